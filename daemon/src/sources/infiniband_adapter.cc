#include "infiniband_adapter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "rasd/common/logging.h"

namespace rasd::daemon {

void InfinibandAdapter::Start() {
  infiniband_ = std::make_unique<ras::InfinibandSysfsSource>(context_.host);
  (void)infiniband_->Poll();  // the baseline: counts since boot are not news
  UpdateNicAffinity();
  Publish();
  timer_ = context_.loop.CreateTimer([this] { Poll(); });
  Arm();
}

void InfinibandAdapter::Publish() {
  std::lock_guard lock(published_mutex_);
  published_ = infiniband_->Last();
}

void InfinibandAdapter::Arm() {
  const auto period = context_.options.infiniband_poll;
  const std::string where = context_.host.Resolve("/sys/class/infiniband").string();
  if (infiniband_->Last().unreadable) {
    state_ = {"failed", fmt::format("cannot list {} (permissions?): the last reading stands, "
                                    "looked at again in {} ms",
                                    where, period.count())};
    timer_->ArmAfter(period);
    return;
  }
  const std::size_t devices = infiniband_->Last().devices.size();
  if (devices > 0) {
    backoff_.Reset();
    std::size_t ports = 0;
    for (const auto& [name, device] : infiniband_->Last().devices) ports += device.ports.size();
    state_ = {"active", fmt::format("{} RDMA device(s), {} port(s), polled every {} ms", devices,
                                    ports, period.count())};
    timer_->ArmAfter(period);
    return;
  }
  const auto delay = backoff_.Next();
  state_ = {"absent",
            fmt::format("no RDMA device under {}; looked for again in {} s", where, delay.count())};
  timer_->ArmAfter(delay);
}

void InfinibandAdapter::UpdateNicAffinity() {
  std::set<std::string> names;
  for (const auto& [name, device] : infiniband_->Last().devices) names.insert(name);
  if (names == affinity_of_) return;
  affinity_of_ = names;
  nic_affinity_.clear();
  std::vector<std::pair<int, ras::PciPlacement>> accelerators;
  for (const auto& device : context_.runtime.Devices()) {
    if (auto placement = ras::ReadPciPlacement(context_.host, device->Properties().pci_bdf))
      accelerators.emplace_back(device->Index(), std::move(*placement));
  }
  for (const auto& [name, device] : infiniband_->Last().devices) {
    if (!device.pci_bdf) continue;
    auto nic = ras::ReadPciPlacement(context_.host, *device.pci_bdf);
    if (!nic) continue;
    auto affinity = ras::AcceleratorsOfNic(*nic, accelerators);
    if (!affinity.devices.empty()) {
      RASD_LOG_INFO("RDMA device {} ({}) serves device(s) {}: {}", name, *device.pci_bdf,
                    fmt::join(affinity.devices, ", "), affinity.how);
    }
    nic_affinity_[name] = std::move(affinity);
  }
}

std::vector<InfinibandAdapter::RdmaPort> InfinibandAdapter::PortsOf(int device) const {
  std::vector<RdmaPort> ports;
  if (!infiniband_) return ports;
  for (const auto& [name, affinity] : nic_affinity_) {
    if (std::find(affinity.devices.begin(), affinity.devices.end(), device) ==
        affinity.devices.end())
      continue;
    auto found = infiniband_->Last().devices.find(name);
    if (found == infiniband_->Last().devices.end()) continue;
    for (const auto& [number, port] : found->second.ports)
      ports.push_back({name, number, affinity.how});
  }
  return ports;
}

void InfinibandAdapter::Poll() {
  auto events = infiniband_->Poll();
  UpdateNicAffinity();
  // People see which accelerators a NIC's fault reaches (the event names
  // the NIC by its PCI address).
  for (auto& event : events) {
    if (!event.pci_bdf) continue;
    for (const auto& [name, device] : infiniband_->Last().devices) {
      if (device.pci_bdf != event.pci_bdf) continue;
      auto affinity = nic_affinity_.find(name);
      if (affinity == nic_affinity_.end() || affinity->second.devices.empty()) break;
      event.summary += fmt::format(" [serves device(s) {}: {}]",
                                   fmt::join(affinity->second.devices, ", "), affinity->second.how);
      break;
    }
  }
  SourceBatch batch{.events = std::move(events)};
  if (auto links = LinksDown()) batch.links.push_back(std::move(*links));
  context_.deliver(std::move(batch));
  Publish();
  Arm();
}

std::optional<ras::LinkReport> InfinibandAdapter::LinksDown() const {
  if (infiniband_->Last().unreadable) return std::nullopt;
  ras::LinkReport report{.source = "RDMA"};
  for (const auto& [name, affinity] : nic_affinity_) {
    auto device = infiniband_->Last().devices.find(name);
    if (device == infiniband_->Last().devices.end()) continue;
    for (int accelerator : affinity.devices) {
      auto& ports = report.down[accelerator];
      for (const auto& [number, port] : device->second.ports) {
        // Unreadable state: not evidence either way.
        if (!port.state || !port.phys_state) continue;
        if (port.state->id != 4 || port.phys_state->id != 5)
          ports.push_back(fmt::format("{} port {}", name, number));
      }
    }
  }
  return report;
}

ras::InfinibandSnapshot InfinibandAdapter::Ports() const {
  std::lock_guard lock(published_mutex_);
  return published_;
}

}  // namespace rasd::daemon
