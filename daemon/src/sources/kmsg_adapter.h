#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ras_source.h"
#include "rasd/common/unique_fd.h"
#include "rasd/ras/kmsg_source.h"

namespace rasd::daemon {

// The kernel log (/dev/kmsg, from the saved position on). The character
// device wakes the loop when a record arrives; a regular file (replays,
// tests) is followed by inotify, else by a poll timer. Under a storm the
// log is taken in slices of kSlice records: the rest waits behind whatever
// else is ready on the loop (the control socket first of all). Records that
// may still be open (a GHES block waiting for its next line) are completed
// once the log has been quiet for ras.kmsg_quiet_flush_ms.
class KmsgAdapter final : public RasSource {
 public:
  static constexpr std::size_t kSlice = 4096;

  explicit KmsgAdapter(SourceContext& context) : context_(context) {}
  ~KmsgAdapter() override;

  std::string_view Name() const override { return "kmsg"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override;

  // The position after every record read so far; unset while not open.
  std::optional<ras::SourceCursor> Cursor() const;

 private:
  void FollowFile();
  void Read();
  void OnQuiet();
  void OnFileChanged();

  SourceContext& context_;
  SourceState state_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<ras::KmsgSource> kmsg_;
  std::unique_ptr<common::FdWatch> watch_;
  common::UniqueFd inotify_;
  std::unique_ptr<common::FdWatch> inotify_watch_;
  std::unique_ptr<common::Timer> poll_timer_;   // only where nothing can watch the file
  std::unique_ptr<common::Timer> quiet_timer_;  // armed while records may be open
  bool continuation_posted_ = false;
  std::uint64_t records_since_trim_ = 0;
};

}  // namespace rasd::daemon
