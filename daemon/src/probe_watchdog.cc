#include "probe_watchdog.h"

#include <fmt/format.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

using runtime::HealthState;

ProbeWatchdog::ProbeWatchdog(common::EventLoop& loop, DeviceHealth& health, Options options)
    : loop_(loop), health_(health), options_(options) {
  options_.deadline = std::max(options_.deadline, std::chrono::milliseconds(4));
  options_.isolate_after = std::max(options_.isolate_after, 1);
  timer_ = loop_.CreateTimer([this] {
    Check();
    timer_->ArmAfter(options_.deadline / 4);
  });
}

void ProbeWatchdog::Watch(std::string source, Running running, DeviceOf device_of) {
  watched_.push_back({std::move(source), std::move(running), std::move(device_of)});
  if (!timer_->Armed()) timer_->ArmAfter(options_.deadline / 4);
}

std::map<int, HealthState> ProbeWatchdog::Held() const {
  std::map<int, HealthState> held;
  for (const auto& [device, hold] : held_) held[device] = hold.state;
  return held;
}

std::vector<ProbeWatchdog::StuckCall> ProbeWatchdog::Stuck() const {
  std::lock_guard lock(stuck_mutex_);
  return last_stuck_;
}

std::vector<ProbeWatchdog::StuckCall> ProbeWatchdog::FindStuck() const {
  std::map<int, StuckCall> worst;
  for (const auto& watched : watched_) {
    for (auto& call : watched.running()) {
      if (call.running < options_.deadline) continue;
      const auto device = watched.device_of(call.device);
      if (!device) continue;
      auto [at, added] = worst.try_emplace(*device, StuckCall{*device, watched.source, call});
      if (!added && call.running > at->second.call.running)
        at->second = {*device, watched.source, call};
    }
  }
  std::vector<StuckCall> stuck;
  for (auto& [device, call] : worst) stuck.push_back(std::move(call));
  return stuck;
}

void ProbeWatchdog::Check() {
  const auto now = loop_.Now();
  // The longest-stuck call of each device past its deadline.
  auto found = FindStuck();
  std::map<int, StuckCall> stuck;
  for (const auto& call : found) stuck.emplace(call.device, call);
  {
    std::lock_guard lock(stuck_mutex_);
    last_stuck_ = std::move(found);
  }
  for (const auto& [device, worst] : stuck) {
    Hold& hold = held_[device];
    hold.clear_since = std::chrono::nanoseconds(-1);
    if (hold.state != HealthState::kHealthy && !health_.Holds(device, HealthCause::kProbe)) {
      hold.state = HealthState::kHealthy;  // the operator undrained it
      hold.judged_from = now;
    }
    auto running = worst.call.running;
    if (hold.judged_from.count() >= 0) running = std::min(running, now - hold.judged_from);
    if (running < options_.deadline) continue;
    const HealthState target = running >= options_.deadline * options_.isolate_after
                                   ? HealthState::kIsolated
                                   : HealthState::kDraining;
    if (target <= hold.state) continue;
    Decide(device, target,
           fmt::format("unresponsive: {} call {} on {} has not returned for {:.1f} s", worst.source,
                       worst.call.function, worst.call.device,
                       std::chrono::duration<double>(worst.call.running).count()));
    hold.state = target;
  }
  for (auto it = held_.begin(); it != held_.end();) {
    Hold& hold = it->second;
    if (stuck.contains(it->first)) {
      ++it;
      continue;
    }
    if (hold.state == HealthState::kHealthy) {
      it = held_.erase(it);  // an undrain's judging, ended by the call's return
      continue;
    }
    if (hold.clear_since.count() < 0) hold.clear_since = now;
    // An isolation stays for the operator; a Draining hold lifts once the
    // device's calls have returned for a whole deadline.
    if (hold.state == HealthState::kDraining && now - hold.clear_since >= options_.deadline) {
      Decide(it->first, HealthState::kHealthy, "its driver calls return again");
      it = held_.erase(it);
      continue;
    }
    if (hold.state == HealthState::kIsolated && !health_.Holds(it->first, HealthCause::kProbe)) {
      it = held_.erase(it);  // the operator undrained it
      continue;
    }
    ++it;
  }
}

void ProbeWatchdog::Decide(int device, HealthState target, const std::string& reason) {
  auto decided = health_.DecideAndSave({.device = device,
                                        .cause = HealthCause::kProbe,
                                        .target = target,
                                        .reason = reason,
                                        .rule = "probe-deadline"});
  if (!decided) {
    // The decision stands in memory; DeviceHealth retries its save.
    RASD_LOG_WARN("device {}: {}: {}", device, reason, decided.error().message);
  }
  RASD_LOG_WARN("device {} {} by the probe deadline: {}", device,
                std::string(runtime::HealthStateName(target)), reason);
}

}  // namespace rasd::daemon
