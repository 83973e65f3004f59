#include "tracefs_adapter.h"

#include <fmt/format.h>
#include <sys/epoll.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

TracefsAdapter::~TracefsAdapter() {
  watches_.clear();
  tracefs_.reset();  // removes the tracing instance
}

void TracefsAdapter::Start() {
  retry_ = context_.loop.CreateTimer([this] { Open(); });
  Open();
}

void TracefsAdapter::Open() {
  auto opened = ras::TracefsSource::Open(context_.host, context_.options.tracefs_instance,
                                         ras::TracefsSource::RasEvents());
  if (!opened) {
    // The kernel log still carries the same errors, in text. Another rasd
    // owning the instance is an operator's mistake worth a warning.
    const auto level =
        opened.error().code == ErrorCode::kUnavailable ? spdlog::level::warn : spdlog::level::info;
    if (!logged_missing_) {
      RASD_LOG(level, "tracefs source not used for now: {}", opened.error().message);
      logged_missing_ = true;
    }
    state_ = LookAgainLater(opened.error(), backoff_, *retry_);
    return;
  }
  tracefs_ = std::move(*opened);
  backoff_.Reset();
  for (std::size_t index = 0; index < tracefs_->CpuCount(); ++index) {
    auto watch = context_.loop.WatchFd(tracefs_->CpuFd(index), EPOLLIN,
                                       [this, index](std::uint32_t) { Read(index); });
    if (!watch) {
      RASD_LOG_WARN("tracefs source disabled: cannot poll cpu{}: {}", index, watch.error().message);
      state_ = {"failed", fmt::format("cannot poll cpu{}: {}", index, watch.error().message)};
      watches_.clear();
      tracefs_.reset();
      return;
    }
    watches_.push_back(std::move(*watch));
  }
  std::string events;
  for (const auto& name : tracefs_->Events()) events += (events.empty() ? "" : ", ") + name;
  // Events this kernel lacks are facts about the kernel, not faults: said
  // once, and in status.
  std::string absent;
  for (const auto& name : tracefs_->Absent()) absent += (absent.empty() ? "" : ", ") + name;
  RASD_LOG_INFO("tracefs source: {} ({} CPUs): {}{}{}", tracefs_->InstanceDir().string(),
                tracefs_->CpuCount(), events, absent.empty() ? "" : "; absent: ", absent);
  state_ = {"active", fmt::format("{}: {}{}{}", tracefs_->InstanceDir().string(), events,
                                  absent.empty() ? "" : "; absent: ", absent)};
}

void TracefsAdapter::Read(std::size_t cpu) {
  context_.deliver({.events = tracefs_->ReadEvents(cpu)});
}

void TracefsAdapter::AddTo(IngestStats& stats) const {
  stats.tracefs_active = tracefs_ != nullptr;
  if (!tracefs_) return;
  stats.tracefs_pages = tracefs_->GetStats().pages;
  stats.tracefs_events = tracefs_->GetStats().events;
}

}  // namespace rasd::daemon
