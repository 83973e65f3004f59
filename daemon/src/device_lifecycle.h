#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device_health.h"
#include "device_recovery.h"
#include "node_fault.h"
#include "rasd/common/event_loop.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/recovery.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"
#include "rasd/runtime/self_test.h"
#include "scheduler.h"

namespace rasd::daemon {

// What an operator's state change did, for the control API to show.
struct StateChange {
  int device = -1;
  runtime::HealthState state = runtime::HealthState::kHealthy;
  runtime::HealthState was = runtime::HealthState::kHealthy;
  std::optional<std::chrono::milliseconds> deadline;  // drain
  std::vector<std::string> jobs;                      // drain: the jobs on the device
  struct SelfTest {
    bool passed = false;
    std::string summary;
  };
  std::optional<SelfTest> self_test;  // undrain of a device that was not Healthy
  bool forced = false;                // undrain --force over a failed self-test
};

// A device's last self-test, as `rasctl devices` shows it.
struct SelfTestResult {
  std::chrono::system_clock::time_point time;
  bool passed = false;
  std::string summary;
};

// The device lifecycle: operators' isolate, drain (with its deadline) and
// undrain (with the self-test), automatic recovery of devices the policy
// isolated, and resuming the node at the scheduler when nothing is left
// isolated. Every operator state change goes through here, as DeviceHealth
// decisions of the operator's cause; the policy's isolations reach here as
// DeviceStateChanged, and their recovery is scheduled once the batch that
// made them is done (posted to the loop).
//
// The self-test runs on a worker thread, never on the loop: the control
// socket keeps answering while a device is tested. One self-test per device
// at a time; a second undrain meanwhile is refused (kUnavailable).
//
// Loop thread only. Runtime, health, actuator (the node fault) and store
// must outlive it; the destructor waits for running self-tests (each bounded by its step
// timeouts).
class DeviceLifecycle {
 public:
  struct Options {
    std::chrono::milliseconds drain_deadline{30000};
    bool auto_recover = false;
    std::chrono::milliseconds auto_recover_delay{5000};
    std::chrono::seconds auto_recover_window{std::chrono::hours(24)};
    bool resume_on_undrain = true;
    runtime::SelfTestOptions self_test;
  };
  using Done = std::function<void(Result<StateChange>)>;

  DeviceLifecycle(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
                  NodeFault& node, jobs::JobManager& jobs, ras::StateStore& store,
                  SchedulerLink* scheduler, Options options);
  ~DeviceLifecycle();
  DeviceLifecycle(const DeviceLifecycle&) = delete;
  DeviceLifecycle& operator=(const DeviceLifecycle&) = delete;

  // Takes effect for what starts from now on (config reload).
  void SetOptions(Options options) { options_ = options; }

  Result<StateChange> Isolate(int device, const std::string& reason);
  Result<StateChange> Drain(int device, const std::string& reason,
                            std::optional<std::chrono::milliseconds> deadline);
  // Back to service when the self-test passes (or `force`). `done` runs on
  // the loop, later (after the self-test) or at once (errors, a Healthy
  // device).
  void Undrain(int device, const std::string& reason, bool force, Done done);

  // Told when a device is back in service after a self-test passed.
  void SetRecoveredObserver(std::function<void(int device, ReturnedBy how)> observer) {
    recovered_ = std::move(observer);
  }
  // What is suggested for a device now; unset: any recovery may run.
  // Asked before an undrain (forced or not) tests a device: an error keeps
  // it out of service, with the reason (the retired pages unread).
  void SetReturnCheck(std::function<Status(int device)> check) { return_check_ = std::move(check); }
  void SetRecoveryAdvisor(std::function<ras::RecoveryAction(int device)> advisor) {
    advisor_ = std::move(advisor);
  }

  std::optional<SelfTestResult> LastSelfTest(int device) const;
  bool SelfTestRunning(int device) const { return testing_.contains(device); }
  std::size_t PendingDrainDeadlines() const { return drain_timers_.size(); }
  std::size_t PendingRecoveries() const { return recovery_timers_.size(); }
  // An automatic recovery of `device` is armed (it runs after its delay).
  bool RecoveryScheduled(int device) const { return recovery_timers_.contains(device); }

 private:
  // Runs the self-test of `device` on a worker thread; `then` gets the
  // report on the loop, with whether another decision about the device came
  // while it ran. The gate is opened to Draining (an Isolated device admits
  // nothing, the test included) and put back to what the holds say before
  // `then` runs.
  using SelfTestDone =
      std::function<void(const runtime::SelfTestReport&, DeviceHealth::SelfTestWindow)>;
  void StartSelfTest(int device, const std::string& why, SelfTestDone then);
  DeviceHealth::SelfTestWindow FinishSelfTest(int device, const std::string& why,
                                              const runtime::SelfTestReport& report);
  // Devices the policy isolated get their automatic recovery scheduled
  // (policy.auto_recover), unless what is suggested for them is more than a
  // reset (a reboot, a repair): a reset and self-test would only loop then,
  // so they wait for an operator.
  void ScheduleRecoveries();
  void OnDrainDeadline(int device);
  void Recover(int device);
  void MaybeResumeNode();
  void RecordAction(ras::ActionRecord record);

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  DeviceHealth& health_;
  NodeFault& node_;
  jobs::JobManager& jobs_;
  ras::StateStore& store_;
  SchedulerLink* scheduler_;  // null without a scheduler
  Options options_;
  std::function<void(int, ReturnedBy)> recovered_;
  std::function<ras::RecoveryAction(int)> advisor_;
  std::function<Status(int)> return_check_;

  std::map<int, std::unique_ptr<common::Timer>> drain_timers_;
  std::map<int, std::unique_ptr<common::Timer>> recovery_timers_;
  std::map<int, std::chrono::nanoseconds> recovered_at_;  // loop monotonic time
  std::map<int, SelfTestResult> last_self_test_;
  std::set<int> testing_;
  std::vector<int> newly_isolated_;  // by the policy, not yet scheduled
  DeviceHealth::Subscription subscription_;
  std::map<int, std::thread> workers_;  // the self-test running on each device
  // Read by posted completions: false once the destructor has begun.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rasd::daemon
