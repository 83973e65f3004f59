#include "rasd/ras/log_line.h"

#include <cctype>
#include <charconv>

namespace rasd::ras {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view SkipSpaces(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return text;
}

// "<digits>,<digits>,<digits>,<flags>;" as /dev/kmsg prints a record header.
bool StripKmsgHeader(std::string_view& text) {
  std::size_t i = 0;
  for (int field = 0; field < 3; ++field) {
    const std::size_t start = i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    if (i == start || i >= text.size() || text[i] != ',') return false;
    ++i;
  }
  const std::size_t semicolon = text.find(';', i);
  if (semicolon == std::string_view::npos || semicolon - i > 8) return false;
  text.remove_prefix(semicolon + 1);
  return true;
}

// "<6>" as printk levels appear in pstore dumps and raw printk text.
bool StripPrintkLevel(std::string_view& text) {
  if (text.size() < 3 || text.front() != '<') return false;
  std::size_t i = 1;
  while (i < text.size() && i < 5 && IsDigit(text[i])) ++i;
  if (i == 1 || i >= text.size() || text[i] != '>') return false;
  text.remove_prefix(i + 1);
  return true;
}

// "[ 1234.567890] " or "[Mon Jan 27 19:27:15 2020] " (any locale).
bool StripBracketStamp(std::string_view& text) {
  if (text.empty() || text.front() != '[') return false;
  const std::size_t close = text.find(']');
  if (close == std::string_view::npos || close > 40) return false;
  const std::string_view inside = TrimView(text.substr(1, close - 1));
  if (inside.empty()) return false;
  bool monotonic = true;
  bool dot = false;
  for (char c : inside) {
    if (c == '.') {
      dot = true;
    } else if (!IsDigit(c)) {
      monotonic = false;
    }
  }
  // dmesg -T ends in "HH:MM:SS YYYY".
  bool wall = inside.size() >= 13 && IsDigit(inside.back()) && inside[inside.size() - 5] == ' ' &&
              inside[inside.size() - 8] == ':' && inside[inside.size() - 11] == ':';
  if (!(monotonic && dot) && !wall) return false;
  text = SkipSpaces(text.substr(close + 1));
  return true;
}

// "Jun  9 16:21:24 " or "2019-08-19T04:18:38.274699-04:00 ", then an
// optional host name, then "kernel:" or "tag[pid]:".
bool StripSyslog(std::string_view& text, std::string_view& producer) {
  std::size_t i = 0;
  if (text.size() > 20 && IsDigit(text[0]) && text[4] == '-' && text[10] == 'T') {
    i = text.find(' ');
    if (i == std::string_view::npos) return false;
  } else if (text.size() > 15 && std::isupper(static_cast<unsigned char>(text[0])) &&
             std::islower(static_cast<unsigned char>(text[1])) &&
             std::islower(static_cast<unsigned char>(text[2])) && text[3] == ' ') {
    i = 4;
    while (i < text.size() && text[i] == ' ') ++i;
    const std::size_t day = i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    if (i == day || i - day > 2 || i + 9 > text.size() || text[i] != ' ') return false;
    ++i;
    if (!(IsDigit(text[i]) && IsDigit(text[i + 1]) && text[i + 2] == ':' && text[i + 5] == ':'))
      return false;
    i += 8;
  } else {
    return false;
  }
  std::string_view rest = SkipSpaces(text.substr(i));
  // Up to two tokens: [host] tag:
  for (int token = 0; token < 2; ++token) {
    const std::size_t end = rest.find(' ');
    const std::string_view word = rest.substr(0, end);
    if (!word.empty() && word.back() == ':') {
      const std::string_view tag = word.substr(0, word.find('['));
      if (tag != "kernel:" && tag != "kernel") producer = tag;
      text = SkipSpaces(end == std::string_view::npos ? std::string_view() : rest.substr(end));
      return true;
    }
    if (end == std::string_view::npos) break;
    rest = SkipSpaces(rest.substr(end));
  }
  return false;
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

}  // namespace

std::string_view TrimView(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

LogLine SplitLogLine(std::string_view raw) {
  LogLine line{raw, raw, {}};
  std::string_view text = raw;
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n')) text.remove_suffix(1);
  // Publishers stack prefixes in any order: peel until nothing changes.
  for (int round = 0; round < 6; ++round) {
    text = SkipSpaces(text);
    if (!text.empty() &&
        (text.front() == '>' || (text.size() > 1 && text[0] == '+' && text[1] == '>'))) {
      text.remove_prefix(text.front() == '+' ? 2 : 1);
      continue;
    }
    if (StripPrintkLevel(text) || StripKmsgHeader(text) || StripGrepPrefix(text, line.producer) ||
        StripBracketStamp(text) || StripSyslog(text, line.producer)) {
      continue;
    }
    if (StartsWith(text, "kernel: ")) {
      text.remove_prefix(8);
      continue;
    }
    break;
  }
  line.text = TrimView(text);
  return line;
}

}  // namespace rasd::ras
