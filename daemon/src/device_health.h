#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The name a device's rows are saved under: its UUID, or "index-N" for a
// device without one.
std::string DeviceUuid(runtime::Runtime& runtime, int device);

// Who decided something about a device's health. Each cause holds its own
// part of the state: a cause lifts only its own hold.
enum class HealthCause : std::uint8_t {
  kPolicy,            // the rules, on RAS events (the heartbeat's hangs included)
  kLink,              // a link down (LinkHealth)
  kOperator,          // rasctl isolate, drain, undrain
  kSelfTest,          // the gate opened for a self-test (never a hold)
  kRecovery,          // automatic recovery (policy.auto_recover)
  kRestore,           // the start: a saved state without its cause, a damaged database
  kProbe,             // a driver call that did not return
  kSilentCorruption,  // a device that computes wrong without saying so
};
std::string_view HealthCauseName(HealthCause cause);
std::optional<HealthCause> ParseHealthCause(std::string_view name);

// One cause's verdict on one device. A target worse than Healthy sets the
// cause's hold (a hold only grows: the worse of the old and the new);
// Healthy lifts it. Callers fill every field; `rule` and `evidence` are
// what the action row shows, never read back.
struct HealthDecision {
  int device = -1;
  HealthCause cause = HealthCause::kPolicy;
  runtime::HealthState target = runtime::HealthState::kHealthy;
  std::string reason;
  std::string rule;      // the rule that decided; empty: the cause's name
  std::string evidence;  // appended to the action row's detail
};

// A change of a device's effective state, pushed to every subscriber.
struct DeviceStateChanged {
  int device = -1;
  runtime::HealthState from = runtime::HealthState::kHealthy;
  runtime::HealthState to = runtime::HealthState::kHealthy;
  HealthCause cause = HealthCause::kPolicy;
};

// A device's health with why and since when, as rasd shows it.
struct DeviceStatus {
  runtime::HealthState state = runtime::HealthState::kHealthy;
  std::string reason;
  std::chrono::system_clock::time_point since{};
  std::optional<HealthCause> cause;  // the worst hold's; none when Healthy
  struct Hold {
    HealthCause cause = HealthCause::kPolicy;
    runtime::HealthState state = runtime::HealthState::kHealthy;
    std::string reason;
    std::chrono::system_clock::time_point since{};
  };
  std::vector<Hold> holds;  // in cause order
};

// What one decision did.
struct HealthOutcome {
  runtime::HealthState from = runtime::HealthState::kHealthy;
  runtime::HealthState to = runtime::HealthState::kHealthy;
  bool Changed() const { return from != to; }
};

// The one owner of device health. Every cause hands it a HealthDecision;
// it keeps one hold per cause per device, and a device's effective state is
// its worst hold (Healthy without one). It is the only writer of the
// runtime's gates (Device::SetHealth), and each change of an effective
// state is pushed, as a DeviceStateChanged, to every subscriber, on the
// loop, before Decide returns (a change a subscriber makes in turn is heard
// after the one it is reacting to, by everyone).
//
// Lifting: a cause's Healthy lifts its own hold. The operator's Healthy
// (an undrain) lifts every hold; the recovery's lifts the policy's hold as
// well as its own, since automatic recovery is for what the policy
// isolated. Nothing else lowers an Isolated device.
//
// A self-test needs an Isolated device's gate open to Draining (the test is
// an admitted job): OpenForSelfTest opens it, CloseSelfTest puts the
// effective state back and says whether a decision came while it ran that
// stands over the test's outcome (one that keeps the device out of service,
// or any of the policy's). The window moves the gate only: subscribers
// hear of effective states, not of the test's opening.
//
// Saving: each decision's rows (the device's state with its holds, and an
// action row for every cause but the policy, whose action row the Actuator
// writes, and but a link decision that changed nothing) wait for TakePending, which the pipeline
// calls to put them into the batch it commits in one transaction. DecideAndSave commits them at
// once, for a decision made outside the pipeline; a failed save is kept
// and retried with the next batch (the unsaved callback arms the retry).
//
// Loop thread only. The runtime and store outlive it.
class DeviceHealth {
 public:
  using Subscriber = std::function<void(const DeviceStateChanged&)>;
  // Unsubscribes when destroyed; may outlive the DeviceHealth.
  using Subscription = std::shared_ptr<void>;

  DeviceHealth(common::EventLoop& loop, runtime::Runtime& runtime, ras::StateStore& store);
  DeviceHealth(const DeviceHealth&) = delete;
  DeviceHealth& operator=(const DeviceHealth&) = delete;

  // Applies the saved states, with their holds, before anything can admit
  // work. A row saved without holds, or with holds that cannot be read,
  // stands as a restore hold (an operator's undrain lifts it). When the
  // saved states cannot be read at all, nothing is applied and the error is
  // returned: the caller fences every device (what was isolated is unknown).
  Status Restore();

  [[nodiscard]] Subscription Subscribe(Subscriber subscriber);

  // kNotFound for an unknown device; kInvalidArgument for a self-test cause.
  Result<HealthOutcome> Decide(const HealthDecision& decision);
  // Decide, then commit its rows now. When the save fails the decision
  // stands all the same, is retried, and the error says so.
  Result<HealthOutcome> DecideAndSave(const HealthDecision& decision);
  // Every device isolated by a restore hold, saved, until an operator
  // checks it: what the store held about them is lost or unreadable.
  void IsolateEveryDevice(const std::string& reason, const std::string& rule);

  // A restore hold from a row an older rasd saved without holds, at
  // `state`, becomes `cause`'s: the cause that knows, from its own saved
  // state, that it made it (LinkHealth's degraded_by_link). Returns whether
  // it did.
  bool ClaimRestoredHold(int device, HealthCause cause, runtime::HealthState state);

  Status OpenForSelfTest(int device);
  struct SelfTestWindow {
    bool overtaken = false;  // another decision about the device came meanwhile
  };
  SelfTestWindow CloseSelfTest(int device);

  DeviceStatus StatusOf(int device) const;
  runtime::HealthState StateOf(int device) const;
  bool Holds(int device, HealthCause cause) const;
  // The worst hold other than `cause`'s (Healthy: none).
  runtime::HealthState WorstExcept(int device, HealthCause cause) const;

  void TakePending(ras::StoreBatch& batch);
  // A batch holding TakePending's rows was committed.
  void Committed() { unsaved_.clear(); }
  std::size_t UnsavedStates() const { return unsaved_.size(); }
  void SetUnsavedCallback(std::function<void()> on_unsaved) { on_unsaved_ = std::move(on_unsaved); }
  // Told of each action row it writes ("isolate-device", "ok"), for the
  // counts rasd exports; unset: not counted.
  using ActionCounter = std::function<void(const std::string& action, const std::string& result)>;
  void SetActionCounter(ActionCounter counter) { count_ = std::move(counter); }

 private:
  struct HoldEntry {
    runtime::HealthState state = runtime::HealthState::kHealthy;
    std::string reason;
    std::chrono::system_clock::time_point since{};
    std::uint64_t order = 0;  // later decisions win a tie of equal states
  };
  struct Record {
    std::map<HealthCause, HoldEntry> holds;
    std::string reason;  // of the last change, when no hold explains it
    std::chrono::system_clock::time_point since{};
    bool testing = false;
    bool overtaken = false;
    bool isolated_during_test = false;  // the gate closed again while under test
    bool legacy_restore = false;  // the restore hold is a row saved without holds
  };
  runtime::HealthState Effective(const Record& record) const;
  // Sets the gate to what `record` says (the self-test's window included).
  void Apply(int device, Record& record);
  ras::DeviceStateRecord Row(int device) const;
  void Publish(const DeviceStateChanged& change);

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  ras::StateStore& store_;
  std::map<int, Record> records_;
  std::uint64_t decisions_ = 0;
  std::set<int> unsaved_;  // devices whose row waits for a commit
  std::vector<ras::BatchAction> pending_actions_;
  std::function<void()> on_unsaved_;
  ActionCounter count_;
  std::shared_ptr<std::map<std::uint64_t, Subscriber>> subscribers_ =
      std::make_shared<std::map<std::uint64_t, Subscriber>>();
  std::uint64_t next_subscriber_ = 1;
  std::deque<DeviceStateChanged> queue_;  // changes not yet heard by everyone
  bool publishing_ = false;
};

}  // namespace rasd::daemon
