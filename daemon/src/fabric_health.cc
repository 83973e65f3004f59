#include "fabric_health.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "rasd/common/logging.h"
#include "rasd/ras/pci_topology.h"

namespace rasd::daemon {

FabricHealth::FabricHealth(common::EventLoop& loop, const common::HostEnv& host,
                           const runtime::Runtime& runtime, std::chrono::seconds hold,
                           Deliver deliver)
    : loop_(loop),
      host_(host),
      runtime_(runtime),
      hold_(hold),
      deliver_(std::move(deliver)),
      timer_(loop.CreateTimer([this] { Expire(); })) {
  timer_->ArmAfter(hold_);
}

bool FabricHealth::IsFabricFault(const ras::RasEvent& event) {
  if (event.severity != ras::Severity::kFatal || event.device || event.historical) return false;
  // A Fabric Manager line may name no switch address: the fault is the
  // fabric's all the same.
  if (event.origin == "nvswitch") return true;
  return event.pci_bdf && (event.origin == "mlx5" || event.origin == "devlink");
}

std::optional<ras::LinkReport> FabricHealth::Observe(const std::vector<ras::RasEvent>& events) {
  bool any = false;
  for (const auto& event : events) {
    if (!IsFabricFault(event)) continue;
    // sysfs names functions in lower case; a log may not.
    std::string bdf = event.pci_bdf.value_or("unnamed");
    std::transform(bdf.begin(), bdf.end(), bdf.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    auto [fault, added] = faults_.try_emplace(bdf);
    fault->second.until = loop_.Now() + hold_;
    any = true;
    // A NIC whose placement could not be read yet is looked up again.
    if (!added && !fault->second.devices.empty()) continue;
    // The accelerators behind the NIC, read when its fault starts: devices
    // and placements change only with the hardware.
    std::vector<std::pair<int, ras::PciPlacement>> accelerators;
    for (const auto& device : runtime_.Devices()) {
      if (auto placement = ras::ReadPciPlacement(host_, device->Properties().pci_bdf))
        accelerators.emplace_back(device->Index(), std::move(*placement));
    }
    ras::NicAffinity affinity;
    if (event.origin == "nvswitch") {
      // On an HGX baseboard every GPU has NVLinks to every NVSwitch, and a
      // switch's fatal error takes the fabric down until the GPUs and
      // switches are reset (Fabric Manager's guide): every NVIDIA GPU is
      // out of collectives; its own compute is not in question.
      for (const auto& device : runtime_.Devices())
        if (device->Properties().vendor == "nvidia") affinity.devices.push_back(device->Index());
      affinity.how = "every NVIDIA GPU shares the NVLink fabric";
    } else if (auto nic = ras::ReadPciPlacement(host_, bdf)) {
      affinity = ras::AcceleratorsOfNic(*nic, accelerators);
    } else {
      affinity.how = "no PCI placement";
    }
    fault->second.devices = affinity.devices;
    fault->second.reason =
        event.origin == "nvswitch"
            ? fmt::format("nvswitch {} fatal SXid {}", bdf, event.vendor_code.value_or(0))
            : fmt::format("{} {} fatal health", event.origin, bdf);
    const char* what = event.origin == "nvswitch" ? "NVSwitch" : "NIC";
    if (affinity.devices.empty()) {
      RASD_LOG_WARN("{} {}: fatal health, and it serves no accelerator ({}): recorded only", what,
                    bdf, affinity.how);
    } else {
      RASD_LOG_WARN("{} {}: fatal health: a link fault of device(s) {} ({}) for at least {} s",
                    what, bdf, fmt::join(affinity.devices, ", "), affinity.how, hold_.count());
    }
  }
  if (!any) return std::nullopt;
  Arm();
  return Report(/*every_device=*/false);
}

ras::LinkReport FabricHealth::Report(bool every_device) const {
  ras::LinkReport report{.source = "NIC health"};
  // A device listed with no link down is up again in this source.
  for (int device : reported_) report.down[device];
  if (every_device)
    for (const auto& device : runtime_.Devices()) report.down[device->Index()];
  for (const auto& [bdf, fault] : faults_)
    for (int device : fault.devices) report.down[device].push_back(fault.reason);
  return report;
}

void FabricHealth::Expire() {
  const auto now = loop_.Now();
  const auto before = faults_.size();
  std::erase_if(faults_, [now](const auto& entry) { return entry.second.until <= now; });
  const bool first = !started_ && faults_.empty();
  if (faults_.size() != before || first) {
    started_ = started_ || first;
    ras::LinkReport report = Report(/*every_device=*/first);
    reported_.clear();
    for (const auto& [device, down] : report.down)
      if (!down.empty()) reported_.insert(device);
    deliver_(std::move(report));
  }
  Arm();
}

void FabricHealth::Arm() {
  if (faults_.empty()) return;
  auto next = faults_.begin()->second.until;
  for (const auto& [bdf, fault] : faults_) next = std::min(next, fault.until);
  for (const auto& [bdf, fault] : faults_)
    for (int device : fault.devices) reported_.insert(device);
  timer_->ArmAfter(std::max(next - loop_.Now(), std::chrono::nanoseconds(0)));
}

}  // namespace rasd::daemon
