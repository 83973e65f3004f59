#include "rasd/ras/pci_topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>

namespace rasd::ras {
namespace {

// "0000:05:00.0": domain, bus, device and function in hex.
bool LooksLikeBdf(std::string_view text) {
  if (text.size() != 12 || text[4] != ':' || text[7] != ':' || text[10] != '.') return false;
  for (std::size_t i : {0u, 1u, 2u, 3u, 5u, 6u, 8u, 9u, 11u}) {
    if (!std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

std::size_t CommonPrefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

std::optional<PciPlacement> ReadPciPlacement(const common::HostEnv& host, std::string_view bdf) {
  if (!LooksLikeBdf(bdf)) return std::nullopt;
  const std::string base = "/sys/bus/pci/devices/" + std::string(bdf);
  std::error_code error;
  const auto link = std::filesystem::read_symlink(host.Resolve(base), error);
  if (error) return std::nullopt;
  PciPlacement placement;
  placement.bdf = std::string(bdf);
  for (const auto& part : link) {
    const std::string name = part.string();
    if (name.starts_with("pci") && name.size() > 3 && placement.root.empty()) {
      placement.root = name;
    } else if (!placement.root.empty() && LooksLikeBdf(name)) {
      placement.path.push_back(name);
    }
  }
  if (placement.root.empty() || placement.path.empty() || placement.path.back() != bdf) {
    return std::nullopt;
  }
  if (auto text = host.ReadFile(base + "/numa_node", 64)) {
    int node = -1;
    const auto begin = text->data();
    const auto [end, ec] = std::from_chars(begin, begin + text->size(), node);
    if (ec == std::errc() && node >= 0) placement.numa_node = node;
  }
  return placement;
}

NicAffinity AcceleratorsOfNic(const PciPlacement& nic,
                              const std::vector<std::pair<int, PciPlacement>>& accelerators) {
  NicAffinity affinity;
  // A shared root port and switch upstream port: both sit below one switch.
  for (const auto& [index, placement] : accelerators) {
    if (placement.root == nic.root && CommonPrefix(placement.path, nic.path) >= 2)
      affinity.devices.push_back(index);
  }
  if (!affinity.devices.empty()) {
    affinity.how = "same PCIe switch";
  } else if (nic.numa_node) {
    for (const auto& [index, placement] : accelerators) {
      if (placement.numa_node == nic.numa_node) affinity.devices.push_back(index);
    }
    if (!affinity.devices.empty()) affinity.how = fmt::format("same NUMA node {}", *nic.numa_node);
  }
  if (affinity.devices.empty()) affinity.how = "none";
  std::sort(affinity.devices.begin(), affinity.devices.end());
  return affinity;
}

}  // namespace rasd::ras
