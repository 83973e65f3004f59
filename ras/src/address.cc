#include "rasd/ras/address.h"

#include <cctype>
#include <charconv>

namespace rasd::ras {

std::string HexText(std::uint64_t value) {
  char digits[16];
  const auto end = std::to_chars(digits, digits + sizeof digits, value, 16).ptr;
  std::string text = "0x";
  text.append(digits, end);
  return text;
}

Address Address::Of(std::uint64_t value) { return Address{value, HexText(value)}; }

std::optional<Address> ParsePrintedAddress(std::string_view text) {
  while (!text.empty() && (text.back() == '.' || text.back() == ',')) text.remove_suffix(1);
  std::string_view digits = text;
  if (digits.starts_with("0x") || digits.starts_with("0X")) digits.remove_prefix(2);
  Address address;
  address.printed.reserve(digits.size() + 2);
  address.printed = "0x";
  bool any_digit = false;
  bool wide = false;
  for (const char c : digits) {
    if (c == '_') {
      address.printed += c;
      continue;
    }
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    const auto lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::uint64_t digit =
        static_cast<std::uint64_t>(lower <= '9' ? lower - '0' : lower - 'a' + 10);
    // Leading zeros never overflow; a 17th significant digit does.
    if (address.value >> 60 != 0) wide = true;
    address.value = address.value << 4 | digit;
    address.printed += lower;
    any_digit = true;
  }
  if (!any_digit || wide) return std::nullopt;
  return address;
}

}  // namespace rasd::ras
