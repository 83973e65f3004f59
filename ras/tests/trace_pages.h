#pragma once

// Raw ring-buffer pages and RAS tracepoint records laid out as kernel 6.18
// writes them (see tests/fixtures/tracefs for the format files).

#include <cstring>
#include <string>
#include <vector>

#include "byte_writer.h"

namespace rasd::ras::testing {

inline void PutString(Bytes& record, std::size_t loc_offset, std::size_t at,
                      const std::string& text) {
  const auto length = static_cast<std::uint32_t>(text.size() + 1);
  Put<std::uint32_t>(record, loc_offset, (length << 16) | static_cast<std::uint32_t>(at));
  if (record.size() < at + length) record.resize(at + length);
  std::memcpy(record.data() + at, text.c_str(), length);
}

// ras:mc_event as kernel 6.18 lays it out (see the fixture's format file).
inline Bytes McEvent(std::uint16_t id, std::uint32_t error_type, std::uint16_t count,
                     std::uint8_t mc, long address, const std::string& label) {
  Bytes record(60, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::int32_t>(record, 4, 1234);
  Put<std::uint32_t>(record, 8, error_type);
  Put<std::uint16_t>(record, 20, count);
  Put<std::uint8_t>(record, 22, mc);
  Put<long>(record, 32, address);
  PutString(record, 12, 60, "");
  PutString(record, 16, 61, label);
  PutString(record, 56, 61 + label.size() + 1, "");
  record.resize((record.size() + 3) / 4 * 4);
  return record;
}

inline Bytes GhesEvent(std::uint16_t id, std::uint8_t sev) {
  Bytes record(64, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::uint8_t>(record, 60, sev);  // ras:arm_event's sev
  return record;
}

// A page: header, then each record behind a small-event header (type_len = length / 4).
inline Bytes Page(const std::vector<Bytes>& records) {
  Bytes page(16, 0);
  Put<std::uint64_t>(page, 0, 1'000'000);
  for (const auto& record : records) {
    const auto type_len = static_cast<std::uint32_t>(record.size() / 4);
    Put<std::uint32_t>(page, page.size(), type_len | (10U << 5));
    page.insert(page.end(), record.begin(), record.end());
  }
  Put<std::uint64_t>(page, 8, page.size() - 16);
  page.resize(4096, 0);
  return page;
}

}  // namespace rasd::ras::testing
