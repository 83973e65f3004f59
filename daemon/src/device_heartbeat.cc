#include "device_heartbeat.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "rasd/common/logging.h"

namespace rasd::daemon {

namespace {

// A copy beat moves kCopyBeatBytes between the halves of one block
// (64-byte aligned, as ACL wants device addresses).
constexpr std::uint64_t kCopyBeatBlock = 8192;
constexpr std::uint64_t kCopyBeatBytes = 64;
// A hang is found at the tick on its last deadline: that tick fires this
// close to it.
constexpr std::chrono::milliseconds kTickSlack{1};

}  // namespace

DeviceHeartbeat::DeviceHeartbeat(common::EventLoop& loop, runtime::Runtime& runtime,
                                 Options options)
    : loop_(loop), runtime_(runtime), options_(options), beats_(runtime.DeviceCount()) {
  for (std::size_t i = 0; i < beats_.size(); ++i) beats_[i].stats.device = static_cast<int>(i);
  Publish();
}

DeviceHeartbeat::~DeviceHeartbeat() {
  runtime_.SetWorkListener(nullptr);
  *alive_ = false;
  if (timer_) timer_->Disarm();
  // A pending beat on a hung device: its stream is aborted, not waited for.
  for (std::size_t i = 0; i < beats_.size(); ++i)
    DropStream(static_cast<int>(i), beats_[i], "rasd stopping");
}

void DeviceHeartbeat::DropStream(int device, Beat& beat, std::string_view why) {
  if (!beat.stream) return;
  if (beat.pending) (void)beat.stream->Abort(why);
  if (beat.scratch.size > 0) {
    if (auto pool = runtime_.Pool(device)) (void)(*pool)->Free(beat.scratch);
    beat.scratch = {};
  }
  beat.stream.reset();
}

void DeviceHeartbeat::Start() {
  timer_ = loop_.CreateTimer([this] { Tick(); });
  timer_->SetSlack(kTickSlack);
  runtime_.SetWorkListener([this, alive = alive_](int device) {
    loop_.Post([this, alive, device] {
      if (*alive) OnWork(device);
    });
  });
  if (options_.period.count() > 0) timer_->ArmAfter(TickPeriod());
}

void DeviceHeartbeat::SetOptions(Options options) {
  options_ = options;
  // From the next tick, and a tick soon: the new periods may be shorter
  // than what was armed.
  if (timer_ && options_.period.count() > 0) ArmNext(TickPeriod());
}

void DeviceHeartbeat::OnWork(int device) {
  if (options_.period.count() == 0 || device < 0 ||
      static_cast<std::size_t>(device) >= beats_.size())
    return;
  const Beat& beat = beats_[static_cast<std::size_t>(device)];
  // Due under the busy period now or soon, not at the next idle beat.
  if (!beat.pending)
    ArmNext(beat.ever_launched
                ? std::max<std::chrono::nanoseconds>(beat.launched + options_.period - loop_.Now(),
                                                     std::chrono::nanoseconds(0))
                : std::chrono::nanoseconds(0));
}

// Arms the timer for `next` from now unless it is armed for sooner.
void DeviceHeartbeat::ArmNext(std::chrono::nanoseconds next) {
  const auto at = loop_.Now() + next;
  if (timer_->Armed() && armed_for_ <= at) return;
  armed_for_ = at;
  timer_->ArmAfter(next);
}

std::chrono::nanoseconds DeviceHeartbeat::IntervalOf(int device) const {
  if (options_.idle_period.count() == 0 || !runtime_.JobsOn(device).empty() ||
      (busy_probe_ && busy_probe_(device)))
    return options_.period;
  return options_.idle_period;
}

// Ticks often enough to see a deadline pass within a tenth of it, and a
// period begin on time.
std::chrono::nanoseconds DeviceHeartbeat::TickPeriod() const {
  const auto finest = std::min(options_.period, options_.deadline / 10);
  return std::max<std::chrono::nanoseconds>(finest, std::chrono::milliseconds(10));
}

std::vector<DeviceHeartbeat::DeviceStats> DeviceHeartbeat::Stats() const {
  std::lock_guard lock(stats_mutex_);
  return published_;
}

void DeviceHeartbeat::Publish() {
  std::vector<DeviceStats> stats;
  stats.reserve(beats_.size());
  for (const auto& beat : beats_) stats.push_back(beat.stats);
  std::lock_guard lock(stats_mutex_);
  published_ = std::move(stats);
}

bool DeviceHeartbeat::BeatSettled(int device) {
  if (device < 0 || static_cast<std::size_t>(device) >= beats_.size()) return true;
  Beat& beat = beats_[static_cast<std::size_t>(device)];
  if (!beat.pending || !beat.stream) return true;
  const auto done = beat.stream->Synchronize(std::chrono::nanoseconds(0));
  return done || done.error().code != ErrorCode::kTimeout;
}

void DeviceHeartbeat::Tick() {
  if (options_.period.count() == 0) return;  // turned off: the timer stays disarmed
  const auto now = loop_.Now();
  constexpr auto kNever = std::chrono::nanoseconds::max();
  auto next = kNever;
  for (std::size_t i = 0; i < beats_.size(); ++i) {
    const int device = static_cast<int>(i);
    Beat& beat = beats_[i];
    auto found = runtime_.GetDevice(device);
    if (!found || !runtime::TakesNewWork((*found)->Health())) {
      // Out of service (a draining device is leaving anyway, and one under
      // its self-test is judged by the test): forget the episode. A stream
      // stuck on a hung device is aborted and dropped; back in service, the
      // device gets a new one.
      DropStream(device, beat, "device out of service");
      beat.pending = false;
      beat.missed = 0;
      beat.reported = false;
      // Looked at again as if beaten now: back in service, it waits no
      // longer than its interval for a beat (a job's stream, none).
      next = std::min(next, IntervalOf(device));
      continue;
    }
    beat.stats.op_timeouts = (*found)->OpTimeouts();
    if (beat.pending) Poll(**found, beat, now);
    const auto interval = IntervalOf(device);
    // Every device in service is beaten once at the start, whatever its period.
    if (!beat.pending && (!beat.ever_launched || now - beat.launched >= interval))
      Launch(**found, beat, now);
    // A pending beat is polled at the tick period, and so is a launch that
    // failed (no stream, a full pool: due already); otherwise the device's
    // next beat is all there is to wake for.
    const auto due =
        beat.ever_launched ? beat.launched + interval - now : std::chrono::nanoseconds(0);
    if (beat.pending) {
      // A tick on the pending beat's next deadline, so that a hang is
      // counted there and not up to a tick period later.
      const auto next_deadline = beat.launched + options_.deadline * (beat.missed + 1) - now;
      next = std::min({next, TickPeriod(), next_deadline});
    } else {
      next = std::min(next, due <= std::chrono::nanoseconds(0) ? TickPeriod() : due);
    }
  }
  Publish();
  if (next == kNever) return;  // no device: nothing to wake for
  armed_for_ = now + std::max<std::chrono::nanoseconds>(next, std::chrono::milliseconds(1));
  timer_->ArmAfter(armed_for_ - now);
}

void DeviceHeartbeat::Poll(const runtime::Device& device, Beat& beat,
                           std::chrono::nanoseconds now) {
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
    DropStream(device.Index(), beat, "heartbeat failed");
    return;
  }
  const auto overdue = now - beat.launched;
  const auto deadlines = static_cast<int>(overdue / options_.deadline);
  if (deadlines > beat.missed) {
    beat.stats.misses += static_cast<std::uint64_t>(deadlines - beat.missed);
    beat.missed = deadlines;
  }
  if (beat.missed == 0) return;
  const auto abandoned = device.OpTimeouts() - beat.op_timeouts_at_launch;
  const bool hung = beat.missed >= options_.misses || abandoned > 0;
  if (!hung || beat.reported) return;
  beat.reported = true;
  ++beat.stats.hangs;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(overdue);
  const std::string evidence =
      abandoned > 0 ? fmt::format("; jobs gave up on {} op(s) there meanwhile", abandoned) : "";
  RASD_LOG_ERROR(
      "device {}: a heartbeat kernel has not finished in {} ms ({} deadline(s) of {} ms){}",
      device.Index(), waited.count(), beat.missed, options_.deadline.count(), evidence);
  drivers::DriverErrorEvent event;
  event.device = device.Index();
  event.kind = drivers::DriverErrorKind::kHang;
  event.message = fmt::format("not responding: a heartbeat kernel unfinished after {} ms{}",
                              waited.count(), evidence);
  event.time = loop_.GetClock().Wall();
  runtime_.ReportError(event);
}

void DeviceHeartbeat::Launch(const runtime::Device& device, Beat& beat,
                             std::chrono::nanoseconds now) {
  if (!beat.stream) {
    auto stream = runtime_.CreateStream(
        device.Index(), {.owner = "rasd-heartbeat", .admission = runtime::Admission::kAdmittedJob});
    if (!stream) return;  // tried again next period
    beat.stream = std::move(*stream);
  }
  beat.launched = now;
  beat.ever_launched = true;
  beat.op_timeouts_at_launch = device.OpTimeouts();
  if (!beat.copy_beat) {
    auto launched = beat.stream->Launch("empty", {});
    if (launched) {
      beat.pending = true;
      return;
    }
    if (launched.error().code != ErrorCode::kNotSupported) {
      DropStream(device.Index(), beat, "heartbeat refused");  // a fault the driver reports
      return;
    }
    RASD_LOG_INFO("device {}: no kernels on this backend; its heartbeat is a 64-byte copy",
                  device.Index());
    beat.copy_beat = true;
  }
  if (beat.scratch.size == 0) {
    auto pool = runtime_.Pool(device.Index());
    if (!pool) return;
    auto scratch = (*pool)->Allocate(kCopyBeatBlock, *beat.stream);
    if (!scratch) return;  // a full pool: tried again next period
    beat.scratch = *scratch;
  }
  if (auto copied = beat.stream->CopyDeviceToDevice(beat.scratch.address + kCopyBeatBlock / 2,
                                                    device.Index(), beat.scratch.address,
                                                    kCopyBeatBytes);
      !copied) {
    DropStream(device.Index(), beat, "heartbeat refused");
    return;
  }
  beat.pending = true;
}

}  // namespace rasd::daemon
