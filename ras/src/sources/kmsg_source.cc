#include "rasd/ras/kmsg_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace rasd::ras {
namespace {

// Wall-clock times of kernel timestamps (microseconds since boot), from one
// reading of the boot and wall clocks: a slice of a storm takes thousands of
// records, and two clock reads per record showed in its profile.
class KernelTimeToWall {
 public:
  explicit KernelTimeToWall(const common::Clock& clock)
      : now_(clock.Wall()), since_boot_(clock.SinceBoot()) {}

  std::chrono::system_clock::time_point Now() const { return now_; }

  std::chrono::system_clock::time_point operator()(std::uint64_t usec) const {
    const auto record_age = since_boot_ - std::chrono::microseconds(usec);
    if (record_age < std::chrono::nanoseconds(0)) return now_;  // a replayed log
    return now_ - std::chrono::duration_cast<std::chrono::system_clock::duration>(record_age);
  }

 private:
  std::chrono::system_clock::time_point now_;
  std::chrono::nanoseconds since_boot_{0};
};

}  // namespace

std::optional<KmsgRecord> DecodeKmsgRecord(std::string_view record) {
  KmsgRecord decoded;
  const std::size_t semicolon = record.find(';');
  if (semicolon == std::string_view::npos) return std::nullopt;
  std::string_view header = record.substr(0, semicolon);
  std::uint64_t fields[3] = {};
  for (auto& field : fields) {
    const std::size_t comma = header.find(',');
    if (comma == std::string_view::npos) return std::nullopt;
    auto value = ParseNumber(header.substr(0, comma));
    if (!value) return std::nullopt;
    field = *value;
    header.remove_prefix(comma + 1);
  }
  decoded.priority = static_cast<int>(fields[0]);
  decoded.sequence = fields[1];
  decoded.usec = fields[2];
  std::string_view text = record.substr(semicolon + 1);
  text = text.substr(0, text.find('\n'));  // dictionary lines follow
  decoded.text = text;
  return decoded;
}

KmsgSource::KmsgSource(const common::HostEnv& host, std::string boot_id,
                       std::optional<SourceCursor> resume, const CodeTable& codes)
    : host_(host), boot_id_(std::move(boot_id)), scanner_(codes) {
  scanner_.SetAnchoredLines(true);
  if (resume && resume->boot_id == boot_id_) {
    if (auto sequence = ParseNumber(resume->position)) resume_after_ = *sequence;
  }
  first_start_in_boot_ = !resume_after_;
}

Status KmsgSource::Open() {
  const auto path = host_.Resolve("/dev/kmsg");
  fd_.Reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd_) return Fail(ErrnoError("open " + path.string(), errno));
  struct stat st {};
  if (::fstat(fd_.Get(), &st) == 0) character_device_ = S_ISCHR(st.st_mode);
  return {};
}

void KmsgSource::Accept(std::string_view record) {
  if (record.empty() || record.front() == ' ') return;  // a dictionary line
  const auto decoded = DecodeKmsgRecord(record);
  if (!decoded) {
    scanner_.AddLine(record);  // plain text in a replay file
    return;
  }
  ++records_read_;
  if (resume_after_ && decoded->sequence <= *resume_after_) return;  // seen before the restart
  const std::uint64_t expected =
      last_sequence_ ? *last_sequence_ + 1 : resume_after_.value_or(0) + 1;
  if ((last_sequence_ || resume_after_) && decoded->sequence > expected) {
    const std::uint64_t lost = decoded->sequence - expected;
    lost_records_ += lost;
    RasEvent gap;
    gap.time = host_.GetClock().Wall();
    gap.source = std::string(kSourceName);
    gap.origin = "kmsg";
    gap.summary = fmt::format(
        "{} kernel log record(s) (sequence {} to {}) were overwritten before rasd read them", lost,
        expected, decoded->sequence - 1);
    gap_events_.push_back(std::move(gap));
    ++gaps_;
  }
  last_sequence_ = decoded->sequence;
  resume_after_.reset();
  if (character_device_ && (decoded->priority >> 3) != 0) {  // not the kernel's
    ++untrusted_records_;
    return;
  }
  // Positions are sequence + 1: the scanner reserves 0 for "none", and the
  // kernel's first record is sequence 0.
  scanner_.AddLine(decoded->text, decoded->usec, decoded->sequence + 1);
}

std::vector<RasEvent> KmsgSource::Poll(std::size_t max_lines) {
  std::size_t lines = 0;
  exhausted_ = false;
  // Lines already read but not taken yet (a previous Poll ran out of budget).
  auto take_buffered_lines = [&] {
    while (lines < max_lines) {
      const std::size_t newline = partial_.find('\n', partial_start_);
      if (newline == std::string::npos) break;
      Accept(std::string_view(partial_).substr(partial_start_, newline - partial_start_));
      partial_start_ = newline + 1;
      ++lines;
    }
    if (partial_start_ > 0 && (partial_start_ == partial_.size() || partial_start_ >= 1 << 16)) {
      partial_.erase(0, partial_start_);
      partial_start_ = 0;
    }
  };
  take_buffered_lines();
  char buffer[64 * 1024];
  while (lines < max_lines) {
    const std::size_t chunk_size = character_device_ ? 8192 : sizeof buffer;
    const ssize_t n = ::read(fd_.Get(), buffer, chunk_size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) continue;  // overwritten while we read: the sequence gap says how many
      exhausted_ = true;             // EAGAIN: all read
      break;
    }
    if (n == 0) {  // end of a regular file: follow it on the next poll
      exhausted_ = true;
      break;
    }
    const std::string_view chunk(buffer, static_cast<std::size_t>(n));
    if (character_device_) {
      Accept(chunk);  // one record per read
      ++lines;
      continue;
    }
    partial_.append(chunk);
    take_buffered_lines();
    if (partial_.size() - partial_start_ > 1 << 20 &&
        partial_.find('\n', partial_start_) == std::string::npos) {
      // A runaway line: drop it, never grow unbounded.
      partial_.clear();
      partial_start_ = 0;
    }
  }
  auto events = Collect();
  if (first_start_in_boot_ && exhausted_ && !ring_read_) {
    // The ring as found is read: what follows was logged while rasd ran.
    ring_read_ = true;
    ring_end_position_ = last_sequence_ ? *last_sequence_ + 1 : 0;
  }
  return events;
}

std::vector<RasEvent> KmsgSource::Flush() {
  scanner_.CloseOpenBlocks();
  auto events = Collect();
  std::vector<ScannedRecord>().swap(completed_);  // quiet now: give the storm's buffer back
  return events;
}

std::vector<RasEvent> KmsgSource::Collect() {
  std::vector<RasEvent> events = std::move(gap_events_);
  gap_events_.clear();
  scanner_.TakeCompleted(completed_);
  if (completed_.empty()) return events;
  events.reserve(events.size() + completed_.size());
  const KernelTimeToWall wall_time(host_.GetClock());
  for (auto& record : completed_) {
    const auto time = record.tag != 0 ? wall_time(record.tag) : wall_time.Now();
    const bool before_start =
        first_start_in_boot_ &&
        (!ring_read_ || (record.first_position != 0 && record.first_position <= ring_end_position_));
    events.push_back(EventFromRecord(std::move(record), std::string(kSourceName), time));
    if (before_start) {
      events.back().before_start = true;
      ++before_start_events_;
    }
  }
  completed_.clear();
  return events;
}

SourceCursor KmsgSource::Cursor() const {
  std::uint64_t done = last_sequence_ ? *last_sequence_ : resume_after_.value_or(0);
  // A record still open (a GHES block waiting for its next line) holds the
  // cursor before its first line, not the records after it: those are
  // taken and stored, and after a crash the block is read again whole.
  // (Sequence 0, the kernel's banner, can never be held back past.)
  if (const auto held = scanner_.OldestHeldPosition()) {
    const std::uint64_t oldest_held_sequence = *held - 1;
    done = std::min(done, oldest_held_sequence == 0 ? 0 : oldest_held_sequence - 1);
  }
  return SourceCursor{std::string(kSourceName), boot_id_, std::to_string(done)};
}

}  // namespace rasd::ras
