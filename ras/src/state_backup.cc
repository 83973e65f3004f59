// StateStore::StartBackup and StateBackup: an online copy of the state
// database through SQLite's backup API, renamed into place only when whole
// and checked.

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "rasd/common/unique_fd.h"
#include "rasd/ras/state_store.h"

namespace rasd::ras {
namespace {

// Pages per step when StateStore::Backup runs a backup to the end at once.
constexpr int kPagesPerStep = 1024;

Error CopyError(sqlite3* copy, std::string_view what, const std::filesystem::path& file) {
  return Error{ErrorCode::kIoError,
               fmt::format("{} {}: {}", what, file.string(), sqlite3_errmsg(copy))};
}

// fsync of a file or directory by path.
Status SyncPath(const std::filesystem::path& path, int flags) {
  common::UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd) return Fail(ErrnoError("open " + path.string(), errno));
  if (::fsync(fd.Get()) != 0) return Fail(ErrnoError("fsync " + path.string(), errno));
  return {};
}

void RemoveCopy(const std::filesystem::path& temporary) {
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) {
    ::unlink((temporary.string() + suffix).c_str());
  }
}

}  // namespace

Result<std::unique_ptr<StateBackup>> StateStore::StartBackup(
    const std::filesystem::path& destination, bool replace) {
  if (auto fault = ReadFaulted("backup")) return Fail(*fault);
  if (!destination.is_absolute() || !destination.has_filename()) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("backup destination '{}' is not an absolute path to a file",
                            destination.string()));
  }
  struct stat st {};
  if (!replace && ::lstat(destination.c_str(), &st) == 0) {
    return Fail(ErrorCode::kAlreadyExists,
                fmt::format("{} already exists; not replaced", destination.string()));
  }
  // mkstemp: O_EXCL, so that nobody's symlink in a shared directory is
  // followed (rasd runs as root).
  std::string pattern = (destination.parent_path() /
                         fmt::format(".{}.rasd-backup-XXXXXX", destination.filename().string()))
                            .string();
  common::UniqueFd fd(::mkstemp(pattern.data()));
  if (!fd) {
    return Fail(ErrnoError(
        fmt::format("cannot create the backup's temporary file in {}",
                    destination.parent_path().string()),
        errno));
  }
  const std::filesystem::path temporary = pattern;
  (void)::fchmod(fd.Get(), 0640);
  fd = common::UniqueFd();

  sqlite3* copy = nullptr;
  if (const int rc = sqlite3_open_v2(
          temporary.c_str(), &copy,
          SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
      rc != SQLITE_OK) {
    const std::string message = copy != nullptr ? sqlite3_errmsg(copy) : sqlite3_errstr(rc);
    sqlite3_close(copy);
    RemoveCopy(temporary);
    return Fail(ErrorCode::kIoError, fmt::format("cannot open {}: {}", temporary.string(), message));
  }
  sqlite3_backup* backup = sqlite3_backup_init(copy, "main", db_, "main");
  if (backup == nullptr) {
    const Error error = CopyError(copy, "cannot start a backup to", temporary);
    sqlite3_close(copy);
    RemoveCopy(temporary);
    return Fail(error);
  }
  return std::unique_ptr<StateBackup>(
      new StateBackup(destination, temporary, replace, copy, backup));
}

Result<BackupSummary> StateStore::Backup(const std::filesystem::path& destination, bool replace) {
  auto backup = StartBackup(destination, replace);
  if (!backup) return Fail(backup.error());
  for (;;) {
    auto done = (*backup)->Step(kPagesPerStep);
    if (!done) return Fail(done.error());
    if (*done) break;
  }
  return (*backup)->Finish();
}

StateBackup::StateBackup(std::filesystem::path destination, std::filesystem::path temporary,
                         bool replace, sqlite3* copy, sqlite3_backup* backup)
    : destination_(std::move(destination)),
      temporary_(std::move(temporary)),
      replace_(replace),
      copy_(copy),
      backup_(backup) {}

StateBackup::~StateBackup() { Abandon(); }

void StateBackup::Abandon() {
  if (backup_ != nullptr) sqlite3_backup_finish(backup_);
  backup_ = nullptr;
  if (copy_ != nullptr) {
    sqlite3_close(copy_);
    copy_ = nullptr;
    RemoveCopy(temporary_);
  }
}

int StateBackup::PagesCopied() const {
  if (backup_ == nullptr) return done_ ? pages_total_ : 0;
  return sqlite3_backup_pagecount(backup_) - sqlite3_backup_remaining(backup_);
}

int StateBackup::PagesTotal() const {
  return backup_ == nullptr ? pages_total_ : sqlite3_backup_pagecount(backup_);
}

Result<bool> StateBackup::Step(int pages) {
  if (backup_ == nullptr) {
    return Fail(ErrorCode::kInternal, "backup to " + destination_.string() + " is over");
  }
  if (done_) return true;
  const int rc = sqlite3_backup_step(backup_, pages < 1 ? 1 : pages);
  if (rc == SQLITE_DONE) {
    done_ = true;
    return true;
  }
  if (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return false;
  const Error error{ErrorCode::kIoError,
                    fmt::format("backup to {} failed: {}", temporary_.string(), sqlite3_errstr(rc))};
  Abandon();
  return Fail(error);
}

Status StateBackup::Detach() {
  if (!done_ || copy_ == nullptr) {
    return Fail(ErrorCode::kInternal,
                "backup to " + destination_.string() + " finished before every page was copied");
  }
  if (backup_ == nullptr) return {};
  pages_total_ = sqlite3_backup_pagecount(backup_);
  const int rc = sqlite3_backup_finish(backup_);
  backup_ = nullptr;
  if (rc != SQLITE_OK) {
    const Error error = CopyError(copy_, "backup to", temporary_);
    Abandon();
    return Fail(error);
  }
  return {};
}

Result<BackupSummary> StateBackup::Finish() {
  if (auto detached = Detach(); !detached) return Fail(detached.error());
  BackupSummary summary{destination_, 0, pages_total_};
  auto fail = [this](Error error) -> Result<BackupSummary> {
    Abandon();
    return Fail(std::move(error));
  };
  // One file that stands alone (no log beside it), and not in use: the live
  // database's in-use mark came along with its pages.
  char* message = nullptr;
  if (sqlite3_exec(copy_,
                   "PRAGMA journal_mode=DELETE; "
                   "UPDATE in_use SET running = 0, pid = 0 WHERE id = 1;",
                   nullptr, nullptr, &message) != SQLITE_OK) {
    Error error{ErrorCode::kIoError,
                fmt::format("finish the copy {}: {}", temporary_.string(),
                            message != nullptr ? message : sqlite3_errmsg(copy_))};
    sqlite3_free(message);
    return fail(std::move(error));
  }
  sqlite3_stmt* check = nullptr;
  std::string verdict = "no answer";
  if (sqlite3_prepare_v2(copy_, "PRAGMA quick_check(1);", -1, &check, nullptr) == SQLITE_OK &&
      sqlite3_step(check) == SQLITE_ROW) {
    const auto* text = sqlite3_column_text(check, 0);
    verdict = text != nullptr ? reinterpret_cast<const char*>(text) : "";
  } else {
    verdict = sqlite3_errmsg(copy_);
  }
  sqlite3_finalize(check);
  if (verdict != "ok") {
    return fail(Error{ErrorCode::kCorruptData,
                      fmt::format("the copy {} fails quick_check ({}); not kept",
                                  temporary_.string(), verdict)});
  }
  if (sqlite3_close(copy_) != SQLITE_OK) return fail(CopyError(copy_, "close", temporary_));
  copy_ = nullptr;
  auto remove_and_fail = [this](Error error) -> Result<BackupSummary> {
    RemoveCopy(temporary_);
    return Fail(std::move(error));
  };
  if (auto synced = SyncPath(temporary_, O_RDONLY); !synced) return remove_and_fail(synced.error());
  struct stat st {};
  if (::stat(temporary_.c_str(), &st) != 0) {
    return remove_and_fail(ErrnoError("stat " + temporary_.string(), errno));
  }
  summary.bytes = static_cast<std::uint64_t>(st.st_size);
  // Without `replace`, a destination that appeared meanwhile is not replaced
  // either: the refusal is the rename's own, atomic.
  const int renamed = replace_ ? ::rename(temporary_.c_str(), destination_.c_str())
                               : ::renameat2(AT_FDCWD, temporary_.c_str(), AT_FDCWD,
                                             destination_.c_str(), RENAME_NOREPLACE);
  if (renamed != 0) {
    const int error = errno;
    if (error == EEXIST) {
      return remove_and_fail(Error{
          ErrorCode::kAlreadyExists,
          fmt::format("{} already exists; not replaced", destination_.string())});
    }
    return remove_and_fail(ErrnoError(
        fmt::format("rename {} to {}", temporary_.string(), destination_.string()), error));
  }
  // The rename itself, durable.
  if (auto synced = SyncPath(destination_.parent_path(), O_RDONLY | O_DIRECTORY); !synced) {
    return Fail(synced.error());
  }
  return summary;
}

}  // namespace rasd::ras
