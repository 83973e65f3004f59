#include "scan_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/log_line.h"

namespace rasd::ctl {
namespace {

// Parts scanned in parallel: large enough that starting a thread and
// re-synchronising at a boundary are lost in the scan, small enough that a
// window of them (one per thread) keeps memory at a few tens of MiB.
constexpr std::size_t kPartBytes = std::size_t{2} << 20;

std::string Detail(const ras::ScannedRecord& record) {
  std::string detail;
  auto add = [&detail](std::string_view part) {
    if (!detail.empty()) detail += ' ';
    detail += part;
  };
  if (record.xid) add(fmt::format("xid={}", *record.xid));
  if (record.pci_bdf) add(fmt::format("pci={}", *record.pci_bdf));
  if (record.mc) add(fmt::format("mc={}", *record.mc));
  if (record.address) add(fmt::format("addr={}", record.address->printed));
  if (record.count > 1) add(fmt::format("count={}", record.count));
  if (record.historical) add("previous-boot");
  return detail.empty() ? "-" : detail;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string LineTime(std::string_view raw_line) {
  const ras::LogLine line = ras::SplitLogLine(raw_line);
  std::string_view prefix =
      raw_line.substr(0, static_cast<std::size_t>(line.text.data() - raw_line.data()));
  while (!prefix.empty() &&
         (prefix.front() == ' ' || prefix.front() == '\t' || prefix.front() == '>'))
    prefix.remove_prefix(1);
  // "[ 1234.567890]" or "[Mon Jan 27 19:27:15 2020]": dmesg's own stamp.
  if (const std::size_t open = prefix.find('['); open != std::string_view::npos) {
    const std::size_t close = prefix.find(']', open);
    std::string_view inside = ras::TrimView(
        prefix.substr(open + 1, close == std::string_view::npos ? 0 : close - open - 1));
    if (!inside.empty() && (IsDigit(inside.front()) || IsDigit(inside.back()))) {
      // Not a "[pid]" of a syslog tag.
      if (inside.find_first_of(". :") != std::string_view::npos) return std::string(inside);
    }
  }
  // "6,1234,5678901,-;": a kmsg record's microseconds.
  {
    std::string_view rest = prefix;
    if (rest.starts_with("<")) rest.remove_prefix(std::min(rest.size(), rest.find('>') + 1));
    const std::size_t first = rest.find(',');
    const std::size_t second = first == std::string_view::npos ? first : rest.find(',', first + 1);
    const std::size_t third =
        second == std::string_view::npos ? second : rest.find(',', second + 1);
    if (third != std::string_view::npos && rest.find(';') != std::string_view::npos &&
        IsDigit(rest.front())) {
      if (auto usec = ras::ParseNumber(rest.substr(second + 1, third - second - 1))) {
        return fmt::format("{}.{:06}", *usec / 1'000'000, *usec % 1'000'000);
      }
    }
  }
  // "2019-08-19T04:18:38.274699-04:00 host kernel: ..."
  if (prefix.size() > 19 && IsDigit(prefix[0]) && prefix[4] == '-' && prefix[10] == 'T')
    return std::string(prefix.substr(0, prefix.find(' ')));
  // "Jun  9 16:21:24 host kernel: ..."
  if (prefix.size() >= 15 && std::isupper(static_cast<unsigned char>(prefix[0])) != 0 &&
      prefix[3] == ' ' && prefix[9] == ':' && prefix[12] == ':')
    return std::string(prefix.substr(0, 15));
  return "-";
}

int RunScan(const ScanOptions& options, std::ostream& out, std::ostream& err) {
  const bool standard_input = options.file == "-";
  const std::string name = standard_input ? "standard input" : options.file;
  auto cannot_read = [&](int error) {
    err << fmt::format("rasctl: scan: cannot read {}: {}\n", name, std::strerror(error));
    return 1;
  };
  Fd owned(standard_input ? -1 : ::open(options.file.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = standard_input ? 0 : owned.get();
  if (fd < 0) return cannot_read(errno);
  struct stat status {};
  if (::fstat(fd, &status) != 0) return cannot_read(errno);
  if (S_ISDIR(status.st_mode)) return cannot_read(EISDIR);
  const bool regular = S_ISREG(status.st_mode);
  if (regular) ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  // Where the output is a pipe, a larger one takes a window's records in a
  // few writes instead of a wake-up of the reader every 64 KiB, during
  // which no part is scanned. 1 MiB is what an unprivileged process may
  // ask for by default; a refusal changes nothing.
  if (&out == &std::cout) {
    struct stat output {};
    if (::fstat(STDOUT_FILENO, &output) == 0 && S_ISFIFO(output.st_mode))
      (void)::fcntl(STDOUT_FILENO, F_SETPIPE_SZ, 1 << 20);
  }

  // The scan allocates and frees a window's records over and over: keep
  // freed memory in the heap rather than handing it back to the kernel and
  // faulting it in again (a quarter of the run time otherwise).
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);

  unsigned threads = options.threads;
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1U, 8U);

  // Records are formatted on the scanning threads and printed as soon as
  // they are settled, so memory stays flat however long the log.
  auto format = [json = options.json](const ras::ScannedRecord& record, std::string& output) {
    if (json) {
      record.AppendJson(output);
      output += '\n';
      return;
    }
    std::string_view message = record.message;
    const bool cut = message.size() > 100;
    if (cut) message = message.substr(0, 97);
    fmt::format_to(std::back_inserter(output), "{:<15} {:<6} {:<15} {:<40} {}{}\n",
                   record.lines.empty() ? std::string("-") : LineTime(record.lines.front()),
                   ras::SeverityName(record.severity), record.origin, Detail(record), message,
                   cut ? "..." : "");
  };
  bool header = false;
  auto deliver = [&](std::string_view output) {
    if (!options.json && !header) {
      out << fmt::format("{:<15} {:<6} {:<15} {:<40} {}\n", "TIME", "CLASS", "ORIGIN", "DETAIL",
                         "MESSAGE");
      header = true;
    }
    out.write(output.data(), static_cast<std::streamsize>(output.size()));
  };

  // A regular file is read a window at a time (a part per thread) and
  // each window scanned in parallel; a pipe is scanned as its data comes.
  ras::ChunkedLogScanner scanner(threads, format, deliver);
  // Not a std::vector: its zero-filling would touch every page up front.
  std::size_t capacity = regular ? threads * kPartBytes : kPartBytes;
  auto buffer = std::make_unique_for_overwrite<char[]>(capacity);
  std::size_t filled = 0;
  while (true) {
    const ssize_t got = ::read(fd, buffer.get() + filled, capacity - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      return cannot_read(errno);
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
    if (regular && filled < capacity) continue;
    const std::string_view data(buffer.get(), filled);
    const std::size_t last_newline = data.rfind('\n');
    if (last_newline == std::string_view::npos) {
      if (filled == capacity) {  // one very long line
        auto larger = std::make_unique_for_overwrite<char[]>(capacity * 2);
        std::memcpy(larger.get(), buffer.get(), filled);
        buffer = std::move(larger);
        capacity *= 2;
      }
      continue;
    }
    scanner.Add(data.substr(0, last_newline + 1), kPartBytes);
    filled -= last_newline + 1;
    std::memmove(buffer.get(), buffer.get() + last_newline + 1, filled);
  }
  if (filled > 0) scanner.Add(std::string_view(buffer.get(), filled), kPartBytes);
  const ras::ChunkScanStats stats = scanner.Finish();
  if (options.json) {
    // Not on stdout: consumers read it as JSON lines.
    err << fmt::format("rasctl: scan: {} lines read, {} record(s)\n", stats.lines, stats.records);
    return 0;
  }
  out << fmt::format("\n{} record(s)", stats.records);
  if (stats.undecoded > 0) {
    out << fmt::format(", {} line(s) looked like RAS records but did not decode", stats.undecoded);
  }
  out << '\n';
  for (const auto& [key, count] : stats.by_origin) {
    out << fmt::format("  {:<15} {:<6} {}\n", key.first, ras::SeverityName(key.second), count);
  }
  out << fmt::format("{} lines read\n", stats.lines);
  return 0;
}

}  // namespace rasd::ctl
