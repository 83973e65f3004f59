#include "device_heartbeat.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace rasd::daemon {

namespace {

// Devices that take new work. A draining device is leaving anyway (its
// drain deadline bounds what runs there), and one under its self-test is
// judged by the test.
bool InService(runtime::HealthState state) {
  return state == runtime::HealthState::kHealthy || state == runtime::HealthState::kDegraded;
}

}  // namespace

DeviceHeartbeat::DeviceHeartbeat(common::EventLoop& loop, runtime::Runtime& runtime,
                                 Options options)
    : loop_(loop), runtime_(runtime), options_(options), beats_(runtime.DeviceCount()) {
  for (std::size_t i = 0; i < beats_.size(); ++i) beats_[i].stats.device = static_cast<int>(i);
}

DeviceHeartbeat::~DeviceHeartbeat() {
  if (timer_) timer_->Disarm();
  // A pending beat on a hung device: its stream is aborted, not waited for.
  for (auto& beat : beats_) {
    if (beat.stream && beat.pending) (void)beat.stream->Abort("rasd stopping");
  }
}

void DeviceHeartbeat::Start() {
  timer_ = loop_.CreateTimer([this] { Tick(); });
  if (options_.period.count() > 0) timer_->ArmAfter(TickPeriod());
}

void DeviceHeartbeat::SetOptions(Options options) {
  const bool was_off = options_.period.count() == 0;
  options_ = options;
  if (timer_ && was_off && options_.period.count() > 0) timer_->ArmAfter(TickPeriod());
}

// Ticks often enough to see a deadline pass within a tenth of it, and a
// period begin on time.
std::chrono::nanoseconds DeviceHeartbeat::TickPeriod() const {
  const auto finest = std::min(options_.period, options_.deadline / 10);
  return std::max<std::chrono::nanoseconds>(finest, std::chrono::milliseconds(10));
}

std::vector<DeviceHeartbeat::DeviceStats> DeviceHeartbeat::Stats() const {
  std::vector<DeviceStats> stats;
  for (const auto& beat : beats_) stats.push_back(beat.stats);
  return stats;
}

void DeviceHeartbeat::Tick() {
  if (options_.period.count() == 0) return;  // turned off: the timer stays disarmed
  const auto now = loop_.Now();
  for (std::size_t i = 0; i < beats_.size(); ++i) {
    const int device = static_cast<int>(i);
    Beat& beat = beats_[i];
    auto found = runtime_.GetDevice(device);
    if (!found || !InService((*found)->Health())) {
      // Out of service: forget the episode. A stream stuck on a hung device
      // is aborted and dropped; back in service, the device gets a new one.
      if (beat.stream) {
        if (beat.pending) (void)beat.stream->Abort("device out of service");
        beat.stream.reset();
      }
      beat.pending = false;
      beat.missed = 0;
      beat.reported = false;
      continue;
    }
    if (beat.pending) Poll(device, beat, now);
    if (!beat.pending && now - beat.launched >= options_.period) Launch(device, beat, now);
  }
  timer_->ArmAfter(TickPeriod());
}

void DeviceHeartbeat::Poll(int device, Beat& beat, std::chrono::nanoseconds now) {
  const auto done = beat.stream->Synchronize(std::chrono::nanoseconds(0));
  if (done) {
    beat.pending = false;
    beat.missed = 0;
    beat.reported = false;
    ++beat.stats.beats;
    beat.stats.last_latency = now - beat.launched;
    return;
  }
  if (done.error().code != ErrorCode::kTimeout) {
    // The device failed otherwise (sticky fault, lost): the driver reports
    // that itself. A fresh stream next time.
    beat.pending = false;
    beat.stream.reset();
    return;
  }
  const auto overdue = now - beat.launched;
  const auto deadlines = static_cast<int>(overdue / options_.deadline);
  if (deadlines <= beat.missed) return;
  beat.stats.misses += static_cast<std::uint64_t>(deadlines - beat.missed);
  beat.missed = deadlines;
  if (beat.missed < options_.misses || beat.reported) return;
  beat.reported = true;
  ++beat.stats.hangs;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(overdue);
  spdlog::error("device {}: a heartbeat kernel has not finished in {} ms ({} deadlines of {} ms)",
                device, waited.count(), beat.missed, options_.deadline.count());
  drivers::DriverErrorEvent event;
  event.device = device;
  event.kind = drivers::DriverErrorKind::kHang;
  event.message = fmt::format("not responding: a heartbeat kernel unfinished after {} ms",
                              waited.count());
  event.time = loop_.GetClock().Wall();
  runtime_.ReportError(event);
}

void DeviceHeartbeat::Launch(int device, Beat& beat, std::chrono::nanoseconds now) {
  if (!beat.stream) {
    auto stream = runtime_.CreateStream(
        device, {.owner = "rasd-heartbeat", .admission = runtime::Admission::kAdmittedJob});
    if (!stream) return;  // tried again next period
    beat.stream = std::move(*stream);
  }
  beat.launched = now;
  if (auto launched = beat.stream->Launch("empty", {}); !launched) {
    beat.stream.reset();  // the device refused it: a fault the driver reports
    return;
  }
  beat.pending = true;
}

}  // namespace rasd::daemon
