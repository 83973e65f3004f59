#include "rasd/ras/state_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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
  if (sqlite3_prepare_v3(
          db_,
          "INSERT INTO events(time_ns, origin, severity, device, address, summary, raw) "
          "VALUES (?, ?, ?, ?, ?, ?, ?);",
          -1, SQLITE_PREPARE_PERSISTENT, &insert_event_, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare event insert"));
  }
  if (sqlite3_prepare_v3(db_, "SELECT severity, COUNT(*) FROM events GROUP BY severity;", -1,
                         SQLITE_PREPARE_PERSISTENT, &count_events_, nullptr) != SQLITE_OK) {
    return Fail(SqliteError("prepare event count"));
  }
  return {};
}

Result<std::int64_t> StateStore::RecordEvent(const RasEvent& event) {
  sqlite3_reset(insert_event_);
  sqlite3_clear_bindings(insert_event_);
  const auto time_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(event.time.time_since_epoch()).count();
  const std::string_view severity = SeverityName(event.severity);
  sqlite3_bind_int64(insert_event_, 1, time_ns);
  sqlite3_bind_text(insert_event_, 2, event.origin.data(), static_cast<int>(event.origin.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_text(insert_event_, 3, severity.data(), static_cast<int>(severity.size()),
                    SQLITE_STATIC);
  if (event.device) sqlite3_bind_int(insert_event_, 4, *event.device);
  // Addresses are 64-bit unsigned; SQLite stores the same bits as signed.
  if (event.address)
    sqlite3_bind_int64(insert_event_, 5, static_cast<sqlite3_int64>(*event.address));
  sqlite3_bind_text(insert_event_, 6, event.summary.data(), static_cast<int>(event.summary.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_text(insert_event_, 7, event.raw.data(), static_cast<int>(event.raw.size()),
                    SQLITE_TRANSIENT);
  if (sqlite3_step(insert_event_) != SQLITE_DONE) return Fail(SqliteError("record event"));
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db_));
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
