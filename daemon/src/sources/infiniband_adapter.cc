#include "infiniband_adapter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "rasd/common/logging.h"

namespace rasd::daemon {

void InfinibandAdapter::Start() {
  infiniband_ = std::make_unique<ras::InfinibandSysfsSource>(context_.host);
  readers_ = std::make_unique<RdmaDeviceReaders>(context_.loop, context_.host,
                                                 [this] { ReadsFinished(); });
  timer_ = context_.loop.CreateTimer([this] { Poll(); });
  // The first round is the baseline (counts since boot are not news). rasd
  // serves once it is taken, as it did when it was read on the loop, so
  // that a change made just after the start is news; a NIC that does not
  // answer holds the start for the read deadline at most.
  Poll();
  if (round_open_ && readers_->WaitUntilIdle(context_.read_deadline)) ReadsFinished();
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
  if (devices > 0 || round_open_) {
    backoff_.Reset();
    std::size_t ports = 0;
    for (const auto& [name, device] : infiniband_->Last().devices) ports += device.ports.size();
    state_ = {"active", fmt::format("{} RDMA device(s), {} port(s), polled every {} ms", devices,
                                    ports, period.count())};
    for (const auto& [name, call] : stuck_) {
      state_.reason += fmt::format(
          "; {} not answering: reading {} for {} s (its ports count as down)", name, call.function,
          std::chrono::duration_cast<std::chrono::seconds>(call.running).count());
    }
    // A round waiting for a NIC is looked at again by the read deadline.
    timer_->ArmAfter(round_open_ ? std::min(period, context_.read_deadline) : period);
    return;
  }
  const auto delay = backoff_.Next();
  state_ = {"absent",
            fmt::format("no RDMA device under {}; looked for again in {} s", where, delay.count())};
  timer_->ArmAfter(delay);
}

void InfinibandAdapter::UpdateNicAffinity() {
  // By the listing, not the readings: a NIC that has never answered still
  // serves its accelerators.
  const std::set<std::string> names(listed_.begin(), listed_.end());
  if (names == affinity_of_) return;
  affinity_of_ = names;
  nic_affinity_.clear();
  std::vector<std::pair<int, ras::PciPlacement>> accelerators;
  for (const auto& device : context_.runtime.Devices()) {
    if (auto placement = ras::ReadPciPlacement(context_.host, device->Properties().pci_bdf))
      accelerators.emplace_back(device->Index(), std::move(*placement));
  }
  for (const auto& name : names) {
    const auto pci_bdf = ras::InfinibandPciAddress(context_.host, name);
    if (!pci_bdf) continue;
    auto nic = ras::ReadPciPlacement(context_.host, *pci_bdf);
    if (!nic) continue;
    auto affinity = ras::AcceleratorsOfNic(*nic, accelerators);
    if (!affinity.devices.empty()) {
      RASD_LOG_INFO("RDMA device {} ({}) serves device(s) {}: {}", name, *pci_bdf,
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
  if (round_open_) {
    // A NIC has not answered the last round yet: wait for it up to the
    // read deadline, then close the round without it.
    if (context_.loop.Now() - round_began_ >= context_.read_deadline) CloseRound();
    Arm();
    return;
  }
  const auto names = ras::ListInfinibandDevices(context_.host);
  if (!names) {
    // Not listable (permissions): the last reading stands.
    (void)infiniband_->Advance(ras::InfinibandSnapshot{.unreadable = true});
    Publish();
    Arm();
    return;
  }
  listed_ = *names;
  waiting_for_.clear();
  answered_.clear();
  for (const auto& name : listed_) {
    if (readers_->Request(name)) waiting_for_.insert(name);
  }
  round_open_ = true;
  round_began_ = context_.loop.Now();
  if (waiting_for_.empty()) CloseRound();  // no NIC, or every one still inside a read
  Arm();
}

void InfinibandAdapter::ReadsFinished() {
  for (auto& [name, device] : readers_->Take()) {
    waiting_for_.erase(name);
    if (round_open_) answered_[name] = std::move(device);
  }
  if (round_open_ && waiting_for_.empty()) {
    CloseRound();
    Arm();
  }
}

void InfinibandAdapter::CloseRound() {
  round_open_ = false;
  ras::InfinibandSnapshot next;
  for (const auto& name : listed_) {
    auto answered = answered_.find(name);
    if (answered != answered_.end()) {
      if (answered->second) next.devices[name] = std::move(*answered->second);
      continue;  // gone when read
    }
    // Not answered in time (or still inside an earlier read): its last
    // reading stands.
    auto last = infiniband_->Last().devices.find(name);
    if (last != infiniband_->Last().devices.end()) next.devices[name] = last->second;
  }
  answered_.clear();
  stuck_ = StuckReads();
  for (const auto& [name, call] : stuck_) {
    RASD_LOG_WARN("RDMA device {} does not answer: reading {} for {} ms", name, call.function,
                  std::chrono::duration_cast<std::chrono::milliseconds>(call.running).count());
  }
  auto events = infiniband_->Advance(std::move(next));
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
}

std::vector<std::string> InfinibandAdapter::ReadsInFlight() const {
  std::vector<std::string> names;
  if (!readers_) return names;
  for (const auto& [name, read] : readers_->InFlightReads()) names.push_back(name);
  return names;
}

std::map<std::string, drivers::ProbeCalls::Call> InfinibandAdapter::StuckReads() const {
  std::map<std::string, drivers::ProbeCalls::Call> stuck;
  const std::set<std::string> listed(listed_.begin(), listed_.end());
  for (auto& [name, read] : readers_->InFlightReads()) {
    // A NIC no longer listed is gone, not stuck ("device gone" says so).
    if (read.running < context_.read_deadline || !listed.contains(name)) continue;
    if (read.function.empty()) read.function = "its files";
    stuck.emplace(name, std::move(read));
  }
  return stuck;
}

std::optional<ras::LinkReport> InfinibandAdapter::LinksDown() const {
  if (infiniband_->Last().unreadable) return std::nullopt;
  ras::LinkReport report{.source = "RDMA"};
  for (const auto& [name, affinity] : nic_affinity_) {
    const auto stuck = stuck_.find(name);
    auto device = infiniband_->Last().devices.find(name);
    if (device == infiniband_->Last().devices.end()) {
      if (stuck == stuck_.end()) continue;
      // Not answering since it was first listed: its ports are not known.
      for (int accelerator : affinity.devices) {
        report.down[accelerator].push_back(fmt::format(
            "{} (not answering: reading {} for {} s)", name, stuck->second.function,
            std::chrono::duration_cast<std::chrono::seconds>(stuck->second.running).count()));
      }
      continue;
    }
    for (int accelerator : affinity.devices) {
      auto& ports = report.down[accelerator];
      for (const auto& [number, port] : device->second.ports) {
        if (stuck != stuck_.end()) {
          ports.push_back(fmt::format(
              "{} port {} (not answering: reading {} for {} s)", name, number,
              stuck->second.function,
              std::chrono::duration_cast<std::chrono::seconds>(stuck->second.running).count()));
          continue;
        }
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
