#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "actuator.h"
#include "fabric_health.h"
#include "rasd/common/event_loop.h"
#include "rasd/ras/fault_rules.h"
#include "rasd/ras/link_policy.h"
#include "rasd/ras/policy.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"
#include "store_checkpointer.h"

namespace rasd::daemon {

// What one handled batch did, for the observers (metrics, the device
// lifecycle, the jobs).
struct HandledBatch {
  const std::vector<ras::RasEvent>& events;  // as stored (attributed, coalesced)
  std::vector<std::int64_t> event_ids;       // empty when storing failed
  std::vector<double> isolation_seconds;     // fault to gate closed, per isolation
  bool stored = false;
};

// Decides on the link reports of each batch, after its events: its
// decisions go to DeviceHealth, whose rows join the batch, and its own
// state joins it too (TakePending), so that a restart finds the links'
// state and the holds they decided together. Loop thread.
class LinkDecider {
 public:
  virtual ~LinkDecider() = default;
  virtual void Decide(const ras::LinkReport& report) = 0;
  // Its state waiting to be saved, if any, into `batch`.
  virtual void TakePending(ras::StoreBatch& batch) = 0;
  virtual bool HasPending() const = 0;
};

// A storm-coalesced event of several pages (`events[index]`) whose
// `actions` act on some of its pages (`acts`: not disabled or withheld):
// each such page becomes an event of its own, appended to `events`, so that
// its actions' rows point at the page they acted on; the merged event keeps
// the rest. Returns the event each action belongs to.
std::vector<std::size_t> SplitActedPages(std::vector<ras::RasEvent>& events, std::size_t index,
                                         const std::vector<ras::Action>& actions,
                                         const std::function<bool(const ras::Action&)>& acts);

// One batch of RAS events, from any source, through one path:
// attribute to runtime devices -> coalesce a storm -> PolicyEngine::Decide
// -> Actuator::Apply (effects at once) -> the link reports to the
// LinkDecider -> one store transaction for the events, the action rows,
// device states, retired pages, the link policy's state and the source's
// cursor -> observers. Acting never waits for the disk: a gate closes
// before anything is written.
//
// A batch that cannot be stored (a full or failing disk) is kept, in
// order, with every batch after it, and retried with a backoff (100 ms up
// to 10 s); the sources' cursors in it do not reach the store before the
// events they follow. The backlog is bounded (kMaxBacklogEvents): past it,
// events are coalesced (counts stay exact; their actions lose the link to
// the event row); past that too, the oldest are dropped and counted.
//
// Loop thread only. Everything it refers to must outlive it.
class RasPipeline {
 public:
  // The runtime device at PCI address `bdf`, in any of the forms records
  // print it ("0000:07:00.0", "07:00.0", Xid lines' "0000:07:00"); the
  // pipeline's attribution of a record, and a driver call's (ProbeWatchdog).
  static std::optional<int> DeviceAtPciAddress(const runtime::Runtime& runtime,
                                               std::string_view bdf);

  struct Options {
    // A batch larger than this, or more events than this within a second,
    // is a storm (for 10 s after): coalesced, and its rows grow.
    std::size_t storm_threshold = 64;
    // Retention, applied at construction and hourly: events older than
    // this, and the oldest beyond `max_events`, are rolled up by day and
    // component (the summary still counts them) and deleted.
    int retention_days = 90;
    std::uint64_t max_events = 1'000'000;
  };
  struct Stats {
    std::uint64_t events = 0;          // before coalescing
    std::uint64_t coalesced = 0;       // merged into others
    std::uint64_t store_failures = 0;  // commits that failed (each retry counts)
    bool store_ok = true;              // the last commit succeeded
    std::size_t backlog_batches = 0;   // waiting for the store
    std::size_t backlog_events = 0;
    std::uint64_t dropped_events = 0;  // errors lost to the backlog's bound (sum of counts)
    std::uint64_t pruned = 0;          // events retention rolled up and deleted

    // Status's "ras" view of these (the sources add theirs).
    nlohmann::json ToJson() const;
  };
  static constexpr std::size_t kMaxBacklogEvents = 65536;
  // The most page_errors rows a storm's batch writes: thousands of upserts
  // in one batch held the loop, and every request behind it, for 15 ms.
  static constexpr std::size_t kPagesPerBatch = 1024;
  using Observer = std::function<void(const HandledBatch&)>;

  RasPipeline(common::EventLoop& loop, runtime::Runtime& runtime, ras::PolicyEngine& policy,
              Actuator& actuator, DeviceHealth& health, ras::StateStore& store, Options options);
  // Saves the page errors a storm left unsaved, if the store takes them.
  ~RasPipeline();
  RasPipeline(const RasPipeline&) = delete;
  RasPipeline& operator=(const RasPipeline&) = delete;

  void SetOptions(Options options) { options_ = options; }
  // The fault rules' rows (ras.fault_rules); what they saw carries on.
  void SetFaultRules(std::vector<ras::FaultRule> rows) { fault_rules_.SetRows(std::move(rows)); }
  // The device is back in service: its next fault is judged afresh.
  void OnDeviceReturned(int device) { fault_rules_.ForgetDevice(device); }
  // When the node booted, for the fault rules' settle rows.
  void SetBootTime(std::chrono::system_clock::time_point boot) { fault_rules_.SetBootTime(boot); }
  void AddObserver(Observer observer) { observers_.push_back(std::move(observer)); }
  // Called for each event with the policy's decision, before any of its
  // actions is taken (the recovery suggestion is known to a hook then).
  using DecisionObserver =
      std::function<void(const ras::RasEvent& event, const std::vector<ras::Action>& actions)>;
  void SetDecisionObserver(DecisionObserver observer) { decided_ = std::move(observer); }

  // Decides on every batch's link reports from now on; null: none. It
  // must outlive the pipeline or be unset first.
  void SetLinkDecider(LinkDecider* decider) { link_decider_ = decider; }
  // Turns each batch's NIC faults into a link report of the batch; null:
  // none.
  void SetFabricHealth(std::unique_ptr<FabricHealth> fabric_health) {
    fabric_health_ = std::move(fabric_health);
  }
  FabricHealth* GetFabricHealth() { return fabric_health_.get(); }
  // Adds to each event what only the daemon knows (the attached workload a
  // record's process is), before the policy decides and the store keeps it.
  using Annotator = std::function<void(ras::RasEvent&)>;
  void SetAnnotator(Annotator annotate) { annotate_ = std::move(annotate); }

  // `cursors` are the positions of the sources after these events: stored
  // in the same transaction, so that a restart resumes exactly behind what
  // was stored. `links`: what the same look read of the links.
  void Handle(std::vector<ras::RasEvent> events, std::vector<ras::SourceCursor> cursors = {},
              std::vector<ras::LinkReport> links = {});
  // Commits the rows of decisions made outside a batch of events (a link's
  // debounce ending, an operator's return): now, or with the backlog's next
  // retry when batches wait for the store.
  void CommitDecisions();

  const Stats& GetStats() const { return stats_; }
  // Copies the write-ahead log back on a thread of its own from now on;
  // null: on the loop. It must outlive the pipeline or be unset first.
  void SetCheckpointer(StoreCheckpointer* checkpointer) { checkpointer_ = checkpointer; }

 private:
  void AttributeToDevices(std::vector<ras::RasEvent>& events) const;
  // The rows the actuator, the link decider and DeviceHealth hold for the store.
  void TakePending(ras::StoreBatch& batch);
  // Commits the backlog as one transaction; on failure keeps it and arms
  // the retry.
  void FlushBacklog();
  // Counts a failed commit; logs the first of a run of them.
  void NoteFailure(const ras::StoreBatch& batch, const Error& error);
  void Bound();
  void ArmRetry();
  // After a commit: the write-ahead log is copied back once the store has
  // been quiet for a second, or when it has grown past 8 MiB. With a
  // checkpointer the copy runs there; under a storm the loop's writes go on
  // meanwhile, so once it has finished the loop copies what was written
  // since (a few batches) itself, and its next commit starts the log over.
  // (A checkpoint that never catches up with the writer never lets the log
  // start over: it grew past 100 MiB in a long storm.)
  void AfterCommit();
  void CheckpointOnLoop();
  void Log(const std::vector<ras::RasEvent>& events);
  // Moves the page errors not saved yet into `batch` (set even if none,
  // so that the store does not count the batch's events a second time).
  void TakePages(ras::StoreBatch& batch);
  // A storm's pages in slices: the rest of what waits goes with the next
  // batches, so that no one batch holds the loop for all of them.
  void TakeSomePages(ras::StoreBatch& batch);
  // Whether a batch of `events` arrives in a storm (and counts it).
  bool InStorm(std::size_t events);
  // Sets batch.grows for the events that only record and whose component
  // has a row stored in their minute: they add to it instead of adding rows.
  // For a storm's batches only (more events than the storm threshold).
  void PlanGrowth(ras::StoreBatch& batch, const std::vector<bool>& acted);
  // After a commit: the rows that may grow from now on.
  void OpenStored(const ras::StoreBatch& batch, const std::vector<bool>& acted,
                  const std::vector<std::int64_t>& event_ids);

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  ras::PolicyEngine& policy_;
  void Prune();

  Actuator& actuator_;
  DeviceHealth& health_;  // its rows join each batch
  ras::StateStore& store_;
  Options options_;
  std::vector<Observer> observers_;
  DecisionObserver decided_;
  LinkDecider* link_decider_ = nullptr;
  std::unique_ptr<FabricHealth> fabric_health_;
  Annotator annotate_;
  Stats stats_;
  std::deque<ras::StoreBatch> backlog_;
  // Page errors decided on but not saved: under a storm a batch's pages
  // wait up to kPagesSavePeriod and go with a later batch's transaction,
  // so that a page struck in every batch is written once a second, not
  // once per batch (the upserts were a third of a spread storm's time).
  // Outside a storm, and in any batch that acts, they go at once. A crash
  // loses at most that second of counts: the policy's counters in memory
  // are what decides while rasd runs; page_errors only seeds them at start.
  // Once the second is up, its sums go kPagesPerBatch a batch (from
  // saving_pages_) while the next second's gather in unsaved_pages_.
  static constexpr std::chrono::seconds kPagesSavePeriod{1};
  ras::PageErrorTally unsaved_pages_;
  std::vector<ras::PageErrorsRecord> saving_pages_;
  std::chrono::nanoseconds pages_saved_at_{};
  bool PagesWaiting() const { return !unsaved_pages_.empty() || !saving_pages_.empty(); }
  std::unique_ptr<common::Timer> pages_timer_;  // saves what a storm's end left
  // Rows stored in their minute that record-only events of the same
  // component add to (a storm is a row per component and minute, not per
  // batch). Forgotten when a commit fails: the backlog stores new rows.
  struct OpenEvent {
    std::int64_t id = 0;
    // The minute it coalesces in; for the first event of a fault rule's
    // storm window, the window's last minute (its repeats grow it).
    std::int64_t minute = 0;
    ras::RasEvent first;  // the component, as SameComponent compares it
    std::uint64_t count = 0;
    std::vector<ras::PageErrors> pages;                         // every page, first seen first
    std::unordered_map<std::uint64_t, std::size_t> page_index;  // page -> its place in `pages`
    std::chrono::system_clock::time_point last;
    // Adds each page's errors, a new page at the end.
    void AddPages(const std::vector<ras::PageErrors>& more);
  };
  static constexpr std::size_t kMaxOpenEvents = 256;
  static constexpr std::size_t kMaxOpenPages = 4096;  // a row with more starts another
  std::vector<OpenEvent> open_;
  ras::FaultRules fault_rules_;
  std::int64_t rate_second_ = -1;  // InStorm's count of the events of a second
  std::size_t events_this_second_ = 0;
  std::chrono::nanoseconds storm_until_{};
  std::unique_ptr<common::Timer> retry_timer_;
  std::unique_ptr<common::Timer> checkpoint_timer_;
  StoreCheckpointer* checkpointer_ = nullptr;
  // A checkpoint asked of checkpointer_ for a log past 8 MiB, and its count
  // of finished checkpoints then. The loop copies the rest itself (only the
  // log's owner can see it copied in full, so that it starts over) once
  // the thread has left at most kLoopCheckpointPages: copying the pages a
  // storm wrote while the thread ran held the loop for 15 ms.
  static constexpr std::size_t kLoopCheckpointPages = 256;
  bool bulk_requested_ = false;
  std::uint64_t finished_before_bulk_ = 0;
  std::unique_ptr<common::Timer> prune_timer_;  // hourly retention
  std::chrono::milliseconds retry_delay_{100};
  std::chrono::nanoseconds failing_since_{};
  // Log at most this many events a second; a storm is counted, not printed.
  std::int64_t log_window_second_ = -1;
  int logged_in_window_ = 0;
  std::uint64_t unlogged_ = 0;
};

}  // namespace rasd::daemon
