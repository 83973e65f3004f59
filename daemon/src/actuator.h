#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "device_health.h"
#include "node_fault.h"
#include "rasd/common/host_env.h"
#include "rasd/ras/policy.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// How an action went, as stored ("ok", "failed", ...).
enum class ActionResult { kOk, kFailed, kSkipped, kDisabled, kStarted };
std::string_view ActionResultName(ActionResult result);

// What one action did: its result, and the device state it changed, if it
// changed one. Callers read these fields, never the detail text.
struct ActionOutcome {
  ActionResult result = ActionResult::kOk;
  struct HealthChange {
    int device = -1;
    runtime::HealthState from = runtime::HealthState::kHealthy;
    runtime::HealthState to = runtime::HealthState::kHealthy;
  };
  std::optional<HealthChange> health_change;
  ras::ActionRecord record;  // as stored (or to be stored, after Apply)
};

// Carries the policy's actions to the runtime (page retirement, killing a
// consumer), to DeviceHealth (degrade, drain, isolate: the policy's hold),
// to NodeFault and the scheduler (drain-node),
// to the host (offlining pages) and to operators' programs (hooks). Every
// action is logged, stored in the actions table linked to its event, and
// counted; retired pages are persisted so that a restart (or a kill -9)
// keeps them.
//
// Runs on the event loop, except hooks: each runs in a thread of its own
// (argv, no shell, a timeout), at most kMaxHooks at once.
class Actuator {
 public:
  struct Options {
    bool host_page_offline = false;
    std::chrono::milliseconds hook_timeout{10000};
  };
  static constexpr std::size_t kMaxHooks = 4;

  // A drain-node action declares the node's fault to `node`, then asks the
  // node drainer (the scheduler) to drain.
  Actuator(const common::HostEnv& host, ras::StateStore& store, runtime::Runtime& runtime,
           DeviceHealth& health, NodeFault& node, Options options);
  ~Actuator();  // waits for running hooks (each is bounded by its timeout)
  Actuator(const Actuator&) = delete;
  Actuator& operator=(const Actuator&) = delete;

  void SetOptions(Options options);
  // Whether Apply would act on `action` rather than store it as disabled
  // or skipped (withheld, or a kind the options turn off).
  bool Acts(const ras::Action& action) const;
  // Where drain-node goes (the scheduler link); unset: logged as skipped.
  // Returns the detail to store.
  void SetNodeDrainer(std::function<std::string(const std::string& reason)> drainer) {
    node_drainer_ = std::move(drainer);
  }
  // The suggested recovery action for an event (RASD_SUGGESTED_ACTION in a
  // hook's environment); unset: the variable is left out.
  void SetSuggester(std::function<std::string(const ras::RasEvent&)> suggester) {
    suggester_ = std::move(suggester);
  }

  // Where kill-consumer goes for an event that names a process (an Xid's
  // pid=) rather than a device address: the attached workloads. It returns
  // what it did, or an error that says why nothing was killed (the action
  // is then stored as skipped). Unset: such events are skipped.
  using ConsumerKiller =
      std::function<Result<std::string>(std::int64_t pid, int device, const std::string& reason)>;
  void SetConsumerKiller(ConsumerKiller killer) { consumer_killer_ = std::move(killer); }
  // The processes computing on a device now, by its driver's account
  // (NVML's list): kill-consumer's evidence for an event that names
  // neither the memory nor the process (an Xid 94 without pid=, NVML's own
  // Xid event). Only a list of exactly one process names the consumer.
  using ProcessLister = std::function<Result<std::vector<std::int64_t>>(int device)>;
  void SetProcessLister(ProcessLister lister) { process_lister_ = std::move(lister); }

  // Applies what the store remembers: retired pages leave the pools again.
  // (Device states are DeviceHealth's, the node fault NodeFault's.) When the
  // pages cannot be read, none is retired and the error is returned: the
  // caller fences every device (a poisoned page would be handed out again).
  Status Restore();
  // Ok once Restore() has succeeded; else tries it again: a device must not
  // return to service while its poisoned pages may be handed out.
  Status EnsurePagesRestored();

  // Apply, then commit its rows (and DeviceHealth's) at once, linked to
  // `event_id`: for a caller outside the pipeline. Returns what was stored.
  ras::ActionRecord Execute(const ras::Action& action, const ras::RasEvent& event,
                            std::optional<std::int64_t> event_id);

  // Acting before writing: the action takes effect at once (a gate closes
  // in microseconds); what it writes (its action row, linked to event
  // `event_index` of the batch, device states, retired pages) waits for
  // TakePending(), which moves it into the batch the caller commits in one
  // transaction with the events (DeviceHealth's rows join the same batch).
  ActionOutcome Apply(const ras::Action& action, const ras::RasEvent& event,
                      std::size_t event_index);
  void TakePending(ras::StoreBatch& batch);
  // "action result" -> how many, e.g. "retire-page ok". Count() adds one
  // (DeviceHealth's rows are counted here too); thread-safe.
  std::map<std::string, std::uint64_t> Counts() const;
  void Count(const std::string& action, const std::string& result);

 private:
  struct Outcome {
    ActionResult result = ActionResult::kOk;
    std::string detail;
    std::optional<ActionOutcome::HealthChange> health_change;
  };
  ActionOutcome Run(const ras::Action& action, const ras::RasEvent& event,
                    std::optional<std::int64_t> event_id);
  Outcome RetirePage(const ras::Action& action);
  Outcome KillConsumer(const ras::Action& action);
  Outcome KillOnlyProcessOnDevice(const ras::Action& action);
  Outcome MarkAtRisk(const ras::Action& action);
  Outcome RaiseHealth(const ras::Action& action, runtime::HealthState state);
  Outcome OfflineHostPage(const ras::Action& action, bool hard);
  Outcome RunHook(const ras::Action& action, const ras::RasEvent& event,
                  std::optional<std::int64_t> event_id);
  ras::ActionRecord Store(ras::ActionRecord record);

  const common::HostEnv& host_;
  ras::StateStore& store_;
  runtime::Runtime& runtime_;
  DeviceHealth& health_;
  NodeFault& node_;
  Options options_;
  std::size_t pending_index_ = 0;
  std::vector<ras::BatchAction> pending_records_;
  std::vector<ras::RetiredPageRecord> pending_pages_;
  std::function<std::string(const std::string& reason)> node_drainer_;
  std::function<std::string(const ras::RasEvent&)> suggester_;
  ConsumerKiller consumer_killer_;
  ProcessLister process_lister_;
  bool pages_restored_ = false;

  mutable std::mutex mutex_;  // guards counts_ and the hook bookkeeping
  std::map<std::string, std::uint64_t> counts_;
  std::size_t hooks_running_ = 0;
  std::condition_variable hooks_done_;
};

}  // namespace rasd::daemon
