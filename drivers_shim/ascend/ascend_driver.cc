#include "rasd/drivers_shim/ascend_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "acl_api.h"
#include "acl_errors.h"
#include "aclnn_ops.h"
#include "dcmi_monitor.h"
#include "kernel_geometry.h"
#include "rasd/common/real_time.h"
#include "rasd/common/logging.h"

namespace rasd::drivers {
namespace {

using ascend::AclApi;

// The unit in which rasd retires device memory: the 4 KiB small page the
// Ascend driver maps. ReserveMemory aligns reservations to it.
constexpr std::uint64_t kRetireGranularity = 4096;
// aclrtMemcpyAsync wants 64-byte-aligned source and destination.
constexpr std::uint64_t kCopyAlignment = 64;
// The longest one wait blocks inside ACL: an abort or a reset wakes a
// waiter within this.
constexpr std::chrono::milliseconds kWaitSlice{5};
// How long a report thread blocks in aclrtProcessReport: its stop latency.
constexpr std::int32_t kReportPollMs = 10;
// How long DestroyStream lets queued device work drain when the library
// cannot abort a stream.
constexpr std::int32_t kDestroyDrainMs = 1000;
// Pinned staging memory kept per device for reuse.
constexpr std::uint64_t kStagingCacheBytes = std::uint64_t{64} << 20;
constexpr std::uint64_t kMinStagingBytes = 4096;
// A kernel's fp32 tensors must start on an element.
constexpr std::uint64_t kTensorElementAlignment = 4;
// The per-stream device scratch the "empty" kernel zeroes, and the least
// workspace a stream keeps once it needs one.
constexpr std::uint64_t kScratchBytes = 64;
constexpr std::uint64_t kMinWorkspaceBytes = 64 << 10;


std::uint64_t RoundUp(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

void* ToPointer(DeviceAddress address) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
}

DeviceAddress ToAddress(const void* pointer) {
  return static_cast<DeviceAddress>(reinterpret_cast<std::uintptr_t>(pointer));
}

// A host buffer from aclrtMallocHost: the only host memory aclrtMemcpyAsync
// may read or write.
struct PinnedBuffer {
  std::byte* data = nullptr;
  std::uint64_t capacity = 0;
};

// Pinned buffers of one device, reused by power-of-two capacity. Acquire and
// Trim call ACL and so run with the device's context current; Release only
// files a buffer, so it may run anywhere.
class StagingPool {
 public:
  explicit StagingPool(const AclApi& acl) : acl_(acl) {}

  aclError Acquire(std::uint64_t bytes, PinnedBuffer* buffer) {
    const std::uint64_t capacity = std::bit_ceil(std::max(bytes, kMinStagingBytes));
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(capacity);
      if (it != free_.end() && !it->second.empty()) {
        *buffer = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= capacity;
        return ascend::kAclSuccess;
      }
    }
    Trim(kStagingCacheBytes);
    void* data = nullptr;
    const aclError rc = acl_.malloc_host(&data, capacity);
    if (rc != ascend::kAclSuccess) return rc;
    *buffer = PinnedBuffer{static_cast<std::byte*>(data), capacity};
    return ascend::kAclSuccess;
  }

  void Release(PinnedBuffer buffer) {
    if (buffer.data == nullptr) return;
    std::lock_guard lock(mutex_);
    free_[buffer.capacity].push_back(buffer);
    cached_bytes_ += buffer.capacity;
  }

  // Frees cached buffers, largest first, until at most `keep` bytes stay.
  void Trim(std::uint64_t keep) {
    std::vector<PinnedBuffer> doomed;
    {
      std::lock_guard lock(mutex_);
      for (auto it = free_.rbegin(); it != free_.rend() && cached_bytes_ > keep; ++it) {
        while (!it->second.empty() && cached_bytes_ > keep) {
          doomed.push_back(it->second.back());
          it->second.pop_back();
          cached_bytes_ -= doomed.back().capacity;
        }
      }
    }
    for (const auto& buffer : doomed) (void)acl_.free_host(buffer.data);
  }

 private:
  const AclApi& acl_;
  std::mutex mutex_;
  std::map<std::uint64_t, std::vector<PinnedBuffer>> free_;  // guarded by mutex_
  std::uint64_t cached_bytes_ = 0;                           // guarded by mutex_
};

struct Reservation {
  void* raw = nullptr;  // what aclrtMalloc returned (the base may be above it)
  std::uint64_t size = 0;
  bool lost = false;  // freed by a device reset
};

struct StreamState {
  StreamState(StreamHandle stream_handle, int device_index)
      : handle(stream_handle), device(device_index) {}

  const StreamHandle handle;
  const int device;
  aclrtStream acl = nullptr;  // guarded by the device's gate

  std::mutex mutex;
  // The abort reason or the first asynchronous device error: later work and
  // waits fail with it. Guarded by mutex.
  std::optional<Error> error;
  bool aborted = false;     // guarded by mutex
  std::uint64_t epoch = 0;  // guarded by mutex: device resets so far
  // Staging buffers of dropped copies: ACL may still touch them until the
  // ACL stream is destroyed. Guarded by mutex.
  std::vector<PinnedBuffer> quarantine;

  // Device memory for aclnn operators run on this stream, held as the
  // driver's own reservations (so a reset frees them as it frees every
  // reservation): the current workspace, grown on demand; workspaces it
  // outgrew, freed once a synchronize shows the launches that used them
  // done (`retired_at` is the launch count when they were replaced); the
  // "empty" kernel's scratch. Guarded by workspace_mutex, which a launch
  // holds from choosing its workspace until the operator is queued.
  std::mutex workspace_mutex;
  DeviceAddress workspace = 0;
  std::uint64_t workspace_bytes = 0;
  DeviceAddress scratch = 0;
  std::vector<std::pair<DeviceAddress, std::uint64_t>> retired;  // (base, retired_at)
  std::uint64_t launches = 0;

  Status Current() {
    std::lock_guard lock(mutex);
    if (error) return Fail(*error);
    return {};
  }
};

struct EventState {
  EventState(EventHandle event_handle, int device_index)
      : handle(event_handle), device(device_index) {}

  const EventHandle handle;
  const int device;
  aclrtEvent acl = nullptr;  // guarded by the device's gate

  std::mutex mutex;
  std::uint64_t recorded = 0;              // guarded by mutex: records since creation or reset
  std::weak_ptr<StreamState> recorded_on;  // guarded by mutex
};

// Work the host does in stream order, from an aclrtLaunchCallback.
struct HostWork {
  enum class Kind : std::uint8_t { kCallback, kCopyOut, kReleaseStaging };
  Kind kind = Kind::kCallback;
  std::uint64_t stream = 0;
  int device = 0;
  StreamCallback callback;
  PinnedBuffer staging;
  void* host_dst = nullptr;
  std::uint64_t bytes = 0;
};

class AscendDriverImpl;

// The driver whose report thread this is: aclrtProcessReport runs stream
// callbacks on the thread that calls it, and aclrtCallback carries only a
// pointer, which holds the work's id.
thread_local AscendDriverImpl* t_report_owner = nullptr;

void HostWorkTrampoline(void* user_data);

// The thread that runs one device's stream callbacks: aclrtSubscribeReport
// binds each stream of the device to it, and it loops on aclrtProcessReport.
class ReportThread {
 public:
  ReportThread(const AclApi& acl, aclrtContext context, AscendDriverImpl* owner, int device)
      : acl_(acl), context_(context), owner_(owner), device_(device), thread_([this] { Run(); }) {
    id_ = static_cast<std::uint64_t>(thread_.native_handle());
  }
  ~ReportThread() { Stop(); }
  ReportThread(const ReportThread&) = delete;
  ReportThread& operator=(const ReportThread&) = delete;

  // The id aclrtSubscribeReport takes: the pthread id (kept after Stop).
  std::uint64_t Id() const { return id_; }

  void Stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    t_report_owner = owner_;
    bool warned = false;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      // A callback may have made another device's context current here.
      (void)acl_.set_current_context(context_);
      const aclError rc = acl_.process_report(kReportPollMs);
      if (rc == ascend::kAclSuccess || rc == ascend::kAclErrorWaitCallbackTimeout ||
          rc == ascend::kAclErrorRtReportTimeout) {
        continue;
      }
      // No stream subscribed yet, or a failure: do not spin.
      const bool not_subscribed =
          rc == ascend::kAclErrorThreadNotSubscribe || rc == ascend::kAclErrorRtThreadSubscribe;
      if (!not_subscribed && !warned) {
        RASD_LOG_WARN("ascend: device {}: aclrtProcessReport failed with ACL error {}", device_, rc);
        warned = true;
      }
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(kReportPollMs), [this] { return stopping_; });
    }
  }

  const AclApi& acl_;
  const aclrtContext context_;
  AscendDriverImpl* const owner_;
  const int device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;     // starts once the members above exist
  std::uint64_t id_ = 0;   // fixed once constructed
};

struct DeviceState {
  int index = 0;
  DeviceProperties properties;

  // Shared by every ACL call made in this device's context; exclusive while
  // a reset replaces the context and what lives in it.
  std::shared_mutex gate;
  aclrtContext context = nullptr;          // guarded by gate
  std::optional<Error> lost;               // guarded by gate: a reset failed
  std::unique_ptr<ReportThread> reporter;  // guarded by gate
  bool acl_device_set = false;             // aclrtSetDevice succeeded: reset it at the end
  std::atomic<bool> resetting{false};      // new calls fail fast while set
  std::mutex reset_mutex;                  // one reset at a time
  std::unique_ptr<StagingPool> staging;

  std::mutex memory_mutex;
  std::map<DeviceAddress, Reservation> reservations;  // guarded by memory_mutex
};

// ASCEND_RT_VISIBLE_DEVICES: "2,3" makes ACL device 0 logic id 2.
std::vector<int> LogicIds(const std::optional<std::string>& option, int device_count) {
  std::string visible;
  if (option) {
    visible = *option;
  } else if (const char* env = std::getenv("ASCEND_RT_VISIBLE_DEVICES"); env != nullptr) {
    visible = env;
  }
  std::vector<int> ids;
  std::size_t start = 0;
  while (!visible.empty() && start <= visible.size()) {
    const std::size_t comma = std::min(visible.find(',', start), visible.size());
    int id = -1;
    const char* first = visible.data() + start;
    const char* last = visible.data() + comma;
    while (first < last && *first == ' ') ++first;
    const auto parsed = std::from_chars(first, last, id);
    if (parsed.ec != std::errc() || parsed.ptr != last || id < 0) {
      RASD_LOG_WARN(
          "ascend: ASCEND_RT_VISIBLE_DEVICES='{}' is not a list of device ids; "
          "assuming ACL device i is DCMI logic id i",
          visible);
      ids.clear();
      break;
    }
    ids.push_back(id);
    start = comma + 1;
  }
  for (int i = static_cast<int>(ids.size()); i < device_count; ++i) ids.push_back(i);
  ids.resize(static_cast<std::size_t>(device_count));
  return ids;
}

class AscendDriverImpl final : public Driver {
 public:
  AscendDriverImpl(common::DynamicLibrary library, AclApi acl)
      : library_(std::move(library)), acl_(acl) {}
  ~AscendDriverImpl() override;
  AscendDriverImpl(const AscendDriverImpl&) = delete;
  AscendDriverImpl& operator=(const AscendDriverImpl&) = delete;

  // kUnavailable when ACL cannot be initialized or has no usable device.
  Status Init(const AscendDriverOptions& options);

  std::string_view Name() const override { return "ascend"; }

  Result<std::vector<DeviceProperties>> EnumerateDevices() override {
    std::vector<DeviceProperties> properties;
    for (const auto& device : devices_) properties.push_back(device->properties);
    return properties;
  }

  std::vector<KernelSignature> Kernels() const override {
    if (!ops_) return {};
    return ops_->Kernels();
  }

  Result<DeviceAddress> ReserveMemory(int device_index, std::uint64_t bytes) override;
  Status ReleaseMemory(int device_index, DeviceAddress base) override;

  Result<StreamHandle> CreateStream(int device_index) override;
  Status DestroyStream(StreamHandle handle) override;

  Status CopyHostToDevice(StreamHandle handle, DeviceAddress dst, const void* src,
                          std::uint64_t bytes) override;
  Status CopyDeviceToHost(StreamHandle handle, void* dst, DeviceAddress src,
                          std::uint64_t bytes) override;
  Status CopyDeviceToDevice(StreamHandle handle, DeviceAddress dst, int dst_device,
                            DeviceAddress src, std::uint64_t bytes) override;

  Status LaunchKernel(StreamHandle handle, std::string_view kernel, const LaunchConfig& config,
                      std::span<const KernelArg> args) override;

  Status EnqueueCallback(StreamHandle handle, StreamCallback callback) override;

  Result<EventHandle> CreateEvent(int device_index) override;
  Status DestroyEvent(EventHandle handle) override;
  Status RecordEvent(EventHandle event_handle, StreamHandle stream_handle) override;
  Status StreamWaitEvent(StreamHandle stream_handle, EventHandle event_handle) override;
  Status SynchronizeEvent(EventHandle handle, std::chrono::nanoseconds timeout) override;
  Result<std::chrono::nanoseconds> ElapsedTime(EventHandle start, EventHandle end) override;

  Status SynchronizeStream(StreamHandle handle, std::chrono::nanoseconds timeout) override;
  Status AbortStream(StreamHandle handle, const Error& reason) override;
  Result<MemoryAfterReset> ResetDevice(int device_index) override;

  void SetErrorListener(ErrorListener listener) override {
    std::lock_guard lock(listener_mutex_);
    listener_ = std::move(listener);
  }

  // dcmi_ is set, or reset, only while the driver is being made and
  // destroyed: the reads need no lock.
  bool MonitorsDevices() const override { return dcmi_ != nullptr; }
  std::vector<ProbeCalls::Call> RunningCalls() const override {
    return dcmi_ ? dcmi_->RunningCalls() : std::vector<ProbeCalls::Call>{};
  }

  // Runs host work `id` on a report thread (HostWorkTrampoline).
  void RunHostWork(std::uint64_t id);

 private:
  // ": <aclGetRecentErrMsg's text>", or "" without one.
  std::string RecentAclMessage() const {
    const char* detail =
        acl_.recent_error_message != nullptr ? acl_.recent_error_message() : nullptr;
    if (detail == nullptr || *detail == '\0') return "";
    return fmt::format(": {}", detail);
  }

  // Loads the operator library (aclnn) for kernels; without it, logs one
  // line and serves everything else.
  void LoadOperatorLibrary(const AscendDriverOptions& options);

  Error Acl(std::string_view call, aclError rc, std::optional<int> device) const {
    const char* detail =
        acl_.recent_error_message != nullptr ? acl_.recent_error_message() : nullptr;
    return ascend::AclError(call, rc, device, detail != nullptr ? detail : "");
  }

  Result<DeviceState*> GetDevice(int index) {
    if (index < 0 || static_cast<std::size_t>(index) >= devices_.size()) {
      return Fail(ErrorCode::kInvalidArgument, fmt::format("no Ascend device {}", index));
    }
    return devices_[static_cast<std::size_t>(index)].get();
  }

  Result<std::shared_ptr<StreamState>> FindStream(StreamHandle handle) {
    std::shared_lock lock(handles_mutex_);
    auto it = streams_.find(handle.value);
    if (it == streams_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown stream");
    return it->second;
  }

  Result<std::shared_ptr<EventState>> FindEvent(EventHandle handle) {
    std::shared_lock lock(handles_mutex_);
    auto it = events_.find(handle.value);
    if (it == events_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown event");
    return it->second;
  }

  std::vector<std::shared_ptr<StreamState>> StreamsOf(int device) {
    std::vector<std::shared_ptr<StreamState>> result;
    std::shared_lock lock(handles_mutex_);
    for (auto& [value, stream] : streams_) {
      if (stream->device == device) result.push_back(stream);
    }
    return result;
  }

  std::vector<std::shared_ptr<EventState>> EventsOf(int device) {
    std::vector<std::shared_ptr<EventState>> result;
    std::shared_lock lock(handles_mutex_);
    for (auto& [value, event] : events_) {
      if (event->device == device) result.push_back(event);
    }
    return result;
  }

  // Runs `work` with the device's context current on this thread and the
  // device's gate held shared. Fails fast while the device is being reset,
  // unless `wait_for_reset`.
  template <typename Work>
  Status WithDevice(DeviceState& device, Work&& work, bool wait_for_reset = false) {
    if (!wait_for_reset && device.resetting.load(std::memory_order_acquire)) {
      return Fail(ErrorCode::kAborted, fmt::format("device {} is being reset", device.index));
    }
    std::shared_lock lock(device.gate);
    if (device.lost) return Fail(*device.lost);
    if (const aclError rc = acl_.set_current_context(device.context); rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtSetCurrentContext", rc, device.index));
    }
    return work();
  }

  // Reservation check for a copy: aligned and inside a live reservation.
  Status CheckRange(DeviceState& device, DeviceAddress address, std::uint64_t bytes,
                    std::uint64_t alignment = kCopyAlignment,
                    std::string_view requirer = "aclrtMemcpyAsync") {
    if (address % alignment != 0) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("device {}: address 0x{:x} is not {}-byte aligned, as "
                              "{} requires",
                              device.index, address, alignment, requirer));
    }
    std::lock_guard lock(device.memory_mutex);
    auto it = device.reservations.upper_bound(address);
    if (it != device.reservations.begin()) {
      --it;
      if (address + bytes >= address && address + bytes <= it->first + it->second.size) {
        if (!it->second.lost) return {};
        return Fail(ErrorCode::kInvalidArgument,
                    fmt::format("device {}: the reservation at 0x{:x} was freed by a device reset",
                                device.index, it->first));
      }
    }
    return Fail(ErrorCode::kInvalidArgument, fmt::format("device {}: illegal address 0x{:x} (+{})",
                                                         device.index, address, bytes));
  }

  std::uint64_t AddHostWork(HostWork work) {
    const std::uint64_t id = next_host_work_.fetch_add(1);
    std::lock_guard lock(host_work_mutex_);
    host_work_.emplace(id, std::move(work));
    return id;
  }

  std::optional<HostWork> TakeHostWork(std::uint64_t id) {
    std::lock_guard lock(host_work_mutex_);
    auto it = host_work_.find(id);
    if (it == host_work_.end()) return std::nullopt;
    HostWork work = std::move(it->second);
    host_work_.erase(it);
    return work;
  }

  // Called right after AddHostWork: an abort that failed the stream's work
  // just before `id` was filed missed it. Takes it back and fails it then,
  // returning the stream's error.
  Status RecheckAfterFiling(StreamState& stream, std::uint64_t id) {
    Status current = stream.Current();
    if (current) return {};
    if (auto work = TakeHostWork(id)) {
      std::vector<HostWork> taken;
      taken.push_back(std::move(*work));
      // The caller hears the error: its callback is not also told.
      taken.back().callback = nullptr;
      FailHostWork(stream, std::move(taken), current.error());
      return current;
    }
    return {};  // the abort took it and told it
  }

  // Takes the host work pending on `stream`, in enqueue order.
  std::vector<HostWork> TakeHostWorkOf(std::uint64_t stream) {
    std::vector<HostWork> taken;
    std::lock_guard lock(host_work_mutex_);
    for (auto it = host_work_.begin(); it != host_work_.end();) {
      if (it->second.stream == stream) {
        taken.push_back(std::move(it->second));
        it = host_work_.erase(it);
      } else {
        ++it;
      }
    }
    return taken;
  }

  // Fails taken host work with `reason`: callbacks hear it, copies out do
  // not happen, and staging buffers wait for the ACL stream's end.
  void FailHostWork(StreamState& stream, std::vector<HostWork> taken, const Error& reason) {
    for (auto& work : taken) {
      if (work.staging.data != nullptr) {
        std::lock_guard lock(stream.mutex);
        stream.quarantine.push_back(work.staging);
      }
      if (work.kind == HostWork::Kind::kCallback && work.callback) work.callback(Fail(reason));
    }
  }

  // Aborts `stream` for good: it keeps failing with `reason`.
  void FailStream(StreamState& stream, const Error& reason) {
    {
      std::lock_guard lock(stream.mutex);
      stream.error = reason;
      stream.aborted = true;
    }
    FailHostWork(stream, TakeHostWorkOf(stream.handle.value), reason);
  }

  // Ends the ACL side of a stream. Gate held (or no other caller left), the
  // device's context current.
  void DestroyAclStream(DeviceState& device, StreamState& stream) {
    if (stream.acl != nullptr) {
      if (acl_.stream_abort != nullptr) (void)acl_.stream_abort(stream.acl);
      (void)acl_.synchronize_stream(stream.acl, kDestroyDrainMs);
      if (device.reporter) (void)acl_.unsubscribe_report(device.reporter->Id(), stream.acl);
      if (const aclError rc = acl_.destroy_stream(stream.acl); rc != ascend::kAclSuccess) {
        RASD_LOG_WARN("ascend: {}", Acl("aclrtDestroyStream", rc, device.index).message);
      }
    }
    std::vector<PinnedBuffer> quarantine;
    {
      std::lock_guard lock(stream.mutex);
      quarantine.swap(stream.quarantine);
    }
    for (const auto& buffer : quarantine) device.staging->Release(buffer);
    // The stream's operators are done or dropped: their device memory goes.
    std::lock_guard lock(stream.workspace_mutex);
    for (const auto& [base, retired_at] : stream.retired) FreeInContext(device, base);
    stream.retired.clear();
    for (DeviceAddress* base : {&stream.workspace, &stream.scratch}) {
      if (*base != 0) FreeInContext(device, *base);
      *base = 0;
    }
    stream.workspace_bytes = 0;
  }

  // aclrtMalloc of `bytes`, page aligned, filed as a reservation. A
  // reservation lost in a reset gives its addresses up to the new one (its
  // owner forgets it: MemoryAfterReset::kFreed); a base a live reservation
  // still names (ACL's bookkeeping, not ours) is asked for again while the
  // colliding memory is held. Gate held, context current.
  Result<DeviceAddress> ReserveInContext(DeviceState& device, std::uint64_t bytes) {
    std::vector<void*> colliding;
    Result<DeviceAddress> made = Fail(ErrorCode::kInternal, "no attempt");
    for (int attempt = 0; attempt < 8; ++attempt) {
      made = ReserveOnce(device, bytes, &colliding);
      if (!made || *made != 0) break;
    }
    for (void* raw : colliding) (void)acl_.free_device(raw);
    if (made && *made == 0) {
      return Fail(ErrorCode::kOutOfMemory,
                  fmt::format("device {}: ACL keeps returning addresses of live reservations",
                              device.index));
    }
    return made;
  }

  // One try of ReserveInContext: the base, or 0 (the memory added to
  // `colliding`) when a live reservation names it.
  Result<DeviceAddress> ReserveOnce(DeviceState& device, std::uint64_t bytes,
                                    std::vector<void*>* colliding) {
    const std::uint64_t rounded = RoundUp(bytes, kRetireGranularity);
    void* raw = nullptr;
    if (const aclError rc = acl_.malloc_device(&raw, rounded, ACL_MEM_MALLOC_HUGE_FIRST);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtMalloc", rc, device.index));
    }
    DeviceAddress base = ToAddress(raw);
    if (base % kRetireGranularity != 0) {
      // Small allocations come back less aligned: take a page more and
      // start at the first page boundary in it.
      (void)acl_.free_device(raw);
      raw = nullptr;
      if (const aclError rc =
              acl_.malloc_device(&raw, rounded + kRetireGranularity, ACL_MEM_MALLOC_HUGE_FIRST);
          rc != ascend::kAclSuccess) {
        return Fail(Acl("aclrtMalloc", rc, device.index));
      }
      base = RoundUp(ToAddress(raw), kRetireGranularity);
    }
    std::lock_guard lock(device.memory_mutex);
    // A reservation a reset freed is forgotten by its owner, never released
    // (Driver::ResetDevice, MemoryAfterReset::kFreed): ACL may hand its
    // addresses out again, and the new reservation takes them over.
    auto& reservations = device.reservations;
    for (auto it = reservations.begin(); it != reservations.end();) {
      const bool overlaps = it->first < base + rounded && base < it->first + it->second.size;
      it = it->second.lost && overlaps ? reservations.erase(it) : std::next(it);
    }
    if (reservations.contains(base)) {  // a live one: ACL's bookkeeping is not ours
      colliding->push_back(raw);
      return DeviceAddress{0};
    }
    reservations[base] = Reservation{raw, rounded, false};
    return base;
  }

  // Returns a reservation of the driver's own; one a reset freed is only
  // forgotten. Gate held, context current.
  void FreeInContext(DeviceState& device, DeviceAddress base) {
    Reservation reservation;
    {
      std::lock_guard lock(device.memory_mutex);
      auto it = device.reservations.find(base);
      if (it == device.reservations.end()) return;
      reservation = it->second;
      device.reservations.erase(it);
    }
    if (reservation.lost) return;
    if (const aclError rc = acl_.free_device(reservation.raw); rc != ascend::kAclSuccess) {
      RASD_LOG_WARN("ascend: {}", Acl("aclrtFree", rc, device.index).message);
    }
  }

  // Frees the workspaces `stream` outgrew before its `launches`-th launch.
  // Gate held, context current.
  void ReleaseRetiredWorkspaces(DeviceState& device, StreamState& stream, std::uint64_t launches) {
    std::lock_guard lock(stream.workspace_mutex);
    std::erase_if(stream.retired, [&](const auto& entry) {
      if (entry.second > launches) return false;
      FreeInContext(device, entry.first);
      return true;
    });
  }

  // Makes a new ACL stream for `stream`, bound to the device's report
  // thread. Gate held, context current.
  Status MakeAclStream(DeviceState& device, StreamState& stream) {
    aclrtStream created = nullptr;
    if (const aclError rc = acl_.create_stream(&created); rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtCreateStream", rc, device.index));
    }
    if (const aclError rc = acl_.subscribe_report(device.reporter->Id(), created);
        rc != ascend::kAclSuccess) {
      (void)acl_.destroy_stream(created);
      return Fail(Acl("aclrtSubscribeReport", rc, device.index));
    }
    stream.acl = created;
    return {};
  }

  // Reports a runtime device error code to the listener, for the daemon's
  // code tables; the driver does not classify it.
  void ReportRuntimeCode(aclError rc, int device, std::optional<StreamHandle> stream,
                         std::string_view call) {
    if (!ascend::IsReportedRuntimeCode(rc)) return;
    const auto name = ascend::AclErrorName(rc);
    Emit({.device = device,
          .kind = DriverErrorKind::kVendorCode,
          .stream = stream,
          .vendor_code = rc,
          .code_space = VendorCodeSpace::kAscend,
          .message = fmt::format("{} returned ACL error {}{}{}", call, rc, name.empty() ? "" : ": ",
                                 name)});
  }

  void Emit(const DriverErrorEvent& event) {
    std::lock_guard lock(listener_mutex_);
    if (listener_) listener_(event);
  }

  Status EnsurePeerAccess(int from, int to);

  common::DynamicLibrary library_;  // first: everything below calls into it
  const AclApi acl_;
  bool initialized_ = false;  // aclInit succeeded
  bool owns_init_ = false;    // ... and was not already done by someone else
  std::vector<std::unique_ptr<DeviceState>> devices_;  // fixed after Init

  std::shared_mutex handles_mutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<StreamState>> streams_;
  std::unordered_map<std::uint64_t, std::shared_ptr<EventState>> events_;
  std::atomic<std::uint64_t> next_handle_{1};

  std::mutex host_work_mutex_;
  std::map<std::uint64_t, HostWork> host_work_;  // guarded by host_work_mutex_; by id = order
  std::atomic<std::uint64_t> next_host_work_{1};

  std::mutex peer_mutex_;
  std::map<std::pair<int, int>, bool> peer_access_;  // guarded: enabled, or impossible

  std::mutex listener_mutex_;
  ErrorListener listener_;

  std::unique_ptr<ascend::DcmiMonitor> dcmi_;
  // The operator library; null when it could not be loaded (`ops_error_`
  // says why), and then no kernel is offered.
  std::unique_ptr<ascend::AclnnOps> ops_;
  std::string ops_error_;
};

void HostWorkTrampoline(void* user_data) {
  if (t_report_owner != nullptr) {
    t_report_owner->RunHostWork(
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user_data)));
  }
}

void* HostWorkId(std::uint64_t id) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id));
}

Status AscendDriverImpl::Init(const AscendDriverOptions& options) {
  const std::string& library = options.acl_library;
  const aclError init = acl_.init(nullptr);
  if (init == ascend::kAclErrorRepeatInitialize) {
    initialized_ = true;  // someone in this process did: not ours to finalize
  } else if (init != ascend::kAclSuccess) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("{}: {}", library, Acl("aclInit", init, std::nullopt).message));
  } else {
    initialized_ = true;
    owns_init_ = true;
  }
  std::uint32_t count = 0;
  if (const aclError rc = acl_.get_device_count(&count); rc != ascend::kAclSuccess) {
    return Fail(
        ErrorCode::kUnavailable,
        fmt::format("{}: {}", library, Acl("aclrtGetDeviceCount", rc, std::nullopt).message));
  }
  if (count == 0) {
    return Fail(ErrorCode::kUnavailable, fmt::format("{}: no Ascend device", library));
  }
  auto unavailable = [&](const Error& error) {
    return Fail(ErrorCode::kUnavailable, fmt::format("{}: {}", library, error.message));
  };
  for (int index = 0; index < static_cast<int>(count); ++index) {
    devices_.push_back(std::make_unique<DeviceState>());
    DeviceState& device = *devices_.back();
    device.index = index;
    device.staging = std::make_unique<StagingPool>(acl_);
    if (const aclError rc = acl_.set_device(index); rc != ascend::kAclSuccess) {
      return unavailable(Acl("aclrtSetDevice", rc, index));
    }
    device.acl_device_set = true;
    if (const aclError rc = acl_.create_context(&device.context, index);
        rc != ascend::kAclSuccess) {
      device.context = nullptr;
      return unavailable(Acl("aclrtCreateContext", rc, index));
    }
    if (const aclError rc = acl_.set_current_context(device.context); rc != ascend::kAclSuccess) {
      return unavailable(Acl("aclrtSetCurrentContext", rc, index));
    }
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    // Chips without HBM (Atlas 300I) have DDR.
    if (acl_.get_mem_info(ACL_HBM_MEM, &free_bytes, &total_bytes) != ascend::kAclSuccess ||
        total_bytes == 0) {
      if (const aclError rc = acl_.get_mem_info(ACL_DDR_MEM, &free_bytes, &total_bytes);
          rc != ascend::kAclSuccess) {
        return unavailable(Acl("aclrtGetMemInfo", rc, index));
      }
    }
    const char* soc = acl_.soc_name != nullptr ? acl_.soc_name() : nullptr;
    device.properties.index = index;
    device.properties.name = soc != nullptr && *soc != '\0' ? soc : "Ascend";
    device.properties.vendor = "huawei";
    device.properties.memory_bytes = total_bytes;
    device.properties.retire_granularity = kRetireGranularity;
    device.reporter = std::make_unique<ReportThread>(acl_, device.context, this, index);
  }

  LoadOperatorLibrary(options);

  auto monitor = ascend::DcmiMonitor::Create(
      options.dcmi_library, LogicIds(options.visible_devices, static_cast<int>(count)));
  if (!monitor) {
    RASD_LOG_INFO("ascend: {}; running without DCMI health polling", monitor.error().message);
    return {};
  }
  dcmi_ = std::move(*monitor);
  for (auto& device : devices_) {
    device->properties.pci_bdf = dcmi_->PciBdf(device->index);
    device->properties.uuid = dcmi_->Uuid(device->index);
  }
  if (dcmi_->MappedDevices() == 0) {
    RASD_LOG_INFO("ascend: DCMI knows none of the {} ACL devices; running without health polling",
                 count);
    dcmi_.reset();
    return {};
  }
  dcmi_->Start(options.health_poll, [this](DriverErrorEvent event) { Emit(std::move(event)); });
  return {};
}

AscendDriverImpl::~AscendDriverImpl() {
  if (dcmi_) dcmi_->Stop();
  dcmi_.reset();
  std::unordered_map<std::uint64_t, std::shared_ptr<StreamState>> streams;
  std::unordered_map<std::uint64_t, std::shared_ptr<EventState>> events;
  {
    std::unique_lock lock(handles_mutex_);
    streams.swap(streams_);
    events.swap(events_);
  }
  const Error destroyed{ErrorCode::kAborted, "Ascend driver destroyed"};
  for (auto& [value, stream] : streams) FailStream(*stream, destroyed);
  for (auto& device : devices_) {
    std::unique_lock lock(device->gate);
    // Streams are drained and unsubscribed while the report thread still
    // runs their callbacks.
    if (device->context != nullptr && !device->lost) {
      (void)acl_.set_current_context(device->context);
      for (auto& [value, stream] : streams) {
        if (stream->device == device->index) DestroyAclStream(*device, *stream);
      }
      for (auto& [value, event] : events) {
        if (event->device == device->index && event->acl != nullptr) {
          (void)acl_.destroy_event(event->acl);
        }
      }
      {
        std::lock_guard memory_lock(device->memory_mutex);
        for (auto& [base, reservation] : device->reservations) {
          if (!reservation.lost) (void)acl_.free_device(reservation.raw);
        }
        device->reservations.clear();
      }
      device->staging->Trim(0);
    }
    // The report thread stops outside the gate: a callback it is running
    // may call into the driver, which takes the gate.
    lock.unlock();
    if (device->reporter) device->reporter->Stop();
    device->reporter.reset();
    lock.lock();
    if (device->context != nullptr) (void)acl_.destroy_context(device->context);
    device->context = nullptr;
    if (device->acl_device_set) (void)acl_.reset_device(device->index);
  }
  if (initialized_ && owns_init_) (void)acl_.finalize();
}

void AscendDriverImpl::RunHostWork(std::uint64_t id) {
  std::optional<HostWork> work = TakeHostWork(id);
  if (!work) return;  // failed already (abort, reset, error)
  auto stream = FindStream(StreamHandle{work->stream});
  Status status =
      stream ? (*stream)->Current() : Status(Fail(ErrorCode::kAborted, "stream destroyed"));
  DeviceState& device = *devices_[static_cast<std::size_t>(work->device)];
  switch (work->kind) {
    case HostWork::Kind::kCallback:
      if (work->callback) work->callback(status);
      break;
    case HostWork::Kind::kCopyOut:
      // Checked and copied under the stream's mutex: once an abort or a
      // destroy has failed the stream, no copy-out into the caller's buffer
      // runs or starts, so the caller may free it.
      if (stream) {
        std::lock_guard lock((*stream)->mutex);
        if (!(*stream)->error) std::memcpy(work->host_dst, work->staging.data, work->bytes);
      }
      device.staging->Release(work->staging);
      break;
    case HostWork::Kind::kReleaseStaging:
      device.staging->Release(work->staging);
      break;
  }
}

Result<DeviceAddress> AscendDriverImpl::ReserveMemory(int device_index, std::uint64_t bytes) {
  auto device = GetDevice(device_index);
  if (!device) return Fail(device.error());
  if (bytes == 0) return Fail(ErrorCode::kInvalidArgument, "cannot reserve 0 bytes");
  DeviceAddress base = 0;
  Status reserved = WithDevice(**device, [&]() -> Status {
    auto made = ReserveInContext(**device, bytes);
    if (!made) return Fail(made.error());
    base = *made;
    return {};
  });
  if (!reserved) return Fail(reserved.error());
  return base;
}

Status AscendDriverImpl::ReleaseMemory(int device_index, DeviceAddress base) {
  auto device = GetDevice(device_index);
  if (!device) return Fail(device.error());
  DeviceState& d = **device;
  // Waits out a reset, which frees every reservation of the device.
  std::shared_lock gate(d.gate);
  Reservation reservation;
  {
    std::lock_guard lock(d.memory_mutex);
    auto it = d.reservations.find(base);
    if (it == d.reservations.end()) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("device {}: 0x{:x} is not a reservation", device_index, base));
    }
    reservation = it->second;
    d.reservations.erase(it);
  }
  if (reservation.lost || d.lost) return {};  // gone with the context
  if (const aclError rc = acl_.set_current_context(d.context); rc != ascend::kAclSuccess) {
    return Fail(Acl("aclrtSetCurrentContext", rc, device_index));
  }
  if (const aclError rc = acl_.free_device(reservation.raw); rc != ascend::kAclSuccess) {
    return Fail(Acl("aclrtFree", rc, device_index));
  }
  return {};
}

Result<StreamHandle> AscendDriverImpl::CreateStream(int device_index) {
  auto device = GetDevice(device_index);
  if (!device) return Fail(device.error());
  auto stream =
      std::make_shared<StreamState>(StreamHandle{next_handle_.fetch_add(1)}, device_index);
  Status created = WithDevice(**device, [&]() -> Status {
    if (auto made = MakeAclStream(**device, *stream); !made) return made;
    // Published under the gate, so a reset sees the stream with its ACL
    // stream or not at all.
    std::unique_lock lock(handles_mutex_);
    streams_.emplace(stream->handle.value, stream);
    return {};
  });
  if (!created) return Fail(created.error());
  return stream->handle;
}

Status AscendDriverImpl::DestroyStream(StreamHandle handle) {
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  FailStream(**stream, Error{ErrorCode::kAborted, "stream destroyed"});
  DeviceState& device = *devices_[static_cast<std::size_t>((*stream)->device)];
  // Under the gate (waiting out a reset), so that a reset either ends this
  // ACL stream itself or never sees it.
  std::shared_lock gate(device.gate);
  {
    std::unique_lock lock(handles_mutex_);
    streams_.erase(handle.value);
  }
  if (device.lost) return {};  // its context is gone, and the stream with it
  if (const aclError rc = acl_.set_current_context(device.context); rc != ascend::kAclSuccess) {
    return Fail(Acl("aclrtSetCurrentContext", rc, device.index));
  }
  DestroyAclStream(device, **stream);
  return {};
}

Status AscendDriverImpl::CopyHostToDevice(StreamHandle handle, DeviceAddress dst, const void* src,
                                          std::uint64_t bytes) {
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  StreamState& s = **stream;
  if (auto current = s.Current(); !current) return current;
  if (bytes == 0) return {};
  DeviceState& device = *devices_[static_cast<std::size_t>(s.device)];
  return WithDevice(device, [&]() -> Status {
    if (auto range = CheckRange(device, dst, bytes); !range) return range;
    PinnedBuffer staging;
    if (const aclError rc = device.staging->Acquire(bytes, &staging); rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtMallocHost", rc, s.device));
    }
    // The source is copied now: the caller may reuse it at once.
    std::memcpy(staging.data, src, bytes);
    if (const aclError rc = acl_.memcpy_async(ToPointer(dst), bytes, staging.data, bytes,
                                              ACL_MEMCPY_HOST_TO_DEVICE, s.acl);
        rc != ascend::kAclSuccess) {
      device.staging->Release(staging);
      return Fail(Acl("aclrtMemcpyAsync", rc, s.device));
    }
    const std::uint64_t id = AddHostWork({.kind = HostWork::Kind::kReleaseStaging,
                                          .stream = handle.value,
                                          .device = s.device,
                                          .staging = staging});
    if (auto current = RecheckAfterFiling(s, id); !current) return current;
    if (const aclError rc =
            acl_.launch_callback(&HostWorkTrampoline, HostWorkId(id), ACL_CALLBACK_NO_BLOCK, s.acl);
        rc != ascend::kAclSuccess) {
      // The copy is queued; only the staging buffer's return is not.
      if (auto work = TakeHostWork(id)) {
        std::lock_guard lock(s.mutex);
        s.quarantine.push_back(work->staging);
      }
    }
    return {};
  });
}

Status AscendDriverImpl::CopyDeviceToHost(StreamHandle handle, void* dst, DeviceAddress src,
                                          std::uint64_t bytes) {
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  StreamState& s = **stream;
  if (auto current = s.Current(); !current) return current;
  if (bytes == 0) return {};
  DeviceState& device = *devices_[static_cast<std::size_t>(s.device)];
  return WithDevice(device, [&]() -> Status {
    if (auto range = CheckRange(device, src, bytes); !range) return range;
    PinnedBuffer staging;
    if (const aclError rc = device.staging->Acquire(bytes, &staging); rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtMallocHost", rc, s.device));
    }
    if (const aclError rc = acl_.memcpy_async(staging.data, bytes, ToPointer(src), bytes,
                                              ACL_MEMCPY_DEVICE_TO_HOST, s.acl);
        rc != ascend::kAclSuccess) {
      device.staging->Release(staging);
      return Fail(Acl("aclrtMemcpyAsync", rc, s.device));
    }
    // Copied out to `dst` in stream order, by a callback that holds the
    // stream until it is done.
    const std::uint64_t id = AddHostWork({.kind = HostWork::Kind::kCopyOut,
                                          .stream = handle.value,
                                          .device = s.device,
                                          .staging = staging,
                                          .host_dst = dst,
                                          .bytes = bytes});
    if (auto current = RecheckAfterFiling(s, id); !current) return current;
    if (const aclError rc =
            acl_.launch_callback(&HostWorkTrampoline, HostWorkId(id), ACL_CALLBACK_BLOCK, s.acl);
        rc != ascend::kAclSuccess) {
      if (auto work = TakeHostWork(id)) {
        std::lock_guard lock(s.mutex);
        s.quarantine.push_back(work->staging);
      }
      return Fail(Acl("aclrtLaunchCallback", rc, s.device));
    }
    return {};
  });
}

Status AscendDriverImpl::EnsurePeerAccess(int from, int to) {
  std::lock_guard lock(peer_mutex_);
  if (auto known = peer_access_.find({from, to}); known != peer_access_.end()) {
    if (known->second) return {};
    return Fail(ErrorCode::kNotSupported,
                fmt::format("device {} cannot copy to device {}: no peer access", from, to));
  }
  if (acl_.can_access_peer == nullptr || acl_.enable_peer_access == nullptr) {
    peer_access_[{from, to}] = false;
    return Fail(ErrorCode::kNotSupported,
                fmt::format("device {} cannot copy to device {}: {} has no peer access API", from,
                            to, library_.name()));
  }
  std::int32_t can_access = 0;
  DeviceState& source = *devices_[static_cast<std::size_t>(from)];
  DeviceState& target = *devices_[static_cast<std::size_t>(to)];
  Status asked = WithDevice(source, [&]() -> Status {
    if (const aclError rc = acl_.can_access_peer(&can_access, from, to);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtDeviceCanAccessPeer", rc, from));
    }
    return {};
  });
  if (!asked) return asked;
  if (can_access == 0) {
    peer_access_[{from, to}] = false;
    return Fail(ErrorCode::kNotSupported,
                fmt::format("device {} cannot copy to device {}: aclrtDeviceCanAccessPeer says no "
                            "peer access between them",
                            from, to));
  }
  // Enabled from both sides: the copy runs on the source's stream and
  // writes into the target's memory.
  for (const auto& side : {std::pair{&source, to}, std::pair{&target, from}}) {
    DeviceState& self = *side.first;
    const int peer = side.second;
    Status enabled = WithDevice(self, [&]() -> Status {
      if (const aclError rc = acl_.enable_peer_access(peer, 0); rc != ascend::kAclSuccess) {
        return Fail(Acl("aclrtDeviceEnablePeerAccess", rc, self.index));
      }
      return {};
    });
    if (!enabled) return enabled;
  }
  peer_access_[{from, to}] = true;
  peer_access_[{to, from}] = true;
  return {};
}

Status AscendDriverImpl::CopyDeviceToDevice(StreamHandle handle, DeviceAddress dst, int dst_device,
                                            DeviceAddress src, std::uint64_t bytes) {
  auto target = GetDevice(dst_device);
  if (!target) return Fail(target.error());
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  StreamState& s = **stream;
  if (auto current = s.Current(); !current) return current;
  if (bytes == 0) return {};
  if (auto range = CheckRange(**target, dst, bytes); !range) return range;
  if (dst_device != s.device) {
    if (auto peer = EnsurePeerAccess(s.device, dst_device); !peer) return peer;
  }
  DeviceState& device = *devices_[static_cast<std::size_t>(s.device)];
  return WithDevice(device, [&]() -> Status {
    if (auto range = CheckRange(device, src, bytes); !range) return range;
    if (const aclError rc = acl_.memcpy_async(ToPointer(dst), bytes, ToPointer(src), bytes,
                                              ACL_MEMCPY_DEVICE_TO_DEVICE, s.acl);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtMemcpyAsync", rc, s.device));
    }
    return {};
  });
}

Status AscendDriverImpl::EnqueueCallback(StreamHandle handle, StreamCallback callback) {
  if (!callback) return Fail(ErrorCode::kInvalidArgument, "empty callback");
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  StreamState& s = **stream;
  if (auto current = s.Current(); !current) return current;
  const std::uint64_t id = AddHostWork({.kind = HostWork::Kind::kCallback,
                                        .stream = handle.value,
                                        .device = s.device,
                                        .callback = std::move(callback)});
  if (auto current = RecheckAfterFiling(s, id); !current) return current;
  DeviceState& device = *devices_[static_cast<std::size_t>(s.device)];
  Status launched = WithDevice(device, [&]() -> Status {
    if (const aclError rc =
            acl_.launch_callback(&HostWorkTrampoline, HostWorkId(id), ACL_CALLBACK_BLOCK, s.acl);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtLaunchCallback", rc, s.device));
    }
    return {};
  });
  // Not queued: unless an abort or reset took the callback meanwhile (and
  // told it so), it never runs and the caller hears why.
  if (!launched && !TakeHostWork(id)) return {};
  return launched;
}

void AscendDriverImpl::LoadOperatorLibrary(const AscendDriverOptions& options) {
  // Beside libascendcl when that was given as a path (CANN installs both in
  // its lib64), else by soname.
  auto beside_acl = [&](const std::string& soname) {
    const auto slash = options.acl_library.rfind('/');
    if (slash == std::string::npos) return soname;
    return options.acl_library.substr(0, slash + 1) + soname;
  };
  const std::string op_library =
      options.op_library.empty() ? beside_acl("libopapi.so") : options.op_library;
  const std::string base_library =
      options.nnopbase_library.empty() ? beside_acl("libnnopbase.so") : options.nnopbase_library;
  auto loaded = ascend::AclnnOps::Load(op_library, base_library);
  if (!loaded) {
    ops_error_ = fmt::format("no operator library: {}", loaded.error().message);
    RASD_LOG_INFO("ascend: {}; kernels are unavailable, memory, copies and streams serve",
                  ops_error_);
    return;
  }
  ops_ = std::move(*loaded);
  if (!ops_->Missing().empty()) {
    RASD_LOG_INFO("ascend: {}: {} kernels through aclnn; unavailable: {}", ops_->Name(),
                  ops_->Kernels().size(), fmt::join(ops_->Missing(), "; "));
  } else {
    RASD_LOG_INFO("ascend: {}: {} kernels through aclnn", ops_->Name(), ops_->Kernels().size());
  }
}

Status AscendDriverImpl::LaunchKernel(StreamHandle handle, std::string_view kernel,
                                      const LaunchConfig&, std::span<const KernelArg> args) {
  // Grid and block mean nothing to an aclnn operator: it tiles itself.
  if (!ops_) {
    return Fail(ErrorCode::kNotSupported,
                fmt::format("kernel '{}' cannot run on Ascend: {}", kernel, ops_error_));
  }
  if (auto checked = ops_->Check(kernel, args); !checked) return checked;
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  StreamState& s = **stream;
  if (auto current = s.Current(); !current) return current;
  DeviceState& device = *devices_[static_cast<std::size_t>(s.device)];
  return WithDevice(device, [&]() -> Status {
    for (const auto& [address, bytes] : cuda::KernelBuffers(kernel, args)) {
      if (bytes == 0) continue;
      if (auto range = CheckRange(device, address, bytes, kTensorElementAlignment,
                                  fmt::format("an fp32 tensor of kernel '{}'", kernel));
          !range) {
        return range;
      }
    }
    std::lock_guard lock(s.workspace_mutex);
    // A destroy that failed the stream meanwhile has freed its memory.
    if (auto current = s.Current(); !current) return current;
    if (kernel == "empty" && s.scratch == 0) {
      auto scratch = ReserveInContext(device, kScratchBytes);
      if (!scratch) return Fail(scratch.error());
      s.scratch = *scratch;
    }
    auto launch = ops_->Prepare(kernel, args, s.scratch);
    if (!launch) {
      return Fail(launch.error().code,
                  fmt::format("device {}: {}{}", s.device, launch.error().message, RecentAclMessage()));
    }
    if (launch->Empty()) return {};
    const std::uint64_t need = launch->WorkspaceBytes();
    if (need > s.workspace_bytes) {
      const std::uint64_t bytes = std::max(std::bit_ceil(need), kMinWorkspaceBytes);
      auto grown = ReserveInContext(device, bytes);
      if (!grown) return Fail(grown.error());
      // Queued operators may still use the old one: freed after a synchronize.
      if (s.workspace != 0) s.retired.emplace_back(s.workspace, s.launches);
      s.workspace = *grown;
      s.workspace_bytes = bytes;
    }
    const aclnnStatus status =
        launch->Run(need > 0 ? ToPointer(s.workspace) : nullptr, need, s.acl);
    ++s.launches;
    if (status != ascend::kAclnnSuccess) {
      ReportRuntimeCode(status, s.device, handle, launch->Operator());
      return Fail(ascend::AclnnErrorCode(status),
                  fmt::format("kernel '{}' on device {}: {} failed with status {}{}", kernel,
                              s.device, launch->Operator(), status, RecentAclMessage()));
    }
    return {};
  });
}

Result<EventHandle> AscendDriverImpl::CreateEvent(int device_index) {
  auto device = GetDevice(device_index);
  if (!device) return Fail(device.error());
  auto event = std::make_shared<EventState>(EventHandle{next_handle_.fetch_add(1)}, device_index);
  Status created = WithDevice(**device, [&]() -> Status {
    if (const aclError rc = acl_.create_event(&event->acl); rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtCreateEvent", rc, device_index));
    }
    std::unique_lock lock(handles_mutex_);
    events_.emplace(event->handle.value, event);
    return {};
  });
  if (!created) return Fail(created.error());
  return event->handle;
}

Status AscendDriverImpl::DestroyEvent(EventHandle handle) {
  auto event = FindEvent(handle);
  if (!event) return Fail(event.error());
  DeviceState& device = *devices_[static_cast<std::size_t>((*event)->device)];
  std::shared_lock gate(device.gate);  // as DestroyStream
  {
    std::unique_lock lock(handles_mutex_);
    events_.erase(handle.value);
  }
  if (device.lost || (*event)->acl == nullptr) return {};
  if (const aclError rc = acl_.set_current_context(device.context); rc != ascend::kAclSuccess) {
    return Fail(Acl("aclrtSetCurrentContext", rc, device.index));
  }
  if (const aclError rc = acl_.destroy_event((*event)->acl); rc != ascend::kAclSuccess) {
    return Fail(Acl("aclrtDestroyEvent", rc, device.index));
  }
  return {};
}

Status AscendDriverImpl::RecordEvent(EventHandle event_handle, StreamHandle stream_handle) {
  auto event = FindEvent(event_handle);
  if (!event) return Fail(event.error());
  auto stream = FindStream(stream_handle);
  if (!stream) return Fail(stream.error());
  if ((*event)->device != (*stream)->device) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("an event of device {} cannot be recorded on a stream of device {}: "
                            "ACL events belong to their device's context",
                            (*event)->device, (*stream)->device));
  }
  if (auto current = (*stream)->Current(); !current) return current;
  DeviceState& device = *devices_[static_cast<std::size_t>((*stream)->device)];
  return WithDevice(device, [&]() -> Status {
    if (const aclError rc = acl_.record_event((*event)->acl, (*stream)->acl);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtRecordEvent", rc, device.index));
    }
    std::lock_guard lock((*event)->mutex);
    ++(*event)->recorded;
    (*event)->recorded_on = *stream;
    return {};
  });
}

Status AscendDriverImpl::StreamWaitEvent(StreamHandle stream_handle, EventHandle event_handle) {
  auto stream = FindStream(stream_handle);
  if (!stream) return Fail(stream.error());
  auto event = FindEvent(event_handle);
  if (!event) return Fail(event.error());
  if (auto current = (*stream)->Current(); !current) return current;
  {
    std::lock_guard lock((*event)->mutex);
    if ((*event)->recorded == 0) return {};  // never recorded: nothing to wait for (as CUDA)
  }
  DeviceState& device = *devices_[static_cast<std::size_t>((*stream)->device)];
  DeviceState& event_device = *devices_[static_cast<std::size_t>((*event)->device)];
  return WithDevice(device, [&]() -> Status {
    // The event's handle is guarded by its own device's gate.
    std::shared_lock<std::shared_mutex> other;
    if (&event_device != &device) {
      if (event_device.resetting.load(std::memory_order_acquire)) {
        return Fail(ErrorCode::kAborted,
                    fmt::format("device {} is being reset", event_device.index));
      }
      other = std::shared_lock(event_device.gate);
      if (event_device.lost) return Fail(*event_device.lost);
    }
    if (const aclError rc = acl_.stream_wait_event((*stream)->acl, (*event)->acl);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtStreamWaitEvent", rc, device.index));
    }
    return {};
  });
}

Status AscendDriverImpl::SynchronizeEvent(EventHandle handle, std::chrono::nanoseconds timeout) {
  auto event = FindEvent(handle);
  if (!event) return Fail(event.error());
  EventState& e = **event;
  DeviceState& device = *devices_[static_cast<std::size_t>(e.device)];
  const auto deadline = common::Deadline::After(timeout);
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    std::shared_ptr<StreamState> recorded_on;
    {
      std::lock_guard lock(e.mutex);
      if (e.recorded == 0) return {};
      recorded_on = e.recorded_on.lock();
    }
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    aclError rc = ascend::kAclSuccess;
    Status queried = WithDevice(device, [&]() -> Status {
      rc = acl_.query_event_status(e.acl, &status);
      return {};
    });
    if (!queried) return queried;
    if (rc != ascend::kAclSuccess && rc != ascend::kAclErrorRtEventNotComplete) {
      const Error error = Acl("aclrtQueryEventStatus", rc, e.device);
      std::optional<StreamHandle> stream;
      if (recorded_on) stream = recorded_on->handle;
      ReportRuntimeCode(rc, e.device, stream, "aclrtQueryEventStatus");
      return Fail(error);
    }
    if (rc == ascend::kAclSuccess && status == ACL_EVENT_RECORDED_STATUS_COMPLETE) return {};
    // Work dropped by an abort, or failed on the device, never completes
    // the event: say why instead of waiting for it.
    if (recorded_on) {
      if (auto current = recorded_on->Current(); !current) return current;
    }
    if (deadline.Expired()) {
      return Fail(
          ErrorCode::kTimeout,
          fmt::format("event on device {} did not complete within {} ms", e.device,
                      std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(pause, deadline.Left()));
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

Result<std::chrono::nanoseconds> AscendDriverImpl::ElapsedTime(EventHandle start, EventHandle end) {
  auto first = FindEvent(start);
  if (!first) return Fail(first.error());
  auto second = FindEvent(end);
  if (!second) return Fail(second.error());
  if ((*first)->device != (*second)->device) {
    return Fail(ErrorCode::kInvalidArgument, "elapsed time between events of different devices");
  }
  for (const auto& event : {*first, *second}) {
    std::lock_guard lock(event->mutex);
    if (event->recorded == 0) return Fail(ErrorCode::kUnavailable, "event has not completed");
  }
  float milliseconds = 0.0f;
  DeviceState& device = *devices_[static_cast<std::size_t>((*first)->device)];
  Status measured = WithDevice(device, [&]() -> Status {
    for (const auto& event : {*first, *second}) {
      aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
      if (const aclError rc = acl_.query_event_status(event->acl, &status);
          rc != ascend::kAclSuccess && rc != ascend::kAclErrorRtEventNotComplete) {
        return Fail(Acl("aclrtQueryEventStatus", rc, device.index));
      }
      if (status != ACL_EVENT_RECORDED_STATUS_COMPLETE) {
        return Fail(ErrorCode::kUnavailable, "event has not completed");
      }
    }
    if (const aclError rc = acl_.event_elapsed_time(&milliseconds, (*first)->acl, (*second)->acl);
        rc != ascend::kAclSuccess) {
      return Fail(Acl("aclrtEventElapsedTime", rc, device.index));
    }
    return {};
  });
  if (!measured) return Fail(measured.error());
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double, std::milli>(milliseconds));
}

Status AscendDriverImpl::SynchronizeStream(StreamHandle handle, std::chrono::nanoseconds timeout) {
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  StreamState& s = **stream;
  DeviceState& device = *devices_[static_cast<std::size_t>(s.device)];
  const auto deadline = common::Deadline::After(timeout);
  std::uint64_t epoch = 0;
  {
    std::lock_guard lock(s.mutex);
    if (s.error) return Fail(*s.error);
    epoch = s.epoch;
  }
  std::uint64_t launches = 0;  // operators queued so far: done once this wait succeeds
  {
    std::lock_guard lock(s.workspace_mutex);
    launches = s.launches;
  }
  // Where the library has aclrtStreamQuery, a wait polls it (with a
  // back-off up to 1 ms) and synchronizes only a finished stream, to
  // collect its status: CANN logs every timed-out synchronize, with a
  // device snapshot, so waiting in timed slices would flood its logs.
  // Otherwise it waits in slices. Either way an abort or a reset is seen
  // within a slice.
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    aclError rc = ascend::kAclSuccess;
    bool pending = false;
    Status waited = WithDevice(device, [&]() -> Status {
      if (acl_.stream_query != nullptr) {
        aclrtStreamStatus status = ACL_STREAM_STATUS_COMPLETE;
        if (acl_.stream_query(s.acl, &status) == ascend::kAclSuccess &&
            status == ACL_STREAM_STATUS_NOT_READY) {
          pending = true;
          return {};
        }
      }
      const auto remaining = std::chrono::milliseconds(deadline.PollMillis());
      const auto slice = std::clamp(remaining, std::chrono::milliseconds(1), kWaitSlice);
      rc = acl_.synchronize_stream(s.acl, static_cast<std::int32_t>(slice.count()));
      return {};
    });
    {
      std::lock_guard lock(s.mutex);
      if (s.error) return Fail(*s.error);
      if (s.epoch != epoch) {
        return Fail(ErrorCode::kAborted,
                    fmt::format("device {} was reset while waiting for its stream", s.device));
      }
    }
    if (!waited) return waited;
    if (pending) {
      if (deadline.Expired()) {
        return Fail(
            ErrorCode::kTimeout,
            fmt::format("stream on device {} did not finish within {} ms", s.device,
                        std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
      }
      if (pause.count() == 0) {
        std::this_thread::yield();
        pause = std::chrono::microseconds(10);
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
      }
      continue;
    }
    if (rc == ascend::kAclSuccess) {
      (void)WithDevice(device, [&]() -> Status {
        ReleaseRetiredWorkspaces(device, s, launches);
        return {};
      });
      return {};
    }
    if (rc == ascend::kAclErrorRtStreamSyncTimeout || rc == ascend::kAclErrorRtWaitTimeout) {
      if (deadline.Expired()) {
        return Fail(
            ErrorCode::kTimeout,
            fmt::format("stream on device {} did not finish within {} ms", s.device,
                        std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
      }
      continue;
    }
    const Error error = Acl("aclrtSynchronizeStreamWithTimeout", rc, s.device);
    ReportRuntimeCode(rc, s.device, handle, "aclrtSynchronizeStreamWithTimeout");
    {
      std::lock_guard lock(s.mutex);
      if (!s.error) s.error = error;
    }
    FailHostWork(s, TakeHostWorkOf(handle.value), error);
    return Fail(error);
  }
}

Status AscendDriverImpl::AbortStream(StreamHandle handle, const Error& reason) {
  auto stream = FindStream(handle);
  if (!stream) return Fail(stream.error());
  FailStream(**stream, reason);
  if (acl_.stream_abort != nullptr) {
    DeviceState& device = *devices_[static_cast<std::size_t>((*stream)->device)];
    (void)WithDevice(device, [&]() -> Status {
      if (const aclError rc = acl_.stream_abort((*stream)->acl); rc != ascend::kAclSuccess) {
        RASD_LOG_WARN("ascend: {}", Acl("aclrtStreamAbort", rc, device.index).message);
      }
      return {};
    });
  }
  return {};
}

Result<MemoryAfterReset> AscendDriverImpl::ResetDevice(int device_index) {
  auto found = GetDevice(device_index);
  if (!found) return Fail(found.error());
  DeviceState& device = **found;
  std::lock_guard reset_lock(device.reset_mutex);
  device.resetting.store(true, std::memory_order_release);
  const Error reason{ErrorCode::kAborted, fmt::format("device {} reset", device_index)};

  // 1. Pending host work fails now; waiters see the new epoch.
  for (auto& stream : StreamsOf(device_index)) {
    {
      std::lock_guard lock(stream->mutex);
      ++stream->epoch;
      if (!stream->aborted) stream->error.reset();
    }
    FailHostWork(*stream, TakeHostWorkOf(stream->handle.value), reason);
  }
  // 2. The report thread stops outside the gate: a callback it is running
  //    may call the driver.
  {
    std::shared_lock lock(device.gate);
    if (device.reporter) device.reporter->Stop();
  }

  Status result;
  std::vector<std::pair<std::shared_ptr<StreamState>, std::vector<HostWork>>> late;
  {
    std::unique_lock lock(device.gate);
    auto streams = StreamsOf(device_index);
    auto events = EventsOf(device_index);
    // Work queued by calls that were in flight during step 1.
    for (auto& stream : streams) late.emplace_back(stream, TakeHostWorkOf(stream->handle.value));
    if (device.context != nullptr && !device.lost) {
      (void)acl_.set_current_context(device.context);
      for (auto& stream : streams) {
        DestroyAclStream(device, *stream);
        stream->acl = nullptr;
      }
      for (auto& event : events) {
        if (event->acl != nullptr) (void)acl_.destroy_event(event->acl);
        event->acl = nullptr;
      }
      device.staging->Trim(0);
      (void)acl_.destroy_context(device.context);
    }
    device.context = nullptr;
    device.reporter.reset();
    {
      std::lock_guard memory_lock(device.memory_mutex);
      for (auto& [base, reservation] : device.reservations) reservation.lost = true;
    }
    auto reset = [&]() -> Status {
      if (device.acl_device_set) {
        if (const aclError rc = acl_.reset_device(device_index); rc != ascend::kAclSuccess) {
          return Fail(Acl("aclrtResetDevice", rc, device_index));
        }
        device.acl_device_set = false;
      }
      if (const aclError rc = acl_.set_device(device_index); rc != ascend::kAclSuccess) {
        return Fail(Acl("aclrtSetDevice", rc, device_index));
      }
      device.acl_device_set = true;
      aclrtContext context = nullptr;
      if (const aclError rc = acl_.create_context(&context, device_index);
          rc != ascend::kAclSuccess) {
        return Fail(Acl("aclrtCreateContext", rc, device_index));
      }
      device.context = context;
      if (const aclError rc = acl_.set_current_context(context); rc != ascend::kAclSuccess) {
        return Fail(Acl("aclrtSetCurrentContext", rc, device_index));
      }
      device.reporter = std::make_unique<ReportThread>(acl_, context, this, device_index);
      for (auto& stream : streams) {
        if (auto made = MakeAclStream(device, *stream); !made) return made;
      }
      for (auto& event : events) {
        if (const aclError rc = acl_.create_event(&event->acl); rc != ascend::kAclSuccess) {
          event->acl = nullptr;
          return Fail(Acl("aclrtCreateEvent", rc, device_index));
        }
        std::lock_guard event_lock(event->mutex);
        event->recorded = 0;
        event->recorded_on.reset();
      }
      return {};
    };
    result = reset();
    if (!result) {
      device.lost = Error{ErrorCode::kDeviceFault,
                          fmt::format("device {} could not be reset and is unusable: {}",
                                      device_index, result.error().message)};
      RASD_LOG_ERROR("ascend: {}", device.lost->message);
    } else {
      device.lost.reset();
    }
  }
  device.resetting.store(false, std::memory_order_release);
  for (auto& [stream, work] : late) FailHostWork(*stream, std::move(work), reason);
  {
    std::lock_guard lock(peer_mutex_);
    std::erase_if(peer_access_, [&](const auto& entry) {
      return entry.first.first == device_index || entry.first.second == device_index;
    });
  }
  if (!result) return Fail(*device.lost);
  return MemoryAfterReset::kFreed;  // aclrtResetDevice frees everything the device held
}

}  // namespace

Result<std::unique_ptr<Driver>> CreateAscendDriver(const AscendDriverOptions& options) {
  auto library = common::DynamicLibrary::Open(options.acl_library);
  if (!library) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("Ascend backend unavailable: {}", library.error().message));
  }
  auto acl = ascend::AclApi::Load(*library);
  if (!acl) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("Ascend backend unavailable: {}", acl.error().message));
  }
  auto driver = std::make_unique<AscendDriverImpl>(std::move(*library), *acl);
  if (auto ready = driver->Init(options); !ready) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("Ascend backend unavailable: {}", ready.error().message));
  }
  return std::unique_ptr<Driver>(std::move(driver));
}

}  // namespace rasd::drivers
