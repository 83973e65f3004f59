#include "rasd/drivers_shim/cuda_driver.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "cuda_api.h"
#include "cuda_fatbin.h"
#include "kernel_geometry.h"
#include "sim_kernels.h"
#include "rasd/common/real_time.h"
#include "rasd/common/logging.h"

namespace rasd::drivers {
namespace cu {

Result<Api> Api::Load(const std::string& library_name) {
  auto library = common::DynamicLibrary::Open(library_name);
  if (!library) return Fail(library.error());
  Api api{.library = std::move(*library)};
  const auto& lib = api.library;
  // Newer symbol first where CUDA versioned an entry point after 11.x.
  auto either = [&](auto& target, const char* preferred, const char* fallback) -> Status {
    if (lib.Bind(target, preferred)) return {};
    return lib.Bind(target, fallback);
  };
  const Status bindings[] = {
      lib.Bind(api.Init, "cuInit"),
      lib.Bind(api.DriverGetVersion, "cuDriverGetVersion"),
      lib.Bind(api.GetErrorName, "cuGetErrorName"),
      lib.Bind(api.DeviceGetCount, "cuDeviceGetCount"),
      lib.Bind(api.DeviceGet, "cuDeviceGet"),
      lib.Bind(api.DeviceGetName, "cuDeviceGetName"),
      lib.Bind(api.DeviceTotalMem, "cuDeviceTotalMem_v2"),
      lib.Bind(api.DeviceGetPciBusId, "cuDeviceGetPCIBusId"),
      either(api.DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
      lib.Bind(api.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      lib.Bind(api.PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
      lib.Bind(api.CtxSetCurrent, "cuCtxSetCurrent"),
      lib.Bind(api.CtxSynchronize, "cuCtxSynchronize"),
      lib.Bind(api.StreamCreate, "cuStreamCreate"),
      lib.Bind(api.StreamDestroy, "cuStreamDestroy_v2"),
      lib.Bind(api.StreamQuery, "cuStreamQuery"),
      lib.Bind(api.StreamWaitEvent, "cuStreamWaitEvent"),
      lib.Bind(api.StreamAddCallback, "cuStreamAddCallback"),
      lib.Bind(api.EventCreate, "cuEventCreate"),
      lib.Bind(api.EventDestroy, "cuEventDestroy_v2"),
      lib.Bind(api.EventRecord, "cuEventRecord"),
      lib.Bind(api.EventQuery, "cuEventQuery"),
      either(api.EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
      lib.Bind(api.MemAlloc, "cuMemAlloc_v2"),
      lib.Bind(api.MemFree, "cuMemFree_v2"),
      lib.Bind(api.MemHostAlloc, "cuMemHostAlloc"),
      lib.Bind(api.MemFreeHost, "cuMemFreeHost"),
      lib.Bind(api.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
      lib.Bind(api.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
      lib.Bind(api.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
      lib.Bind(api.MemcpyPeerAsync, "cuMemcpyPeerAsync"),
      lib.Bind(api.ModuleLoadData, "cuModuleLoadData"),
      lib.Bind(api.ModuleUnload, "cuModuleUnload"),
      lib.Bind(api.ModuleGetFunction, "cuModuleGetFunction"),
      lib.Bind(api.LaunchKernel, "cuLaunchKernel"),
  };
  for (const auto& bound : bindings) {
    if (!bound) {
      return Fail(ErrorCode::kUnavailable, fmt::format("{} is not a usable CUDA driver: {}",
                                                       library_name, bound.error().message));
    }
  }
  // Without it a sticky error is repaired only by restarting rasd.
  if (!either(api.PrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset")) {
    api.PrimaryCtxReset = nullptr;
  }
  return api;
}

std::string Api::Describe(const char* call, Code code) const {
  const char* name = nullptr;
  if (GetErrorName == nullptr || GetErrorName(code, &name) != kSuccess || name == nullptr) {
    name = "unknown CUDA error";
  }
  return fmt::format("{}: {} ({})", call, name, code);
}

}  // namespace cu

namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kRetireGranularity = 4096;
// Pinned staging buffers kept for reuse, per size class; beyond this a
// buffer is freed once its copy is done.
constexpr std::size_t kStagingCachedPerClass = 8;

ErrorCode CodeFor(cu::Code status) {
  switch (status) {
    case cu::kErrorInvalidValue:
    case cu::kErrorInvalidHandle:
    case cu::kErrorNotFound:
    case cu::kErrorInvalidDevice:
    case cu::kErrorLaunchOutOfResources:
      return ErrorCode::kInvalidArgument;
    case cu::kErrorOutOfMemory:
      return ErrorCode::kOutOfMemory;
    case cu::kErrorNotReady:
      return ErrorCode::kTimeout;  // not done yet: asked too early
    case cu::kErrorNoBinaryForGpu:
    case cu::kErrorInvalidPtx:
    case cu::kErrorNotPermitted:
    case cu::kErrorNotSupported:
      return ErrorCode::kNotSupported;
    case cu::kErrorStubLibrary:
    case cu::kErrorInsufficientDriver:
    case cu::kErrorNoDevice:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kDeviceFault;
  }
}

// The form nvidia-smi and NVML print: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string FormatUuid(const cu::Uuid& uuid) {
  std::string hex;
  for (unsigned char byte : uuid.bytes) hex += fmt::format("{:02x}", byte);
  return fmt::format("GPU-{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4),
                     hex.substr(16, 4), hex.substr(20));
}

struct StreamState : std::enable_shared_from_this<StreamState> {
  int device = 0;
  cu::Stream stream = nullptr;
  // Held shared by every CUDA call on `stream`, exclusively by the destroy:
  // no call ever gets a destroyed handle.
  std::shared_mutex use;
  bool destroyed = false;  // guarded by use
  std::atomic<bool> aborted{false};
  // Bumped by ResetDevice: a wait or callback that began before a reset
  // ends with kAborted, while work enqueued after it runs.
  std::atomic<std::uint64_t> resets{0};
  std::mutex mutex;
  std::optional<Error> abort_reason;  // guarded by mutex

  std::optional<Error> AbortReason() {
    if (!aborted.load(std::memory_order_acquire)) return std::nullopt;
    std::lock_guard lock(mutex);
    return abort_reason;
  }
};

struct EventState {
  int device = 0;
  cu::Event event = nullptr;
  std::shared_mutex use;   // as StreamState's
  bool destroyed = false;  // guarded by use
};

// Pinned host buffers for copies. cuMemcpy*Async from pageable memory is
// not asynchronous (a device-to-host copy returns only when it is done,
// behind everything queued before it), so copies go through these, as the
// Driver contract's "return before the work runs" needs. Release() runs on
// CUDA's callback threads and makes no CUDA call: buffers beyond the cache
// are freed later, by Acquire() on an ordinary thread.
class StagingPool {
 public:
  explicit StagingPool(const cu::Api& api) : api_(api) {}
  ~StagingPool() {
    std::lock_guard lock(mutex_);
    if (abandoned_) return;  // the driver is gone: the process's exit reclaims the buffers
    for (auto& [size, buffers] : free_)
      for (void* buffer : buffers) (void)api_.MemFreeHost(buffer);
    for (void* buffer : to_free_) (void)api_.MemFreeHost(buffer);
  }

  static std::size_t SizeClass(std::uint64_t bytes) {
    std::size_t size = 4096;
    while (size < bytes) size *= 2;
    return size;
  }

  // A pinned buffer of SizeClass(bytes); the caller's GPU context is current.
  Result<void*> Acquire(std::uint64_t bytes) {
    const std::size_t size = SizeClass(bytes);
    std::vector<void*> doomed;
    {
      std::lock_guard lock(mutex_);
      doomed.swap(to_free_);
      auto& buffers = free_[size];
      if (!buffers.empty()) {
        void* buffer = buffers.back();
        buffers.pop_back();
        for (void* old : doomed) (void)api_.MemFreeHost(old);
        return buffer;
      }
    }
    for (void* old : doomed) (void)api_.MemFreeHost(old);
    void* buffer = nullptr;
    if (cu::Code rc = api_.MemHostAlloc(&buffer, size, cu::kMemHostAllocPortable);
        rc != cu::kSuccess) {
      return Fail(CodeFor(rc), api_.Describe("cuMemHostAlloc", rc));
    }
    return buffer;
  }

  // The driver is going while a GPU still runs copies: from now on nothing
  // may call CUDA (the last copy may finish after the driver is gone).
  void Abandon() {
    std::lock_guard lock(mutex_);
    abandoned_ = true;
  }

  void Release(void* buffer, std::uint64_t bytes) {
    const std::size_t size = SizeClass(bytes);
    std::lock_guard lock(mutex_);
    auto& buffers = free_[size];
    if (buffers.size() < kStagingCachedPerClass) {
      buffers.push_back(buffer);
    } else {
      to_free_.push_back(buffer);
    }
  }

 private:
  const cu::Api& api_;
  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;  // guarded by mutex_
  std::vector<void*> to_free_;                      // guarded by mutex_
  bool abandoned_ = false;                          // guarded by mutex_
};

struct Reservation {
  cu::DevicePointer raw = 0;  // what cuMemAlloc returned
  std::uint64_t bytes = 0;
};

struct GpuState {
  int ordinal = 0;  // CUDA's
  cu::Device handle = 0;
  cu::Context context = nullptr;
  cu::Module module = nullptr;
  std::map<std::string, cu::Function, std::less<>> functions;
  DeviceProperties properties;
  std::map<DeviceAddress, Reservation> reservations;  // guarded by the driver's mutex
  bool ecc_reported = false;                          // guarded by the driver's mutex
  // A context reset freed the reservations and no ResetDevice has said so
  // yet (the one that reset failed after it): the next one that succeeds
  // says kFreed. Guarded by the driver's mutex.
  bool freed_unreported = false;
  // Pinned buffers belong to the context current when they were allocated,
  // and a context reset frees them: each GPU stages through its own. Read
  // under a stream's `use` (shared), replaced under every one of the GPU's
  // streams' `use` (exclusive).
  std::shared_ptr<StagingPool> staging;
  // Held shared by the calls that use the context without a stream or
  // event (reserve, release, create), exclusively by a context reset.
  std::unique_ptr<std::shared_mutex> context_gate = std::make_unique<std::shared_mutex>();
};

// A staged copy's host side, finished by a stream callback on CUDA's
// thread: copy out (device-to-host) and return the buffer. The copy-out
// happens under the stream's mutex and only while nobody has given up on
// the stream (abort, destroy, reset): once AbortStream or ResetDevice
// returns, no copy-out is running or will start, so the caller may free
// its buffer.
struct StagedCopy {
  std::shared_ptr<StagingPool> pool;
  std::shared_ptr<StreamState> stream;
  void* staging = nullptr;
  std::uint64_t bytes = 0;
  void* copy_out_to = nullptr;  // device-to-host: the caller's buffer
  std::uint64_t resets_at_enqueue = 0;

  static void Finish(cu::Stream, cu::Code status, void* user) {
    std::unique_ptr<StagedCopy> copy(static_cast<StagedCopy*>(user));
    if (copy->copy_out_to != nullptr && status == cu::kSuccess) {
      std::lock_guard lock(copy->stream->mutex);
      if (!copy->stream->abort_reason &&
          copy->stream->resets.load(std::memory_order_acquire) == copy->resets_at_enqueue) {
        std::memcpy(copy->copy_out_to, copy->staging, copy->bytes);
      }
    }
    copy->pool->Release(copy->staging, copy->bytes);
  }
};

struct CallbackHub;

// What CUDA holds for a stream callback: the callback itself stays in the
// hub (CallbackHub::in_cuda), so that a context reset can fail it.
struct CallbackTicket {
  std::shared_ptr<CallbackHub> hub;
  std::uint64_t id = 0;
};

struct CallbackBox {
  std::shared_ptr<CallbackHub> hub;
  std::shared_ptr<StreamState> stream;
  StreamCallback callback;
  std::uint64_t resets_at_enqueue = 0;
};

// Where CUDA's callback threads leave callbacks for the driver's thread.
// Shared with every pending callback, so that one CUDA runs after the
// driver is gone (a GPU that never finished) finds the hub, not freed
// memory.
struct CallbackHub {
  struct Pending {
    std::unique_ptr<CallbackBox> box;
    cu::Code status = cu::kSuccess;
  };
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Pending> pending;  // guarded by mutex
  bool stopping = false;        // guarded by mutex
  // Callbacks CUDA holds, by the id CUDA was given instead of a pointer: a
  // context reset drops them in CUDA and fails them here, and CUDA calling
  // one late finds it gone rather than freed memory. Guarded by mutex.
  std::unordered_map<std::uint64_t, std::unique_ptr<CallbackBox>> in_cuda;
  std::uint64_t next_id = 1;  // guarded by mutex
};

class CudaDriverImpl final : public Driver {
 public:
  explicit CudaDriverImpl(cu::Api api) : api_(std::move(api)) {}

  ~CudaDriverImpl() override {
    // Let the GPUs finish what they were given before their memory goes,
    // but not forever: a hung GPU must not hang rasd's exit.
    const std::set<int> busy = WaitForStreams(std::chrono::seconds(2));
    {
      std::lock_guard lock(hub_->mutex);
      hub_->stopping = true;
    }
    hub_->ready.notify_all();
    if (callback_thread_.joinable()) callback_thread_.join();
    std::lock_guard lock(mutex_);
    for (auto& [id, stream] : streams_) {
      if (busy.contains(stream->device) || stream->stream == nullptr) continue;
      (void)Use(stream->device);
      (void)api_.StreamDestroy(stream->stream);
    }
    for (auto& [id, event] : events_) {
      if (busy.contains(event->device) || event->event == nullptr) continue;
      (void)Use(event->device);
      (void)api_.EventDestroy(event->event);
    }
    for (std::size_t i = 0; i < gpus_.size(); ++i) {
      // A GPU still running work keeps its memory and context: freeing them
      // would block on it, or pull memory from under running kernels. The
      // process's exit reclaims them.
      if (busy.contains(static_cast<int>(i))) continue;
      auto& gpu = gpus_[i];
      (void)api_.CtxSetCurrent(gpu.context);
      for (auto& [base, reservation] : gpu.reservations) (void)api_.MemFree(reservation.raw);
      if (gpu.module != nullptr) (void)api_.ModuleUnload(gpu.module);
    }
    for (auto& gpu : gpus_) {
      if (!busy.empty()) gpu.staging->Abandon();
      gpu.staging.reset();  // pinned buffers, while the contexts exist
    }
    for (std::size_t i = 0; i < gpus_.size(); ++i) {
      if (!busy.contains(static_cast<int>(i))) (void)api_.PrimaryCtxRelease(gpus_[i].handle);
    }
  }

  Status Initialize(const std::string& library_name) {
    if (cu::Code rc = api_.Init(0); rc != cu::kSuccess) {
      if (rc == cu::kErrorStubLibrary) {
        return Fail(ErrorCode::kUnavailable,
                    fmt::format("{} is the CUDA toolkit's stub: no NVIDIA driver on this host ({})",
                                library_name, api_.Describe("cuInit", rc)));
      }
      return Fail(ErrorCode::kUnavailable, api_.Describe("cuInit", rc));
    }
    int count = 0;
    if (cu::Code rc = api_.DeviceGetCount(&count); rc != cu::kSuccess) {
      return Fail(ErrorCode::kUnavailable, api_.Describe("cuDeviceGetCount", rc));
    }
    if (count <= 0) return Fail(ErrorCode::kUnavailable, "the CUDA driver sees no GPU");
    const auto fatbin = cuda::KernelFatbin();
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      GpuState gpu{.ordinal = ordinal, .staging = std::make_shared<StagingPool>(api_)};
      if (cu::Code rc = api_.DeviceGet(&gpu.handle, ordinal); rc != cu::kSuccess) {
        RASD_LOG_ERROR("CUDA GPU {} left out: {}", ordinal, api_.Describe("cuDeviceGet", rc));
        continue;
      }
      if (cu::Code rc = api_.PrimaryCtxRetain(&gpu.context, gpu.handle); rc != cu::kSuccess) {
        // One GPU the driver cannot open must not take the others with it.
        RASD_LOG_ERROR("CUDA GPU {} left out: {}", ordinal,
                      api_.Describe("cuDevicePrimaryCtxRetain", rc));
        continue;
      }
      auto& properties = gpu.properties;
      properties.index = static_cast<int>(gpus_.size());
      properties.vendor = "nvidia";
      properties.retire_granularity = kRetireGranularity;
      char text[128] = {};
      if (api_.DeviceGetName(text, sizeof text - 1, gpu.handle) == cu::kSuccess) {
        properties.name = text;
      }
      std::fill(std::begin(text), std::end(text), '\0');
      if (api_.DeviceGetPciBusId(text, sizeof text - 1, gpu.handle) == cu::kSuccess) {
        properties.pci_bdf = text;
        for (char& c : properties.pci_bdf)
          c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      cu::Uuid uuid{};
      if (api_.DeviceGetUuid(&uuid, gpu.handle) == cu::kSuccess) properties.uuid = FormatUuid(uuid);
      std::size_t total = 0;
      if (api_.DeviceTotalMem(&total, gpu.handle) == cu::kSuccess) properties.memory_bytes = total;
      if (!fatbin.empty()) {
        if (auto loaded = LoadKernels(gpu, fatbin); !loaded) {
          // A GPU the fatbin has no code for (an architecture newer than
          // its PTX allows, an older driver) still serves memory and copies.
          RASD_LOG_WARN("CUDA GPU {} ({}): no kernels: {}", ordinal, properties.name,
                       loaded.error().message);
        }
      }
      gpus_.push_back(std::move(gpu));
    }
    if (gpus_.empty()) return Fail(ErrorCode::kUnavailable, "no CUDA GPU could be opened");
    if (fatbin.empty()) {
      RASD_LOG_WARN(
          "CUDA: rasd was built without nvcc: no kernels; memory, copies and streams only");
    }
    callback_thread_ = std::thread([this] { RunCallbacks(); });
    return {};
  }

  std::string_view Name() const override { return "cuda"; }

  Result<std::vector<DeviceProperties>> EnumerateDevices() override {
    std::vector<DeviceProperties> devices;
    for (const auto& gpu : gpus_) devices.push_back(gpu.properties);
    return devices;
  }

  std::vector<KernelSignature> Kernels() const override {
    std::vector<KernelSignature> kernels;
    const bool any = std::any_of(gpus_.begin(), gpus_.end(), [](const GpuState& gpu) {
      std::shared_lock gate(*gpu.context_gate);  // a context reset reloads them
      return !gpu.functions.empty();
    });
    if (!any) return kernels;
    for (const auto& kernel : sim::SimKernels()) kernels.push_back(kernel.signature);
    return kernels;
  }

  Result<DeviceAddress> ReserveMemory(int device, std::uint64_t bytes) override {
    auto gpu = Gpu(device);
    if (!gpu) return Fail(gpu.error());
    if (bytes == 0) return Fail(ErrorCode::kInvalidArgument, "cannot reserve 0 bytes");
    if (bytes > (std::uint64_t{1} << 48)) {
      return Fail(ErrorCode::kInvalidArgument, fmt::format("cannot reserve {} bytes", bytes));
    }
    const std::uint64_t rounded =
        (bytes + kRetireGranularity - 1) / kRetireGranularity * kRetireGranularity;
    std::shared_lock context(ContextGate(device));
    if (auto used = Use(device); !used) return Fail(used.error());
    // cuMemAlloc aligns large allocations at 2 MiB but promises only 256
    // bytes: ask for a granule more and align the base.
    cu::DevicePointer raw = 0;
    if (cu::Code rc = api_.MemAlloc(&raw, rounded + kRetireGranularity); rc != cu::kSuccess) {
      return Fail(CodeFor(rc), fmt::format("GPU {}: {} of {} bytes", device,
                                           api_.Describe("cuMemAlloc", rc), bytes));
    }
    const DeviceAddress base =
        (raw + kRetireGranularity - 1) / kRetireGranularity * kRetireGranularity;
    std::lock_guard lock(mutex_);
    (*gpu)->reservations[base] = Reservation{raw, rounded};
    return base;
  }

  Status ReleaseMemory(int device, DeviceAddress base) override {
    auto gpu = Gpu(device);
    if (!gpu) return Fail(gpu.error());
    std::shared_lock context(ContextGate(device));  // a reset frees and forgets them meanwhile
    Reservation reservation;
    {
      std::lock_guard lock(mutex_);
      auto it = (*gpu)->reservations.find(base);
      if (it == (*gpu)->reservations.end()) {
        return Fail(ErrorCode::kInvalidArgument,
                    fmt::format("GPU {}: 0x{:x} is not a reservation", device, base));
      }
      reservation = it->second;
      (*gpu)->reservations.erase(it);
    }
    if (auto used = Use(device); !used) return used;
    return Check(api_.MemFree(reservation.raw), "cuMemFree", device);
  }

  Result<StreamHandle> CreateStream(int device) override {
    if (auto gpu = Gpu(device); !gpu) return Fail(gpu.error());
    std::shared_lock context(ContextGate(device));  // listed before a reset looks
    if (auto used = Use(device); !used) return Fail(used.error());
    auto state = std::make_shared<StreamState>();
    state->device = device;
    if (auto created = Check(api_.StreamCreate(&state->stream, cu::kStreamNonBlocking),
                             "cuStreamCreate", device);
        !created) {
      return Fail(created.error());
    }
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_handle_++;
    streams_[id] = std::move(state);
    return StreamHandle{id};
  }

  Status DestroyStream(StreamHandle handle) override {
    auto found = FindStream(handle);
    if (!found) return Fail(found.error());
    // The gate before the stream leaves the list: a context reset lists the
    // streams it gives new CUDA objects, and one it missed would be
    // destroyed here by its dead handle (which CUDA may have reused).
    std::shared_lock context(ContextGate((*found)->device));
    std::shared_ptr<StreamState> state;
    {
      std::lock_guard lock(mutex_);
      auto it = streams_.find(handle.value);
      if (it == streams_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown stream");
      state = std::move(it->second);
      streams_.erase(it);
    }
    MarkAborted(*state, Error{ErrorCode::kAborted, "stream destroyed"});
    std::unique_lock use(state->use);  // waits for calls in flight on it
    state->destroyed = true;
    if (state->stream == nullptr) return {};  // a failed context reset left it none
    if (auto used = Use(state->device); !used) return used;
    // CUDA releases the stream once its work is done; callbacks still to
    // run hold the state.
    return Check(api_.StreamDestroy(state->stream), "cuStreamDestroy", state->device);
  }

  Status CopyHostToDevice(StreamHandle handle, DeviceAddress dst, const void* src,
                          std::uint64_t bytes) override {
    if (bytes == 0) return {};
    return OnStream(handle, "cuMemcpyHtoDAsync", [&](StreamState& stream) -> cu::Code {
      // The source is copied now, so the caller's buffer is free at return.
      const auto& pool = StagingOf(stream);
      auto staging = pool->Acquire(bytes);
      if (!staging) return cu::kErrorOutOfMemory;
      std::memcpy(*staging, src, bytes);
      auto copy = std::make_unique<StagedCopy>(
          StagedCopy{pool, stream.shared_from_this(), *staging, bytes, nullptr,
                     stream.resets.load(std::memory_order_acquire)});
      if (cu::Code rc = api_.MemcpyHtoDAsync(dst, *staging, bytes, stream.stream);
          rc != cu::kSuccess) {
        pool->Release(*staging, bytes);
        return rc;
      }
      return FinishStaged(stream, std::move(copy));
    });
  }

  Status CopyDeviceToHost(StreamHandle handle, void* dst, DeviceAddress src,
                          std::uint64_t bytes) override {
    if (bytes == 0) return {};
    return OnStream(handle, "cuMemcpyDtoHAsync", [&](StreamState& stream) -> cu::Code {
      const auto& pool = StagingOf(stream);
      auto staging = pool->Acquire(bytes);
      if (!staging) return cu::kErrorOutOfMemory;
      auto copy = std::make_unique<StagedCopy>(
          StagedCopy{pool, stream.shared_from_this(), *staging, bytes, dst,
                     stream.resets.load(std::memory_order_acquire)});
      if (cu::Code rc = api_.MemcpyDtoHAsync(*staging, src, bytes, stream.stream);
          rc != cu::kSuccess) {
        pool->Release(*staging, bytes);
        return rc;
      }
      return FinishStaged(stream, std::move(copy));
    });
  }

  Status CopyDeviceToDevice(StreamHandle handle, DeviceAddress dst, int dst_device,
                            DeviceAddress src, std::uint64_t bytes) override {
    auto target = Gpu(dst_device);
    if (!target) return Fail(target.error());
    return OnStream(handle, "cuMemcpyDtoDAsync", [&](StreamState& stream) -> cu::Code {
      if (dst_device == stream.device) {
        return api_.MemcpyDtoDAsync(dst, src, bytes, stream.stream);
      }
      // A peer copy works with or without peer access enabled (the driver
      // stages it through the host where there is no direct path).
      return api_.MemcpyPeerAsync(dst, (*target)->context, src,
                                  gpus_[static_cast<std::size_t>(stream.device)].context, bytes,
                                  stream.stream);
    });
  }

  Status LaunchKernel(StreamHandle handle, std::string_view kernel, const LaunchConfig& config,
                      std::span<const KernelArg> args) override {
    const sim::SimKernel* registered = sim::FindSimKernel(kernel);
    if (registered == nullptr) {
      return Fail(ErrorCode::kNotFound, fmt::format("no kernel named '{}'", kernel));
    }
    if (auto matches = cuda::CheckKernelArgs(registered->signature, args); !matches) {
      return matches;
    }
    if (auto sized = cuda::CheckKernelSizes(kernel, args); !sized) return sized;
    // kernelParams: one pointer per argument, to a value of the kernel's
    // parameter type (long long, float, or a device pointer); CUDA copies
    // them before cuLaunchKernel returns.
    void* params[kMaxKernelArgs] = {};
    for (std::size_t i = 0; i < args.size(); ++i) {
      params[i] = const_cast<void*>(args[i].kind == ArgKind::kFloat
                                        ? static_cast<const void*>(&args[i].real)
                                        : static_cast<const void*>(&args[i].integer));
    }
    const LaunchConfig geometry =
        cuda::IsDefaultLaunch(config) ? cuda::KernelGeometry(kernel, args) : config;
    // The kernels and the reservations are looked up under the stream's
    // `use`, which a context reset holds while it replaces them: a launch
    // checked against the old context never runs in the new one.
    Status refused;
    Status launched = OnStream(handle, "cuLaunchKernel", [&](StreamState& state) -> cu::Code {
      const auto& gpu = gpus_[static_cast<std::size_t>(state.device)];
      auto function = gpu.functions.find(kernel);
      if (function == gpu.functions.end()) {
        refused = Fail(ErrorCode::kNotSupported,
                       fmt::format("GPU {} has no CUDA kernels (rasd built without nvcc, or no "
                                   "code for this GPU's architecture)",
                                   state.device));
        return cu::kSuccess;
      }
      if (refused = CheckBuffers(gpu, kernel, args); !refused) return cu::kSuccess;
      return api_.LaunchKernel(function->second, geometry.grid.x, geometry.grid.y, geometry.grid.z,
                               geometry.block.x, geometry.block.y, geometry.block.z,
                               geometry.shared_bytes, state.stream, params, nullptr);
    });
    if (!refused) return refused;
    return launched;
  }

  Status EnqueueCallback(StreamHandle handle, StreamCallback callback) override {
    return OnStream(handle, "cuStreamAddCallback", [&](StreamState& stream) {
      auto box = std::make_unique<CallbackBox>(
          CallbackBox{hub_, FindStream(StreamHandle{handle.value}).value_or(nullptr),
                      std::move(callback), stream.resets.load(std::memory_order_acquire)});
      std::uint64_t id = 0;
      {
        std::lock_guard lock(hub_->mutex);
        id = hub_->next_id++;
        hub_->in_cuda.emplace(id, std::move(box));
      }
      auto ticket = std::make_unique<CallbackTicket>(CallbackTicket{hub_, id});
      const cu::Code rc =
          api_.StreamAddCallback(stream.stream, &OnStreamCallback, ticket.get(), 0);
      if (rc == cu::kSuccess) {
        // OnStreamCallback owns it now. Where a context reset means CUDA
        // never calls back, it is leaked: a few bytes per callback pending then.
        (void)ticket.release();
      } else {
        std::unique_ptr<CallbackBox> refused;  // destroyed outside the hub's lock
        std::lock_guard lock(hub_->mutex);
        if (auto it = hub_->in_cuda.find(id); it != hub_->in_cuda.end()) {
          refused = std::move(it->second);
          hub_->in_cuda.erase(it);
        }
      }
      return rc;
    });
  }

  Result<EventHandle> CreateEvent(int device) override {
    if (auto gpu = Gpu(device); !gpu) return Fail(gpu.error());
    std::shared_lock context(ContextGate(device));  // listed before a reset looks
    if (auto used = Use(device); !used) return Fail(used.error());
    auto state = std::make_shared<EventState>();
    state->device = device;
    if (auto created =
            Check(api_.EventCreate(&state->event, cu::kEventDefault), "cuEventCreate", device);
        !created) {
      return Fail(created.error());
    }
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_handle_++;
    events_[id] = std::move(state);
    return EventHandle{id};
  }

  Status DestroyEvent(EventHandle handle) override {
    auto found = FindEvent(handle);
    if (!found) return Fail(found.error());
    std::shared_lock context(ContextGate((*found)->device));  // as DestroyStream, for the same reason
    std::shared_ptr<EventState> state;
    {
      std::lock_guard lock(mutex_);
      auto it = events_.find(handle.value);
      if (it == events_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown event");
      state = std::move(it->second);
      events_.erase(it);
    }
    std::unique_lock use(state->use);
    state->destroyed = true;
    if (auto used = Use(state->device); !used) return used;
    if (state->event == nullptr) return {};  // a failed context reset left it none
    return Check(api_.EventDestroy(state->event), "cuEventDestroy", state->device);
  }

  Status RecordEvent(EventHandle event_handle, StreamHandle stream_handle) override {
    auto event = FindEvent(event_handle);
    if (!event) return Fail(event.error());
    std::shared_lock event_use((*event)->use);
    if ((*event)->destroyed) return Fail(ErrorCode::kInvalidArgument, "unknown event");
    return OnStream(stream_handle, "cuEventRecord", [&](StreamState& stream) -> cu::Code {
      if ((*event)->device != stream.device) return cu::kErrorInvalidValue;
      return api_.EventRecord((*event)->event, stream.stream);
    });
  }

  Status StreamWaitEvent(StreamHandle stream_handle, EventHandle event_handle) override {
    auto event = FindEvent(event_handle);
    if (!event) return Fail(event.error());
    std::shared_lock event_use((*event)->use);
    if ((*event)->destroyed) return Fail(ErrorCode::kInvalidArgument, "unknown event");
    // Cross-device waits are allowed: CUDA orders them itself.
    return OnStream(stream_handle, "cuStreamWaitEvent", [&](StreamState& stream) {
      return api_.StreamWaitEvent(stream.stream, (*event)->event, 0);
    });
  }

  Status SynchronizeEvent(EventHandle handle, std::chrono::nanoseconds timeout) override {
    auto event = FindEvent(handle);
    if (!event) return Fail(event.error());
    const auto deadline = common::Deadline::After(timeout);
    auto pause = 0us;
    while (true) {
      cu::Code rc = cu::kSuccess;
      {
        std::shared_lock use((*event)->use);
        if ((*event)->destroyed) return Fail(ErrorCode::kAborted, "event destroyed");
        if (auto used = Use((*event)->device); !used) return used;
        rc = api_.EventQuery((*event)->event);
      }
      if (rc != cu::kErrorNotReady) return Check(rc, "cuEventQuery", (*event)->device);
      if (auto waited = Pause(deadline, timeout, (*event)->device, pause); !waited) return waited;
    }
  }

  Result<std::chrono::nanoseconds> ElapsedTime(EventHandle start, EventHandle end) override {
    auto first = FindEvent(start);
    if (!first) return Fail(first.error());
    auto last = FindEvent(end);
    if (!last) return Fail(last.error());
    // Both at once: a context reset takes every event's `use` in its own order.
    std::shared_lock first_use((*first)->use, std::defer_lock);
    std::shared_lock last_use((*last)->use, std::defer_lock);
    if (*first == *last) {
      first_use.lock();
    } else {
      std::lock(first_use, last_use);
    }
    if ((*first)->destroyed || (*last)->destroyed) {
      return Fail(ErrorCode::kInvalidArgument, "unknown event");
    }
    if (auto used = Use((*first)->device); !used) return Fail(used.error());
    float milliseconds = 0;
    if (auto measured = Check(api_.EventElapsedTime(&milliseconds, (*first)->event, (*last)->event),
                              "cuEventElapsedTime", (*first)->device);
        !measured) {
      return Fail(measured.error());
    }
    return std::chrono::nanoseconds(static_cast<std::int64_t>(milliseconds * 1e6));
  }

  Status SynchronizeStream(StreamHandle handle, std::chrono::nanoseconds timeout) override {
    auto stream = FindStream(handle);
    if (!stream) return Fail(stream.error());
    StreamState& state = **stream;
    const auto deadline = common::Deadline::After(timeout);
    const std::uint64_t resets = state.resets.load(std::memory_order_acquire);
    auto pause = 0us;
    while (true) {
      if (auto reason = state.AbortReason()) return Fail(*reason);
      if (state.resets.load(std::memory_order_acquire) != resets) {
        return Fail(ErrorCode::kAborted, fmt::format("GPU {} was reset", state.device));
      }
      cu::Code rc = cu::kSuccess;
      {
        std::shared_lock use(state.use);
        if (state.destroyed) return Fail(ErrorCode::kAborted, "stream destroyed");
        if (state.stream == nullptr) continue;  // aborted by a failed context reset: said above
        if (auto used = Use(state.device); !used) return used;
        rc = api_.StreamQuery(state.stream);
      }
      if (rc != cu::kErrorNotReady) {
        if (rc == cu::kErrorEccUncorrectable) ReportEcc(state.device, *stream);
        return Check(rc, "cuStreamQuery", state.device);
      }
      if (auto waited = Pause(deadline, timeout, state.device, pause); !waited) return waited;
    }
  }

  Status AbortStream(StreamHandle handle, const Error& reason) override {
    auto stream = FindStream(handle);
    if (!stream) return Fail(stream.error());
    MarkAborted(**stream, reason);
    return {};
  }

  Result<MemoryAfterReset> ResetDevice(int device) override {
    if (auto gpu = Gpu(device); !gpu) return Fail(gpu.error());
    const auto [on_device, events_on_device] = ObjectsOf(device);
    for (const auto& stream : on_device) {
      std::lock_guard lock(stream->mutex);  // no staged copy-out runs past this
      stream->resets.fetch_add(1, std::memory_order_acq_rel);
    }
    if (auto used = Use(device); !used) return Fail(used.error());
    // A sticky error fails every call in the context; a small allocation
    // finds it without waiting for work (cuCtxSynchronize would block on a
    // hung GPU). A full GPU (out of memory) is not a sticky error.
    const cu::Code rc = ProbeContext();
    if (rc == cu::kSuccess || rc == cu::kErrorOutOfMemory) return MemoryAfterThisReset(device);
    if (api_.PrimaryCtxReset == nullptr) {
      return Fail(ErrorCode::kNotSupported,
                  fmt::format("GPU {}: the context has a sticky error ({}) and {} has no "
                              "cuDevicePrimaryCtxReset: restart rasd or reset the GPU",
                              device, api_.Describe("cuMemAlloc", rc), "the CUDA driver"));
    }
    auto reset = ResetContext(device);
    if (!reset) return Fail(reset.error());
    if (*reset == MemoryAfterReset::kKept) return MemoryAfterThisReset(device);
    return MemoryAfterReset::kFreed;
  }

  void SetErrorListener(ErrorListener listener) override {
    std::lock_guard lock(listener_mutex_);
    listener_ = std::move(listener);
  }

 private:
  Result<GpuState*> Gpu(int device) {
    if (device < 0 || device >= static_cast<int>(gpus_.size())) {
      return Fail(ErrorCode::kInvalidArgument, fmt::format("no CUDA device {}", device));
    }
    return &gpus_[static_cast<std::size_t>(device)];
  }

  // What a successful ResetDevice reports: kFreed when a context reset
  // freed the reservations since the last report (this one, or one that
  // failed after it), so that their owner forgets them.
  MemoryAfterReset MemoryAfterThisReset(int device) {
    std::lock_guard lock(mutex_);
    auto& gpu = gpus_[static_cast<std::size_t>(device)];
    return std::exchange(gpu.freed_unreported, false) ? MemoryAfterReset::kFreed
                                                      : MemoryAfterReset::kKept;
  }

  // Every buffer of a launch lies inside one reservation of the launching
  // GPU: an out-of-range access would fail the context, and every job on
  // the GPU with it, instead of this one launch.
  Status CheckBuffers(const GpuState& gpu, std::string_view kernel,
                      std::span<const KernelArg> args) {
    std::lock_guard lock(mutex_);
    for (const auto& [address, bytes] : cuda::KernelBuffers(kernel, args)) {
      if (bytes == 0) continue;
      auto it = gpu.reservations.upper_bound(address);
      const bool inside = it != gpu.reservations.begin() &&
                          (--it, address - it->first <= it->second.bytes &&
                                     bytes <= it->second.bytes - (address - it->first));
      if (!inside) {
        return Fail(ErrorCode::kInvalidArgument,
                    fmt::format("kernel '{}': [0x{:x}, +{}) is outside GPU {}'s memory", kernel,
                                address, bytes, gpu.properties.index));
      }
    }
    return {};
  }

  // Makes the GPU's primary context current on the calling thread (CUDA's
  // current context is per thread).
  // A 256-byte allocation in the current context: kSuccess, or the error
  // every call in a failed context returns.
  cu::Code ProbeContext() {
    cu::DevicePointer probe = 0;
    const cu::Code rc = api_.MemAlloc(&probe, 256);
    if (rc == cu::kSuccess) (void)api_.MemFree(probe);
    return rc;
  }

  // cuDevicePrimaryCtxReset, with the driver's state brought along: the
  // streams and events keep their handles and get new CUDA objects, the
  // kernels are loaded again, the callbacks CUDA dropped fail with kAborted,
  // and the reservations and pinned buffers are forgotten (the reset freed
  // them). Every call that uses the context waits meanwhile: on the streams'
  // and events' `use`, or on the GPU's context gate. The primary context is
  // still retained after the reset, so its handle stays valid. kKept
  // (nothing done) when a reset that ran while this one waited for the gate
  // repaired the context already.
  Result<MemoryAfterReset> ResetContext(int device) {
    GpuState& gpu = gpus_[static_cast<std::size_t>(device)];
    std::unique_lock context_gate(*gpu.context_gate);
    if (auto used = Use(device); !used) return Fail(used.error());
    const cu::Code sticky = ProbeContext();
    if (sticky == cu::kSuccess || sticky == cu::kErrorOutOfMemory) return MemoryAfterReset::kKept;
    const auto [streams, events] = ObjectsOf(device);  // none is made or destroyed from here
    std::vector<std::unique_lock<std::shared_mutex>> held;
    // Events before streams, as RecordEvent and StreamWaitEvent take them.
    for (const auto& event : events) held.emplace_back(event->use);
    for (const auto& stream : streams) held.emplace_back(stream->use);
    if (const cu::Code rc = api_.PrimaryCtxReset(gpu.handle); rc != cu::kSuccess) {
      return Fail(Check(rc, "cuDevicePrimaryCtxReset", device).error());
    }
    {
      std::lock_guard lock(mutex_);
      gpu.reservations.clear();
      gpu.ecc_reported = false;
      gpu.freed_unreported = true;
    }
    gpu.staging->Abandon();  // its buffers went with the context
    gpu.staging = std::make_shared<StagingPool>(api_);
    std::vector<std::unique_ptr<CallbackBox>> dropped;
    {
      std::lock_guard lock(hub_->mutex);
      for (auto it = hub_->in_cuda.begin(); it != hub_->in_cuda.end();) {
        if (it->second->stream && it->second->stream->device == device) {
          // Its stream's reset count moved on: it runs with kAborted.
          hub_->pending.push_back({std::move(it->second), cu::kSuccess});
          it = hub_->in_cuda.erase(it);
        } else {
          ++it;
        }
      }
    }
    hub_->ready.notify_one();
    if (auto used = Use(device); !used) return Fail(used.error());
    Status result;
    for (const auto& stream : streams) {
      if (stream->destroyed) continue;
      if (auto made = Check(api_.StreamCreate(&stream->stream, cu::kStreamNonBlocking),
                            "cuStreamCreate", device);
          !made) {
        // No CUDA stream behind the handle: every call on it is refused.
        stream->stream = nullptr;
        MarkAborted(*stream, made.error());
        if (result) result = made;
      }
    }
    for (const auto& event : events) {
      if (event->destroyed) continue;
      if (auto made = Check(api_.EventCreate(&event->event, cu::kEventDefault), "cuEventCreate",
                            device);
          !made) {
        event->event = nullptr;  // never destroyed: there is nothing behind it
        if (result) result = made;
      }
    }
    gpu.module = nullptr;
    gpu.functions.clear();
    if (const auto fatbin = cuda::KernelFatbin(); !fatbin.empty()) {
      if (auto loaded = LoadKernels(gpu, fatbin); !loaded && result) result = loaded;
    }
    // Some errors outlive the context (a GPU that needs a bus reset). The
    // memory is gone all the same: the next reset that succeeds says so.
    if (const cu::Code after = ProbeContext();
        after != cu::kSuccess && after != cu::kErrorOutOfMemory) {
      return Fail(ErrorCode::kDeviceFault,
                  fmt::format("GPU {}: the sticky error ({}) outlived a context reset ({}): "
                              "restart rasd or reset the GPU",
                              device, api_.Describe("cuMemAlloc", sticky),
                              api_.Describe("cuMemAlloc", after)));
    }
    if (!result) return Fail(result.error());
    // Said here, under the gate: a reset waiting for it finds the context
    // repaired and the memory already reported (kKept).
    std::lock_guard lock(mutex_);
    gpu.freed_unreported = false;
    return MemoryAfterReset::kFreed;
  }

  std::pair<std::vector<std::shared_ptr<StreamState>>, std::vector<std::shared_ptr<EventState>>>
  ObjectsOf(int device) {
    std::pair<std::vector<std::shared_ptr<StreamState>>, std::vector<std::shared_ptr<EventState>>>
        objects;
    std::lock_guard lock(mutex_);
    for (auto& [id, stream] : streams_) {
      if (stream->device == device) objects.first.push_back(stream);
    }
    for (auto& [id, event] : events_) {
      if (event->device == device) objects.second.push_back(event);
    }
    return objects;
  }

  std::shared_mutex& ContextGate(int device) {
    return *gpus_[static_cast<std::size_t>(device)].context_gate;
  }

  // The stream's GPU's staging pool; call under the stream's `use`.
  const std::shared_ptr<StagingPool>& StagingOf(const StreamState& stream) const {
    return gpus_[static_cast<std::size_t>(stream.device)].staging;
  }

  Status Use(int device) {
    return Check(api_.CtxSetCurrent(gpus_[static_cast<std::size_t>(device)].context),
                 "cuCtxSetCurrent", device);
  }

  Status Check(cu::Code rc, const char* call, int device) {
    if (rc == cu::kSuccess) return {};
    return Fail(CodeFor(rc), fmt::format("GPU {}: {}", device, api_.Describe(call, rc)));
  }

  // Runs `call` on the stream's handle with its GPU current, unless the
  // stream is unknown, destroyed or aborted; the handle cannot be destroyed
  // meanwhile.
  template <typename Call>
  Status OnStream(StreamHandle handle, const char* name, Call&& call) {
    auto stream = FindStream(handle);
    if (!stream) return Fail(stream.error());
    std::shared_lock use((*stream)->use);
    if ((*stream)->destroyed) return Fail(ErrorCode::kInvalidArgument, "unknown stream");
    if (auto reason = (*stream)->AbortReason()) return Fail(*reason);
    if (auto used = Use((*stream)->device); !used) return used;
    return Check(call(**stream), name, (*stream)->device);
  }

  // Enqueues the host side of a staged copy after it.
  cu::Code FinishStaged(StreamState& stream, std::unique_ptr<StagedCopy> copy) {
    const cu::Code rc = api_.StreamAddCallback(stream.stream, &StagedCopy::Finish, copy.get(), 0);
    if (rc == cu::kSuccess) {
      (void)copy.release();  // StagedCopy::Finish owns it now
    } else {
      // The copy is enqueued but nothing will return its buffer (the
      // context failed in between, say): wait for the stream here rather
      // than free memory the copy may still use. The caller gets the error.
      cu::Code done = cu::kErrorNotReady;
      while ((done = api_.StreamQuery(stream.stream)) == cu::kErrorNotReady) {
        std::this_thread::sleep_for(100us);
      }
      if (done == cu::kSuccess && copy->copy_out_to != nullptr) {
        std::memcpy(copy->copy_out_to, copy->staging, copy->bytes);
      }
      copy->pool->Release(copy->staging, copy->bytes);
    }
    return rc;
  }

  // An uncorrectable ECC error fails the whole context, so every later
  // call returns it too: only the first stream status that carries it is
  // reported, once per GPU, as consumed by that stream.
  void ReportEcc(int device, const std::shared_ptr<StreamState>& stream) {
    DriverErrorEvent event;
    {
      std::lock_guard lock(mutex_);
      auto& gpu = gpus_[static_cast<std::size_t>(device)];
      if (gpu.ecc_reported) return;
      gpu.ecc_reported = true;
      for (const auto& [id, state] : streams_) {
        if (state == stream) event.stream = StreamHandle{id};
      }
      event.pci_bdf = gpu.properties.pci_bdf;
    }
    event.device = device;
    event.kind = DriverErrorKind::kUncorrectedEcc;
    event.consumed = stream != nullptr;
    event.message = "CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error in device memory";
    std::lock_guard lock(listener_mutex_);
    if (listener_) listener_(event);
  }

  Result<std::shared_ptr<StreamState>> FindStream(StreamHandle handle) {
    std::lock_guard lock(mutex_);
    auto it = streams_.find(handle.value);
    if (it == streams_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown stream");
    return it->second;
  }

  Result<std::shared_ptr<EventState>> FindEvent(EventHandle handle) {
    std::lock_guard lock(mutex_);
    auto it = events_.find(handle.value);
    if (it == events_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown event");
    return it->second;
  }

  void MarkAborted(StreamState& stream, const Error& reason) {
    std::lock_guard lock(stream.mutex);
    if (!stream.abort_reason) stream.abort_reason = reason;
    stream.aborted.store(true, std::memory_order_release);
  }

  // One step of a polling wait: kTimeout past the deadline, else a pause
  // that starts as a yield and doubles up to 1 ms, so a wait notices an
  // abort or completion within a millisecond without spinning.
  Status Pause(const common::Deadline& deadline, std::chrono::nanoseconds timeout, int device,
               std::chrono::microseconds& pause) {
    if (deadline.Expired()) {
      return Fail(
          ErrorCode::kTimeout,
          fmt::format("GPU {}: not done after {} ms", device,
                      std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
    }
    if (pause.count() == 0) {
      std::this_thread::yield();
      pause = 10us;
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, 1ms);
    }
    return {};
  }

  // Waits, up to `limit`, until no stream has work left; returns the GPUs
  // whose streams still had work at the limit.
  std::set<int> WaitForStreams(std::chrono::nanoseconds limit) {
    std::vector<std::shared_ptr<StreamState>> streams;
    {
      std::lock_guard lock(mutex_);
      for (auto& [id, stream] : streams_) streams.push_back(stream);
    }
    std::set<int> busy;
    const auto deadline = common::Deadline::After(limit);
    for (const auto& stream : streams) {
      if (stream->stream == nullptr || !Use(stream->device)) continue;
      while (api_.StreamQuery(stream->stream) == cu::kErrorNotReady) {
        if (deadline.Expired()) {
          busy.insert(stream->device);
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
    }
    if (!busy.empty()) {
      RASD_LOG_WARN("CUDA: {} GPU(s) still running work at shutdown; their memory is left to exit",
                   busy.size());
    }
    return busy;
  }

  Status LoadKernels(GpuState& gpu, std::span<const unsigned char> fatbin) {
    if (auto used = Check(api_.CtxSetCurrent(gpu.context), "cuCtxSetCurrent", gpu.ordinal); !used) {
      return used;
    }
    if (auto loaded =
            Check(api_.ModuleLoadData(&gpu.module, fatbin.data()), "cuModuleLoadData", gpu.ordinal);
        !loaded) {
      gpu.module = nullptr;
      return loaded;
    }
    for (const auto& kernel : sim::SimKernels()) {
      cu::Function function = nullptr;
      const std::string& name = kernel.signature.name;
      if (auto found = Check(api_.ModuleGetFunction(&function, gpu.module, name.c_str()),
                             "cuModuleGetFunction", gpu.ordinal);
          !found) {
        gpu.functions.clear();
        return Fail(found.error().code,
                    fmt::format("kernel '{}': {}", name, found.error().message));
      }
      gpu.functions.emplace(name, function);
    }
    return {};
  }

  // Runs on a CUDA thread, which must not call CUDA: hand over.
  static void OnStreamCallback(cu::Stream, cu::Code status, void* user) {
    const std::unique_ptr<CallbackTicket> ticket(static_cast<CallbackTicket*>(user));
    const std::uint64_t id = ticket->id;
    const std::shared_ptr<CallbackHub> hub = ticket->hub;
    {
      std::lock_guard lock(hub->mutex);
      // The driver is gone or going: destroying the callback here could
      // run its captures' destructors, CUDA calls among them, on CUDA's
      // thread, so it stays where it is (this happens only at exit).
      if (hub->stopping) return;
      auto it = hub->in_cuda.find(id);
      if (it == hub->in_cuda.end()) return;  // failed already by a context reset
      hub->pending.push_back({std::move(it->second), status});
      hub->in_cuda.erase(it);
    }
    hub->ready.notify_one();
  }


  void RunCallbacks() {
    while (true) {
      CallbackHub::Pending next;
      {
        std::unique_lock lock(hub_->mutex);
        hub_->ready.wait(lock, [this] { return hub_->stopping || !hub_->pending.empty(); });
        if (hub_->stopping) {
          // Callbacks not yet run learn that the driver is going away.
          std::deque<CallbackHub::Pending> left;
          left.swap(hub_->pending);
          lock.unlock();
          for (auto& pending : left) {
            if (pending.box->callback) {
              pending.box->callback(Fail(ErrorCode::kAborted, "CUDA driver shut down"));
            }
          }
          return;
        }
        next = std::move(hub_->pending.front());
        hub_->pending.pop_front();
      }
      CallbackBox& box = *next.box;
      Status status;
      if (!box.stream) {
        status = Fail(ErrorCode::kAborted, "stream destroyed");
      } else if (auto reason = box.stream->AbortReason()) {
        status = Fail(*reason);
      } else if (box.stream->resets.load(std::memory_order_acquire) != box.resets_at_enqueue) {
        status = Fail(ErrorCode::kAborted, fmt::format("GPU {} was reset", box.stream->device));
      } else if (next.status != cu::kSuccess) {
        if (next.status == cu::kErrorEccUncorrectable) ReportEcc(box.stream->device, box.stream);
        status = Fail(CodeFor(next.status), fmt::format("GPU {}: {}", box.stream->device,
                                                        api_.Describe("stream", next.status)));
      }
      if (box.callback) box.callback(status);
    }
  }

  cu::Api api_;
  std::vector<GpuState> gpus_;  // fixed after Initialize

  std::mutex mutex_;
  std::uint64_t next_handle_ = 1;
  std::unordered_map<std::uint64_t, std::shared_ptr<StreamState>> streams_;
  std::unordered_map<std::uint64_t, std::shared_ptr<EventState>> events_;

  std::mutex listener_mutex_;
  ErrorListener listener_;

  const std::shared_ptr<CallbackHub> hub_ = std::make_shared<CallbackHub>();
  std::thread callback_thread_;
};

}  // namespace

Result<std::unique_ptr<Driver>> CudaDriver::Create(const CudaDriverOptions& options) {
  auto api = cu::Api::Load(options.library);
  if (!api) return Fail(api.error());
  auto driver = std::make_unique<CudaDriverImpl>(std::move(*api));
  if (auto initialized = driver->Initialize(options.library); !initialized) {
    return Fail(initialized.error());
  }
  return std::unique_ptr<Driver>(std::move(driver));
}

}  // namespace rasd::drivers
