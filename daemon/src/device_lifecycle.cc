#include "device_lifecycle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

DeviceLifecycle::DeviceLifecycle(common::EventLoop& loop, runtime::Runtime& runtime,
                                 DeviceHealth& health, NodeFault& node, jobs::JobManager& jobs,
                                 ras::StateStore& store, SchedulerLink* scheduler, Options options)
    : loop_(loop),
      runtime_(runtime),
      health_(health),
      node_(node),
      jobs_(jobs),
      store_(store),
      scheduler_(scheduler),
      options_(options) {
  subscription_ = health_.Subscribe([this](const DeviceStateChanged& change) {
    if (change.cause != HealthCause::kPolicy || change.to != runtime::HealthState::kIsolated)
      return;
    // After the batch: the advisor has then seen all of its events.
    if (newly_isolated_.empty()) {
      loop_.Post([this, alive = alive_] {
        if (*alive) ScheduleRecoveries();
      });
    }
    newly_isolated_.push_back(change.device);
  });
}

DeviceLifecycle::~DeviceLifecycle() {
  *alive_ = false;
  for (auto& [device, worker] : workers_) worker.join();
}

Result<StateChange> DeviceLifecycle::Isolate(int device, const std::string& reason) {
  auto found = runtime_.GetDevice(device);
  if (!found) return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
  const runtime::HealthState was = health_.StateOf(device);
  auto done =
      health_.DecideAndSave({.device = device,
                             .cause = HealthCause::kOperator,
                             .target = runtime::HealthState::kIsolated,
                             .reason = reason.empty() ? "isolated by an operator" : reason});
  if (!done) return Fail(done.error());
  return StateChange{.device = device, .state = runtime::HealthState::kIsolated, .was = was};
}

Result<StateChange> DeviceLifecycle::Drain(int device, const std::string& reason,
                                           std::optional<std::chrono::milliseconds> deadline) {
  auto found = runtime_.GetDevice(device);
  if (!found) return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
  const runtime::HealthState was = health_.StateOf(device);
  if (was == runtime::HealthState::kIsolated) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("device {} is isolated: nothing runs there to drain", device));
  }
  const auto limit = deadline.value_or(options_.drain_deadline);
  jobs_.SetDrainDeadline(device, limit);
  auto done = health_.DecideAndSave(
      {.device = device,
       .cause = HealthCause::kOperator,
       .target = runtime::HealthState::kDraining,
       .reason = reason.empty()
                     ? fmt::format("drained by an operator (deadline {} ms)", limit.count())
                     : reason});
  if (!done) return Fail(done.error());
  auto& timer = drain_timers_[device];
  timer = loop_.CreateTimer([this, device] { OnDrainDeadline(device); });
  timer->ArmAfter(limit);
  return StateChange{.device = device,
                     .state = runtime::HealthState::kDraining,
                     .was = was,
                     .deadline = limit,
                     .jobs = runtime_.JobsOn(device)};
}

void DeviceLifecycle::OnDrainDeadline(int device) {
  const auto jobs = runtime_.JobsOn(device);
  if (jobs.empty()) {
    RASD_LOG_INFO("device {}: drain deadline reached; nothing is running there", device);
  } else {
    RASD_LOG_WARN("device {}: drain deadline reached with {} job(s) still there: {}", device,
                 jobs.size(), fmt::join(jobs, ", "));
  }
  // Last: this destroys the timer whose callback is running (the loop runs
  // a copy of it).
  drain_timers_.erase(device);
}

void DeviceLifecycle::Undrain(int device, const std::string& reason, bool force, Done done) {
  auto found = runtime_.GetDevice(device);
  if (!found) return done(Fail(ErrorCode::kNotFound, fmt::format("no device {}", device)));
  const runtime::HealthState was = health_.StateOf(device);
  if (testing_.contains(device)) {
    return done(Fail(ErrorCode::kUnavailable,
                     fmt::format("device {} is running its self-test already; wait for it "
                                 "(rasctl devices {} shows the result)",
                                 device, device)));
  }
  if (was == runtime::HealthState::kHealthy) {
    MaybeResumeNode();
    return done(StateChange{.device = device, .state = was, .was = was});
  }
  if (return_check_) {
    if (auto ready = return_check_(device); !ready) {
      return done(Fail(ErrorCode::kUnavailable,
                       fmt::format("device {} stays {}: {}", device, runtime::HealthStateName(was),
                                   ready.error().message)));
    }
  }
  StartSelfTest(
      device, "undrain",
      [this, device, was, reason, force, done = std::move(done)](
          const runtime::SelfTestReport& report, DeviceHealth::SelfTestWindow window) {
        if (window.overtaken) {
          // Someone (the policy, say) decided anew while it ran:
          // that decision stands, whatever the test says.
          const auto status = health_.StatusOf(device);
          return done(Fail(ErrorCode::kAborted,
                           fmt::format("device {} changed state during its self-test ({}: {}); "
                                       "it stays {}",
                                       device, runtime::HealthStateName(status.state),
                                       status.reason, runtime::HealthStateName(status.state))));
        }
        if (!report.passed && !force) {
          return done(Fail(ErrorCode::kUnavailable,
                           fmt::format("device {} stays {}: self-test {} (rasctl undrain --force "
                                       "overrides)",
                                       device, runtime::HealthStateName(was), report.Summary())));
        }
        auto changed = health_.DecideAndSave(
            {.device = device,
             .cause = HealthCause::kOperator,
             .target = runtime::HealthState::kHealthy,
             .reason = reason.empty()
                           ? (report.passed ? "returned to service: self-test passed"
                                            : "returned to service by force: self-test failed")
                           : reason});
        // Back in service even when the state could not be saved (that is
        // retried): the recovery counts either way.
        if (recovered_ && report.passed) recovered_(device, ReturnedBy::kUndrain);
        if (!changed) return done(Fail(changed.error()));
        drain_timers_.erase(device);
        MaybeResumeNode();
        done(StateChange{.device = device,
                         .state = runtime::HealthState::kHealthy,
                         .was = was,
                         .self_test = StateChange::SelfTest{report.passed, report.Summary()},
                         .forced = !report.passed});
      });
}

void DeviceLifecycle::StartSelfTest(int device, const std::string& why, SelfTestDone then) {
  // The self-test runs as an admitted job: the gate opens that far, no further.
  (void)health_.OpenForSelfTest(device);
  testing_.insert(device);
  RASD_LOG_INFO("device {}: self-test started ({})", device, why);
  const runtime::SelfTestOptions options = options_.self_test;
  workers_[device] =
      std::thread([this, device, why, options, then = std::move(then), alive = alive_] {
        auto report = std::make_shared<runtime::SelfTestReport>(
            runtime::RunSelfTest(runtime_, device, options, loop_.GetClock()));
        loop_.Post([this, device, why, report, then, alive] {
          if (!*alive) return;  // shutting down: the destructor joins this thread
          if (auto worker = workers_.find(device); worker != workers_.end()) {
            worker->second.join();  // it has nothing left to do but return
            workers_.erase(worker);
          }
          const auto window = FinishSelfTest(device, why, *report);
          then(*report, window);
        });
      });
}

DeviceHealth::SelfTestWindow DeviceLifecycle::FinishSelfTest(
    int device, const std::string& why, const runtime::SelfTestReport& report) {
  testing_.erase(device);
  // Free pages the test's worker thread left in its malloc arena go back
  // to the system. (Its large buffers are mapped and unmapped by the test
  // itself: malloc_trim never shrinks the top of a thread's arena.)
  ::malloc_trim(0);
  // The gate back to what the holds say; a decision made while the test
  // ran (the policy isolated it again, say) stands.
  const auto window = health_.CloseSelfTest(device);
  last_self_test_[device] = {loop_.GetClock().Wall(), report.passed, report.Summary()};
  ras::ActionRecord record;
  record.time = loop_.GetClock().Wall();
  record.action = "self-test";
  record.device = device;
  record.rule = why == "undrain" ? "operator" : why;
  record.reason = why;
  record.result = report.passed ? "ok" : "failed";
  record.detail = report.Summary();
  RecordAction(std::move(record));
  RASD_LOG(report.passed ? spdlog::level::info : spdlog::level::warn, "device {} self-test {}",
              device, report.Summary());
  return window;
}

void DeviceLifecycle::RecordAction(ras::ActionRecord record) {
  if (auto stored = store_.RecordAction(record); !stored) {
    RASD_LOG_ERROR("cannot store the {} result: {}", record.action, stored.error().message);
  }
}

std::optional<SelfTestResult> DeviceLifecycle::LastSelfTest(int device) const {
  auto found = last_self_test_.find(device);
  if (found == last_self_test_.end()) return std::nullopt;
  return found->second;
}

void DeviceLifecycle::ScheduleRecoveries() {
  for (int device : std::exchange(newly_isolated_, {})) {
    if (!options_.auto_recover) continue;
    if (advisor_) {
      if (const auto suggested = advisor_(device); suggested > ras::RecoveryAction::kResetDevice) {
        RASD_LOG_WARN("device {}: no automatic recovery: {} is suggested, more than a reset; it "
                      "waits for an operator",
                      device, ras::RecoveryActionName(suggested));
        continue;
      }
    }
    const auto now = loop_.Now();
    if (auto last = recovered_at_.find(device);
        last != recovered_at_.end() &&
        now - last->second < std::chrono::nanoseconds(options_.auto_recover_window)) {
      const std::string reason = fmt::format(
          "isolated again {} s after it recovered by itself: needs an operator (rasctl undrain)",
          std::chrono::duration_cast<std::chrono::seconds>(now - last->second).count());
      RASD_LOG_ERROR("device {}: {}", device, reason);
      (void)health_.DecideAndSave({.device = device,
                                   .cause = HealthCause::kRecovery,
                                   .target = runtime::HealthState::kIsolated,
                                   .reason = reason});
      recovered_at_.erase(last);
      continue;
    }
    if (recovery_timers_.contains(device)) continue;
    auto timer = loop_.CreateTimer([this, device] {
      auto fired = std::move(recovery_timers_[device]);  // freed when this callback returns
      recovery_timers_.erase(device);
      Recover(device);
    });
    timer->ArmAfter(options_.auto_recover_delay);
    recovery_timers_[device] = std::move(timer);
    RASD_LOG_INFO("device {}: automatic recovery in {} ms", device,
                 options_.auto_recover_delay.count());
  }
}

void DeviceLifecycle::Recover(int device) {
  // Only the policy's isolation recovers by itself: an operator's, or one
  // lifted meanwhile, is not this path's.
  if (health_.StateOf(device) != runtime::HealthState::kIsolated ||
      !health_.Holds(device, HealthCause::kPolicy))
    return;
  if (health_.WorstExcept(device, HealthCause::kPolicy) == runtime::HealthState::kIsolated) {
    RASD_LOG_INFO(
        "device {}: no automatic recovery: it is isolated by more than the policy "
        "({}); it waits for an operator",
        device, health_.StatusOf(device).reason);
    return;
  }
  if (testing_.contains(device)) return;  // an operator's undrain is testing it now
  // Looked at again now: a fault during the delay (an Xid 79 after an Xid
  // 48) may have made a reset pointless.
  if (advisor_) {
    if (const auto suggested = advisor_(device); suggested > ras::RecoveryAction::kResetDevice) {
      RASD_LOG_WARN("device {}: no automatic recovery: {} is suggested now, more than a reset; it "
                    "waits for an operator",
                    device, ras::RecoveryActionName(suggested));
      return;
    }
  }
  ras::ActionRecord record;
  record.time = loop_.GetClock().Wall();
  record.action = "reset-device";
  record.device = device;
  record.rule = "auto-recover";
  record.reason = "automatic recovery";
  auto reset = runtime_.ResetDevice(device);
  if (!reset) {
    record.result = "failed";
    record.detail = reset.error().message;
    RASD_LOG_ERROR("device {}: automatic recovery: reset failed: {}; it stays isolated", device,
                  reset.error().message);
    RecordAction(std::move(record));
    return;
  }
  record.result = "ok";
  if (reset->memory_freed) {
    record.detail = fmt::format(
        "the reset freed the device's memory: {} live allocation(s) lost it, {} stream(s) "
        "aborted so that their jobs rebuild",
        reset->allocations_lost, reset->streams_aborted);
    RASD_LOG_WARN("device {}: {}", device, record.detail);
  }
  RecordAction(std::move(record));
  StartSelfTest(
      device, "auto-recover",
      // Decisions made while it ran (the policy's, about other errors of
      // the device) do not stop it: what counts is that the policy's
      // isolation is still what holds the device, checked below.
      [this, device](const runtime::SelfTestReport& report, DeviceHealth::SelfTestWindow) {
        if (!report.passed) {
          RASD_LOG_ERROR("device {}: automatic recovery: self-test {}; it stays isolated", device,
                         report.Summary());
          return;
        }
        if (!health_.Holds(device, HealthCause::kPolicy)) return;  // an operator acted
        if (health_.WorstExcept(device, HealthCause::kPolicy) == runtime::HealthState::kIsolated)
          return;  // isolated by more than the policy meanwhile: an operator's to return
        (void)health_.DecideAndSave({.device = device,
                                     .cause = HealthCause::kRecovery,
                                     .target = runtime::HealthState::kHealthy,
                                     .reason = "recovered by itself: reset, self-test passed"});
        // Another cause may hold it out still (an operator's isolation
        // meanwhile): a recovery only when it is back in service.
        if (!runtime::TakesNewWork(health_.StateOf(device))) return;
        recovered_at_[device] = loop_.Now();
        if (recovered_) recovered_(device, ReturnedBy::kAutoRecover);
      });
}

void DeviceLifecycle::MaybeResumeNode() {
  for (const auto& device : runtime_.Devices()) {
    if (health_.StateOf(device->Index()) == runtime::HealthState::kIsolated) {
      if (scheduler_ != nullptr && scheduler_->Drained()) {
        RASD_LOG_INFO("scheduler: node {} stays drained: device {} is still isolated",
                      scheduler_->Node(), device->Index());
      }
      return;
    }
  }
  // An operator's undrain with nothing isolated left: the node fault is
  // over for rasctl check too.
  if (const auto& fault = node_.Current()) {
    RASD_LOG_INFO("node fault cleared by an operator's undrain (was: {})", fault->reason);
    node_.Clear();
  }
  if (scheduler_ == nullptr || !options_.resume_on_undrain || !scheduler_->Drained()) return;
  scheduler_->Resume();
}

}  // namespace rasd::daemon
