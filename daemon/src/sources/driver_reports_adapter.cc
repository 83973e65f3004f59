#include "driver_reports_adapter.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "rasd/ras/driver_events.h"

namespace rasd::daemon {

DriverReportsAdapter::~DriverReportsAdapter() {
  *alive_ = false;
  if (subscription_ != 0) context_.runtime.Unsubscribe(subscription_);
}

void DriverReportsAdapter::Start() {
  eventfd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!eventfd_) {
    state_ = SourceFailure(ErrnoError("eventfd", errno));
    return;
  }
  auto watch = context_.loop.WatchFd(eventfd_.Get(), EPOLLIN, [this](std::uint32_t) { OnReady(); });
  if (!watch) {
    state_ = {"failed", "cannot poll its eventfd: " + watch.error().message};
    return;
  }
  watch_ = std::move(*watch);
  const std::string_view driver = context_.runtime.DriverName();
  subscription_ = context_.runtime.SubscribeErrors(
      [this, driver](const drivers::DriverErrorEvent& event) { Queue(event, driver); });
  state_ = {"active", fmt::format("the {} backend's error reports", driver)};
}

void DriverReportsAdapter::Queue(const drivers::DriverErrorEvent& event,
                                 std::string_view reporter) {
  {
    std::lock_guard lock(mutex_);
    queued_.emplace_back(event, reporter);
    // Stamped on arrival when the driver has no time of its own; the
    // HostEnv's clock is thread-safe.
    if (event.time == std::chrono::system_clock::time_point{}) {
      queued_.back().first.time = context_.host.GetClock().Wall();
    }
  }
  const std::uint64_t one = 1;
  (void)::write(eventfd_.Get(), &one, sizeof one);
}

void DriverReportsAdapter::WatchNvlinks(const std::vector<drivers::NvmlGpu>& gpus) {
  for (const auto& gpu : gpus) {
    drivers::DriverErrorEvent probe;
    probe.device = -1;
    probe.pci_bdf = gpu.pci_bdf;
    if (auto device = DeviceOf(probe)) {
      (void)links_down_["NVLink"][*device];
      nvlinks_unconfirmed_[*device].insert(gpu.nvlinks_inactive_at_start.begin(),
                                           gpu.nvlinks_inactive_at_start.end());
    }
  }
  kinds_unannounced_.insert("NVLink");
  context_.loop.Post([this, alive = alive_] {
    if (*alive) Drain();
  });
}

void DriverReportsAdapter::OnReady() {
  std::uint64_t count = 0;
  (void)::read(eventfd_.Get(), &count, sizeof count);
  Drain();
}

void DriverReportsAdapter::Drain() {
  std::deque<std::pair<drivers::DriverErrorEvent, std::string_view>> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(queued_);
  }
  std::vector<ras::RasEvent> events;
  events.reserve(pending.size());
  std::set<std::string> kinds_changed;
  kinds_changed.swap(kinds_unannounced_);
  for (const auto& [event, reporter] : pending) {
    events.push_back(ras::EventFromDriver(event, reporter, context_.codes));
    if (event.kind == drivers::DriverErrorKind::kLinkCorrected && event.link) {
      if (const auto device = DeviceOf(event)) {
        link_errors_[{*device, std::string(drivers::LinkKindName(event.link->kind)),
                      event.link->counter}] += event.count;
      }
      continue;
    }
    if ((event.kind != drivers::DriverErrorKind::kLinkDown &&
         event.kind != drivers::DriverErrorKind::kLinkUp) ||
        !event.link)
      continue;
    const auto device = DeviceOf(event);
    if (!device) continue;
    const std::string kind(drivers::LinkKindName(event.link->kind));
    auto& down = links_down_[kind][*device];
    if (event.kind == drivers::DriverErrorKind::kLinkDown) {
      down.insert(event.link->index);
    } else {
      down.erase(event.link->index);
    }
    if (event.link->kind == drivers::LinkKind::kNvlink)
      nvlinks_unconfirmed_[*device].erase(event.link->index);
    kinds_changed.insert(kind);
  }
  // The link policy decides after the events, in their batch.
  SourceBatch batch{.events = std::move(events)};
  for (const auto& kind : kinds_changed) {
    ras::LinkReport& report = batch.links.emplace_back(ras::LinkReport{.source = kind});
    for (const auto& [device, links] : links_down_[kind]) {
      auto& names = report.down[device];
      for (unsigned link : links) names.push_back(fmt::format("{} {}", kind, link));
    }
    if (kind == drivers::LinkKindName(drivers::LinkKind::kNvlink)) {
      for (const auto& [device, links] : nvlinks_unconfirmed_) {
        for (unsigned link : links)
          report.unconfirmed[device].push_back(fmt::format("{} {}", kind, link));
      }
    }
  }
  context_.deliver(std::move(batch));
}

std::optional<int> DriverReportsAdapter::DeviceOf(const drivers::DriverErrorEvent& event) const {
  if (event.device >= 0) {
    if (context_.runtime.GetDevice(event.device)) return event.device;
    return std::nullopt;
  }
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& device : context_.runtime.Devices()) {
    const auto& bdf = device->Properties().pci_bdf;
    if (!bdf.empty() && same(bdf, event.pci_bdf)) return device->Index();
  }
  return std::nullopt;
}

void DriverReportsAdapter::AddTo(IngestStats& stats) const { stats.link_errors = link_errors_; }

}  // namespace rasd::daemon
