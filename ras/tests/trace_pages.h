#pragma once

// Raw ring-buffer pages and RAS tracepoint records laid out as kernel 6.18
// writes them (see tests/fixtures/tracefs for the format files).

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
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

// The __data_loc strings of a record, laid out after its fixed part
// (`fixed` bytes) in order: {offset of the loc word, text}.
inline void PutStrings(Bytes& record, std::size_t fixed,
                       const std::vector<std::pair<std::size_t, std::string>>& strings) {
  std::size_t at = fixed;
  for (const auto& [loc_offset, text] : strings) {
    PutString(record, loc_offset, at, text);
    at += text.size() + 1;
  }
  record.resize((record.size() + 3) / 4 * 4);
}

// cxl:cxl_general_media as the fixture's format lays it out (from
// drivers/cxl/core/trace.h): log, descriptor, dpa, hpa.
inline Bytes CxlGeneralMedia(std::uint16_t id, int log, std::uint8_t descriptor, std::uint64_t dpa,
                             std::uint64_t hpa, const std::string& memdev,
                             const std::string& host) {
  Bytes record(144, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::int32_t>(record, 16, log);
  Put<std::uint64_t>(record, 72, dpa);
  Put<std::uint8_t>(record, 80, descriptor);
  Put<std::uint64_t>(record, 104, hpa);
  PutStrings(record, 144, {{8, memdev}, {12, host}, {140, ""}});
  return record;
}

// cxl:cxl_poison: trace_type (0 List, 1 Inject, 2 Clear), hpa, dpa.
inline Bytes CxlPoison(std::uint16_t id, std::uint8_t trace_type, std::uint64_t hpa,
                       std::uint64_t dpa, const std::string& memdev, const std::string& host) {
  Bytes record(80, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::uint8_t>(record, 24, trace_type);
  Put<std::uint64_t>(record, 40, hpa);
  Put<std::uint64_t>(record, 48, dpa);
  Put<std::uint32_t>(record, 56, 64);
  PutStrings(record, 80, {{8, memdev}, {12, host}, {28, "region0"}});
  return record;
}

// cxl:cxl_memory_module: log, health_status, media_status.
inline Bytes CxlMemoryModule(std::uint16_t id, int log, std::uint8_t health, std::uint8_t media,
                             const std::string& memdev, const std::string& host) {
  Bytes record(108, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::int32_t>(record, 16, log);
  Put<std::uint8_t>(record, 68, health);
  Put<std::uint8_t>(record, 69, media);
  PutStrings(record, 108, {{8, memdev}, {12, host}});
  return record;
}

// devlink:devlink_health_report: five strings.
inline Bytes DevlinkHealthReport(std::uint16_t id, const std::string& driver,
                                 const std::string& device, const std::string& reporter,
                                 const std::string& message) {
  Bytes record(28, 0);
  Put<std::uint16_t>(record, 0, id);
  PutStrings(record, 28, {{8, "pci"}, {12, device}, {16, driver}, {20, reporter}, {24, message}});
  return record;
}

// signal:signal_generate as kernel 6.18 lays it out.
inline Bytes SignalGenerate(std::uint16_t id, int sig, int code, const std::string& comm, int pid) {
  Bytes record(48, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::int32_t>(record, 8, sig);
  Put<std::int32_t>(record, 16, code);
  std::memcpy(record.data() + 20, comm.c_str(), std::min<std::size_t>(comm.size(), 15));
  Put<std::int32_t>(record, 36, pid);
  return record;
}

// block:block_rq_error / block_rq_complete as kernel 6.18 lays them out:
// dev (major << 20 | minor), sector, nr_sector, error (a negative errno),
// rwbs, an empty cmd.
inline Bytes BlockRqError(std::uint16_t id, unsigned major, unsigned minor, std::uint64_t sector,
                          int error, const std::string& rwbs) {
  Bytes record(48, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::uint32_t>(record, 8, (major << 20) | minor);
  Put<std::uint64_t>(record, 16, sector);
  Put<std::uint32_t>(record, 24, 8);
  Put<std::int32_t>(record, 28, error);
  std::memcpy(record.data() + 34, rwbs.c_str(), std::min<std::size_t>(rwbs.size(), 9));
  PutStrings(record, 48, {{44, ""}});
  return record;
}

// ras:reri_event as the fixture's format lays it out: the RERI status
// register and the address it describes.
inline Bytes ReriEvent(std::uint16_t id, std::uint8_t source_type, std::uint32_t hart,
                       std::uint64_t status, std::uint64_t address) {
  Bytes record(64, 0);
  Put<std::uint16_t>(record, 0, id);
  Put<std::uint16_t>(record, 8, 0x12);
  Put<std::uint8_t>(record, 10, source_type);
  Put<std::uint32_t>(record, 12, hart);
  Put<std::uint64_t>(record, 24, status);
  Put<std::uint64_t>(record, 32, address);
  return record;
}

// A page: header, then each record behind its event header (type_len = length / 4, or a
// length word for a record over 112 bytes).
inline Bytes Page(const std::vector<Bytes>& records) {
  Bytes page(16, 0);
  Put<std::uint64_t>(page, 0, 1'000'000);
  for (const auto& record : records) {
    const auto type_len = static_cast<std::uint32_t>(record.size() / 4);
    if (type_len <= 28) {
      Put<std::uint32_t>(page, page.size(), type_len | (10U << 5));
    } else {
      // Past 112 bytes: type_len 0 and a length word (data + the word itself).
      Put<std::uint32_t>(page, page.size(), 10U << 5);
      Put<std::uint32_t>(page, page.size(), static_cast<std::uint32_t>(record.size() + 4));
    }
    page.insert(page.end(), record.begin(), record.end());
  }
  Put<std::uint64_t>(page, 8, page.size() - 16);
  page.resize(4096, 0);
  return page;
}

}  // namespace rasd::ras::testing
