#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/ras/ras_event.h"

struct tep_handle;
struct tep_event;
struct tep_record;
struct trace_seq;
struct kbuffer;

namespace rasd::ras {

// One event of a ring-buffer page, with its fields read by name through
// the event's format. Valid only inside TraceEventDecoder::ForEachRecord's
// callback.
class TraceRecord {
 public:
  std::string_view System() const;
  std::string_view Name() const;
  std::uint64_t Timestamp() const { return timestamp_; }
  // An integer field; nullopt when the event has no such field.
  std::optional<unsigned long long> Number(const char* field) const;
  // A string field (fixed array or __data_loc), cut at its NUL and at the
  // end of the record: a damaged record never makes it read outside.
  std::string Text(const char* field) const;

 private:
  friend class TraceEventDecoder;
  TraceRecord(tep_event* event, tep_record* record, trace_seq* seq, const std::uint8_t* limit,
              std::uint64_t timestamp)
      : event_(event), record_(record), seq_(seq), limit_(limit), timestamp_(timestamp) {}
  tep_event* event_;
  tep_record* record_;
  trace_seq* seq_;
  const std::uint8_t* limit_;
  std::uint64_t timestamp_;
};

// Decodes the kernel's RAS tracepoints from raw ring-buffer pages, as
// per-CPU trace_pipe_raw hands them out, with libtraceevent and the
// kernel's own format files: event ids and field offsets are read from the
// formats, never hard-coded (they differ between kernels).
//
// Decoded: ras:mc_event (EDAC; class from error_type), ras:arm_event and
// ras:non_standard_event (GHES severity), the cxl: events of
// drivers/cxl/core/trace.h (media, DRAM, memory module, poison list, RAS
// capability errors, log overflow: origin "cxl", the host page where the
// device address maps to one), devlink:devlink_health_report (origin
// "mlx5" for mlx5 reporters) and signal:signal_generate for SIGBUS with a
// memory-error code (origin "memory_failure", the process it kills),
// block:block_rq_error (and block_rq_complete with an error, where a kernel
// has no block_rq_error; origin "block") and ras:reri_event (RISC-V RERI
// records, origin "reri").
// Other events in a page are skipped. Not thread-safe.
class TraceEventDecoder {
 public:
  // `events_dir` is a tracefs "events" directory (or a copy of one): its
  // header_page and <system>/<event>/format files. Events whose format is
  // missing are left out; kNotFound if none of `events` is there.
  // `page_size` is the ring buffer's sub-buffer size (buffer_subbuf_size_kb).
  static Result<std::unique_ptr<TraceEventDecoder>> Load(const std::filesystem::path& events_dir,
                                                         const std::vector<std::string>& events,
                                                         int page_size = 4096);
  ~TraceEventDecoder();
  TraceEventDecoder(const TraceEventDecoder&) = delete;
  TraceEventDecoder& operator=(const TraceEventDecoder&) = delete;

  // The "system/event" names whose formats were loaded.
  const std::vector<std::string>& Loaded() const { return loaded_; }

  // Decodes one page, each event stamped `now` (the time it was read: a
  // record's own timestamp is the ring buffer's clock, not the wall's). A
  // malformed page yields what could be read before the damage.
  std::vector<RasEvent> DecodePage(std::span<const std::uint8_t> page,
                                   std::chrono::system_clock::time_point now);

  // Calls `visit` for each event of a loaded format in one page, RAS or
  // not (DecodePage is built on it).
  void ForEachRecord(std::span<const std::uint8_t> page,
                     const std::function<void(const TraceRecord&)>& visit);

 private:
  TraceEventDecoder();
  tep_handle* tep_ = nullptr;
  kbuffer* kbuf_ = nullptr;
  std::vector<std::string> loaded_;
  std::vector<std::uint8_t> page_copy_;  // kbuffer wants a writable page
};

}  // namespace rasd::ras
