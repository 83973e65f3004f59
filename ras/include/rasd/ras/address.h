#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rasd::ras {

// A physical or device memory address a record carries. The value is parsed
// once, when the record is decoded, and everything that acts on the address
// (page retirement, the owner of poisoned memory, host page offline) uses
// it. `printed` is the text as the record printed it (zero padding and the
// NVIDIA driver's '_' separators kept, lower case, "0x" prefix): what people,
// `rasctl scan` and the event views see.
// The 4 KiB page an address lies in: the unit the page thresholds count
// and a storm-coalesced event's histogram keys on.
constexpr std::uint64_t kPageMask = ~std::uint64_t{0xfff};
constexpr std::uint64_t PageOf(std::uint64_t address) { return address & kPageMask; }

struct Address {
  std::uint64_t value = 0;
  std::string printed;

  // An address that was computed rather than printed (EDAC page + offset,
  // ras-mc-ctl's decimal, a binary record): printed as "0x" + lower-case hex.
  static Address Of(std::uint64_t value);

  // Two records name the same address when the values are equal, however
  // each printed it.
  friend bool operator==(const Address& a, const Address& b) { return a.value == b.value; }
};

// Hex as kernel and tool output print it: an optional 0x/0X prefix, hex
// digits, '_' separators; trailing '.' or ',' (the end of a sentence) are
// not part of it. nullopt for anything else, or for a value wider than 64
// bits.
std::optional<Address> ParsePrintedAddress(std::string_view text);

// "0x" and lower-case hex digits, as fmt's "0x{:x}" prints them.
std::string HexText(std::uint64_t value);

}  // namespace rasd::ras
