#include "rasd/ras/state_store.h"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "rasd/common/unix_nanos.h"
#include "write_ahead_log.h"

namespace rasd::ras {
namespace {

// Migration N (1-based) takes the schema from version N-1 to N. Append only:
// a released migration never changes, or databases in the field diverge.
const std::vector<const char*>& Migrations() {
  static const std::vector<const char*> kMigrations = {
      // 1: the initial schema.
      R"sql(
        CREATE TABLE events (
          id INTEGER PRIMARY KEY,
          time_ns INTEGER NOT NULL,
          origin TEXT NOT NULL,
          severity TEXT NOT NULL,
          device INTEGER,
          address INTEGER,
          summary TEXT NOT NULL,
          raw TEXT NOT NULL
        );
        CREATE INDEX events_by_severity ON events(severity);
        CREATE TABLE device_states (
          device_uuid TEXT PRIMARY KEY,
          state TEXT NOT NULL,
          reason TEXT NOT NULL,
          changed_ns INTEGER NOT NULL
        );
        CREATE TABLE retired_pages (
          device_uuid TEXT NOT NULL,
          address INTEGER NOT NULL,
          reason TEXT NOT NULL,
          retired_ns INTEGER NOT NULL,
          PRIMARY KEY (device_uuid, address)
        );
        CREATE TABLE source_cursors (
          source TEXT PRIMARY KEY,
          boot_id TEXT NOT NULL,
          position TEXT NOT NULL,
          updated_ns INTEGER NOT NULL
        );
      )sql",
      // 2: the fields of decoded kernel records, and the indexes queries use.
      R"sql(
        ALTER TABLE events ADD COLUMN source TEXT NOT NULL DEFAULT '';
        ALTER TABLE events ADD COLUMN mc INTEGER;
        ALTER TABLE events ADD COLUMN pci_bdf TEXT;
        ALTER TABLE events ADD COLUMN address_text TEXT;
        ALTER TABLE events ADD COLUMN vendor_code INTEGER;
        ALTER TABLE events ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE events ADD COLUMN historical INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX events_by_time ON events(time_ns);
        CREATE INDEX events_by_device ON events(device);
      )sql",
      // 3: what rasd did about events.
      R"sql(
        CREATE TABLE actions (
          id INTEGER PRIMARY KEY,
          event_id INTEGER REFERENCES events(id) ON DELETE SET NULL,
          time_ns INTEGER NOT NULL,
          action TEXT NOT NULL,
          device INTEGER,
          address TEXT,
          rule TEXT NOT NULL,
          reason TEXT NOT NULL,
          result TEXT NOT NULL,
          detail TEXT NOT NULL
        );
        CREATE INDEX actions_by_event ON actions(event_id);
        CREATE INDEX actions_by_device ON actions(device);
      )sql",
      // 4: repeated "disabled" and "skipped" decisions share a row per
      // minute: `count` says how many it stands for, `coalesce_key` (NULL for
      // a row of its own; NULLs never conflict) names the row they merge into.
      R"sql(
        ALTER TABLE actions ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE actions ADD COLUMN coalesce_key TEXT;
        CREATE UNIQUE INDEX actions_by_coalesce_key ON actions(coalesce_key);
      )sql",
      // 5: whether a rasd has the database open (see StateStore::Open): set
      // and checkpointed into the main file at open, cleared at a clean
      // close, so that a write-ahead log lost after an unclean stop is seen.
      R"sql(
        CREATE TABLE in_use (
          id INTEGER PRIMARY KEY CHECK (id = 1),
          running INTEGER NOT NULL,
          pid INTEGER NOT NULL,
          since_ns INTEGER NOT NULL
        );
        INSERT INTO in_use(id, running, pid, since_ns) VALUES (1, 0, 0, 0);
      )sql",
      // 6: events logged in this boot before rasd's first start in it.
      R"sql(
        ALTER TABLE events ADD COLUMN before_start INTEGER NOT NULL DEFAULT 0;
      )sql",
      // 7: processes outside rasd attached to its devices (WorkloadRecord).
      R"sql(
        CREATE TABLE workloads (
          pid INTEGER NOT NULL,
          start_time INTEGER NOT NULL,
          spec TEXT NOT NULL,
          PRIMARY KEY (pid, start_time)
        );
      )sql",
      // 8: each device's recovery history and suggested action, by UUID
      // (DeviceRecoveryRecord); the node's own state (a node fault).
      R"sql(
        CREATE TABLE device_recovery (
          device_uuid TEXT PRIMARY KEY,
          spec TEXT NOT NULL
        );
        CREATE TABLE node_state (
          key TEXT PRIMARY KEY,
          value TEXT NOT NULL
        );
      )sql",
      // 9: who holds each device in its state (one hold per cause).
      R"sql(
        ALTER TABLE device_states ADD COLUMN holds TEXT NOT NULL DEFAULT '';
      )sql",
      // 10: the stored events' totals by origin and severity, written in
      // the transaction that inserts or deletes events (one row per class a
      // batch touched), so that the summary and the start read a row per
      // class instead of every event (a storm stores millions).
      R"sql(
        CREATE TABLE event_totals (
          origin TEXT NOT NULL,
          severity TEXT NOT NULL,
          events INTEGER NOT NULL,
          errors INTEGER NOT NULL,
          last_ns INTEGER NOT NULL,
          PRIMARY KEY (origin, severity)
        ) WITHOUT ROWID;
        INSERT INTO event_totals(origin, severity, events, errors, last_ns)
          SELECT origin, severity, COUNT(*), SUM(count), MAX(time_ns) FROM events
          GROUP BY origin, severity;
      )sql",
      // 11: an event stands for a component's records within a minute
      // under a storm: the DIMM they name, the pages they touched with their
      // errors (packed, the first kMaxStoredPages) and how many pages more;
      // the errors of every page ever reported, one row per page, for the
      // page thresholds at the next start; the events retention deleted,
      // rolled up by day (UTC), origin, class, scope (PageScope) and DIMM,
      // which event_totals still count.
      R"sql(
        ALTER TABLE events ADD COLUMN dimm TEXT;
        ALTER TABLE events ADD COLUMN pages BLOB;
        ALTER TABLE events ADD COLUMN pages_not_listed INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE events ADD COLUMN last_ns INTEGER;
        CREATE TABLE page_errors (
          scope TEXT NOT NULL,
          page INTEGER NOT NULL,
          errors INTEGER NOT NULL,
          first_ns INTEGER NOT NULL,
          last_ns INTEGER NOT NULL,
          PRIMARY KEY (scope, page)
        ) WITHOUT ROWID;
        CREATE TABLE event_rollups (
          day INTEGER NOT NULL,
          origin TEXT NOT NULL,
          severity TEXT NOT NULL,
          scope TEXT NOT NULL,
          dimm TEXT NOT NULL,
          events INTEGER NOT NULL,
          errors INTEGER NOT NULL,
          first_ns INTEGER NOT NULL,
          last_ns INTEGER NOT NULL,
          PRIMARY KEY (day, origin, severity, scope, dimm)
        ) WITHOUT ROWID;
      )sql",
  };
  return kMigrations;
}

Status PrepareStateDirectory(const std::filesystem::path& state_dir) {
  if (::mkdir(state_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    // Create missing parents too (e.g. ~/.local/state on a fresh account).
    std::error_code ec;
    std::filesystem::create_directories(state_dir, ec);
    if (ec) {
      return Fail(ErrorCode::kIoError, fmt::format("cannot create state directory {}: {}",
                                                   state_dir.string(), ec.message()));
    }
  }
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) != 0) {
    return Fail(ErrnoError("state directory " + state_dir.string(), errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Fail(
        ErrorCode::kInvalidArgument,
        fmt::format("state directory {} exists but is not a directory", state_dir.string()));
  }
  if (::access(state_dir.c_str(), W_OK | X_OK) != 0) {
    return Fail(ErrnoError("state directory " + state_dir.string() + " is not writable", errno));
  }
  return {};
}

Result<common::UniqueFd> LockStateDirectory(const std::filesystem::path& state_dir) {
  const auto lock_path = state_dir / StateStore::kLockFile;
  common::UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640));
  if (!fd) return Fail(ErrnoError("open " + lock_path.string(), errno));
  if (::flock(fd.Get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("state directory {} is in use by another rasd", state_dir.string()));
    }
    return Fail(ErrnoError("lock " + lock_path.string(), errno));
  }
  return fd;
}

// Runs statements that return no rows.
Status Exec(sqlite3* db, const char* sql, std::string_view what) {
  char* message = nullptr;
  if (const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message); rc != SQLITE_OK) {
    std::string text = message != nullptr ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    const int primary = rc & 0xff;
    const ErrorCode code = primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB
                               ? ErrorCode::kCorruptData
                           : primary == SQLITE_READONLY ? ErrorCode::kPermissionDenied
                                                        : ErrorCode::kIoError;
    return Fail(code, fmt::format("{}: {}", what, text));
  }
  return {};
}

// PRAGMA quick_check's verdict: "ok", or the first problem it names.
std::string QuickCheck(sqlite3* db) {
  sqlite3_stmt* check = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check(1);", -1, &check, nullptr) != SQLITE_OK)
    return sqlite3_errmsg(db);
  std::string verdict = "no answer";
  if (const int rc = sqlite3_step(check); rc == SQLITE_ROW) {
    const auto* text = sqlite3_column_text(check, 0);
    verdict = text != nullptr ? reinterpret_cast<const char*>(text) : "";
  } else {
    verdict = sqlite3_errmsg(db);
  }
  sqlite3_finalize(check);
  return verdict;
}

}  // namespace

Result<std::filesystem::path> StateStore::SetAsideDamaged(const std::filesystem::path& state_dir,
                                                          std::string_view stamp) {
  const auto database = state_dir / kDatabaseFile;
  const auto kept = state_dir / fmt::format("{}.damaged-{}", kDatabaseFile, stamp);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const auto from = database.string() + suffix;
    std::error_code missing;
    if (!std::filesystem::exists(from, missing)) continue;
    std::error_code error;
    std::filesystem::rename(from, kept.string() + suffix, error);
    if (error) {
      return Fail(ErrorCode::kIoError,
                  fmt::format("cannot set {} aside: {}", from, error.message()));
    }
  }
  return kept;
}

int StateStore::LatestSchemaVersion() { return static_cast<int>(Migrations().size()); }

// Prepared once in Prepare(), finalized (before the connection closes) when
// the store goes. Each is used through a StatementUse, so it is reset and its
// bindings dropped however the use ends.
struct StateStore::Statements {
  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_stmt* rollback = nullptr;
  sqlite3_stmt* insert_event = nullptr;
  sqlite3_stmt* insert_action = nullptr;
  sqlite3_stmt* upsert_device_state = nullptr;
  sqlite3_stmt* insert_retired_page = nullptr;
  sqlite3_stmt* upsert_cursor = nullptr;
  sqlite3_stmt* load_cursor = nullptr;
  sqlite3_stmt* query_actions = nullptr;
  sqlite3_stmt* query_device_actions = nullptr;
  sqlite3_stmt* load_device_states = nullptr;
  sqlite3_stmt* load_retired_pages = nullptr;
  sqlite3_stmt* summarize = nullptr;
  sqlite3_stmt* event_rows = nullptr;
  sqlite3_stmt* count_events = nullptr;
  sqlite3_stmt* add_totals = nullptr;
  sqlite3_stmt* rollup_older_events = nullptr;
  sqlite3_stmt* rollup_surplus_events = nullptr;
  sqlite3_stmt* prune_by_age = nullptr;
  sqlite3_stmt* prune_by_count = nullptr;
  sqlite3_stmt* add_page_errors = nullptr;
  sqlite3_stmt* load_page_errors = nullptr;
  sqlite3_stmt* grow_event = nullptr;

  ~Statements() {
    for (sqlite3_stmt* statement : {begin,
                                    commit,
                                    rollback,
                                    insert_event,
                                    insert_action,
                                    upsert_device_state,
                                    insert_retired_page,
                                    upsert_cursor,
                                    load_cursor,
                                    query_actions,
                                    query_device_actions,
                                    load_device_states,
                                    load_retired_pages,
                                    summarize,
                                    event_rows,
                                    count_events,
                                    add_totals,
                                    add_page_errors,
                                    load_page_errors,
                                    grow_event,
                                    rollup_older_events,
                                    rollup_surplus_events,
                                    prune_by_age,
                                    prune_by_count}) {
      sqlite3_finalize(statement);
    }
  }
};

namespace {

// One use of a prepared statement. Resetting it at the end matters: a query
// left on a row would hold its read transaction open, and bound text would be
// kept until the next use.
class StatementUse {
 public:
  explicit StatementUse(sqlite3_stmt* statement) : statement_(statement) {}
  ~StatementUse() {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
  }
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;

  sqlite3_stmt* get() const { return statement_; }

 private:
  sqlite3_stmt* statement_;
};

void BindOptionalInt(sqlite3_stmt* statement, int column, const std::optional<int>& value) {
  if (value) {
    sqlite3_bind_int(statement, column, *value);
  } else {
    sqlite3_bind_null(statement, column);
  }
}

void BindOptionalInt64(sqlite3_stmt* statement, int column,
                       const std::optional<std::int64_t>& value) {
  if (value) {
    sqlite3_bind_int64(statement, column, *value);
  } else {
    sqlite3_bind_null(statement, column);
  }
}

// Text is bound without a copy (SQLITE_STATIC): the value must outlive the
// StatementUse it is bound in, which clears the bindings when it ends. A
// storm's rows carry a few hundred bytes of text each.
void BindOptionalText(sqlite3_stmt* statement, int column,
                      const std::optional<std::string>& value) {
  if (value) {
    sqlite3_bind_text(statement, column, value->data(), static_cast<int>(value->size()),
                      SQLITE_STATIC);
  } else {
    sqlite3_bind_null(statement, column);
  }
}

void BindText(sqlite3_stmt* statement, int column, std::string_view value) {
  sqlite3_bind_text(statement, column, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
}

std::optional<int> ColumnOptionalInt(sqlite3_stmt* statement, int column) {
  if (sqlite3_column_type(statement, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int(statement, column);
}

std::optional<std::string> ColumnOptionalText(sqlite3_stmt* statement, int column) {
  if (sqlite3_column_type(statement, column) == SQLITE_NULL) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(sqlite3_column_text(statement, column)));
}

// An event's address: the value column, with the text as printed. Rows
// written before rasd stored the value (schema 2 to 4 kept only the text)
// get it from the text.
std::optional<Address> StoredAddress(sqlite3_stmt* statement, int value_column, int text_column) {
  auto printed = ColumnOptionalText(statement, text_column);
  if (!printed) return std::nullopt;
  if (sqlite3_column_type(statement, value_column) == SQLITE_NULL)
    return ParsePrintedAddress(*printed);
  return Address{static_cast<std::uint64_t>(sqlite3_column_int64(statement, value_column)),
                 std::move(*printed)};
}

// A coalesced event's pages as stored: (page, errors) pairs of two
// little-endian 64-bit words each, the first kMaxStoredPages of them.
std::string PackPages(const std::vector<PageErrors>& pages) {
  std::string packed;
  const std::size_t listed = std::min(pages.size(), kMaxStoredPages);
  packed.reserve(listed * 16);
  auto put = [&packed](std::uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) packed += static_cast<char>((word >> (8 * byte)) & 0xff);
  };
  for (std::size_t i = 0; i < listed; ++i) {
    put(pages[i].page);
    put(pages[i].errors);
  }
  return packed;
}

// The stored pages of `column`; a blob whose length is no multiple of 16
// (written by no rasd) gives the whole pairs it holds.
std::vector<PageErrors> ColumnPages(sqlite3_stmt* statement, int column) {
  std::vector<PageErrors> pages;
  const auto* bytes = static_cast<const unsigned char*>(sqlite3_column_blob(statement, column));
  const std::size_t size = static_cast<std::size_t>(sqlite3_column_bytes(statement, column));
  if (bytes == nullptr) return pages;
  auto word = [bytes](std::size_t at) {
    std::uint64_t value = 0;
    for (int byte = 7; byte >= 0; --byte)
      value = value << 8 | bytes[at + static_cast<std::size_t>(byte)];
    return value;
  };
  for (std::size_t at = 0; at + 16 <= size; at += 16)
    pages.push_back(PageErrors{.page = word(at), .errors = word(at + 8)});
  return pages;
}

std::string ColumnText(sqlite3_stmt* statement, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(statement, column));
  return text != nullptr ? std::string(text) : std::string();
}

using common::FromUnixNanos;
using common::UnixNanos;

// The row a repeated decision merges into: the same action, rule, result and
// device in the same wall-clock minute. Text fields are length-prefixed so
// that no choice of names makes two keys collide. Null for a result that is
// recorded row by row.
std::optional<std::string> CoalesceKey(const ActionRecord& action) {
  if (action.result != "disabled" && action.result != "skipped") return std::nullopt;
  const auto minute =
      std::chrono::floor<std::chrono::minutes>(action.time).time_since_epoch().count();
  return fmt::format("{}|{}|{}:{}|{}:{}|{}", minute,
                     action.device ? std::to_string(*action.device) : std::string("-"),
                     action.action.size(), action.action, action.rule.size(), action.rule,
                     action.result);
}

Status CheckActionCount(const ActionRecord& action) {
  if (action.count == 0 ||
      action.count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("action {} of rule {} has count {}; it must be 1 to 2^63-1",
                            action.action, action.rule, action.count));
  }
  return {};
}

}  // namespace

// BEGIN IMMEDIATE on the prepared statements; rolls back on destruction
// unless committed (and unless SQLite already rolled back on its own, as it
// does after some errors).
class StateStore::Transaction {
 public:
  explicit Transaction(StateStore& store) : store_(store) {}
  ~Transaction() {
    if (open_ && sqlite3_get_autocommit(store_.db_) == 0) {
      StatementUse rollback(store_.statements_->rollback);
      (void)sqlite3_step(rollback.get());
    }
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  Status Begin(std::string_view what) {
    StatementUse begin(store_.statements_->begin);
    if (sqlite3_step(begin.get()) != SQLITE_DONE)
      return Fail(store_.SqliteError(fmt::format("begin {}", what)));
    open_ = true;
    return {};
  }

  Status Commit(std::string_view what) {
    StatementUse commit(store_.statements_->commit);
    if (sqlite3_step(commit.get()) != SQLITE_DONE)
      return Fail(store_.SqliteError(fmt::format("commit {}", what)));
    open_ = false;
    return {};
  }

 private:
  StateStore& store_;
  bool open_ = false;
};

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::filesystem::path& state_dir,
                                                     std::shared_ptr<const common::Clock> clock) {
  if (auto prepared = PrepareStateDirectory(state_dir); !prepared) return Fail(prepared.error());
  auto lock = LockStateDirectory(state_dir);
  if (!lock) return Fail(lock.error());

  const auto database_path = state_dir / kDatabaseFile;
  std::error_code size_error;
  if (std::filesystem::exists(database_path, size_error) &&
      std::filesystem::file_size(database_path, size_error) == 0 && !size_error) {
    // SQLite would take an empty file for a new database: the devices it
    // recorded as isolated would come back healthy without a word.
    return Fail(ErrorCode::kCorruptData,
                fmt::format("{} is empty (0 bytes): the database was truncated",
                            database_path.string()));
  }
  // Before SQLite sees it: SQLite would take a garbage log for an empty one.
  const auto wal = InspectWriteAheadLog(database_path.string() + "-wal");
  if (!wal) {
    return Fail(wal.error().code,
                wal.error().code == ErrorCode::kCorruptData
                    ? wal.error().message + ": the commits it held are lost"
                    : wal.error().message);
  }
  if (*wal != WalContents::kAbsent && !std::filesystem::exists(database_path, size_error)) {
    // SQLite would lay the old log over a new, empty database.
    return Fail(ErrorCode::kCorruptData,
                fmt::format("{} is missing but its write-ahead log is there: the database was "
                            "lost",
                            database_path.string()));
  }
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(database_path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Fail(ErrorCode::kIoError,
                fmt::format("cannot open {}: {}", database_path.string(), message));
  }
  std::unique_ptr<StateStore> store(
      new StateStore(database_path, std::move(*lock), db, std::move(clock)));
  sqlite3_busy_timeout(db, 2000);
  // journal_mode=WAL is the first statement to touch the file, so a file that
  // is not a database fails here with SQLite's own words.
  if (auto configured =
          Exec(db,
               "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
               // A log grown by a storm is cut back when it starts over.
               "PRAGMA journal_size_limit=4194304;",
               "configure " + database_path.string());
      !configured) {
    return Fail(configured.error());
  }
  if (const std::string verdict = QuickCheck(db); verdict != "ok") {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("{} is damaged (quick_check: {})", database_path.string(), verdict));
  }
  if (auto migrated = store->Migrate(); !migrated) return Fail(migrated.error());
  // A database rasd cannot write would lose every state change: say so now.
  if (auto writable = Exec(db, "UPDATE schema_version SET version = version;",
                           "write to " + database_path.string());
      !writable) {
    return Fail(writable.error().code == ErrorCode::kPermissionDenied ? ErrorCode::kPermissionDenied
                                                                       : writable.error().code,
                writable.error().message + " (rasd must be able to write its state)");
  }
  if (auto prepared = store->Prepare(); !prepared) return Fail(prepared.error());
  // Checkpoints are the owner's to run (Checkpoint()), not SQLite's inside
  // whichever commit crosses 1000 pages: that commit would wait for the
  // copy back and its fsyncs, and a fault's event with it.
  if (auto manual = Exec(db, "PRAGMA wal_autocheckpoint=0;", "configure checkpoints"); !manual)
    return Fail(manual.error());
  if (auto marked = store->MarkInUse(*wal == WalContents::kFrames); !marked)
    return Fail(marked.error());
  sqlite3_wal_hook(
      db,
      [](void* self, sqlite3*, const char*, int pages) {
        static_cast<StateStore*>(self)->wal_pages_ = static_cast<std::size_t>(pages);
        return SQLITE_OK;
      },
      store.get());
  // The totals are written with the events; rows that some other writer
  // added or removed while no rasd had the database (a hand-edited file)
  // show as a different row count, and the totals are taken again.
  // They count the stored events and the rolled-up ones.
  if (auto checked =
          Exec(db,
               "DELETE FROM event_totals WHERE (SELECT COUNT(*) FROM events) + "
               "(SELECT IFNULL(SUM(events), 0) FROM event_rollups) != "
               "(SELECT IFNULL(SUM(events), 0) FROM event_totals);"
               "INSERT INTO event_totals(origin, severity, events, errors, last_ns) "
               "SELECT origin, severity, SUM(events), SUM(errors), MAX(last_ns) FROM ("
               "SELECT origin, severity, COUNT(*) AS events, SUM(count) AS errors, "
               "MAX(time_ns) AS last_ns FROM events GROUP BY origin, severity "
               "UNION ALL SELECT origin, severity, SUM(events), SUM(errors), MAX(last_ns) "
               "FROM event_rollups GROUP BY origin, severity) "
               "WHERE NOT EXISTS (SELECT 1 FROM event_totals) GROUP BY origin, severity;",
               "check event totals");
      !checked) {
    return Fail(checked.error());
  }
  {
    StatementUse sum(store->statements_->count_events);
    if (auto summed = store->SumBySeverity(sum.get(), "count events", store->severity_counts_);
        !summed) {
      return Fail(summed.error());
    }
  }
  return store;
}

Result<std::size_t> StateStore::Checkpoint() {
  if (auto fault = WriteFaulted("checkpoint")) return Fail(*fault);
  int log_pages = 0, copied = 0;
  if (sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log_pages, &copied) !=
      SQLITE_OK) {
    return Fail(SqliteError("checkpoint"));
  }
  if (log_pages < 0) {
    // SQLite's "not in WAL mode": a connection that has not read the
    // database yet has no log open, and its checkpoint does nothing.
    return Fail(ErrorCode::kInternal,
                "checkpoint: this connection has not opened the write-ahead log");
  }
  // Copied in full: the next commit starts the log over.
  if (copied >= log_pages) wal_pages_ = 0;
  return static_cast<std::size_t>(std::max(copied, 0));
}

StateStore::StateStore(std::filesystem::path database_path, common::UniqueFd lock, sqlite3* db,
                       std::shared_ptr<const common::Clock> clock)
    : database_path_(std::move(database_path)),
      lock_(std::move(lock)),
      db_(db),
      clock_(std::move(clock)),
      statements_(std::make_unique<Statements>()) {}

std::optional<Error> StateStore::WriteFaulted(std::string_view what) const {
  return write_fault_ ? write_fault_(what) : std::nullopt;
}

std::optional<Error> StateStore::ReadFaulted(std::string_view what) const {
  return read_fault_ ? read_fault_(what) : std::nullopt;
}

std::int64_t StateStore::NowNanos() const { return UnixNanos(clock_->Wall()); }

Result<std::unique_ptr<StateStore>> StateStore::OpenConnection(int flags,
                                                               std::string_view purpose) const {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(database_path_.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Fail(ErrorCode::kIoError,
                fmt::format("cannot open {} to {}: {}", database_path_.string(), purpose, message));
  }
  std::unique_ptr<StateStore> connection(
      new StateStore(database_path_, common::UniqueFd(), db, clock_));
  sqlite3_busy_timeout(db, 2000);
  connection->schema_version_ = schema_version_;
  return connection;
}

Result<std::unique_ptr<StateStore>> StateStore::OpenReader() const {
  auto reader = OpenConnection(SQLITE_OPEN_READONLY, "read");
  if (!reader) return reader;
  if (auto prepared = (*reader)->Prepare(); !prepared) return Fail(prepared.error());
  return reader;
}

Result<std::unique_ptr<StateStore>> StateStore::OpenCheckpointer() const {
  auto checkpointer = OpenConnection(SQLITE_OPEN_READWRITE, "checkpoint");
  if (!checkpointer) return checkpointer;
  if (auto manual =
          Exec((*checkpointer)->db_, "PRAGMA wal_autocheckpoint=0;", "configure checkpoints");
      !manual)
    return Fail(manual.error());
  // A connection opens the write-ahead log at its first read, and keeps it
  // open; until then its checkpoints do nothing at all.
  if (auto read = Exec((*checkpointer)->db_, "SELECT count(*) FROM sqlite_schema;",
                       "open the write-ahead log");
      !read)
    return Fail(read.error());
  return checkpointer;
}

StateStore::~StateStore() {
  statements_.reset();  // sqlite3_close refuses a connection with live statements
  // Cleared in the log; SQLite's checkpoint at close takes it, with every
  // commit before it, into the main file. A close that cannot checkpoint
  // leaves it in the log, where the next Open() reads it.
  if (marked_in_use_) {
    (void)Exec(db_, "UPDATE in_use SET running = 0, pid = 0 WHERE id = 1;",
               "clear the in-use mark of " + database_path_.string());
  }
  sqlite3_close(db_);
}

Status StateStore::MarkInUse(bool wal_has_frames) {
  sqlite3_stmt* select = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT running, pid, since_ns FROM in_use WHERE id = 1;", -1,
                         &select, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("read the in-use mark"));
  }
  bool running = false;
  std::int64_t pid = 0, since_ns = 0;
  if (sqlite3_step(select) == SQLITE_ROW) {
    running = sqlite3_column_int(select, 0) != 0;
    pid = sqlite3_column_int64(select, 1);
    since_ns = sqlite3_column_int64(select, 2);
  }
  sqlite3_finalize(select);
  if (running && !wal_has_frames) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("{} was not closed cleanly (rasd pid {}, running since {:%Y-%m-%dT%H:%M:%S}Z) "
                            "and its write-ahead log is missing or empty: the changes committed "
                            "after its last checkpoint are lost",
                            database_path_.string(), pid,
                            std::chrono::floor<std::chrono::seconds>(FromUnixNanos(since_ns))));
  }
  const std::string mark =
      fmt::format("UPDATE in_use SET running = 1, pid = {}, since_ns = {} WHERE id = 1;",
                  static_cast<long long>(::getpid()), NowNanos());
  if (auto written = Exec(db_, mark.c_str(), "mark " + database_path_.string() + " in use");
      !written) {
    return written;
  }
  marked_in_use_ = true;
  // Into the main file now: a log deleted later must find the mark there.
  // TRUNCATE (SQLITE_OK only once every frame is copied) leaves the log no
  // larger than what the next commits write, as it was before the mark: a
  // full disk shows at the first commit that needs room.
  if (sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr) !=
      SQLITE_OK) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("cannot checkpoint {} at open ({}): another connection is using it",
                            database_path_.string(), sqlite3_errmsg(db_)));
  }
  // And a frame in the log again: an empty log after an unclean stop means
  // a lost one.
  const std::string touch =
      fmt::format("UPDATE in_use SET since_ns = {} WHERE id = 1;", NowNanos());
  return Exec(db_, touch.c_str(), "mark " + database_path_.string() + " in use");
}

Error StateStore::SqliteError(std::string_view what) const {
  return Error{ErrorCode::kIoError,
               fmt::format("{} ({}): {}", what, database_path_.string(), sqlite3_errmsg(db_))};
}

Status StateStore::Migrate() {
  if (auto created =
          Exec(db_, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);",
               "create schema_version in " + database_path_.string());
      !created) {
    return created;
  }
  sqlite3_stmt* select = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT MAX(version) FROM schema_version;", -1, &select, nullptr) !=
      SQLITE_OK) {
    return Fail(SqliteError("read schema version"));
  }
  int version = 0;
  if (sqlite3_step(select) == SQLITE_ROW) version = sqlite3_column_int(select, 0);
  sqlite3_finalize(select);

  const auto& migrations = Migrations();
  if (version > static_cast<int>(migrations.size())) {
    return Fail(
        ErrorCode::kNotSupported,
        fmt::format("{} has schema version {}, newer than this rasd knows ({}); refusing to "
                    "touch it",
                    database_path_.string(), version, migrations.size()));
  }
  for (int next = version + 1; next <= static_cast<int>(migrations.size()); ++next) {
    const std::string context =
        fmt::format("migrate {} to schema version {}", database_path_.string(), next);
    if (auto begun = Exec(db_, "BEGIN IMMEDIATE;", context); !begun) return begun;
    const std::string record = fmt::format(
        "{}\nDELETE FROM schema_version; INSERT INTO schema_version(version) VALUES ({});",
        migrations[static_cast<std::size_t>(next - 1)], next);
    if (auto applied = Exec(db_, record.c_str(), context); !applied) {
      (void)Exec(db_, "ROLLBACK;", context);
      return applied;
    }
    if (auto committed = Exec(db_, "COMMIT;", context); !committed) return committed;
  }
  schema_version_ = static_cast<int>(migrations.size());
  return {};
}

// Events as event_rollups keeps them: by day (UTC), origin, class, scope
// (PageScope's form) and DIMM. A row that exists gains the counts.
#define ROLLUP_SELECT                                                                        \
  "(day, origin, severity, scope, dimm, events, errors, first_ns, last_ns) "                 \
  "SELECT time_ns / 86400000000000, origin, severity, "                                      \
  "CASE WHEN device IS NOT NULL THEN 'dev' || device WHEN pci_bdf IS NOT NULL THEN pci_bdf " \
  "WHEN mc IS NOT NULL THEN 'mc' || mc ELSE 'host' END, IFNULL(dimm, ''), COUNT(*), "        \
  "SUM(count), MIN(time_ns), MAX(time_ns) FROM events"
#define ROLLUP_GROUP                                                                      \
  "GROUP BY 1, 2, 3, 4, 5 ON CONFLICT(day, origin, severity, scope, dimm) DO UPDATE SET " \
  "events = events + excluded.events, errors = errors + excluded.errors, "                \
  "first_ns = MIN(first_ns, excluded.first_ns), last_ns = MAX(last_ns, excluded.last_ns);"

Status StateStore::Prepare() {
  Statements& s = *statements_;
  const struct {
    sqlite3_stmt** statement;
    const char* what;
    const char* sql;
  } kStatements[] = {
      {&s.begin, "begin", "BEGIN IMMEDIATE;"},
      {&s.commit, "commit", "COMMIT;"},
      {&s.rollback, "rollback", "ROLLBACK;"},
      {&s.insert_event, "event insert",
       "INSERT INTO events(time_ns, origin, severity, device, summary, raw, source, mc, pci_bdf, "
       "address_text, vendor_code, count, historical, address, before_start, dimm, pages, "
       "pages_not_listed) "
       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);"},
      {&s.grow_event, "event growth",
       "UPDATE events SET count = ?, pages = ?, pages_not_listed = ?, last_ns = ? WHERE id = ?;"},
      {&s.add_page_errors, "page errors upsert",
       "INSERT INTO page_errors(scope, page, errors, first_ns, last_ns) VALUES (?, ?, ?, ?, ?) "
       "ON CONFLICT(scope, page) DO UPDATE SET errors = errors + excluded.errors, "
       "first_ns = MIN(first_ns, excluded.first_ns), last_ns = MAX(last_ns, excluded.last_ns);"},
      {&s.load_page_errors, "page errors load",
       "SELECT scope, page, errors, first_ns, last_ns FROM page_errors WHERE last_ns >= ?;"},
      // A coalesced decision adds its count to the minute's row; the id
      // returned is that row's, inserted or not.
      {&s.insert_action, "action insert",
       "INSERT INTO actions(event_id, time_ns, action, device, address, rule, reason, result, "
       "detail, count, coalesce_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
       "ON CONFLICT(coalesce_key) DO UPDATE SET count = count + excluded.count RETURNING id;"},
      {&s.upsert_device_state, "device state upsert",
       "INSERT INTO device_states(device_uuid, state, reason, changed_ns, holds) "
       "VALUES (?, ?, ?, ?, ?) "
       "ON CONFLICT(device_uuid) DO UPDATE SET state = excluded.state, "
       "reason = excluded.reason, changed_ns = excluded.changed_ns, holds = excluded.holds;"},
      {&s.insert_retired_page, "retired page insert",
       "INSERT OR IGNORE INTO retired_pages(device_uuid, address, reason, retired_ns) "
       "VALUES (?, ?, ?, ?);"},
      {&s.upsert_cursor, "cursor upsert",
       "INSERT INTO source_cursors(source, boot_id, position, updated_ns) VALUES (?, ?, ?, ?) "
       "ON CONFLICT(source) DO UPDATE SET boot_id = excluded.boot_id, "
       "position = excluded.position, updated_ns = excluded.updated_ns;"},
      {&s.load_cursor, "cursor query",
       "SELECT boot_id, position FROM source_cursors WHERE source = ?;"},
      {&s.query_actions, "action query",
       "SELECT id, event_id, time_ns, action, device, address, rule, reason, result, detail, "
       "count FROM actions ORDER BY id DESC LIMIT ?;"},
      {&s.query_device_actions, "device action query",
       "SELECT id, event_id, time_ns, action, device, address, rule, reason, result, detail, "
       "count FROM actions WHERE device = ? ORDER BY id DESC LIMIT ?;"},
      {&s.load_device_states, "device state query",
       "SELECT device_uuid, state, reason, changed_ns, holds FROM device_states ORDER BY "
       "device_uuid;"},
      {&s.load_retired_pages, "retired page query",
       "SELECT device_uuid, address, reason, retired_ns FROM retired_pages "
       "ORDER BY device_uuid, address;"},
      {&s.summarize, "summary",
       "SELECT origin, severity, events, errors, last_ns FROM event_totals "
       "ORDER BY origin, severity;"},
      {&s.event_rows, "event row count", "SELECT COUNT(*) FROM events;"},
      {&s.count_events, "event count",
       "SELECT severity, SUM(errors) FROM event_totals GROUP BY severity;"},
      {&s.add_totals, "event totals",
       "INSERT INTO event_totals(origin, severity, events, errors, last_ns) VALUES (?, ?, ?, ?, ?) "
       "ON CONFLICT(origin, severity) DO UPDATE SET events = events + excluded.events, "
       "errors = errors + excluded.errors, last_ns = MAX(last_ns, excluded.last_ns);"},
      // What the prune statements below are about to delete, rolled up.
      {&s.rollup_older_events, "roll-up of old events",
       "INSERT INTO event_rollups " ROLLUP_SELECT " WHERE time_ns < ? " ROLLUP_GROUP},
      {&s.rollup_surplus_events, "roll-up of surplus events",
       "INSERT INTO event_rollups " ROLLUP_SELECT
       " WHERE id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?) " ROLLUP_GROUP},
      {&s.prune_by_age, "prune by age", "DELETE FROM events WHERE time_ns < ?;"},
      // Ids grow with insertion: the oldest rows are the lowest ids.
      {&s.prune_by_count, "prune by count",
       "DELETE FROM events WHERE id <= "
       "(SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?);"},
  };
  for (const auto& [statement, what, sql] : kStatements) {
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, statement, nullptr) !=
        SQLITE_OK) {
      return Fail(SqliteError(fmt::format("prepare {}", what)));
    }
  }
  return {};
}

Status StateStore::SumBySeverity(sqlite3_stmt* statement, std::string_view what,
                                 SeverityCounts& sums) {
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    const auto* name = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
    const auto severity = ParseSeverity(name != nullptr ? name : "");
    if (!severity) continue;  // written by a newer rasd with more classes; not ours to count
    sums[static_cast<std::size_t>(*severity)] +=
        static_cast<std::uint64_t>(sqlite3_column_int64(statement, 1));
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError(what));
  return {};
}

void StateStore::EventTally::Add(const RasEvent& event) {
  AddErrors(event);
  for (auto& total : classes) {
    if (total.severity == event.severity && total.origin == event.origin) {
      ++total.events;
      return;
    }
  }
}

void StateStore::EventTally::AddErrors(const RasEvent& event) {
  severities[static_cast<std::size_t>(event.severity)] += event.count;
  const std::int64_t time_ns = UnixNanos(event.time);
  for (auto& total : classes) {
    if (total.severity != event.severity || total.origin != event.origin) continue;
    total.errors += event.count;
    total.last_ns = std::max(total.last_ns, time_ns);
    return;
  }
  classes.push_back({event.origin, event.severity, 0, event.count, time_ns});
}

Status StateStore::AddTotals(const EventTally& tally) {
  for (const auto& total : tally.classes) {
    StatementUse add(statements_->add_totals);
    sqlite3_stmt* statement = add.get();
    BindText(statement, 1, total.origin);
    BindText(statement, 2, SeverityName(total.severity));
    sqlite3_bind_int64(statement, 3, static_cast<sqlite3_int64>(total.events));
    sqlite3_bind_int64(statement, 4, static_cast<sqlite3_int64>(total.errors));
    sqlite3_bind_int64(statement, 5, total.last_ns);
    if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("add event totals"));
  }
  return {};
}

Result<bool> StateStore::GrowEvent(const EventGrowth& growth, const RasEvent& event,
                                   EventTally& added) {
  StatementUse update(statements_->grow_event);
  sqlite3_stmt* statement = update.get();
  sqlite3_bind_int64(statement, 1, static_cast<sqlite3_int64>(growth.count));
  std::vector<PageErrors> listed(growth.pages.begin(),
                                 growth.pages.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                            growth.pages.size(), kMaxStoredPages)));
  const std::string pages = PackPages(listed);  // outlives the step
  if (pages.empty()) {
    sqlite3_bind_null(statement, 2);
  } else {
    sqlite3_bind_blob(statement, 2, pages.data(), static_cast<int>(pages.size()), SQLITE_STATIC);
  }
  sqlite3_bind_int64(
      statement, 3,
      static_cast<sqlite3_int64>(growth.pages_not_listed + growth.pages.size() - listed.size()));
  sqlite3_bind_int64(statement, 4, UnixNanos(growth.last));
  sqlite3_bind_int64(statement, 5, growth.id);
  if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("add to event"));
  if (sqlite3_changes(db_) == 0) return false;
  added.AddErrors(event);
  return true;
}

Result<std::int64_t> StateStore::InsertEvent(const RasEvent& event, EventTally& added) {
  StatementUse insert(statements_->insert_event);
  sqlite3_stmt* statement = insert.get();
  sqlite3_bind_int64(statement, 1, UnixNanos(event.time));
  BindText(statement, 2, event.origin);
  BindText(statement, 3, SeverityName(event.severity));
  BindOptionalInt(statement, 4, event.device);
  BindText(statement, 5, event.summary);
  BindText(statement, 6, event.raw);
  BindText(statement, 7, event.source);
  BindOptionalInt(statement, 8, event.mc);
  BindOptionalText(statement, 9, event.pci_bdf);
  if (event.address) {
    BindText(statement, 10, event.address->printed);
    sqlite3_bind_int64(statement, 14, static_cast<sqlite3_int64>(event.address->value));
  } else {
    sqlite3_bind_null(statement, 10);
    sqlite3_bind_null(statement, 14);
  }
  BindOptionalInt(statement, 11, event.vendor_code);
  sqlite3_bind_int64(statement, 12, static_cast<sqlite3_int64>(event.count));
  sqlite3_bind_int(statement, 13, event.historical ? 1 : 0);
  sqlite3_bind_int(statement, 15, event.before_start ? 1 : 0);
  BindOptionalText(statement, 16, event.dimm);
  const std::string pages = PackPages(event.pages);  // outlives the step
  if (pages.empty()) {
    sqlite3_bind_null(statement, 17);
  } else {
    sqlite3_bind_blob(statement, 17, pages.data(), static_cast<int>(pages.size()), SQLITE_STATIC);
  }
  const std::size_t listed = std::min(event.pages.size(), kMaxStoredPages);
  sqlite3_bind_int64(
      statement, 18,
      static_cast<sqlite3_int64>(event.pages_not_listed + event.pages.size() - listed));
  if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("record event"));
  added.Add(event);
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db_));
}

void PageErrorTally::Add(const std::string& scope, std::uint64_t page, const Sum& more) {
  auto& pages = by_scope_[scope];
  auto [it, added] = pages.try_emplace(page, more);
  if (added) return;
  it->second.errors += more.errors;
  it->second.first = std::min(it->second.first, more.first);
  it->second.last = std::max(it->second.last, more.last);
}

void PageErrorTally::Add(std::span<const RasEvent> events) {
  for (const auto& event : events) {
    if (!event.address && event.pages.empty()) continue;
    const std::string scope = PageScope(event);
    if (event.pages.empty()) {
      Add(scope, PageOf(event.address->value), Sum{event.count, event.time, event.time});
      continue;
    }
    for (const auto& page : event.pages)
      Add(scope, page.page, Sum{page.errors, event.time, event.time});
  }
}

std::vector<PageErrorsRecord> PageErrorTally::Take() {
  std::vector<PageErrorsRecord> records;
  for (auto& [scope, pages] : by_scope_) {
    const std::size_t from = records.size();
    for (const auto& [page, sum] : pages)
      records.push_back({.scope = scope,
                         .page = page,
                         .errors = sum.errors,
                         .first = sum.first,
                         .last = sum.last});
    std::sort(records.begin() + static_cast<std::ptrdiff_t>(from), records.end(),
              [](const PageErrorsRecord& a, const PageErrorsRecord& b) { return a.page < b.page; });
  }
  by_scope_.clear();
  return records;
}

Status StateStore::AddPageErrors(const std::vector<PageErrorsRecord>& pages) {
  for (const auto& page : pages) {
    StatementUse upsert(statements_->add_page_errors);
    sqlite3_stmt* statement = upsert.get();
    BindText(statement, 1, page.scope);
    sqlite3_bind_int64(statement, 2, static_cast<sqlite3_int64>(page.page));
    sqlite3_bind_int64(statement, 3, static_cast<sqlite3_int64>(page.errors));
    sqlite3_bind_int64(statement, 4, UnixNanos(page.first));
    sqlite3_bind_int64(statement, 5, UnixNanos(page.last));
    if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("count page errors"));
  }
  return {};
}

Result<std::vector<PageErrorsRecord>> StateStore::LoadPageErrors(
    std::chrono::system_clock::time_point since) {
  if (auto fault = ReadFaulted("page errors")) return Fail(*fault);
  StatementUse query(statements_->load_page_errors);
  sqlite3_stmt* statement = query.get();
  sqlite3_bind_int64(statement, 1, UnixNanos(since));
  std::vector<PageErrorsRecord> rows;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    rows.push_back(
        PageErrorsRecord{.scope = ColumnText(statement, 0),
                         .page = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 1)),
                         .errors = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 2)),
                         .first = FromUnixNanos(sqlite3_column_int64(statement, 3)),
                         .last = FromUnixNanos(sqlite3_column_int64(statement, 4))});
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("load page errors"));
  return rows;
}

Result<std::int64_t> StateStore::InsertAction(const ActionRecord& action,
                                              std::optional<std::int64_t> event_id) {
  const std::optional<std::string> coalesce_key = CoalesceKey(action);  // outlives `insert`
  StatementUse insert(statements_->insert_action);
  sqlite3_stmt* statement = insert.get();
  BindOptionalInt64(statement, 1, event_id);
  sqlite3_bind_int64(statement, 2, UnixNanos(action.time));
  BindText(statement, 3, action.action);
  BindOptionalInt(statement, 4, action.device);
  BindOptionalText(statement, 5,
                   action.address ? std::optional(HexText(*action.address)) : std::nullopt);
  BindText(statement, 6, action.rule);
  BindText(statement, 7, action.reason);
  BindText(statement, 8, action.result);
  BindText(statement, 9, action.detail);
  sqlite3_bind_int64(statement, 10, static_cast<sqlite3_int64>(action.count));
  BindOptionalText(statement, 11, coalesce_key);
  // RETURNING: the row is written by the first step, which yields its id.
  if (sqlite3_step(statement) != SQLITE_ROW) return Fail(SqliteError("record action"));
  const std::int64_t id = sqlite3_column_int64(statement, 0);
  if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("record action"));
  return id;
}

Status StateStore::UpsertDeviceState(const DeviceStateRecord& state) {
  StatementUse upsert(statements_->upsert_device_state);
  sqlite3_stmt* statement = upsert.get();
  BindText(statement, 1, state.device_uuid);
  BindText(statement, 2, state.state);
  BindText(statement, 3, state.reason);
  sqlite3_bind_int64(statement, 4, UnixNanos(state.since));
  BindText(statement, 5, state.holds);
  if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("save device state"));
  return {};
}

Status StateStore::InsertRetiredPage(const RetiredPageRecord& page) {
  StatementUse insert(statements_->insert_retired_page);
  sqlite3_stmt* statement = insert.get();
  BindText(statement, 1, page.device_uuid);
  sqlite3_bind_int64(statement, 2, static_cast<sqlite3_int64>(page.address));
  BindText(statement, 3, page.reason);
  sqlite3_bind_int64(statement, 4, UnixNanos(page.retired));
  if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("save retired page"));
  return {};
}

Status StateStore::UpsertCursor(const SourceCursor& cursor, std::int64_t updated_ns) {
  StatementUse upsert(statements_->upsert_cursor);
  sqlite3_stmt* statement = upsert.get();
  BindText(statement, 1, cursor.source);
  BindText(statement, 2, cursor.boot_id);
  BindText(statement, 3, cursor.position);
  sqlite3_bind_int64(statement, 4, updated_ns);
  if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError("save cursor"));
  return {};
}

namespace {

void AddCounts(std::array<std::uint64_t, kAllSeverities.size()>& to,
               const std::array<std::uint64_t, kAllSeverities.size()>& added) {
  for (std::size_t i = 0; i < to.size(); ++i) to[i] += added[i];
}

}  // namespace

Result<std::int64_t> StateStore::RecordEvent(const RasEvent& event) {
  if (auto fault = WriteFaulted("event")) return Fail(*fault);
  Transaction transaction(*this);
  if (auto begun = transaction.Begin("event"); !begun) return Fail(begun.error());
  EventTally added;
  auto id = InsertEvent(event, added);
  if (!id) return Fail(id.error());
  if (auto totals = AddTotals(added); !totals) return Fail(totals.error());
  if (auto committed = transaction.Commit("event"); !committed) return Fail(committed.error());
  AddCommitted(added);
  return id;
}

Result<std::vector<std::int64_t>> StateStore::RecordEvents(std::span<const RasEvent> events) {
  if (auto fault = WriteFaulted("events")) return Fail(*fault);
  std::vector<std::int64_t> ids;
  if (events.empty()) return ids;
  Transaction transaction(*this);
  if (auto begun = transaction.Begin("event batch"); !begun) return Fail(begun.error());
  ids.reserve(events.size());
  EventTally added;
  for (const auto& event : events) {
    auto recorded = InsertEvent(event, added);
    if (!recorded) return Fail(recorded.error());
    ids.push_back(*recorded);
  }
  if (auto totals = AddTotals(added); !totals) return Fail(totals.error());
  PageErrorTally pages;
  pages.Add(events);
  if (auto counted = AddPageErrors(pages.Take()); !counted) return Fail(counted.error());
  if (auto committed = transaction.Commit("event batch"); !committed)
    return Fail(committed.error());
  AddCommitted(added);
  return ids;
}

Result<StoredBatch> StateStore::Commit(const StoreBatch& batch) {
  if (auto fault = WriteFaulted("batch")) return Fail(*fault);
  // Refuse what cannot be written before writing anything.
  for (std::size_t i = 0; i < batch.actions.size(); ++i) {
    const BatchAction& action = batch.actions[i];
    if (action.event_index && *action.event_index >= batch.events.size()) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("batch action {} ({}) links event {}, but the batch has {} events", i,
                              action.record.action, *action.event_index, batch.events.size()));
    }
    if (action.event_index && action.record.event_id) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("batch action {} ({}) has both an event_id and an event_index", i,
                              action.record.action));
    }
    if (auto counted = CheckActionCount(action.record); !counted) return Fail(counted.error());
  }
  StoredBatch stored;
  if (batch.events.empty() && batch.actions.empty() && batch.states.empty() &&
      batch.pages.empty() && batch.cursors.empty() && batch.node_values.empty() &&
      (!batch.page_errors || batch.page_errors->empty())) {
    return stored;
  }

  Transaction transaction(*this);
  if (auto begun = transaction.Begin("batch"); !begun) return Fail(begun.error());
  stored.event_ids.reserve(batch.events.size());
  EventTally added;
  for (std::size_t i = 0; i < batch.events.size(); ++i) {
    const RasEvent& event = batch.events[i];
    if (i < batch.grows.size() && batch.grows[i]) {
      auto grown = GrowEvent(*batch.grows[i], event, added);
      if (!grown) return Fail(grown.error());
      if (*grown) {
        stored.event_ids.push_back(batch.grows[i]->id);
        continue;
      }
    }
    auto id = InsertEvent(event, added);
    if (!id) return Fail(id.error());
    stored.event_ids.push_back(*id);
  }
  if (auto totals = AddTotals(added); !totals) return Fail(totals.error());
  if (batch.page_errors) {
    if (auto counted = AddPageErrors(*batch.page_errors); !counted) return Fail(counted.error());
  } else {
    PageErrorTally tally;
    tally.Add(batch.events);
    if (auto counted = AddPageErrors(tally.Take()); !counted) return Fail(counted.error());
  }
  stored.action_ids.reserve(batch.actions.size());
  for (const auto& action : batch.actions) {
    const auto event_id = action.event_index ? std::optional(stored.event_ids[*action.event_index])
                                             : action.record.event_id;
    auto id = InsertAction(action.record, event_id);
    if (!id) return Fail(id.error());
    stored.action_ids.push_back(*id);
  }
  for (const auto& state : batch.states) {
    if (auto saved = UpsertDeviceState(state); !saved) return Fail(saved.error());
  }
  for (const auto& page : batch.pages) {
    if (auto saved = InsertRetiredPage(page); !saved) return Fail(saved.error());
  }
  const std::int64_t now_ns = batch.cursors.empty() ? 0 : NowNanos();
  for (const auto& cursor : batch.cursors) {
    if (auto saved = UpsertCursor(cursor, now_ns); !saved) return Fail(saved.error());
  }
  for (const auto& node_value : batch.node_values) {
    if (auto saved = UpsertNodeValue(node_value.key, node_value.value); !saved)
      return Fail(saved.error());
  }
  if (auto committed = transaction.Commit("batch"); !committed) return Fail(committed.error());
  AddCommitted(added);
  return stored;
}

Result<std::int64_t> StateStore::RecordAction(const ActionRecord& action) {
  if (auto fault = WriteFaulted("action")) return Fail(*fault);
  if (auto counted = CheckActionCount(action); !counted) return Fail(counted.error());
  return InsertAction(action, action.event_id);
}

Result<std::vector<ActionRecord>> StateStore::QueryActions(std::optional<int> device,
                                                           std::size_t limit) {
  if (auto fault = ReadFaulted("actions")) return Fail(*fault);
  StatementUse query(device ? statements_->query_device_actions : statements_->query_actions);
  sqlite3_stmt* statement = query.get();
  int column = 1;
  if (device) sqlite3_bind_int(statement, column++, *device);
  sqlite3_bind_int64(statement, column, static_cast<sqlite3_int64>(limit));
  std::vector<ActionRecord> actions;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    ActionRecord action;
    action.id = sqlite3_column_int64(statement, 0);
    if (sqlite3_column_type(statement, 1) != SQLITE_NULL)
      action.event_id = sqlite3_column_int64(statement, 1);
    action.time = FromUnixNanos(sqlite3_column_int64(statement, 2));
    action.action = ColumnText(statement, 3);
    action.device = ColumnOptionalInt(statement, 4);
    if (const auto text = ColumnOptionalText(statement, 5)) {
      if (const auto address = ParsePrintedAddress(*text)) action.address = address->value;
    }
    action.rule = ColumnText(statement, 6);
    action.reason = ColumnText(statement, 7);
    action.result = ColumnText(statement, 8);
    action.detail = ColumnText(statement, 9);
    action.count = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 10));
    actions.push_back(std::move(action));
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("query actions"));
  return actions;
}

Status StateStore::SaveDeviceState(const DeviceStateRecord& state) {
  if (auto fault = WriteFaulted("device state")) return Fail(*fault);
  return UpsertDeviceState(state);
}

Result<std::vector<DeviceStateRecord>> StateStore::LoadDeviceStates() {
  if (auto fault = ReadFaulted("device states")) return Fail(*fault);
  StatementUse query(statements_->load_device_states);
  sqlite3_stmt* statement = query.get();
  std::vector<DeviceStateRecord> states;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    states.push_back({ColumnText(statement, 0), ColumnText(statement, 1), ColumnText(statement, 2),
                      FromUnixNanos(sqlite3_column_int64(statement, 3)), ColumnText(statement, 4)});
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("load device states"));
  return states;
}

Status StateStore::SaveRetiredPage(const RetiredPageRecord& page) {
  if (auto fault = WriteFaulted("retired page")) return Fail(*fault);
  return InsertRetiredPage(page);
}

// Workloads change at the pace of processes starting, not of errors: a
// statement prepared per call.
Status StateStore::SaveWorkload(const WorkloadRecord& workload) {
  if (auto fault = WriteFaulted("workload")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO workloads(pid, start_time, spec) VALUES (?, ?, ?)",
                         -1, &statement, nullptr) != SQLITE_OK)
    return Fail(SqliteError("save workload"));
  sqlite3_bind_int64(statement, 1, workload.pid);
  sqlite3_bind_int64(statement, 2, static_cast<sqlite3_int64>(workload.start_time));
  BindText(statement, 3, workload.spec);
  const int rc = sqlite3_step(statement);
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("save workload"));
  return {};
}

Status StateStore::DeleteWorkload(std::int64_t pid, std::uint64_t start_time) {
  if (auto fault = WriteFaulted("workload delete")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "DELETE FROM workloads WHERE pid = ? AND start_time = ?", -1,
                         &statement, nullptr) != SQLITE_OK)
    return Fail(SqliteError("delete workload"));
  sqlite3_bind_int64(statement, 1, pid);
  sqlite3_bind_int64(statement, 2, static_cast<sqlite3_int64>(start_time));
  const int rc = sqlite3_step(statement);
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("delete workload"));
  return {};
}

// Recoveries happen at the pace of repairs: a statement prepared per call.
Status StateStore::SaveDeviceRecovery(const DeviceRecoveryRecord& record) {
  if (auto fault = WriteFaulted("device recovery")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO device_recovery(device_uuid, spec) VALUES (?, ?)",
                         -1, &statement, nullptr) != SQLITE_OK)
    return Fail(SqliteError("save device recovery"));
  BindText(statement, 1, record.device_uuid);
  BindText(statement, 2, record.spec);
  const int rc = sqlite3_step(statement);
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("save device recovery"));
  return {};
}

Status StateStore::SaveNodeValue(const std::string& key, const std::string& value) {
  if (auto fault = WriteFaulted("node value")) return Fail(*fault);
  return UpsertNodeValue(key, value);
}

Status StateStore::UpsertNodeValue(const std::string& key, const std::string& value) {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO node_state(key, value) VALUES (?, ?)", -1,
                         &statement, nullptr) != SQLITE_OK)
    return Fail(SqliteError("save node state"));
  BindText(statement, 1, key);
  BindText(statement, 2, value);
  const int rc = sqlite3_step(statement);
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("save node state"));
  return {};
}

Status StateStore::DeleteNodeValue(const std::string& key) {
  if (auto fault = WriteFaulted("node value delete")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "DELETE FROM node_state WHERE key = ?", -1, &statement, nullptr) !=
      SQLITE_OK)
    return Fail(SqliteError("delete node state"));
  BindText(statement, 1, key);
  const int rc = sqlite3_step(statement);
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("delete node state"));
  return {};
}

Result<std::optional<std::string>> StateStore::LoadNodeValue(const std::string& key) {
  if (auto fault = ReadFaulted("node value")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM node_state WHERE key = ?", -1, &statement,
                         nullptr) != SQLITE_OK)
    return Fail(SqliteError("load node state"));
  BindText(statement, 1, key);
  std::optional<std::string> value;
  const int rc = sqlite3_step(statement);
  if (rc == SQLITE_ROW) value = ColumnText(statement, 0);
  sqlite3_finalize(statement);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Fail(SqliteError("load node state"));
  return value;
}

Result<std::vector<DeviceRecoveryRecord>> StateStore::LoadDeviceRecoveries() {
  if (auto fault = ReadFaulted("device recoveries")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT device_uuid, spec FROM device_recovery ORDER BY device_uuid",
                         -1, &statement, nullptr) != SQLITE_OK)
    return Fail(SqliteError("load device recovery"));
  std::vector<DeviceRecoveryRecord> records;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    records.push_back({ColumnText(statement, 0), ColumnText(statement, 1)});
  }
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("load device recovery"));
  return records;
}

Result<std::vector<WorkloadRecord>> StateStore::LoadWorkloads() {
  if (auto fault = ReadFaulted("workloads")) return Fail(*fault);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT pid, start_time, spec FROM workloads ORDER BY pid", -1,
                         &statement, nullptr) != SQLITE_OK)
    return Fail(SqliteError("load workloads"));
  std::vector<WorkloadRecord> workloads;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    workloads.push_back({sqlite3_column_int64(statement, 0),
                         static_cast<std::uint64_t>(sqlite3_column_int64(statement, 1)),
                         ColumnText(statement, 2)});
  }
  sqlite3_finalize(statement);
  if (rc != SQLITE_DONE) return Fail(SqliteError("load workloads"));
  return workloads;
}

Result<std::vector<RetiredPageRecord>> StateStore::LoadRetiredPages() {
  if (auto fault = ReadFaulted("retired pages")) return Fail(*fault);
  StatementUse query(statements_->load_retired_pages);
  sqlite3_stmt* statement = query.get();
  std::vector<RetiredPageRecord> pages;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    pages.push_back({ColumnText(statement, 0),
                     static_cast<std::uint64_t>(sqlite3_column_int64(statement, 1)),
                     ColumnText(statement, 2), FromUnixNanos(sqlite3_column_int64(statement, 3))});
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("load retired pages"));
  return pages;
}

// Prepared per call: the filters make sixteen shapes, and an operator's
// query is not a hot path. A fixed "(? IS NULL OR ...)" form would keep the
// planner from the device index.
Result<std::vector<StoredEvent>> StateStore::QueryEvents(const EventQuery& query) {
  if (auto fault = ReadFaulted("events")) return Fail(*fault);
  std::string sql =
      "SELECT id, time_ns, origin, severity, device, summary, raw, source, mc, pci_bdf, "
      "address_text, vendor_code, "
      "count, historical, address, before_start, dimm, pages, pages_not_listed, last_ns "
      "FROM events "
      "WHERE time_ns >= ?";
  if (query.severity) sql += " AND severity = ?";
  if (query.device) sql += " AND device = ?";
  if (query.after_id) sql += " AND id > ?";
  if (!query.ids.empty()) {
    sql += " AND id IN (?";
    for (std::size_t i = 1; i < query.ids.size(); ++i) sql += ", ?";
    sql += ")";
  }
  sql += " ORDER BY id DESC LIMIT ?";
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare event query"));
  }
  int column = 1;
  sqlite3_bind_int64(statement, column++, UnixNanos(query.since));
  if (query.severity) BindText(statement, column++, SeverityName(*query.severity));
  if (query.device) sqlite3_bind_int(statement, column++, *query.device);
  if (query.after_id) sqlite3_bind_int64(statement, column++, *query.after_id);
  for (const std::int64_t id : query.ids) sqlite3_bind_int64(statement, column++, id);
  sqlite3_bind_int64(statement, column, static_cast<sqlite3_int64>(query.limit));
  std::vector<StoredEvent> events;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    StoredEvent stored;
    stored.id = sqlite3_column_int64(statement, 0);
    RasEvent& event = stored.event;
    event.time = FromUnixNanos(sqlite3_column_int64(statement, 1));
    event.origin = ColumnText(statement, 2);
    event.severity = ParseSeverity(ColumnText(statement, 3)).value_or(Severity::kInfo);
    event.device = ColumnOptionalInt(statement, 4);
    event.summary = ColumnText(statement, 5);
    event.raw = ColumnText(statement, 6);
    event.source = ColumnText(statement, 7);
    event.mc = ColumnOptionalInt(statement, 8);
    event.pci_bdf = ColumnOptionalText(statement, 9);
    event.address = StoredAddress(statement, 14, 10);
    event.vendor_code = ColumnOptionalInt(statement, 11);
    event.count = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 12));
    event.historical = sqlite3_column_int(statement, 13) != 0;
    event.before_start = sqlite3_column_int(statement, 15) != 0;
    event.dimm = ColumnOptionalText(statement, 16);
    event.pages = ColumnPages(statement, 17);
    event.pages_not_listed = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 18));
    if (sqlite3_column_type(statement, 19) != SQLITE_NULL)
      stored.last = FromUnixNanos(sqlite3_column_int64(statement, 19));
    events.push_back(std::move(stored));
  }
  const bool done = rc == SQLITE_DONE;
  sqlite3_finalize(statement);
  if (!done) return Fail(SqliteError("query events"));
  std::reverse(events.begin(), events.end());  // oldest first
  return events;
}

void StateStore::AddCommitted(const EventTally& added) {
  AddCounts(severity_counts_, added.severities);
  if (!totals_) return;
  for (const auto& total : added.classes) {
    const std::string_view severity = SeverityName(total.severity);
    // In the table's order (origin, then the severity's name), as read.
    auto at = std::lower_bound(totals_->begin(), totals_->end(), total,
                               [severity](const EventSummaryRow& row, const EventTally::Class& c) {
                                 return std::pair(std::string_view(row.origin),
                                                  SeverityName(row.severity)) <
                                        std::pair(std::string_view(c.origin), severity);
                               });
    if (at == totals_->end() || at->origin != total.origin || at->severity != total.severity)
      at = totals_->insert(at, EventSummaryRow{.origin = total.origin, .severity = total.severity});
    at->events += total.events;
    at->errors += total.errors;
    at->last = std::max(at->last, FromUnixNanos(total.last_ns));
  }
}

Result<std::vector<EventSummaryRow>> StateStore::Summarize() {
  if (auto fault = ReadFaulted("event summary")) return Fail(*fault);
  if (totals_) return *totals_;
  StatementUse query(statements_->summarize);
  sqlite3_stmt* statement = query.get();
  std::vector<EventSummaryRow> rows;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    EventSummaryRow row;
    row.origin = ColumnText(statement, 0);
    row.severity = ParseSeverity(ColumnText(statement, 1)).value_or(Severity::kInfo);
    row.events = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 2));
    row.errors = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 3));
    row.last = FromUnixNanos(sqlite3_column_int64(statement, 4));
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("summarize events"));
  if (lock_) totals_ = rows;  // the writing connection: its commits keep the copy
  return rows;
}

Result<std::uint64_t> StateStore::EventRows() {
  if (auto fault = ReadFaulted("event rows")) return Fail(*fault);
  StatementUse query(statements_->event_rows);
  if (sqlite3_step(query.get()) != SQLITE_ROW) return Fail(SqliteError("count event rows"));
  return static_cast<std::uint64_t>(sqlite3_column_int64(query.get(), 0));
}

Result<std::uint64_t> StateStore::Prune(std::chrono::system_clock::time_point older_than,
                                        std::uint64_t max_events) {
  if (auto fault = WriteFaulted("prune")) return Fail(*fault);
  // Each delete is preceded by the roll-up of what it deletes, in the same
  // transaction: the totals (and the summary) go on counting them.
  Transaction transaction(*this);
  if (auto begun = transaction.Begin("prune"); !begun) return Fail(begun.error());
  std::uint64_t removed = 0;
  auto step = [this](sqlite3_stmt* statement, std::string_view what) -> Status {
    if (sqlite3_step(statement) != SQLITE_DONE) return Fail(SqliteError(what));
    return {};
  };
  {
    StatementUse rollup(statements_->rollup_older_events);
    sqlite3_bind_int64(rollup.get(), 1, UnixNanos(older_than));
    if (auto done = step(rollup.get(), "roll up old events"); !done) return Fail(done.error());
  }
  {
    StatementUse by_age(statements_->prune_by_age);
    sqlite3_bind_int64(by_age.get(), 1, UnixNanos(older_than));
    if (auto done = step(by_age.get(), "prune old events"); !done) return Fail(done.error());
    removed += static_cast<std::uint64_t>(sqlite3_changes(db_));
  }
  const auto max_rows = static_cast<sqlite3_int64>(std::min<std::uint64_t>(
      max_events, static_cast<std::uint64_t>(std::numeric_limits<sqlite3_int64>::max())));
  {
    StatementUse rollup(statements_->rollup_surplus_events);
    sqlite3_bind_int64(rollup.get(), 1, max_rows);
    if (auto done = step(rollup.get(), "roll up surplus events"); !done) return Fail(done.error());
  }
  {
    StatementUse by_count(statements_->prune_by_count);
    sqlite3_bind_int64(by_count.get(), 1, max_rows);
    if (auto done = step(by_count.get(), "prune surplus events"); !done) return Fail(done.error());
    removed += static_cast<std::uint64_t>(sqlite3_changes(db_));
  }
  if (auto committed = transaction.Commit("prune"); !committed) return Fail(committed.error());
  return removed;
}

Status StateStore::SaveCursor(const SourceCursor& cursor) {
  if (auto fault = WriteFaulted("cursor")) return Fail(*fault);
  return UpsertCursor(cursor, NowNanos());
}

Result<std::optional<SourceCursor>> StateStore::LoadCursor(std::string_view source) {
  if (auto fault = ReadFaulted("cursor")) return Fail(*fault);
  StatementUse query(statements_->load_cursor);
  sqlite3_stmt* statement = query.get();
  BindText(statement, 1, source);
  std::optional<SourceCursor> cursor;
  const int rc = sqlite3_step(statement);
  if (rc == SQLITE_ROW)
    cursor = SourceCursor{std::string(source), ColumnText(statement, 0), ColumnText(statement, 1)};
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Fail(SqliteError("load cursor"));
  return cursor;
}

Result<std::map<Severity, std::uint64_t>> StateStore::CountEventsBySeverity() {
  std::map<Severity, std::uint64_t> counts;
  for (Severity severity : kAllSeverities)
    counts[severity] = severity_counts_[static_cast<std::size_t>(severity)];
  return counts;
}

std::int64_t StateStore::SqliteMemoryBytes() { return sqlite3_memory_used(); }

}  // namespace rasd::ras
