#include "rasd/ras/tracefs_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <system_error>

namespace rasd::ras {
namespace {

// Pages read from one CPU per call: a flood must not hold the event loop.
constexpr std::size_t kMaxPagesPerRead = 256;

bool WriteSmallFile(const std::filesystem::path& path, std::string_view text, int* error) {
  common::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_TRUNC));
  if (!fd) {
    *error = errno;
    return false;
  }
  if (::write(fd.Get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    *error = errno;
    return false;
  }
  return true;
}

}  // namespace

std::string_view TracefsSource::EventFilter(std::string_view event) {
  // SIGBUS only: the decoder keeps its memory-error codes.
  if (event == "signal/signal_generate") return "sig == 7";
  // Every request completes through it: only the failed ones.
  if (event == "block/block_rq_complete") return "error != 0";
  return {};
}

std::string_view TracefsSource::SupersededBy(std::string_view event) {
  // Kernels since 5.18 trace failed requests alone, in block_rq_error.
  if (event == "block/block_rq_complete") return "block/block_rq_error";
  return {};
}

const std::vector<std::string>& TracefsSource::RasEvents() {
  static const std::vector<std::string> kEvents = {"ras/mc_event",
                                                   "ras/aer_event",
                                                   "ras/arm_event",
                                                   "ras/non_standard_event",
                                                   "ras/memory_failure_event",
                                                   "ras/extlog_mem_event",
                                                   "mce/mce_record",
                                                   "cxl/cxl_general_media",
                                                   "cxl/cxl_dram",
                                                   "cxl/cxl_memory_module",
                                                   "cxl/cxl_poison",
                                                   "cxl/cxl_aer_uncorrectable_error",
                                                   "cxl/cxl_aer_correctable_error",
                                                   "cxl/cxl_overflow",
                                                   "devlink/devlink_health_report",
                                                   "signal/signal_generate",
                                                   "block/block_rq_error",
                                                   "block/block_rq_complete",
                                                   "ras/reri_event"};
  return kEvents;
}

Result<std::unique_ptr<TracefsSource>> TracefsSource::Open(const common::HostEnv& host,
                                                           const std::string& instance_name,
                                                           const std::vector<std::string>& events) {
  if (instance_name.empty() || instance_name.find('/') != std::string::npos ||
      instance_name.starts_with('.')) {
    return Fail(ErrorCode::kInvalidArgument, "bad tracing instance name '" + instance_name + "'");
  }
  std::filesystem::path tracefs;
  for (const char* candidate : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
    if (host.Exists(std::string(candidate) + "/instances")) {
      tracefs = host.Resolve(candidate);
      break;
    }
  }
  if (tracefs.empty()) {
    return Fail(ErrorCode::kNotFound, "no tracefs at " +
                                          host.Resolve("/sys/kernel/tracing").string() +
                                          " (mount -t tracefs nodev /sys/kernel/tracing)");
  }
  std::unique_ptr<TracefsSource> source(new TracefsSource(host.GetClock()));
  source->instance_dir_ = tracefs / "instances" / instance_name;
  if (::mkdir(source->instance_dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    const int error = errno;
    return Fail(
        error == EACCES || error == EPERM ? ErrorCode::kPermissionDenied : ErrorCode::kIoError,
        fmt::format("create tracing instance {}: {}", source->instance_dir_.string(),
                    std::strerror(error)));
  }
  // One owner per instance: a second rasd (a debugging run beside the
  // service) would split the ring buffer and, on exit, switch the service's
  // events off. The lock is an flock on the instance directory itself, so it
  // holds whatever socket or runtime directory each rasd uses, and a crashed
  // owner's lock goes with its process.
  source->owner_lock_.Reset(
      ::open(source->instance_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!source->owner_lock_) {
    return Fail(ErrnoError("open tracing instance " + source->instance_dir_.string(), errno));
  }
  if (::flock(source->owner_lock_.Get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("tracing instance {} is in use by another rasd; a second one needs "
                              "an instance of its own (ras.tracefs_instance)",
                              source->instance_dir_.string()));
    }
    return Fail(ErrnoError("lock tracing instance " + source->instance_dir_.string(), errno));
  }
  // A left-over from a crashed run (no owner now) is reused, and removed on
  // exit too: the name is rasd's.
  source->created_ = true;

  std::size_t page_size = 4096;
  if (auto text = host.ReadFile((source->instance_dir_ / "buffer_subbuf_size_kb").string(), 64);
      text && text->size() > 0) {
    std::size_t kb = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), kb);
    if (ec == std::errc() && kb >= 4 && kb <= 16384) page_size = kb * 1024;
  }
  source->page_size_ = page_size;
  auto decoder = TraceEventDecoder::Load(source->instance_dir_ / "events", events,
                                         static_cast<int>(page_size));
  if (!decoder) return Fail(decoder.error());
  source->decoder_ = std::move(*decoder);

  for (const auto& name : events) {
    if (std::find(source->decoder_->Loaded().begin(), source->decoder_->Loaded().end(), name) ==
        source->decoder_->Loaded().end())
      source->absent_.push_back(name);
  }
  int error = 0;
  const auto& loaded = source->decoder_->Loaded();
  for (const auto& name : loaded) {
    if (const std::string_view newer = SupersededBy(name);
        !newer.empty() && std::find(loaded.begin(), loaded.end(), newer) != loaded.end())
      continue;
    const auto enable = source->instance_dir_ / "events" / name / "enable";
    if (!std::filesystem::exists(enable)) {  // ftrace's own events are always on
      source->events_.push_back(name);
      continue;
    }
    // An event that fires for much more than RAS (every signal) is enabled
    // only with the kernel's filter in place: unfiltered, it would flood
    // the buffer and the loop.
    if (const std::string_view filter = EventFilter(name); !filter.empty()) {
      if (!WriteSmallFile(source->instance_dir_ / "events" / name / "filter", std::string(filter),
                          &error)) {
        source->absent_.push_back(
            fmt::format("{} (filter not accepted: {})", name, std::strerror(error)));
        continue;
      }
    }
    if (!WriteSmallFile(enable, "1", &error)) {
      return Fail(
          error == EACCES || error == EPERM ? ErrorCode::kPermissionDenied : ErrorCode::kIoError,
          fmt::format("enable {}: {}", enable.string(), std::strerror(error)));
    }
    source->enabled_.push_back(enable);
    source->events_.push_back(name);
  }
  // Without this the kernel wakes a reader only when half the buffer is full.
  if (const auto percent = source->instance_dir_ / "buffer_percent";
      std::filesystem::exists(percent) && !WriteSmallFile(percent, "0", &error)) {
    return Fail(ErrnoError("set " + percent.string(), error));
  }

  std::error_code ec;
  std::vector<std::pair<int, std::filesystem::path>> cpus;
  for (const auto& entry :
       std::filesystem::directory_iterator(source->instance_dir_ / "per_cpu", ec)) {
    const std::string name = entry.path().filename().string();
    int cpu = -1;
    if (!name.starts_with("cpu") ||
        std::from_chars(name.data() + 3, name.data() + name.size(), cpu).ec != std::errc()) {
      continue;
    }
    cpus.emplace_back(cpu, entry.path() / "trace_pipe_raw");
  }
  std::sort(cpus.begin(), cpus.end());
  for (const auto& [cpu, path] : cpus) {
    common::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (!fd) return Fail(ErrnoError("open " + path.string(), errno));
    source->pipes_.push_back(std::move(fd));
  }
  if (source->pipes_.empty()) {
    return Fail(ErrorCode::kNotFound,
                "no per_cpu/cpu*/trace_pipe_raw in " + source->instance_dir_.string());
  }
  source->buffer_.resize(page_size);
  return source;
}

TracefsSource::~TracefsSource() { Close(); }

void TracefsSource::Close() {
  int ignored = 0;
  for (const auto& enable : enabled_) (void)WriteSmallFile(enable, "0", &ignored);
  enabled_.clear();
  // The kernel refuses to remove an instance whose files are open.
  pipes_.clear();
  if (created_) (void)::rmdir(instance_dir_.c_str());
  created_ = false;
  owner_lock_.Reset();  // only now: nobody else may take it before the rmdir
}

std::size_t TracefsSource::ReadPages(
    std::size_t index, const std::function<void(std::span<const std::uint8_t>)>& page) {
  std::size_t pages = 0;
  while (pages < kMaxPagesPerRead) {
    const ssize_t got = ::read(pipes_[index].Get(), buffer_.data(), buffer_.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) ++stats_.read_errors;
      break;
    }
    if (got == 0) break;
    ++pages;
    ++stats_.pages;
    page(std::span<const std::uint8_t>(buffer_.data(), static_cast<std::size_t>(got)));
  }
  return pages;
}

std::vector<RasEvent> TracefsSource::ReadEvents(std::size_t index) {
  std::vector<RasEvent> events;
  ReadPages(index, [&](std::span<const std::uint8_t> page) {
    auto decoded = decoder_->DecodePage(page, clock_.Wall());
    stats_.events += decoded.size();
    events.insert(events.end(), std::make_move_iterator(decoded.begin()),
                  std::make_move_iterator(decoded.end()));
  });
  return events;
}

}  // namespace rasd::ras
