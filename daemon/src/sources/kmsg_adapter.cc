#include "kmsg_adapter.h"

#include <malloc.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

KmsgAdapter::~KmsgAdapter() { *alive_ = false; }

void KmsgAdapter::Start() {
  auto cursor = context_.store.LoadCursor(ras::KmsgSource::kSourceName);
  if (!cursor) {
    RASD_LOG_WARN("kmsg: cannot read the saved position ({}); reading the whole log",
                  cursor.error().message);
  }
  kmsg_ = std::make_unique<ras::KmsgSource>(context_.host, context_.boot_id,
                                            cursor ? *cursor : std::nullopt, context_.codes);
  if (auto opened = kmsg_->Open(); !opened) {
    RASD_LOG_WARN("kmsg source disabled: {}", opened.error().message);
    state_ = SourceFailure(opened.error());
    kmsg_.reset();
    return;
  }
  const std::string path = context_.host.Resolve("/dev/kmsg").string();
  if (kmsg_->IsCharacterDevice()) {
    auto watch = context_.loop.WatchFd(kmsg_->Fd(), EPOLLIN, [this](std::uint32_t) { Read(); });
    if (!watch) {
      RASD_LOG_WARN("kmsg source disabled: cannot poll it: {}", watch.error().message);
      state_ = {"failed", "cannot poll it: " + watch.error().message};
      kmsg_.reset();
      return;
    }
    watch_ = std::move(*watch);
  } else {
    FollowFile();
  }
  quiet_timer_ = context_.loop.CreateTimer([this] { OnQuiet(); });
  state_ = {"active", kmsg_->IsCharacterDevice() ? "the kernel's records from " + path
                                                 : "a file, followed as it grows: " + path};
  RASD_LOG_INFO("kmsg source: reading {}{}", path,
                kmsg_->IsCharacterDevice() ? "" : " (a file: followed as it grows)");
  Read();
}

void KmsgAdapter::FollowFile() {
  const auto path = context_.host.Resolve("/dev/kmsg");
  inotify_.Reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (inotify_ &&
      ::inotify_add_watch(inotify_.Get(), path.c_str(), IN_MODIFY | IN_CLOSE_WRITE) >= 0) {
    auto watch =
        context_.loop.WatchFd(inotify_.Get(), EPOLLIN, [this](std::uint32_t) { OnFileChanged(); });
    if (watch) {
      inotify_watch_ = std::move(*watch);
      return;
    }
  }
  inotify_.Reset();
  const auto period = context_.options.kmsg_file_poll;
  RASD_LOG_INFO("kmsg: {} cannot be watched; re-read every {} ms", path.string(), period.count());
  poll_timer_ = context_.loop.CreateTimer([this, period] {
    Read();
    poll_timer_->ArmAfter(period);
  });
  poll_timer_->ArmAfter(period);
}

void KmsgAdapter::OnFileChanged() {
  char buffer[4096];
  while (::read(inotify_.Get(), buffer, sizeof buffer) > 0) {
  }
  Read();
}

void KmsgAdapter::Read() {
  const std::uint64_t before = kmsg_->RecordsRead();
  context_.deliver({.events = kmsg_->Poll(kSlice)});
  records_since_trim_ += kmsg_->RecordsRead() - before;
  if (kmsg_->RecordsRead() != before) {
    // Records may be open (a GHES block waits for its next line): complete
    // them once the log has been quiet for a while.
    quiet_timer_->ArmAfter(context_.options.kmsg_quiet_flush);
  }
  if (kmsg_->Exhausted() && records_since_trim_ > kSlice) {
    // A storm is over: hand the memory its batches used back to the
    // system, so that RSS after a storm is what rasd needs idle.
    ::malloc_trim(0);
    records_since_trim_ = 0;
  }
  if (!kmsg_->Exhausted() && !continuation_posted_) {
    // More is there: the rest after whatever else is ready.
    continuation_posted_ = true;
    context_.loop.Post([this, alive = alive_] {
      if (!*alive) return;
      continuation_posted_ = false;
      Read();
    });
  }
}

void KmsgAdapter::OnQuiet() {
  // Nothing new for kmsg_quiet_flush: whatever is open is complete.
  context_.deliver({.events = kmsg_->Flush()});
}

std::optional<ras::SourceCursor> KmsgAdapter::Cursor() const {
  if (!kmsg_) return std::nullopt;
  return kmsg_->Cursor();
}

void KmsgAdapter::AddTo(IngestStats& stats) const {
  stats.kmsg_active = kmsg_ != nullptr;
  if (!kmsg_) return;
  stats.kmsg_records = kmsg_->RecordsRead();
  stats.kmsg_lost = kmsg_->LostRecords();
  stats.kmsg_untrusted = kmsg_->UntrustedRecords();
  stats.kmsg_before_start = kmsg_->BeforeStartEvents();
  stats.kmsg_gaps = kmsg_->Gaps();
  stats.kmsg_undecoded = kmsg_->UndecodedLines();
}

}  // namespace rasd::daemon
