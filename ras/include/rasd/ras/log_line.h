#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace rasd::ras {

// One line of a saved or live kernel log with its publisher's prefixes
// removed: /dev/kmsg record headers, syslog and journal timestamps and host
// names, `kernel:`, dmesg `[ 1234.5678]` and `dmesg -T` stamps, grep
// `file:line:` prefixes, markdown quote markers, leading indentation.
struct LogLine {
  std::string_view raw;
  std::string_view text;  // the kernel's own message
  // Set when a prefix names the producer: a `rasdaemon[pid]:` journal tag,
  // or an Ascend black-box (`hisi_logs`/`kbox`) file.
  std::string_view producer;
};

// With `find_anchor`, a message that starts with none of the RAS words
// but carries one further on (a line cut mid-prefix, a tool's unknown
// prefix) is taken from that word; a live kernel record, which is the
// message itself, is split without it.
LogLine SplitLogLine(std::string_view raw, bool find_anchor = true);

// Helpers shared by the decoders. Inline: with a literal argument the
// compiler compares a known number of bytes instead of calling memcmp.
std::string_view TrimView(std::string_view text);
inline bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.starts_with(prefix);
}
inline bool Contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}
// Parses an unsigned number in `base` at the start of `text`; nullopt when
// there is no digit. Inline: decoders call it several times a line.
inline std::optional<unsigned long long> ParseNumber(std::string_view text, int base = 10) {
  unsigned long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

}  // namespace rasd::ras
