#include "rasd/ras/state_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

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
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message != nullptr ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    return Fail(ErrorCode::kIoError, fmt::format("{}: {}", what, text));
  }
  return {};
}

}  // namespace

int StateStore::LatestSchemaVersion() { return static_cast<int>(Migrations().size()); }

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::filesystem::path& state_dir) {
  if (auto prepared = PrepareStateDirectory(state_dir); !prepared) return Fail(prepared.error());
  auto lock = LockStateDirectory(state_dir);
  if (!lock) return Fail(lock.error());

  const auto database_path = state_dir / kDatabaseFile;
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
  std::unique_ptr<StateStore> store(new StateStore(database_path, std::move(*lock), db));
  sqlite3_busy_timeout(db, 2000);
  // journal_mode=WAL is the first statement to touch the file, so a file that
  // is not a database fails here with SQLite's own words.
  if (auto wal =
          Exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
               "configure " + database_path.string());
      !wal) {
    return Fail(wal.error());
  }
  if (auto migrated = store->Migrate(); !migrated) return Fail(migrated.error());
  if (auto prepared = store->Prepare(); !prepared) return Fail(prepared.error());
  return store;
}

StateStore::StateStore(std::filesystem::path database_path, common::UniqueFd lock, sqlite3* db)
    : database_path_(std::move(database_path)), lock_(std::move(lock)), db_(db) {}

StateStore::~StateStore() {
  sqlite3_finalize(insert_event_);
  sqlite3_finalize(count_events_);
  sqlite3_close(db_);
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
        ErrorCode::kCorruptData,
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

Status StateStore::Prepare() {
  if (sqlite3_prepare_v3(db_,
                         "INSERT INTO events(time_ns, origin, severity, device, summary, raw, "
                         "source, mc, pci_bdf, "
                         "address_text, vendor_code, count, historical) VALUES (?, ?, ?, ?, ?, ?, "
                         "?, ?, ?, ?, ?, ?, ?);",
                         -1, SQLITE_PREPARE_PERSISTENT, &insert_event_, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare event insert"));
  }
  if (sqlite3_prepare_v3(db_, "SELECT severity, SUM(count) FROM events GROUP BY severity;", -1,
                         SQLITE_PREPARE_PERSISTENT, &count_events_, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare event count"));
  }
  return {};
}

namespace {

void BindOptionalInt(sqlite3_stmt* statement, int column, const std::optional<int>& value) {
  if (value) {
    sqlite3_bind_int(statement, column, *value);
  } else {
    sqlite3_bind_null(statement, column);
  }
}

void BindOptionalText(sqlite3_stmt* statement, int column,
                      const std::optional<std::string>& value) {
  if (value) {
    sqlite3_bind_text(statement, column, value->data(), static_cast<int>(value->size()),
                      SQLITE_TRANSIENT);
  } else {
    sqlite3_bind_null(statement, column);
  }
}

void BindText(sqlite3_stmt* statement, int column, std::string_view value) {
  sqlite3_bind_text(statement, column, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
}

std::optional<int> ColumnOptionalInt(sqlite3_stmt* statement, int column) {
  if (sqlite3_column_type(statement, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int(statement, column);
}

std::optional<std::string> ColumnOptionalText(sqlite3_stmt* statement, int column) {
  if (sqlite3_column_type(statement, column) == SQLITE_NULL) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(sqlite3_column_text(statement, column)));
}

std::string ColumnText(sqlite3_stmt* statement, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(statement, column));
  return text != nullptr ? std::string(text) : std::string();
}

}  // namespace

Result<std::int64_t> StateStore::RecordEvent(const RasEvent& event) {
  sqlite3_reset(insert_event_);
  sqlite3_clear_bindings(insert_event_);
  const auto time_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(event.time.time_since_epoch()).count();
  sqlite3_bind_int64(insert_event_, 1, time_ns);
  BindText(insert_event_, 2, event.origin);
  BindText(insert_event_, 3, SeverityName(event.severity));
  BindOptionalInt(insert_event_, 4, event.device);
  BindText(insert_event_, 5, event.summary);
  BindText(insert_event_, 6, event.raw);
  BindText(insert_event_, 7, event.source);
  BindOptionalInt(insert_event_, 8, event.mc);
  BindOptionalText(insert_event_, 9, event.pci_bdf);
  BindOptionalText(insert_event_, 10, event.address);
  BindOptionalInt(insert_event_, 11, event.vendor_code);
  sqlite3_bind_int64(insert_event_, 12, static_cast<sqlite3_int64>(event.count));
  sqlite3_bind_int(insert_event_, 13, event.historical ? 1 : 0);
  if (sqlite3_step(insert_event_) != SQLITE_DONE) return Fail(SqliteError("record event"));
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<std::vector<std::int64_t>> StateStore::RecordEvents(std::span<const RasEvent> events) {
  std::vector<std::int64_t> ids;
  if (events.empty()) return ids;
  if (auto begun = Exec(db_, "BEGIN IMMEDIATE;", "begin event batch"); !begun)
    return Fail(begun.error());
  ids.reserve(events.size());
  for (const auto& event : events) {
    auto recorded = RecordEvent(event);
    if (!recorded) {
      (void)Exec(db_, "ROLLBACK;", "roll back event batch");
      return Fail(recorded.error());
    }
    ids.push_back(*recorded);
  }
  if (auto committed = Exec(db_, "COMMIT;", "commit event batch"); !committed) {
    (void)Exec(db_, "ROLLBACK;", "roll back event batch");
    return Fail(committed.error());
  }
  return ids;
}

namespace {

std::int64_t Nanos(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

std::chrono::system_clock::time_point FromNanos(std::int64_t nanos) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(nanos)));
}

// A prepared statement freed however the function returns.
struct Statement {
  sqlite3_stmt* statement = nullptr;
  ~Statement() { sqlite3_finalize(statement); }
};

}  // namespace

Result<std::int64_t> StateStore::RecordAction(const ActionRecord& action) {
  Statement insert;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO actions(event_id, time_ns, action, device, address, rule, "
                         "reason, result, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);",
                         -1, &insert.statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare action insert"));
  }
  if (action.event_id) {
    sqlite3_bind_int64(insert.statement, 1, *action.event_id);
  } else {
    sqlite3_bind_null(insert.statement, 1);
  }
  sqlite3_bind_int64(insert.statement, 2, Nanos(action.time));
  BindText(insert.statement, 3, action.action);
  BindOptionalInt(insert.statement, 4, action.device);
  BindOptionalText(insert.statement, 5, action.address);
  BindText(insert.statement, 6, action.rule);
  BindText(insert.statement, 7, action.reason);
  BindText(insert.statement, 8, action.result);
  BindText(insert.statement, 9, action.detail);
  if (sqlite3_step(insert.statement) != SQLITE_DONE) return Fail(SqliteError("record action"));
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<std::vector<ActionRecord>> StateStore::QueryActions(std::optional<int> device,
                                                           std::size_t limit) {
  std::string sql =
      "SELECT id, event_id, time_ns, action, device, address, rule, reason, result, detail "
      "FROM actions";
  if (device) sql += " WHERE device = ?";
  sql += " ORDER BY id DESC LIMIT ?;";
  Statement query;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &query.statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare action query"));
  }
  int column = 1;
  if (device) sqlite3_bind_int(query.statement, column++, *device);
  sqlite3_bind_int64(query.statement, column, static_cast<sqlite3_int64>(limit));
  std::vector<ActionRecord> actions;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(query.statement)) == SQLITE_ROW) {
    ActionRecord action;
    action.id = sqlite3_column_int64(query.statement, 0);
    if (sqlite3_column_type(query.statement, 1) != SQLITE_NULL)
      action.event_id = sqlite3_column_int64(query.statement, 1);
    action.time = FromNanos(sqlite3_column_int64(query.statement, 2));
    action.action = ColumnText(query.statement, 3);
    if (sqlite3_column_type(query.statement, 4) != SQLITE_NULL)
      action.device = sqlite3_column_int(query.statement, 4);
    action.address = ColumnOptionalText(query.statement, 5);
    action.rule = ColumnText(query.statement, 6);
    action.reason = ColumnText(query.statement, 7);
    action.result = ColumnText(query.statement, 8);
    action.detail = ColumnText(query.statement, 9);
    actions.push_back(std::move(action));
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("query actions"));
  return actions;
}

Status StateStore::SaveDeviceState(const DeviceStateRecord& state) {
  Statement upsert;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO device_states(device_uuid, state, reason, changed_ns) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT(device_uuid) DO UPDATE SET "
                         "state = excluded.state, reason = excluded.reason, "
                         "changed_ns = excluded.changed_ns;",
                         -1, &upsert.statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare device state"));
  }
  BindText(upsert.statement, 1, state.device_uuid);
  BindText(upsert.statement, 2, state.state);
  BindText(upsert.statement, 3, state.reason);
  sqlite3_bind_int64(upsert.statement, 4, Nanos(state.since));
  if (sqlite3_step(upsert.statement) != SQLITE_DONE) return Fail(SqliteError("save device state"));
  return {};
}

Result<std::vector<DeviceStateRecord>> StateStore::LoadDeviceStates() {
  Statement query;
  if (sqlite3_prepare_v2(db_,
                         "SELECT device_uuid, state, reason, changed_ns FROM device_states "
                         "ORDER BY device_uuid;",
                         -1, &query.statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare device states"));
  }
  std::vector<DeviceStateRecord> states;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(query.statement)) == SQLITE_ROW) {
    states.push_back({ColumnText(query.statement, 0), ColumnText(query.statement, 1),
                      ColumnText(query.statement, 2),
                      FromNanos(sqlite3_column_int64(query.statement, 3))});
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("load device states"));
  return states;
}

Status StateStore::SaveRetiredPage(const RetiredPageRecord& page) {
  Statement insert;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR IGNORE INTO retired_pages(device_uuid, address, reason, "
                         "retired_ns) VALUES (?, ?, ?, ?);",
                         -1, &insert.statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare retired page"));
  }
  BindText(insert.statement, 1, page.device_uuid);
  sqlite3_bind_int64(insert.statement, 2, static_cast<sqlite3_int64>(page.address));
  BindText(insert.statement, 3, page.reason);
  sqlite3_bind_int64(insert.statement, 4, Nanos(page.retired));
  if (sqlite3_step(insert.statement) != SQLITE_DONE) return Fail(SqliteError("save retired page"));
  return {};
}

Result<std::vector<RetiredPageRecord>> StateStore::LoadRetiredPages() {
  Statement query;
  if (sqlite3_prepare_v2(db_,
                         "SELECT device_uuid, address, reason, retired_ns FROM retired_pages "
                         "ORDER BY device_uuid, address;",
                         -1, &query.statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare retired pages"));
  }
  std::vector<RetiredPageRecord> pages;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(query.statement)) == SQLITE_ROW) {
    pages.push_back({ColumnText(query.statement, 0),
                     static_cast<std::uint64_t>(sqlite3_column_int64(query.statement, 1)),
                     ColumnText(query.statement, 2),
                     FromNanos(sqlite3_column_int64(query.statement, 3))});
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("load retired pages"));
  return pages;
}

Result<std::vector<StoredEvent>> StateStore::QueryEvents(const EventQuery& query) {
  std::string sql =
      "SELECT id, time_ns, origin, severity, device, summary, raw, source, mc, pci_bdf, "
      "address_text, vendor_code, "
      "count, historical FROM events WHERE time_ns >= ?";
  if (query.severity) sql += " AND severity = ?";
  if (query.device) sql += " AND device = ?";
  if (query.after_id) sql += " AND id > ?";
  sql += " ORDER BY id DESC LIMIT ?";
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare event query"));
  }
  int column = 1;
  sqlite3_bind_int64(
      statement, column++,
      std::chrono::duration_cast<std::chrono::nanoseconds>(query.since.time_since_epoch()).count());
  if (query.severity) BindText(statement, column++, SeverityName(*query.severity));
  if (query.device) sqlite3_bind_int(statement, column++, *query.device);
  if (query.after_id) sqlite3_bind_int64(statement, column++, *query.after_id);
  sqlite3_bind_int64(statement, column, static_cast<sqlite3_int64>(query.limit));
  std::vector<StoredEvent> events;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    StoredEvent stored;
    stored.id = sqlite3_column_int64(statement, 0);
    RasEvent& event = stored.event;
    event.time = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(sqlite3_column_int64(statement, 1))));
    event.origin = ColumnText(statement, 2);
    event.severity = ParseSeverity(ColumnText(statement, 3)).value_or(Severity::kInfo);
    event.device = ColumnOptionalInt(statement, 4);
    event.summary = ColumnText(statement, 5);
    event.raw = ColumnText(statement, 6);
    event.source = ColumnText(statement, 7);
    event.mc = ColumnOptionalInt(statement, 8);
    event.pci_bdf = ColumnOptionalText(statement, 9);
    event.address = ColumnOptionalText(statement, 10);
    event.vendor_code = ColumnOptionalInt(statement, 11);
    event.count = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 12));
    event.historical = sqlite3_column_int(statement, 13) != 0;
    events.push_back(std::move(stored));
  }
  const bool done = rc == SQLITE_DONE;
  sqlite3_finalize(statement);
  if (!done) return Fail(SqliteError("query events"));
  std::reverse(events.begin(), events.end());  // oldest first
  return events;
}

Result<std::vector<EventSummaryRow>> StateStore::Summarize() {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "SELECT origin, severity, COUNT(*), SUM(count), MAX(time_ns) FROM events "
                         "GROUP BY origin, severity ORDER BY origin, severity;",
                         -1, &statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare summary"));
  }
  std::vector<EventSummaryRow> rows;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
    EventSummaryRow row;
    row.origin = ColumnText(statement, 0);
    row.severity = ParseSeverity(ColumnText(statement, 1)).value_or(Severity::kInfo);
    row.events = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 2));
    row.errors = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 3));
    row.last = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(sqlite3_column_int64(statement, 4))));
    rows.push_back(std::move(row));
  }
  const bool done = rc == SQLITE_DONE;
  sqlite3_finalize(statement);
  if (!done) return Fail(SqliteError("summarize events"));
  return rows;
}

Result<std::uint64_t> StateStore::EventRows() {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM events;", -1, &statement, nullptr) !=
      SQLITE_OK) {
    return Fail(SqliteError("prepare event count"));
  }
  std::uint64_t rows = 0;
  if (sqlite3_step(statement) == SQLITE_ROW)
    rows = static_cast<std::uint64_t>(sqlite3_column_int64(statement, 0));
  sqlite3_finalize(statement);
  return rows;
}

Result<std::uint64_t> StateStore::Prune(std::chrono::system_clock::time_point older_than,
                                        std::uint64_t max_events) {
  const auto cutoff =
      std::chrono::duration_cast<std::chrono::nanoseconds>(older_than.time_since_epoch()).count();
  const std::string by_age = fmt::format("DELETE FROM events WHERE time_ns < {};", cutoff);
  if (auto deleted = Exec(db_, by_age.c_str(), "prune old events"); !deleted)
    return Fail(deleted.error());
  std::uint64_t removed = static_cast<std::uint64_t>(sqlite3_changes(db_));
  // Ids grow with insertion: the oldest rows are the lowest ids.
  const std::string by_count = fmt::format(
      "DELETE FROM events WHERE id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET {});",
      max_events);
  if (auto deleted = Exec(db_, by_count.c_str(), "prune surplus events"); !deleted)
    return Fail(deleted.error());
  removed += static_cast<std::uint64_t>(sqlite3_changes(db_));
  return removed;
}

Status StateStore::SaveCursor(const SourceCursor& cursor) {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(
          db_,
          "INSERT INTO source_cursors(source, boot_id, position, updated_ns) VALUES (?, ?, ?, ?) "
          "ON CONFLICT(source) DO UPDATE SET boot_id = excluded.boot_id, position = "
          "excluded.position, "
          "updated_ns = excluded.updated_ns;",
          -1, &statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare cursor update"));
  }
  BindText(statement, 1, cursor.source);
  BindText(statement, 2, cursor.boot_id);
  BindText(statement, 3, cursor.position);
  sqlite3_bind_int64(statement, 4,
                     std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());
  const bool done = sqlite3_step(statement) == SQLITE_DONE;
  sqlite3_finalize(statement);
  if (!done) return Fail(SqliteError("save cursor"));
  return {};
}

Result<std::optional<SourceCursor>> StateStore::LoadCursor(std::string_view source) {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT boot_id, position FROM source_cursors WHERE source = ?;", -1,
                         &statement, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare cursor query"));
  }
  BindText(statement, 1, source);
  std::optional<SourceCursor> cursor;
  const int rc = sqlite3_step(statement);
  if (rc == SQLITE_ROW)
    cursor = SourceCursor{std::string(source), ColumnText(statement, 0), ColumnText(statement, 1)};
  sqlite3_finalize(statement);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Fail(SqliteError("load cursor"));
  return cursor;
}

Result<std::map<Severity, std::uint64_t>> StateStore::CountEventsBySeverity() {
  std::map<Severity, std::uint64_t> counts;
  for (Severity severity : kAllSeverities) counts[severity] = 0;
  sqlite3_reset(count_events_);
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(count_events_)) == SQLITE_ROW) {
    const auto* name = reinterpret_cast<const char*>(sqlite3_column_text(count_events_, 0));
    const auto severity = ParseSeverity(name != nullptr ? name : "");
    if (!severity) continue;  // written by a newer rasd with more classes; not ours to count
    counts[*severity] = static_cast<std::uint64_t>(sqlite3_column_int64(count_events_, 1));
  }
  if (rc != SQLITE_DONE) return Fail(SqliteError("count events"));
  return counts;
}

}  // namespace rasd::ras
