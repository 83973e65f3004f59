#include "rasd/ras/log_line.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>

namespace rasd::ras {
namespace {

// The prefixes peeled here follow their producers' output code rather than
// examples: util-linux dmesg's print_record (every --time-format, -H's
// "[May19 19:57]" and "[  +0.000127]", -d's "<delta>", -x's
// "kern  :err   : "), journalctl's output modes (short, short-iso,
// short-precise, short-full, short-unix, short-monotonic, verbose's
// MESSAGE=, json's "MESSAGE" field) whose dates strftime writes in the
// reader's locale, RFC 3164 and RFC 5424 syslog, and /dev/kmsg's record
// header. Month and weekday names are matched by shape, never by name, so
// that any language passes.

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
// The C locale's classes, without a call into the locale per byte.
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool IsAsciiUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsAsciiAlnum(char c) {
  return IsDigit(c) || IsAsciiUpper(c) || (c >= 'a' && c <= 'z');
}

std::string_view SkipSpaces(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return text;
}

std::string_view FirstToken(std::string_view text) {
  std::size_t end = 0;
  while (end < text.size() && text[end] != ' ' && text[end] != '\t') ++end;
  return text.substr(0, end);
}

// `text` after its first token and the blanks that follow it.
std::string_view AfterToken(std::string_view text) {
  return SkipSpaces(text.substr(FirstToken(text).size()));
}

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!IsDigit(c)) return false;
  }
  return true;
}

// "dddd:bb:dd.f" (4 or 5 domain digits).
bool IsBdf(std::string_view text) {
  const std::size_t colon = text.find(':');
  if ((colon != 4 && colon != 5) || text.size() != colon + 8) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool want_colon = i == colon || i == colon + 3;
    if (want_colon ? c != ':' : (i == colon + 6 ? c != '.' : !IsHexDigit(c)))
      return false;
  }
  return true;
}

// Words that begin a kernel RAS message: a line whose message starts with
// none of them but carries one further on had something unknown (or a cut
// stamp) in front of it.
constexpr std::array<std::string_view, 19> kAnchors = {
    "EDAC ",          "mce: ",      "[Hardware Error]",
    "NVRM: ",         "Memory failure: ", "MCE ",
    "BERT: ",         "ERST: ",     "HEST: ",
    "EINJ: ",         "GHES: ",     "HardwareCorrupted:",
    "[ascend]",       "[drv api]",  "sbridge: ",
    "CMCI storm",     "Hardware event. This is not a software error",
    "Memory failure:", "mce_notify_irq:"};

// "<driver> <bdf>: " as dev_printk prefixes a message (pcieport, amdgpu, nvme...).
bool StartsWithDeviceMessage(std::string_view text) {
  const std::string_view driver = FirstToken(text);
  if (driver.empty() || driver.back() == ':') return false;
  const std::string_view rest = SkipSpaces(text.substr(driver.size()));
  // "dddd:bb:dd.f:" (or a 5-digit domain): most lines fail here already.
  if (rest.size() < 13 || (rest[4] != ':' && rest[5] != ':')) return false;
  const std::string_view device = FirstToken(rest);
  return device.size() > 1 && device.back() == ':' && IsBdf(device.substr(0, device.size() - 1));
}

// "{12}[Hardware Error]" (a GHES record's id).
std::size_t EventIdLength(std::string_view text) {
  if (text.empty() || text.front() != '{') return 0;
  std::size_t i = 1;
  while (i < text.size() && i < 22 && IsDigit(text[i])) ++i;
  if (i == 1 || i >= text.size() || text[i] != '}') return 0;
  return i + 1;
}

// kAnchors by their first byte: a line is tested only against the anchors
// that can start where it does (most bytes start none), instead of 19
// comparisons at every position tried.
struct AnchorsByFirstByte {
  std::array<std::uint8_t, 256> count{};
  std::array<std::array<std::uint8_t, kAnchors.size()>, 256> index{};
};
constexpr AnchorsByFirstByte kAnchorsByFirstByte = [] {
  AnchorsByFirstByte table;
  for (std::size_t i = 0; i < kAnchors.size(); ++i) {
    const auto first = static_cast<unsigned char>(kAnchors[i].front());
    table.index[first][table.count[first]++] = static_cast<std::uint8_t>(i);
  }
  return table;
}();

// The anchor that starts `text`, or an empty view.
std::string_view AnchorAtStart(std::string_view text) {
  if (text.empty()) return {};
  const auto first = static_cast<unsigned char>(text.front());
  for (std::uint8_t i = 0; i < kAnchorsByFirstByte.count[first]; ++i) {
    const std::string_view anchor = kAnchors[kAnchorsByFirstByte.index[first][i]];
    // The second byte first: a dmesg stamp's "[ " starts three anchors'
    // first byte and none's second, and no memcmp is called for it.
    if (text.size() >= anchor.size() && text[1] == anchor[1] && text.starts_with(anchor))
      return anchor;
  }
  return {};
}

bool StartsWithAnchor(std::string_view text) {
  if (!AnchorAtStart(text).empty()) return true;
  const std::size_t id = EventIdLength(text);
  if (id != 0 && text.substr(id).starts_with("[Hardware Error]")) return true;
  return StartsWithDeviceMessage(text);
}

// StartsWithAnchor with its last answer kept: the peeling steps ask it of
// the same text more than once (a step before stripping a tag, then the
// next round), a quarter of a line's split otherwise.
class AnchorTest {
 public:
  bool operator()(std::string_view text) {
    if (text.data() != data_ || text.size() != size_) {
      data_ = text.data();
      size_ = text.size();
      anchored_ = StartsWithAnchor(text);
    }
    return anchored_;
  }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
  bool anchored_ = false;
};

// "<digits>,<digits>,<digits>,<flags>;" as /dev/kmsg prints a record header
// (flags may carry ",caller=T123").
bool StripKmsgHeader(std::string_view& text) {
  std::size_t i = 0;
  for (int field = 0; field < 3; ++field) {
    const std::size_t start = i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    if (i == start || i >= text.size() || text[i] != ',') return false;
    ++i;
  }
  const std::size_t semicolon = text.find(';', i);
  if (semicolon == std::string_view::npos || semicolon - i > 32) return false;
  text.remove_prefix(semicolon + 1);
  return true;
}

// "<6>" as printk levels appear in pstore dumps, raw printk text and syslog.
bool StripPrintkLevel(std::string_view& text) {
  if (text.size() < 3 || text.front() != '<') return false;
  std::size_t i = 1;
  while (i < text.size() && i < 5 && IsDigit(text[i])) ++i;
  if (i == 1 || i >= text.size() || text[i] != '>') return false;
  text.remove_prefix(i + 1);
  return true;
}

// "HH:MM" or "HH:MM:SS" ending `text` (dmesg -H writes the minute only).
bool EndsWithClock(std::string_view text) {
  auto pair_at = [&](std::size_t from_end) {
    return text.size() >= from_end && IsDigit(text[text.size() - from_end]) &&
           IsDigit(text[text.size() - from_end + 1]);
  };
  if (!pair_at(2) || !pair_at(5) || text.size() < 5 || text[text.size() - 3] != ':') return false;
  if (text.size() >= 8 && text[text.size() - 6] == ':') return pair_at(8);
  return true;
}

// "[ 1234.567890]", "[  +0.000127]", "[<    0.000127>]", "[ 12.3 <  0.1>]",
// "[Mon Jan 27 19:27:15 2020]", "[May19 19:57]", in any locale.
bool StripBracketStamp(std::string_view& text) {
  if (text.empty() || text.front() != '[') return false;
  const std::size_t close = text.find(']');
  if (close == std::string_view::npos || close > 48) return false;
  const std::string_view inside = TrimView(text.substr(1, close - 1));
  if (inside.empty()) return false;
  bool monotonic = true, digit = false, dot = false;
  for (char c : inside) {
    if (IsDigit(c)) {
      digit = true;
    } else if (c == '.') {
      dot = true;
    } else if (c != ' ' && c != '<' && c != '>' && c != '+' && c != '-') {
      monotonic = false;
    }
  }
  std::string_view clock = inside;
  if (clock.size() > 5 && clock[clock.size() - 5] == ' ' && AllDigits(clock.substr(clock.size() - 4)))
    clock.remove_suffix(5);  // ctime's year
  const bool wall = clock.size() > 5 && EndsWithClock(clock) && clock.find(' ') != std::string_view::npos;
  if (!(monotonic && digit && dot) && !wall) return false;
  text = SkipSpaces(text.substr(close + 1));
  return true;
}

// CONFIG_PRINTK_CALLER's "[ T8357]" or "[    C3]" (kernel/printk/printk.c
// info_print_prefix: the task id or the CPU, right-aligned in six places).
bool StripCallerId(std::string_view& text) {
  if (text.size() < 4 || text.front() != '[') return false;
  const std::size_t close = text.find(']');
  if (close == std::string_view::npos || close > 12) return false;
  const std::string_view inside = TrimView(text.substr(1, close - 1));
  if (inside.size() < 2 || (inside.front() != 'T' && inside.front() != 'C') ||
      !AllDigits(inside.substr(1)))
    return false;
  text = SkipSpaces(text.substr(close + 1));
  return true;
}

// A prefix cut off mid-stamp: "3.456789] ", "+0.000127] ", "] ".
bool StripCutStamp(std::string_view& text) {
  std::size_t i = 0;
  while (i < text.size() && i < 20 &&
         (IsDigit(text[i]) || text[i] == '.' || text[i] == ' ' || text[i] == '+' ||
          text[i] == '<' || text[i] == '>')) {
    ++i;
  }
  if (i >= text.size() || text[i] != ']' || i + 1 >= text.size() || text[i + 1] != ' ') return false;
  text = SkipSpaces(text.substr(i + 1));
  return true;
}

// dmesg -x: "kern  :err   : ".
bool StripDmesgDecode(std::string_view& text) {
  static constexpr std::array<std::string_view, 12> kFacilities = {
      "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
      "authpriv", "ftp"};
  static constexpr std::array<std::string_view, 8> kLevels = {
      "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"};
  // Every facility is a lower-case word.
  if (text.empty() || text.front() < 'a' || text.front() > 'z') return false;
  const std::size_t first = text.find(':');
  if (first == std::string_view::npos || first > 10) return false;
  const std::string_view facility = TrimView(text.substr(0, first));
  const std::size_t second = text.find(':', first + 1);
  if (second == std::string_view::npos || second - first > 8) return false;
  const std::string_view level = TrimView(text.substr(first + 1, second - first - 1));
  const bool known_facility =
      std::find(kFacilities.begin(), kFacilities.end(), facility) != kFacilities.end() ||
      (facility.starts_with("local") && facility.size() == 6);
  if (!known_facility || std::find(kLevels.begin(), kLevels.end(), level) == kLevels.end())
    return false;
  text = SkipSpaces(text.substr(second + 1));
  return true;
}

// "kernel:", "rasdaemon[12671]:": a syslog tag.
bool IsTag(std::string_view token) {
  if (token.size() < 2 || token.back() != ':') return false;
  token.remove_suffix(1);
  if (token.back() == ']') {
    const std::size_t open = token.rfind('[');
    if (open == std::string_view::npos || open == 0 ||
        !AllDigits(token.substr(open + 1, token.size() - open - 2)))
      return false;
    token = token.substr(0, open);
  }
  for (char c : token) {
    if (!IsAsciiAlnum(c) && c != '_' && c != '-' && c != '.' && c != '/' && c != '@') return false;
  }
  return true;
}

std::string_view TagName(std::string_view tag) {
  tag.remove_suffix(1);
  return tag.substr(0, tag.find('['));
}

// "host tag:" or "tag:" after a syslog or journal stamp. With
// `kernel_only`, after a dmesg-style stamp, only the kernel's own tag.
bool StripHostTag(std::string_view& text, std::string_view& producer, bool kernel_only,
                  AnchorTest& starts_with_anchor) {
  if (starts_with_anchor(text)) return false;
  const std::string_view first = FirstToken(text);
  std::string_view tag;
  std::string_view rest;
  if (IsTag(first)) {
    tag = first;
    rest = AfterToken(text);
  } else {
    const std::string_view second = FirstToken(AfterToken(text));
    if (!IsTag(second) || first.find(':') != std::string_view::npos) return false;
    tag = second;
    rest = AfterToken(AfterToken(text));
  }
  const std::string_view name = TagName(tag);
  if (kernel_only && name != "kernel" && tag.find('[') == std::string_view::npos) return false;
  if (name != "kernel") producer = name;
  text = rest;
  return true;
}

// "16:21:24", "16:21:24.123456", "04:18:38.274699-04:00", "16:21:24+0200".
bool IsClockToken(std::string_view token) {
  if (token.size() < 8 || !IsDigit(token[0]) || !IsDigit(token[1]) || token[2] != ':' ||
      !IsDigit(token[3]) || !IsDigit(token[4]) || token[5] != ':' || !IsDigit(token[6]) ||
      !IsDigit(token[7]))
    return false;
  for (char c : token.substr(8)) {
    if (!IsDigit(c) && c != '.' && c != ',' && c != ':' && c != '+' && c != '-' && c != 'Z')
      return false;
  }
  return true;
}

// "2024-06-09".
bool IsIsoDate(std::string_view token) {
  return token.size() == 10 && AllDigits(token.substr(0, 4)) && token[4] == '-' &&
         AllDigits(token.substr(5, 2)) && token[7] == '-' && AllDigits(token.substr(8, 2));
}

// A month or weekday name in any language ("Jun", "juin", "févr.", "июн",
// "6月"), or what is left of one cut at the start of the line.
bool IsNameToken(std::string_view token) {
  if (token.empty() || token.size() > 16 || AllDigits(token)) return false;
  for (char c : token) {
    if (c == ':' || c == '[' || c == ']' || c == '=' || c == '(' || c == '<') return false;
  }
  return true;
}

bool IsDayToken(std::string_view token) {
  return (token.size() == 1 || token.size() == 2) && AllDigits(token);
}

// Syslog and journal dates: "Jun  9 16:21:24", "июн 09 16:21:24.123456",
// "Sun 2024-06-09 16:21:24 CEST", "2019-08-19T04:18:38.274699-04:00",
// "2024-05-19T19:57:01,123456+00:00" (dmesg --time-format iso),
// "1717942884.123456" (short-unix); then the host and tag if present.
// Whether an "HH:MM:SS" starts within the first bytes of `text`, where
// StripWallStamp's forms have their clock (after at most three tokens of
// up to 16 bytes): most lines it is asked about have none, and are turned
// away before their tokens are taken apart.
bool ClockNearStart(std::string_view text) {
  constexpr std::size_t kClockWithin = 96;
  const std::size_t limit = std::min(text.size(), kClockWithin);
  for (std::size_t colon = text.find(':', 2); colon < limit; colon = text.find(':', colon + 1)) {
    if (colon + 5 < text.size() && IsDigit(text[colon - 2]) && IsDigit(text[colon - 1]) &&
        IsDigit(text[colon + 1]) && IsDigit(text[colon + 2]) && text[colon + 3] == ':')
      return true;
  }
  return false;
}

bool StripWallStamp(std::string_view& text, std::string_view& producer,
                    AnchorTest& starts_with_anchor) {
  // No clock: only short-unix ("1717942884.123456 host tag:") may be here.
  if (text.empty() || (!IsDigit(text.front()) && !ClockNearStart(text))) return false;
  std::array<std::string_view, 4> tokens{};
  std::string_view rest = text;
  std::size_t count = 0;
  bool found = false;
  for (; count < tokens.size() && !rest.empty(); ++count) {
    const std::string_view token = FirstToken(rest);
    tokens[count] = token;
    rest = AfterToken(rest);
    const std::size_t t = token.find('T');
    if (IsClockToken(token) || (t == 10 && IsIsoDate(token.substr(0, 10)) && IsClockToken(token.substr(11)))) {
      found = true;
      break;
    }
  }
  if (!found) {
    // short-unix: seconds since the epoch with microseconds.
    const std::string_view first = FirstToken(text);
    const std::size_t dot = first.find('.');
    if (dot < 9 || dot == std::string_view::npos || !AllDigits(first.substr(0, dot)) ||
        !AllDigits(first.substr(dot + 1)))
      return false;
    rest = AfterToken(text);
    if (!StripHostTag(rest, producer, false, starts_with_anchor)) return false;
    text = rest;
    return true;
  }
  const std::size_t before = count;  // tokens before the clock
  const bool iso_joined = tokens[count].find('T') == 10;
  if (iso_joined) {
    if (before != 0) return false;
  } else if (before == 0 || before > 3) {
    return false;
  } else if (IsIsoDate(tokens[before - 1])) {
    if (before == 2 && !IsNameToken(tokens[0])) return false;
    if (before == 3) return false;
  } else {
    // [weekday] month day
    if (before < 2 || !IsDayToken(tokens[before - 1]) || !IsNameToken(tokens[before - 2]))
      return false;
    if (before == 3 && !IsNameToken(tokens[0])) return false;
  }
  // A time zone or a year after the clock, unless the message begins there.
  for (int extra = 0; extra < 2 && !rest.empty() && !starts_with_anchor(rest); ++extra) {
    const std::string_view token = FirstToken(rest);
    const bool zone = token.size() >= 2 && token.size() <= 5 &&
                      std::all_of(token.begin(), token.end(), IsAsciiUpper) &&
                      FirstToken(AfterToken(rest)).size() > 0 && IsTag(FirstToken(AfterToken(AfterToken(rest))));
    const bool offset = (token.size() == 5 || token.size() == 6) && (token[0] == '+' || token[0] == '-') &&
                        IsDigit(token[1]);
    const bool year = token.size() == 4 && AllDigits(token);
    if (!zone && !offset && !year) break;
    rest = AfterToken(rest);
  }
  StripHostTag(rest, producer, false, starts_with_anchor);
  text = rest;
  return true;
}

// RFC 5424 after its "<PRI>": "1 2024-06-09T16:21:24.123Z host app procid msgid - msg".
bool StripRfc5424(std::string_view& text, std::string_view& producer) {
  if (!text.starts_with("1 ")) return false;
  std::string_view rest = text.substr(2);
  const std::string_view stamp = FirstToken(rest);
  if (stamp.size() < 19 || !IsIsoDate(stamp.substr(0, 10)) || stamp[10] != 'T') return false;
  rest = AfterToken(rest);
  const std::string_view host = FirstToken(rest);
  rest = AfterToken(rest);
  const std::string_view app = FirstToken(rest);
  rest = AfterToken(AfterToken(AfterToken(rest)));  // app, procid, msgid
  if (host.empty() || app.empty()) return false;
  if (rest.starts_with("- ")) {
    rest.remove_prefix(2);
  } else if (rest.starts_with("[")) {
    const std::size_t close = rest.find("] ");
    if (close == std::string_view::npos) return false;
    rest.remove_prefix(close + 2);
  }
  if (app != "kernel") producer = app;
  text = rest;
  return true;
}

// talosctl dmesg: "<node>: kern: warning: [2026-04-22T21:27:51.291660856Z]: msg".
bool StripTalosPrefix(std::string_view& text) {
  const std::string_view node = FirstToken(text);
  if (node.size() < 2 || node.back() != ':') return false;
  std::string_view rest = AfterToken(text);
  const std::string_view facility = FirstToken(rest);
  if (facility != "kern:" && facility != "user:" && facility != "daemon:") return false;
  rest = AfterToken(rest);
  static constexpr std::string_view kLevels[] = {
      "emerg:", "alert:", "crit:", "err:", "warning:", "notice:", "info:", "debug:"};
  const std::string_view level = FirstToken(rest);
  if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) return false;
  rest = AfterToken(rest);
  if (!rest.starts_with("[")) return false;
  const std::size_t close = rest.find("]: ");
  if (close == std::string_view::npos || close > 40) return false;
  text = rest.substr(close + 3);
  return true;
}

// "/hisi_logs/device-2/.../kbox.txt:2014[2454.830692] ..." as grep -n prints.
bool StripGrepPrefix(std::string_view& text, std::string_view& producer) {
  if (text.empty() || text.front() != '/') return false;
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos || text.substr(0, colon).find(' ') != std::string_view::npos)
    return false;
  std::size_t i = colon + 1;
  const std::size_t digits = i;
  while (i < text.size() && IsDigit(text[i])) ++i;
  // "file:12:text" (grep -n) or "file:12[stamp] text"; a sysfs dump's
  // "path:value" ends after the number and is not a prefix.
  if (i == digits || i >= text.size() || (text[i] != ':' && text[i] != '[')) return false;
  const std::string_view path = text.substr(0, colon);
  if (Contains(path, "hisi_logs") || Contains(path, "kbox")) producer = "ascend";
  if (i < text.size() && text[i] == ':') ++i;
  text = text.substr(i);
  return true;
}

// journalctl -o verbose / export: "MESSAGE=..."; -o json: {..."MESSAGE":"..."...}
// (escapes stay as written: kernel RAS messages have none that matter).
bool StripJournalField(std::string_view& text) {
  if (text.starts_with("MESSAGE=")) {
    text.remove_prefix(8);
    return true;
  }
  if (text.empty() || text.front() != '{') return false;
  const std::size_t at = text.find("\"MESSAGE\":\"");
  if (at == std::string_view::npos) return false;
  std::string_view value = text.substr(at + 11);
  std::size_t end = 0;
  while (end < value.size() && !(value[end] == '"' && (end == 0 || value[end - 1] != '\\'))) ++end;
  text = value.substr(0, end);
  return true;
}

// "mcelog: ", "rasdaemon[832]: ": a known producer's tag with no stamp in
// front (journalctl -o cat keeps none; a pasted excerpt may keep the tag).
bool StripProducerTag(std::string_view& text, std::string_view& producer) {
  std::string_view first = FirstToken(text);
  std::string_view rest = AfterToken(text);
  if (!IsTag(first)) {
    // "localhost kernel: ..." (a syslogd wall banner's line has no date).
    if (first.find(':') != std::string_view::npos) return false;
    first = FirstToken(rest);
    rest = AfterToken(rest);
    if (!IsTag(first)) return false;
  }
  const std::string_view name = TagName(first);
  if (name != "mcelog" && name != "rasdaemon" && name != "kernel") return false;
  if (name != "kernel") producer = name;
  text = rest;
  return true;
}

// What a cut line kept of "kernel: ": "rnel: ", "el: ".
bool StripCutKernelTag(std::string_view& text) {
  constexpr std::string_view kTag = "kernel:";
  const std::string_view first = FirstToken(text);
  if (first.size() < 2 || first.size() >= kTag.size() || !kTag.ends_with(first)) return false;
  text = AfterToken(text);
  return true;
}

// The message moved to the first anchor when something unrecognised (a cut
// line, a tool's prefix) stands in front of it.
std::string_view RebaseToAnchor(std::string_view text, AnchorTest& starts_with_anchor) {
  // Report rows (rasdaemon, ras-mc-ctl, sysfs values) begin with a number.
  if (text.empty() || IsDigit(text.front()) || starts_with_anchor(text)) return text;
  constexpr std::size_t kMaxPrefix = 120;
  // The first position where an anchor starts (one pass, whatever the
  // number of anchors).
  std::size_t best = std::string_view::npos;
  const std::size_t last = std::min(text.size(), kMaxPrefix + 1);
  for (std::size_t at = 1; at < last; ++at) {
    if (kAnchorsByFirstByte.count[static_cast<unsigned char>(text[at])] == 0) continue;
    const std::string_view anchor = AnchorAtStart(text.substr(at));
    if (anchor.empty()) continue;
    best = at;
    if (anchor == "[Hardware Error]") {
      // Keep a "{N}" id in front of it (only digits and braces lie between,
      // where no anchor starts).
      const std::size_t open = text.rfind('{', at);
      if (open != std::string_view::npos && EventIdLength(text.substr(open)) == at - open)
        best = open;
    }
    break;
  }
  // "<driver> <bdf>: ".
  for (std::size_t colon = text.find(": "); colon != std::string_view::npos && colon <= kMaxPrefix;
       colon = text.find(": ", colon + 1)) {
    if (colon < 12) continue;
    const std::size_t bdf_start = text.rfind(' ', colon);
    if (bdf_start == std::string_view::npos || bdf_start == 0) continue;
    if (!IsBdf(text.substr(bdf_start + 1, colon - bdf_start - 1))) continue;
    const std::size_t driver_start = text.rfind(' ', bdf_start - 1);
    const std::size_t at = driver_start == std::string_view::npos ? 0 : driver_start + 1;
    best = std::min(best, at);
    break;
  }
  if (best == std::string_view::npos || best == 0) return text;
  // Saved logs only: nothing acts on them. A live record is split without
  // this step, so that words a message quotes are never taken for a record.
  if (IsAsciiAlnum(text[best - 1])) return text;  // the anchor is inside a word
  return text.substr(best);
}

}  // namespace

std::string_view TrimView(std::string_view text) {
  while (!text.empty() && IsSpace(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back()))
    text.remove_suffix(1);
  return text;
}

LogLine SplitLogLine(std::string_view raw, bool find_anchor) {
  LogLine line{raw, raw, {}};
  AnchorTest starts_with_anchor;
  std::string_view text = raw;
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n')) text.remove_suffix(1);
  // Publishers stack prefixes in any order: peel until nothing changes.
  for (int round = 0; round < 8; ++round) {
    text = SkipSpaces(text);
    if (!text.empty() &&
        (text.front() == '>' || (text.size() > 1 && text[0] == '+' && text[1] == '>'))) {
      text.remove_prefix(text.front() == '+' ? 2 : 1);
      continue;
    }
    if (starts_with_anchor(text)) break;
    if (StripPrintkLevel(text)) {
      StripRfc5424(text, line.producer);
      continue;
    }
    if (StripKmsgHeader(text) || StripGrepPrefix(text, line.producer) || StripJournalField(text) ||
        StripDmesgDecode(text) || StripTalosPrefix(text) || StripCallerId(text)) {
      continue;
    }
    if (StripBracketStamp(text)) {
      StripCallerId(text);
      StripHostTag(text, line.producer, /*kernel_only=*/true, starts_with_anchor);
      continue;
    }
    if (StripWallStamp(text, line.producer, starts_with_anchor) || StripCutStamp(text)) continue;
    // The tag once: "rasdaemon[1]: rasdaemon: ..." keeps the message's own word.
    if (line.producer.empty() && StripProducerTag(text, line.producer)) continue;
    if (round == 0 && StripCutKernelTag(text)) continue;
    break;
  }
  line.text = TrimView(text);
  if (find_anchor) line.text = RebaseToAnchor(line.text, starts_with_anchor);
  return line;
}

}  // namespace rasd::ras
