#include "sim_link_tree.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace rasd::daemon {
namespace {

std::string NicName(int device) { return fmt::format("rasdsim_{}", device); }
std::string PortDir(int device) {
  return fmt::format("/sys/class/infiniband/{}/ports/1", NicName(device));
}

}  // namespace

Result<std::unique_ptr<SimLinkTree>> SimLinkTree::Create(
    const common::HostEnv& host, const std::vector<drivers::DeviceProperties>& devices) {
  std::error_code error;
  if (std::filesystem::equivalent(host.Root(), "/", error)) {
    return Fail(ErrorCode::kPermissionDenied,
                "simulator.link_sysfs writes a sysfs tree: only under a host.root other than /");
  }
  std::vector<int> indices;
  auto fail = [](const std::string& what, const std::error_code& code) {
    return Fail(ErrorCode::kIoError,
                fmt::format("simulated RDMA tree: {}: {}", what, code.message()));
  };
  for (const auto& device : devices) {
    unsigned domain = 0, bus = 0, slot = 0, function = 0;
    if (device.vendor != "sim" ||
        std::sscanf(device.pci_bdf.c_str(), "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
      continue;
    const int i = device.index;
    // One switch per device: root port, upstream port, two downstream ports.
    const std::string root = fmt::format("{:04x}:00:{:02x}.0", domain, i + 1);
    const std::string upstream = fmt::format("{:04x}:{:02x}:00.0", domain, 0x10 + i);
    const std::string down_device = fmt::format("{:04x}:{:02x}:00.0", domain, 0x20 + i);
    const std::string down_nic = fmt::format("{:04x}:{:02x}:01.0", domain, 0x20 + i);
    const std::string nic = fmt::format("{:04x}:{:02x}:00.0", domain, 0xe1 + i);
    const std::string base = fmt::format("pci{:04x}:00/{}/{}", domain, root, upstream);
    const std::string device_path = fmt::format("{}/{}/{}", base, down_device, device.pci_bdf);
    const std::string nic_path = fmt::format("{}/{}/{}", base, down_nic, nic);
    for (const auto& [bdf, path] :
         {std::pair{device.pci_bdf, device_path}, std::pair{nic, nic_path}}) {
      if (host.Exists("/sys/bus/pci/devices/" + bdf)) continue;  // a fixture's own placement
      if (auto written = host.WriteFile("/sys/devices/" + path + "/numa_node", "0\n", true);
          !written)
        return Fail(written.error());
      std::filesystem::create_directories(host.Resolve("/sys/bus/pci/devices"), error);
      if (error) return fail("sys/bus/pci/devices", error);
      std::filesystem::create_directory_symlink("../../../devices/" + path,
                                                host.Resolve("/sys/bus/pci/devices/" + bdf), error);
      if (error) return fail(bdf, error);
    }
    const std::string port = PortDir(i);
    for (const auto& [file, text] : {std::pair<std::string, std::string>{"state", "4: ACTIVE\n"},
                                     {"phys_state", "5: LinkUp\n"},
                                     {"rate", "200 Gb/sec (4X HDR)\n"},
                                     {"link_layer", "InfiniBand\n"},
                                     {"counters/link_downed", "0\n"},
                                     {"counters/symbol_error", "0\n"}}) {
      if (auto written = host.WriteFile(port + "/" + file, text, true); !written)
        return Fail(written.error());
    }
    const auto link = host.Resolve(fmt::format("/sys/class/infiniband/{}/device", NicName(i)));
    if (!std::filesystem::is_symlink(link)) {
      std::filesystem::create_directory_symlink("../../../devices/" + nic_path, link, error);
      if (error) return fail(link.string(), error);
    }
    indices.push_back(i);
  }
  std::unique_ptr<SimLinkTree> tree(new SimLinkTree(host, std::move(indices)));
  tree->link_downed_.assign(tree->devices_.size(), 0);
  return tree;
}

std::string SimLinkTree::PortName(int device) const {
  return fmt::format("{} port 1", NicName(device));
}

Status SimLinkTree::SetPortUp(int device, bool up) {
  const auto at = std::find(devices_.begin(), devices_.end(), device);
  if (at == devices_.end()) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("device {} has no simulated RDMA port", device));
  }
  const std::string port = PortDir(device);
  auto& downed = link_downed_[static_cast<std::size_t>(at - devices_.begin())];
  if (!up) {
    // As the HCA counts it: one more time the link went down.
    if (auto written =
            host_.WriteFile(port + "/counters/link_downed", fmt::format("{}\n", ++downed), true);
        !written)
      return written;
  }
  // phys_state first: the poller never sees ACTIVE over a link that is not up.
  if (auto written = host_.WriteFile(port + (up ? "/phys_state" : "/state"),
                                     up ? "5: LinkUp\n" : "1: DOWN\n", /*create=*/true);
      !written)
    return written;
  // A fixture file, rewritten whole (a sysfs write would not truncate).
  return host_.WriteFile(port + (up ? "/state" : "/phys_state"),
                         up ? "4: ACTIVE\n" : "3: Disabled\n", /*create=*/true);
}

}  // namespace rasd::daemon
