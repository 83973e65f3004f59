#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/common/unique_fd.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/severity.h"

struct sqlite3;
struct sqlite3_stmt;
struct sqlite3_backup;

namespace rasd::ras {

struct StoredEvent {
  std::int64_t id = 0;  // increases with every event; a follower resumes after it
  RasEvent event;       // its time: the first error's
  // A row that went on counting in its minute (StoreBatch::grows): when its
  // last error was; unset for a row written once.
  std::optional<std::chrono::system_clock::time_point> last;
};

struct EventQuery {
  std::chrono::system_clock::time_point since{};
  std::optional<Severity> severity;
  std::optional<int> device;
  std::optional<std::int64_t> after_id;
  std::vector<std::int64_t> ids;  // only these rows, if any
  std::size_t limit = 1000;       // the newest `limit` matching events
};

struct EventSummaryRow {
  std::string origin;
  Severity severity = Severity::kInfo;
  std::uint64_t events = 0;  // stored events
  std::uint64_t errors = 0;  // errors they stand for (an EDAC line may report several)
  std::chrono::system_clock::time_point last;
};

// A device's health as persisted: the runtime's gate starts from it.
struct DeviceStateRecord {
  std::string device_uuid;
  std::string state;  // HealthStateName: Healthy, Degraded, Draining, Isolated
  std::string reason;
  std::chrono::system_clock::time_point since;
  // Who holds it in that state, as the daemon's own JSON; empty in a row
  // saved before schema 9.
  std::string holds;
};

// A device's recovery history and suggested action, by UUID, so that an
// escalation counts recoveries across restarts and reboots. `spec` is the
// daemon's own JSON.
struct DeviceRecoveryRecord {
  std::string device_uuid;
  std::string spec;
};

// A process outside rasd attached to its devices, as persisted so that a
// restarted rasd follows it again: the pid with its start time (clock ticks
// since boot, /proc's starttime) names one process, whatever reuses the pid
// later. `spec` is the daemon's own JSON (name, uid, devices, signal, grace).
struct WorkloadRecord {
  std::int64_t pid = 0;
  std::uint64_t start_time = 0;
  std::string spec;
};

struct RetiredPageRecord {
  std::string device_uuid;
  std::uint64_t address = 0;  // the page's first byte
  std::string reason;
  std::chrono::system_clock::time_point retired;
};

// What rasd did about an event (or an operator asked for), and how it went.
struct ActionRecord {
  std::int64_t id = 0;
  std::optional<std::int64_t> event_id;  // null for an operator's command or a pruned event
  std::chrono::system_clock::time_point time;
  std::string action;  // ActionKindName
  std::optional<int> device;
  std::optional<std::uint64_t> address;
  std::string rule;
  std::string reason;
  std::string result;  // ok | failed | skipped | disabled
  std::string detail;
  // Decisions this row stands for. A "disabled" or "skipped" decision is
  // coalesced: it is added to the row of the same action, rule, result and
  // device in the same wall-clock minute (floor of `time` to 60 s), which
  // keeps the first record's time, event, address, reason and detail. Other
  // results always get a row of their own. At least 1.
  std::uint64_t count = 1;
};

// Where a source stopped reading, so that a restart neither repeats nor
// loses records: /dev/kmsg's boot id and sequence number, for example.
struct SourceCursor {
  std::string source;
  std::string boot_id;
  std::string position;
};

// An action to store with a batch. `event_index`, when set, links the row to
// `events[*event_index]` of the same batch (record.event_id must then be
// unset): the event's id is not known until it is inserted.
struct BatchAction {
  ActionRecord record;
  std::optional<std::size_t> event_index;
};

// One row of the node's own state (node_state), replacing the saved value.
struct NodeValue {
  std::string key;
  std::string value;
};

// What one turn of the daemon's loop writes. Any part may be empty.
// A stored event that goes on counting: the batch's event at the same
// position (the errors since) joins this row, which becomes `count` errors
// over `pages` (the first kMaxStoredPages listed, `pages_not_listed` more),
// last seen at `last`.
struct EventGrowth {
  std::int64_t id = 0;
  std::uint64_t count = 0;
  std::vector<PageErrors> pages;
  std::uint64_t pages_not_listed = 0;
  std::chrono::system_clock::time_point last;
};

// The errors of pages, summed by scope and page over any number of
// events: what one upsert per page adds to page_errors. A plain value.
class PageErrorTally {
 public:
  // Adds every page each event names (its histogram, or its address).
  void Add(std::span<const RasEvent> events);
  bool empty() const { return by_scope_.empty(); }
  // The sums by scope and page, ascending (the table's key order); the
  // tally is empty after.
  std::vector<PageErrorsRecord> Take();

 private:
  struct Sum {
    std::uint64_t errors = 0;
    std::chrono::system_clock::time_point first;
    std::chrono::system_clock::time_point last;
  };
  void Add(const std::string& scope, std::uint64_t page, const Sum& more);
  std::map<std::string, std::unordered_map<std::uint64_t, Sum>> by_scope_;
};

struct StoreBatch {
  std::vector<RasEvent> events;
  // The page errors this batch adds to page_errors. Unset: those `events`
  // name. Set: these instead, so that a caller may gather several batches'
  // pages and write them in one of their transactions (a storm's pages
  // once a second, not once per batch).
  std::optional<std::vector<PageErrorsRecord>> page_errors;
  // Empty, or one entry per event: where set, the event is added to that
  // stored row (event totals count its errors, not another event) instead
  // of becoming a row; a row that is gone (pruned) gets the event as a new
  // row. StoredBatch::event_ids gives the row either way.
  std::vector<std::optional<EventGrowth>> grows;
  std::vector<BatchAction> actions;
  std::vector<DeviceStateRecord> states;
  std::vector<RetiredPageRecord> pages;
  // Saved in the same transaction as `events`: a source's records are stored
  // exactly once across a crash.
  std::vector<SourceCursor> cursors;
  // The state of a policy that decided in this batch (the links'), saved
  // with its decisions: a restart never finds one without the other.
  std::vector<NodeValue> node_values;
};

struct StoredBatch {
  std::vector<std::int64_t> event_ids;   // in the order of StoreBatch::events
  std::vector<std::int64_t> action_ids;  // in order; a coalesced action has its row's id
};

// What a finished backup wrote.
struct BackupSummary {
  std::filesystem::path file;
  std::uint64_t bytes = 0;  // the copy's size
  int pages = 0;            // database pages copied
};

class StateBackup;

// The daemon's durable state in one SQLite file (WAL): events, device health
// states, retired pages and source cursors, so that a restart loses nothing,
// repeats nothing, and never un-isolates a device.
//
// Open() takes an exclusive lock on the state directory: two daemons acting
// on the same devices would fight. The schema is versioned; Open() applies
// pending migrations in order, each in its own transaction, and refuses a
// database written by a newer rasd.
//
// Every statement is prepared once, at Open(), and reused; a batch is one
// transaction.
//
// Not thread-safe: the daemon's event loop owns it.
class StateStore {
 public:
  static constexpr const char* kDatabaseFile = "rasd.db";
  static constexpr const char* kLockFile = "rasd.lock";

  // Creates `state_dir` (0750) if missing. Errors name the directory and what
  // is wrong with it: not a directory, not writable, locked by another rasd,
  // not a database, newer schema.
  //
  // A damaged database (an empty file, one SQLite cannot read, or one
  // PRAGMA quick_check faults) is kCorruptData and is left as it is; one
  // rasd cannot write is kPermissionDenied; one of a newer rasd is
  // kNotSupported.
  //
  // A lost write-ahead log is kCorruptData too, checked before SQLite sees
  // the files (SQLite would start without the commits it held, and say
  // nothing): a rasd.db-wal whose header is not a valid SQLite WAL header
  // (magic, version, page size, checksum); a WAL whose database is gone;
  // and, when the last rasd on this database did not close it cleanly, a WAL
  // that is missing or holds no complete frame. For the latter, Open() marks the database as in use (a
  // row written and checkpointed into the main file) and the destructor
  // clears the mark before SQLite's closing checkpoint. The rule has no
  // false negative for a WAL deleted or emptied after an unclean stop; its
  // false positive is an unclean stop after which every commit had already
  // been checkpointed (nothing lost) and the WAL was then removed. A WAL cut
  // short after its first frame is not detected: SQLite keeps the commits
  // before the cut, as after a crash in the middle of a write.
  //
  // The times the store stamps itself (the in-use mark, a cursor's
  // updated_ns) are `clock`'s Wall(); it must not be null and is shared for
  // the store's lifetime.
  static Result<std::unique_ptr<StateStore>> Open(
      const std::filesystem::path& state_dir,
      std::shared_ptr<const common::Clock> clock = std::make_shared<common::SystemClock>());
  // A second, read-only connection to this store's database, for a reader
  // thread: in WAL mode its queries read the last commit without waiting
  // for the owner's writes or delaying them. It answers the query methods
  // (QueryEvents, QueryActions, LoadRetiredPages, Summarize, LoadPageErrors);
  // every write fails. Independent of this store's lifetime; one thread at
  // a time may use it. Loop thread (it reads this store's path and clock).
  Result<std::unique_ptr<StateStore>> OpenReader() const;
  // A second read-write connection that only ever runs Checkpoint(), for a
  // thread of its own: the copy (megabytes, and an fsync) never holds the
  // owner's thread. It writes nothing else. Must be closed before this
  // store, so that this store's close takes the log in. Loop thread.
  Result<std::unique_ptr<StateStore>> OpenCheckpointer() const;
  // Renames a damaged database and its WAL to <db>.damaged-<stamp>[-wal],
  // so that a fresh one can be made and the old one examined. Returns the
  // new name of the database file.
  static Result<std::filesystem::path> SetAsideDamaged(const std::filesystem::path& state_dir,
                                                       std::string_view stamp);

  // Clears the in-use mark (see Open()) and closes the database, which
  // checkpoints it. Every StateBackup of this store must be gone first.
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // The schema version after migrations; equals LatestSchemaVersion().
  int SchemaVersion() const { return schema_version_; }
  static int LatestSchemaVersion();
  const std::filesystem::path& DatabasePath() const { return database_path_; }

  // Every write (a batch, an event, a row saved or deleted, a cursor, a
  // prune, a checkpoint) asks the write fault first, and every read (a load,
  // a query, a count of rows, the start of a backup: "backup") the read
  // fault; when it answers an error, the
  // call fails with it and touches nothing, as a full or failing disk would:
  // how tests make a commit or a read fail on demand. `what` names the rows
  // ("batch", "device states", "retired pages", ...). Unset (the default): no
  // fault. CountEventsBySeverity() reads no file and asks neither.
  using Fault = std::function<std::optional<Error>(std::string_view what)>;
  void SetWriteFault(Fault fault) { write_fault_ = std::move(fault); }
  void SetReadFault(Fault fault) { read_fault_ = std::move(fault); }

  // Appends an event; returns its id.
  Result<std::int64_t> RecordEvent(const RasEvent& event);
  // Appends events in one transaction: all or none. Returns their ids, in
  // order.
  Result<std::vector<std::int64_t>> RecordEvents(std::span<const RasEvent> events);

  // Writes the whole batch in one transaction, in the order events, actions,
  // states, pages, cursors: all or nothing. An action whose event_index is
  // out of range (or that also has an event_id), or whose count is 0 or
  // beyond INT64_MAX, is kInvalidArgument before anything is written; a
  // failing write rolls the transaction back and returns kIoError. An empty
  // batch touches nothing.
  Result<StoredBatch> Commit(const StoreBatch& batch);

  // Appends (or coalesces, see ActionRecord::count) one action in a
  // transaction of its own; returns its row's id.
  Result<std::int64_t> RecordAction(const ActionRecord& action);
  // The newest `limit` actions, newest first; of one device when given.
  Result<std::vector<ActionRecord>> QueryActions(std::optional<int> device, std::size_t limit);

  Status SaveDeviceState(const DeviceStateRecord& state);
  Result<std::vector<DeviceStateRecord>> LoadDeviceStates();
  // Idempotent: a page retired twice keeps its first reason and time.
  Status SaveRetiredPage(const RetiredPageRecord& page);
  Result<std::vector<RetiredPageRecord>> LoadRetiredPages();
  // Attached workloads: one row per (pid, start_time), replaced on save.
  Status SaveWorkload(const WorkloadRecord& workload);
  Status DeleteWorkload(std::int64_t pid, std::uint64_t start_time);
  // One row per device UUID, replaced on save.
  Status SaveDeviceRecovery(const DeviceRecoveryRecord& record);
  Result<std::vector<DeviceRecoveryRecord>> LoadDeviceRecoveries();
  // The node's own state by key (the daemon's "node_fault"), a value each.
  Status SaveNodeValue(const std::string& key, const std::string& value);
  Status DeleteNodeValue(const std::string& key);
  Result<std::optional<std::string>> LoadNodeValue(const std::string& key);
  Result<std::vector<WorkloadRecord>> LoadWorkloads();
  // Matching events, oldest first.
  Result<std::vector<StoredEvent>> QueryEvents(const EventQuery& query);
  // The pages whose last error is at or after `since`.
  Result<std::vector<PageErrorsRecord>> LoadPageErrors(std::chrono::system_clock::time_point since);
  // Counts by origin and severity, like `ras-mc-ctl --summary`: every event
  // stored, those retention has rolled up included. On the connection that
  // writes (Open()'s), from a copy in memory after the first call: its
  // commits keep it, so a summary during a storm reads nothing.
  Result<std::vector<EventSummaryRow>> Summarize();

  // Deletes events older than `older_than`, then the oldest beyond
  // `max_events`, in one transaction, after rolling them up by day, origin,
  // class, scope and DIMM (event_rollups), which the summary and the counts
  // by severity go on counting. Returns how many were deleted.
  Result<std::uint64_t> Prune(std::chrono::system_clock::time_point older_than,
                              std::uint64_t max_events);
  Result<std::uint64_t> EventRows();

  // Copies the write-ahead log back into the database (PASSIVE: it never
  // waits for readers). SQLite does not do it by itself here, so that no
  // commit on the hot path pays for it: the owner calls this when the store
  // is quiet, or when WalPages() grows large under a long storm. Returns
  // the log's pages copied so far: all of them (the log's length) when it
  // is copied in full, and the next commit starts it over.
  Result<std::size_t> Checkpoint();
  // Pages in the write-ahead log since the last full checkpoint.
  std::size_t WalPages() const { return wal_pages_; }
  // Heap SQLite holds in this process, all connections together: mostly
  // page caches, each bounded by cache_size (SQLite's default, 2000 KiB),
  // which fill as the database grows to that size.
  static std::int64_t SqliteMemoryBytes();

  // Starts an online backup (SQLite's backup API) to `destination`, an
  // absolute path, while this store goes on committing. The copy is written
  // to a temporary file beside `destination` (.<name>.rasd-backup-XXXXXX,
  // mode 0640) and renamed into place by StateBackup::Finish() only when it
  // is complete and PRAGMA quick_check says ok; no half file ever has the
  // final name. An existing `destination` is kAlreadyExists unless
  // `replace`. The copy is a database of its own (rollback journal, not in
  // use): a rasd started on a state directory holding only it as rasd.db
  // takes it as cleanly closed.
  Result<std::unique_ptr<StateBackup>> StartBackup(const std::filesystem::path& destination,
                                                   bool replace);
  // StartBackup() run to the end at once: for a small database, or a caller
  // that may block.
  Result<BackupSummary> Backup(const std::filesystem::path& destination, bool replace = false);

  Status SaveCursor(const SourceCursor& cursor);
  Result<std::optional<SourceCursor>> LoadCursor(std::string_view source);

  // Error counts by severity (the sum of the events' counts, so that a
  // coalesced row counts for every error it stands for), with every
  // severity present (0 where none). O(1), without touching the file: the
  // sums are read once by Open() and then kept by every commit of events
  // (pruned ones stay counted, rolled up), so `status` stays cheap under a storm
  // however many events are stored. Exact while this store is the only
  // writer of events, which the directory lock ensures for rasd; rows that
  // another connection writes (an operator's sqlite3 shell) are counted from
  // the next Open(). Rows of severities this rasd does not know are not
  // counted.
  Result<std::map<Severity, std::uint64_t>> CountEventsBySeverity();

 private:
  struct Statements;  // the prepared statements, defined in state_store.cc
  class Transaction;
  // Errors by severity, indexed by the enum's value.
  using SeverityCounts = std::array<std::uint64_t, kAllSeverities.size()>;

  StateStore(std::filesystem::path database_path, common::UniqueFd lock, sqlite3* db,
             std::shared_ptr<const common::Clock> clock);
  // The clock's wall time, as stored (nanoseconds since the Unix epoch).
  std::int64_t NowNanos() const;
  Status Migrate();
  // Another connection to this store's database (`flags`: read-only or
  // read-write), with the busy timeout; `purpose` names it in errors.
  Result<std::unique_ptr<StateStore>> OpenConnection(int flags, std::string_view purpose) const;
  Status Prepare();
  // Refuses a lost WAL after an unclean stop (see Open()), then marks the
  // database as in use and checkpoints the mark into the main file.
  Status MarkInUse(bool wal_has_frames);
  Error SqliteError(std::string_view what) const;
  // What the test's write (read) fault answers for `what`; none when unset.
  std::optional<Error> WriteFaulted(std::string_view what) const;
  std::optional<Error> ReadFaulted(std::string_view what) const;

  // `statement` (a "severity, SUM(count)" query, bound) added into `sums`.
  Status SumBySeverity(sqlite3_stmt* statement, std::string_view what, SeverityCounts& sums);

  // What a transaction's inserted events add: by severity (for
  // severity_counts_, applied once it commits) and by origin and severity
  // (for event_totals, written before it commits).
  struct EventTally {
    struct Class {
      std::string origin;
      Severity severity;
      std::uint64_t events = 0;
      std::uint64_t errors = 0;
      std::int64_t last_ns = 0;
    };
    SeverityCounts severities{};
    std::vector<Class> classes;  // few: a batch's events share a handful of classes
    void Add(const RasEvent& event);
    // The event's errors, added to a row already counted.
    void AddErrors(const RasEvent& event);
  };
  Status AddTotals(const EventTally& tally);

  // One row each, on the prepared statements, in the caller's transaction
  // (or SQLite's implicit one). InsertEvent adds the event to `added`.
  Result<std::int64_t> InsertEvent(const RasEvent& event, EventTally& added);
  // Adds `event` to the row `growth` names; false when there is no such row.
  Result<bool> GrowEvent(const EventGrowth& growth, const RasEvent& event, EventTally& added);
  Result<std::int64_t> InsertAction(const ActionRecord& action,
                                    std::optional<std::int64_t> event_id);
  Status UpsertDeviceState(const DeviceStateRecord& state);
  Status InsertRetiredPage(const RetiredPageRecord& page);
  Status UpsertCursor(const SourceCursor& cursor, std::int64_t updated_ns);
  Status UpsertNodeValue(const std::string& key, const std::string& value);
  // Each page's errors, added to its row of page_errors.
  Status AddPageErrors(const std::vector<PageErrorsRecord>& pages);

  std::filesystem::path database_path_;
  common::UniqueFd lock_;
  sqlite3* db_ = nullptr;
  std::shared_ptr<const common::Clock> clock_;
  std::size_t wal_pages_ = 0;
  std::unique_ptr<Statements> statements_;  // finalized before db_ is closed
  Fault write_fault_;
  Fault read_fault_;
  int schema_version_ = 0;
  SeverityCounts severity_counts_{};  // what CountEventsBySeverity reports
  // event_totals as committed, once Summarize has read it (the writing
  // connection only: no other writes it while this one is open).
  std::optional<std::vector<EventSummaryRow>> totals_;
  void AddCommitted(const EventTally& added);
  bool marked_in_use_ = false;        // the destructor clears the mark it set
};

// One online backup of a StateStore in progress: SQLite's backup API
// stepped by its owner, a bounded number of pages at a time, so that a large
// database never holds the daemon's loop for long. Commits to the store
// between steps go into the copy too (they are made on the connection the
// backup reads from), so the copy is the store as of the last step.
//
// Made by StateStore::StartBackup(); must be destroyed before that store.
// Destroying an unfinished backup removes its temporary file.
//
// Threads: not thread-safe. Until Detach() it reads the store's connection,
// so it runs (and is destroyed) on the store's thread; after Detach() it
// touches only its own copy, and Finish() and the destructor may run on any
// one thread: checking and syncing a large copy takes a second or more
// (1M events: 250 MB), too long for the daemon's loop.
class StateBackup {
 public:
  ~StateBackup();
  StateBackup(const StateBackup&) = delete;
  StateBackup& operator=(const StateBackup&) = delete;

  // Copies up to `pages` more pages (at least 1); true once every page is
  // copied. A store busy writing (SQLITE_BUSY) copies nothing and is false.
  Result<bool> Step(int pages);
  // Once Step() returned true: ends the copy and lets go of the store.
  Status Detach();
  // Once Step() returned true (Detach()es first if needed): marks the copy
  // as not in use, checks it (PRAGMA quick_check), syncs it and renames it
  // to the destination. On any error the temporary file is removed.
  Result<BackupSummary> Finish();

  int PagesCopied() const;
  int PagesTotal() const;
  const std::filesystem::path& Destination() const { return destination_; }

 private:
  friend class StateStore;
  StateBackup(std::filesystem::path destination, std::filesystem::path temporary, bool replace,
              sqlite3* copy, sqlite3_backup* backup);
  void Abandon();

  std::filesystem::path destination_;
  std::filesystem::path temporary_;
  bool replace_;
  sqlite3* copy_;
  sqlite3_backup* backup_;  // null once detached
  bool done_ = false;
  int pages_total_ = 0;  // kept at Detach()
};

}  // namespace rasd::ras
