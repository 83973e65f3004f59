#pragma once

// Small text helpers for the kernel-log decoders (private to rasd::ras).

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rasd/ras/address.h"
#include "rasd/ras/log_line.h"

namespace rasd::ras::scan {

inline bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// dddd:bb:dd.f (4 or 5 domain digits, as VMD domains have).
inline bool IsPciBdf(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon != 4 && colon != 5) return false;
  if (text.size() != colon + 8) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i == colon || i == colon + 3) {
      if (c != ':') return false;
    } else if (i == colon + 6) {
      if (c != '.') return false;
    } else if (!IsHex(c)) {
      return false;
    }
  }
  return true;
}

// The word after `marker` in `text`, up to a space or one of `stops`.
inline std::string_view WordAfter(std::string_view text, std::string_view marker,
                                  std::string_view stops = " ,;)(") {
  const std::size_t at = text.find(marker);
  if (at == std::string_view::npos) return {};
  std::string_view rest = text.substr(at + marker.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  // Not find_first_of, which calls memchr over `stops` for every byte.
  auto is_stop = [stops](char c) {
    for (char stop : stops) {
      if (c == stop) return true;
    }
    return false;
  };
  std::size_t end = 0;
  while (end < rest.size() && !is_stop(rest[end])) ++end;
  return rest.substr(0, end);
}

inline std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "page:0x849923 offset:0x380" -> (page << 12) | offset, as EDAC prints it.
// Kernels before 3.5 print "page 0x849923, offset 0x380".
inline std::optional<Address> EdacPageOffsetAddress(std::string_view text) {
  std::string_view page = WordAfter(text, "page:0x");
  std::string_view offset = WordAfter(text, "offset:0x");
  if (page.empty() || offset.empty()) {
    page = WordAfter(text, "page 0x");
    offset = WordAfter(text, "offset 0x");
  }
  if (page.empty() || offset.empty()) return std::nullopt;
  const auto page_value = ParseNumber(page, 16);
  const auto offset_value = ParseNumber(offset, 16);
  if (!page_value || !offset_value) return std::nullopt;
  return Address::Of((*page_value << 12) | *offset_value);
}

}  // namespace rasd::ras::scan
