#include "ras_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "rasd/common/logging.h"

namespace rasd::daemon {
namespace {

constexpr int kMaxLoggedPerSecond = 20;

std::string Describe(const ras::RasEvent& event) {
  std::string detail;
  if (event.device) detail += fmt::format(" device={}", *event.device);
  if (event.vendor_code) detail += fmt::format(" code={}", *event.vendor_code);
  if (event.pci_bdf) detail += " pci=" + *event.pci_bdf;
  if (event.mc) detail += fmt::format(" mc={}", *event.mc);
  if (event.address) detail += " addr=" + *event.address;
  if (event.count > 1) detail += fmt::format(" count={}", event.count);
  if (event.historical) detail += " previous-boot";
  return fmt::format("{} {}{}: {}", ras::SeverityName(event.severity), event.origin, detail,
                     event.summary);
}

// "0000:07:00.0", "07:00.0" and "0000:07:00" (as Xid lines print it) name
// the same device: compare domain, bus and device, and the function when
// both give one.
bool SamePciDevice(std::string_view a, std::string_view b) {
  auto normalize = [](std::string_view bdf) {
    std::string text;
    for (char c : bdf) text += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::count(text.begin(), text.end(), ':') == 1) text = "0000:" + text;
    return text;
  };
  const std::string left = normalize(a), right = normalize(b);
  if (left.size() < 10 || right.size() < 10) return false;
  if (left.compare(0, 10, right, 0, 10) != 0) return false;
  const auto left_function = left.find('.'), right_function = right.find('.');
  if (left_function == std::string::npos || right_function == std::string::npos) return true;
  return left.substr(left_function) == right.substr(right_function);
}

}  // namespace

RasPipeline::RasPipeline(common::EventLoop& loop, runtime::Runtime& runtime,
                         ras::PolicyEngine& policy, Actuator& actuator, ras::StateStore& store,
                         Options options)
    : loop_(loop),
      runtime_(runtime),
      policy_(policy),
      actuator_(actuator),
      store_(store),
      options_(options) {}

void RasPipeline::AttributeToDevices(std::vector<ras::RasEvent>& events) const {
  for (auto& event : events) {
    if (event.device || !event.pci_bdf || event.historical) continue;
    for (const auto& device : runtime_.Devices()) {
      const auto& bdf = device->Properties().pci_bdf;
      if (!bdf.empty() && SamePciDevice(bdf, *event.pci_bdf)) {
        event.device = device->Index();
        break;
      }
    }
  }
}

void RasPipeline::Handle(std::vector<ras::RasEvent> events,
                         std::vector<ras::SourceCursor> cursors) {
  if (events.empty() && cursors.empty()) return;
  const auto arrived = loop_.Now();
  // A kernel record about a PCI device rasd runs (an Xid, an AER error on a
  // GPU) is about that runtime device.
  AttributeToDevices(events);
  stats_.events += events.size();
  const std::size_t before = events.size();
  events = ras::CoalesceStorm(std::move(events), options_.storm_threshold);
  stats_.coalesced += before - events.size();

  // Effects first: the rows follow in the batch below.
  std::vector<double> isolations;
  for (std::size_t i = 0; i < events.size(); ++i) {
    for (const auto& action : policy_.Decide(events[i], loop_.Now())) {
      const ActionOutcome outcome = actuator_.Apply(action, events[i], i);
      if (!outcome.health_change || outcome.health_change->to != runtime::HealthState::kIsolated)
        continue;
      // A driver's report carries when the device failed; a kernel-log
      // record when it was logged, which may be long ago: from arrival.
      const double seconds =
          events[i].source == "driver"
              ? std::chrono::duration<double>(loop_.GetClock().Wall() - events[i].time).count()
              : std::chrono::duration<double>(loop_.Now() - arrived).count();
      isolations.push_back(std::max(0.0, seconds));
    }
  }

  ras::StoreBatch batch;
  batch.events = std::move(events);
  batch.cursors = std::move(cursors);
  actuator_.TakePending(batch);
  HandledBatch handled{.events = batch.events, .isolation_seconds = std::move(isolations)};
  if (auto stored = store_.Commit(batch); !stored) {
    // A full disk or a broken database must not stop ingestion: count, log, go on.
    ++stats_.store_failures;
    spdlog::error("cannot store {} RAS event(s) and {} action(s): {}", batch.events.size(),
                  batch.actions.size(), stored.error().message);
  } else {
    handled.stored = true;
    handled.event_ids = std::move(stored->event_ids);
  }
  Log(batch.events);
  for (const auto& observer : observers_) observer(handled);
}

void RasPipeline::Log(const std::vector<ras::RasEvent>& events) {
  const std::int64_t second = std::chrono::duration_cast<std::chrono::seconds>(loop_.Now()).count();
  if (second != log_window_second_) {
    if (unlogged_ > 0)
      spdlog::warn("{} more RAS event(s) in the last second were stored but not logged", unlogged_);
    log_window_second_ = second;
    logged_in_window_ = 0;
    unlogged_ = 0;
  }
  auto logger = common::GetLogger("ras");
  for (const auto& event : events) {
    if (logged_in_window_ >= kMaxLoggedPerSecond) {
      ++unlogged_;
      continue;
    }
    ++logged_in_window_;
    const auto level = event.severity >= ras::Severity::kUcna ? spdlog::level::warn
                       : event.severity == ras::Severity::kCe ? spdlog::level::info
                                                              : spdlog::level::debug;
    logger->log(level, "RAS event: {}", Describe(event));
  }
}

}  // namespace rasd::daemon
