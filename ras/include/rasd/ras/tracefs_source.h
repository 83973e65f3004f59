#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/common/unique_fd.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/trace_event_decoder.h"

namespace rasd::ras {

// Follows the kernel's RAS tracepoints live, as rasdaemon does: a private
// tracing instance (<tracefs>/instances/<name>) so rasd neither sees nor
// disturbs anyone else's tracing, with buffer_percent 0 so poll() wakes for
// a single event, the RAS events this kernel has enabled in it, and each
// CPU's trace_pipe_raw read page by page and decoded with the instance's
// own format files.
//
// Plain file operations under HostEnv's root do the tracefs side (an
// instance is a mkdir), so a fixture tree can stand in; libtraceevent's
// kbuffer decodes the pages. The instance is removed when the source is
// destroyed; one left behind by a crash is reused. Events are stamped with
// the HostEnv's wall clock, so the HostEnv must outlive the source. Not
// thread-safe.
class TracefsSource {
 public:
  // The events rasd wants, "system/event"; those the kernel lacks are
  // skipped.
  static const std::vector<std::string>& RasEvents();

  // Finds tracefs (/sys/kernel/tracing, else /sys/kernel/debug/tracing),
  // creates the instance and enables `events`. kNotFound without tracefs
  // or without any of the events; kPermissionDenied when not allowed;
  // kUnavailable when another process (a second rasd) owns the instance: it
  // is left exactly as it is.
  static Result<std::unique_ptr<TracefsSource>> Open(const common::HostEnv& host,
                                                     const std::string& instance_name,
                                                     const std::vector<std::string>& events);
  ~TracefsSource();
  TracefsSource(const TracefsSource&) = delete;
  TracefsSource& operator=(const TracefsSource&) = delete;

  const std::filesystem::path& InstanceDir() const { return instance_dir_; }
  // The "system/event" names enabled (or, for ftrace's own events, present).
  const std::vector<std::string>& Events() const { return events_; }
  // Those asked for that this kernel lacks (no format: CXL events on a
  // kernel without CONFIG_CXL_BUS), or that could not be enabled as rasd
  // needs them (with why): reported, not an error.
  const std::vector<std::string>& Absent() const { return absent_; }
  // The tracefs filter `event` is enabled with ("" for none).
  static std::string_view EventFilter(std::string_view event);
  // The newer event that carries what `event` does, so that `event` is
  // enabled only on a kernel without it ("" for none).
  static std::string_view SupersededBy(std::string_view event);
  // One non-blocking trace_pipe_raw descriptor per CPU, for poll().
  std::size_t CpuCount() const { return pipes_.size(); }
  int CpuFd(std::size_t index) const { return pipes_[index].Get(); }
  TraceEventDecoder& Decoder() { return *decoder_; }

  // Reads every page the CPU's pipe has now (never blocks) and hands each
  // to `page`. Returns the number of pages read.
  std::size_t ReadPages(std::size_t index,
                        const std::function<void(std::span<const std::uint8_t>)>& page);
  // ReadPages, decoding each page into RAS events stamped with the host's
  // wall clock at the read.
  std::vector<RasEvent> ReadEvents(std::size_t index);

  struct Stats {
    std::uint64_t pages = 0;
    std::uint64_t events = 0;
    std::uint64_t read_errors = 0;
  };
  const Stats& GetStats() const { return stats_; }

 private:
  explicit TracefsSource(const common::Clock& clock) : clock_(clock) {}
  void Close();

  const common::Clock& clock_;
  std::filesystem::path instance_dir_;
  common::UniqueFd owner_lock_;                 // flock'd instance directory
  bool created_ = false;                        // by us: removed on exit
  std::vector<std::filesystem::path> enabled_;  // enable files written with "1"
  std::unique_ptr<TraceEventDecoder> decoder_;
  std::vector<std::string> events_;
  std::vector<std::string> absent_;
  std::vector<common::UniqueFd> pipes_;
  std::vector<std::uint8_t> buffer_;
  std::size_t page_size_ = 4096;
  Stats stats_;
};

}  // namespace rasd::ras
