#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/ras/ras_event.h"

struct tep_handle;
struct kbuffer;

namespace rasd::ras {

// Decodes the kernel's RAS tracepoints from raw ring-buffer pages, as
// per-CPU trace_pipe_raw hands them out, with libtraceevent and the
// kernel's own format files: event ids and field offsets are read from the
// formats, never hard-coded (they differ between kernels).
//
// Decoded: ras:mc_event (EDAC; class from error_type), ras:arm_event and
// ras:non_standard_event (GHES severity). Other events in a page are
// skipped. Not thread-safe.
class TraceEventDecoder {
 public:
  // `events_dir` is a tracefs "events" directory (or a copy of one): its
  // header_page and <system>/<event>/format files. Events whose format is
  // missing are left out; kNotFound if none of `events` is there.
  static Result<std::unique_ptr<TraceEventDecoder>> Load(const std::filesystem::path& events_dir,
                                                         const std::vector<std::string>& events);
  ~TraceEventDecoder();
  TraceEventDecoder(const TraceEventDecoder&) = delete;
  TraceEventDecoder& operator=(const TraceEventDecoder&) = delete;

  // The "system/event" names whose formats were loaded.
  const std::vector<std::string>& Loaded() const { return loaded_; }

  // Decodes one page. A malformed page yields what could be read before
  // the damage.
  std::vector<RasEvent> DecodePage(std::span<const std::uint8_t> page);

 private:
  TraceEventDecoder();
  tep_handle* tep_ = nullptr;
  kbuffer* kbuf_ = nullptr;
  std::vector<std::string> loaded_;
  std::vector<std::uint8_t> page_copy_;  // kbuffer wants a writable page
};

}  // namespace rasd::ras
