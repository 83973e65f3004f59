#include "nic_health.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "rasd/common/logging.h"
#include "rasd/ras/pci_topology.h"

namespace rasd::daemon {

NicHealth::NicHealth(common::EventLoop& loop, const common::HostEnv& host,
                     const runtime::Runtime& runtime, std::chrono::seconds hold, Deliver deliver)
    : loop_(loop),
      host_(host),
      runtime_(runtime),
      hold_(hold),
      deliver_(std::move(deliver)),
      timer_(loop.CreateTimer([this] { Expire(); })) {
  timer_->ArmAfter(hold_);
}

bool NicHealth::IsNicFault(const ras::RasEvent& event) {
  return event.severity == ras::Severity::kFatal && !event.device && event.pci_bdf &&
         !event.historical && (event.origin == "mlx5" || event.origin == "devlink");
}

std::optional<ras::LinkReport> NicHealth::Observe(const std::vector<ras::RasEvent>& events) {
  bool any = false;
  for (const auto& event : events) {
    if (!IsNicFault(event)) continue;
    // sysfs names functions in lower case; a log may not.
    std::string bdf = *event.pci_bdf;
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
    if (auto nic = ras::ReadPciPlacement(host_, bdf)) {
      affinity = ras::AcceleratorsOfNic(*nic, accelerators);
    } else {
      affinity.how = "no PCI placement";
    }
    fault->second.devices = affinity.devices;
    fault->second.reason = fmt::format("{} {} fatal health", event.origin, bdf);
    if (affinity.devices.empty()) {
      RASD_LOG_WARN("NIC {}: fatal health, and it serves no accelerator ({}): recorded only", bdf,
                    affinity.how);
    } else {
      RASD_LOG_WARN("NIC {}: fatal health: a link fault of device(s) {} ({}) for at least {} s",
                    bdf, fmt::join(affinity.devices, ", "), affinity.how, hold_.count());
    }
  }
  if (!any) return std::nullopt;
  Arm();
  return Report(/*every_device=*/false);
}

ras::LinkReport NicHealth::Report(bool every_device) const {
  ras::LinkReport report{.source = "NIC health"};
  // A device listed with no link down is up again in this source.
  for (int device : reported_) report.down[device];
  if (every_device)
    for (const auto& device : runtime_.Devices()) report.down[device->Index()];
  for (const auto& [bdf, fault] : faults_)
    for (int device : fault.devices) report.down[device].push_back(fault.reason);
  return report;
}

void NicHealth::Expire() {
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

void NicHealth::Arm() {
  if (faults_.empty()) return;
  auto next = faults_.begin()->second.until;
  for (const auto& [bdf, fault] : faults_) next = std::min(next, fault.until);
  for (const auto& [bdf, fault] : faults_)
    for (int device : fault.devices) reported_.insert(device);
  timer_->ArmAfter(std::max(next - loop_.Now(), std::chrono::nanoseconds(0)));
}

}  // namespace rasd::daemon
