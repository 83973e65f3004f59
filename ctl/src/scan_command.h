#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

namespace rasd::ctl {

struct ScanOptions {
  std::string file = "-";  // "-": standard input
  bool json = false;
  unsigned threads = 0;  // 0: one per CPU, at most 8
};

// `rasctl scan`: reads a saved kernel log and prints every RAS record
// recognised in it, INFO included: one JSON object per line with --json
// (the corpus field names; the "N lines read" summary goes to `err`, so
// that `out` holds nothing but records), else a table (time, class,
// origin, detail, message), a summary by origin and severity, and
// "N lines read". A regular file is scanned in parts in parallel, with the
// records a serial scan gives, in its order. Offline: no daemon involved.
// Returns the exit code: 0, or 1 when the log cannot be read (missing, no
// permission, a directory, a read error), with `cannot read FILE: why` on
// `err`.
int RunScan(const ScanOptions& options, std::ostream& out, std::ostream& err);

// The time stamp a kernel log line was printed with, as printed ("1234.567890"
// for dmesg's and kmsg's monotonic stamps, "Jun  9 16:21:24", an ISO time,
// dmesg -T's date); "-" where the line has none.
std::string LineTime(std::string_view raw_line);

}  // namespace rasd::ctl
