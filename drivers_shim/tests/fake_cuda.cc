// A stand-in for libcuda.so.1 with the driver-API entry points rasd's CUDA
// backend resolves, for tests on machines without a GPU. Device memory is
// host memory (a device pointer is the host address), each stream is a
// thread running its work in order, and kernels are the simulator's CPU
// code (sim_kernels.cc) run over the arguments cuLaunchKernel receives, so
// that the backend's marshalling is checked against real results.
//   RASD_FAKE_CUDA_DEVICES  number of GPUs (default 2)
//   RASD_FAKE_CUDA_INIT     a return code for cuInit (default 0)
// Test controls (extern "C"): fake_cuda_hold(device, on) stops the
// device's streams from running work; fake_cuda_inject_ecc(device) makes
// the device's next operation fail with CUDA_ERROR_ECC_UNCORRECTABLE, and
// the context sticky, as a real uncorrectable error does.
// cuDevicePrimaryCtxReset_v2 destroys the context's streams, events and
// memory and clears a sticky error, unless fake_cuda_sticky_survives_reset
// (device, on) says it outlives the reset; fake_cuda_context_resets(device)
// counts resets; fake_cuda_pause_resets(device, on) makes a reset wait,
// inside cuDevicePrimaryCtxReset (the backend's locks held), until it is
// turned off again, and fake_cuda_resets_waiting(device) says how many wait
// there (races with a reset, made deterministic); fake_cuda_stream_queries()
// counts cuStreamQuery calls (a test knows a wait has begun). Built with
// FAKE_CUDA_WITHOUT_CTX_RESET the library has no cuDevicePrimaryCtxReset at
// all, as an old driver.
// A kernel given an address outside every live allocation fails with
// CUDA_ERROR_ILLEGAL_ADDRESS and makes the context sticky, as on a GPU; a
// stream handle that names no live stream (its context was reset) is
// CUDA_ERROR_INVALID_HANDLE to cuStreamDestroy instead of freed memory.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim_kernels.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

using Code = int;
constexpr Code kSuccess = 0, kInvalidValue = 1, kNotInitialized = 3, kInvalidHandle = 400,
               kNotFound = 500, kNotReady = 600, kEccUncorrectable = 214, kInvalidContext = 201,
               kIllegalAddress = 700, kContextIsDestroyed = 709;

// Device allocations by the pointer handed out: a context reset frees the
// context's, and a copy outside every live one fails as on a GPU rather
// than touching freed host memory.
struct FakeDevice;

struct DeviceAllocation {
  FakeDevice* device = nullptr;
  std::size_t bytes = 0;
};
std::mutex allocations_mutex;
std::map<unsigned long long, DeviceAllocation> allocations;  // guarded by allocations_mutex

bool LiveRange(unsigned long long address, std::size_t bytes) {
  std::lock_guard lock(allocations_mutex);
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return false;
  --it;
  return address + bytes <= it->first + it->second.bytes;
}

struct FakeDevice {
  int index = 0;
  std::atomic<bool> held{false};
  std::atomic<Code> sticky{kSuccess};
  std::atomic<bool> ecc_pending{false};
  std::atomic<bool> sticky_survives_reset{false};
  // Bumped by cuDevicePrimaryCtxReset: streams of an older context are gone.
  std::atomic<std::uint64_t> context_epoch{0};
  std::atomic<int> context_resets{0};
  std::atomic<bool> pause_resets{false};
  std::atomic<int> resets_waiting{0};
};

std::mutex global_mutex;
std::vector<std::unique_ptr<FakeDevice>> devices;  // fixed after cuInit
bool initialized = false;
// The current context of each thread (as cuCtxSetCurrent keeps it). Not
// thread_local: GCC 12's TSan mishandles dynamic TLS in a dlopen()ed
// library.
std::mutex current_mutex;
std::map<std::thread::id, FakeDevice*> current_by_thread;

FakeDevice* Current() {
  std::lock_guard lock(current_mutex);
  auto it = current_by_thread.find(std::this_thread::get_id());
  return it == current_by_thread.end() ? nullptr : it->second;
}

struct FakeEvent {
  std::mutex mutex;
  bool recorded = false;
  bool complete = true;
  std::chrono::steady_clock::time_point when;
};

class FakeStream {
 public:
  explicit FakeStream(FakeDevice* device)
      : device_(device), epoch_(device->context_epoch.load()), worker_([this] { Run(); }) {}
  ~FakeStream() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  FakeDevice* device() const { return device_; }
  std::atomic<bool> destroying{false};
  // Its context was reset: nothing it holds runs, callbacks included.
  bool Destroyed() const { return device_->context_epoch.load() != epoch_; }

  void Enqueue(std::function<Code()> op) {
    {
      std::lock_guard lock(mutex_);
      ops_.push_back(std::move(op));
    }
    wake_.notify_all();
  }

  Code Query() {
    if (Destroyed()) return kContextIsDestroyed;
    if (Code sticky = device_->sticky.load(); sticky != kSuccess) return sticky;
    std::lock_guard lock(mutex_);
    if (!ops_.empty() || running_) return kNotReady;
    return status_;
  }

  Code Status() {
    std::lock_guard lock(mutex_);
    return status_;
  }

 private:
  void Run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait_for(lock, std::chrono::milliseconds(1),
                     [this] { return stopping_ || (!ops_.empty() && !device_->held.load()); });
      if (stopping_ && (ops_.empty() || device_->held.load())) return;
      if (ops_.empty() || device_->held.load()) continue;
      auto op = std::move(ops_.front());
      ops_.pop_front();
      if (Destroyed()) continue;
      running_ = true;
      lock.unlock();
      Code result = kSuccess;
      if (device_->ecc_pending.exchange(false)) {
        device_->sticky.store(kEccUncorrectable);
        result = kEccUncorrectable;
      } else if (Code sticky = device_->sticky.load(); sticky != kSuccess) {
        result = sticky;
      } else {
        result = op();
      }
      lock.lock();
      running_ = false;
      if (result != kSuccess && status_ == kSuccess) status_ = result;
    }
  }

  FakeDevice* const device_;
  const std::uint64_t epoch_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<Code()>> ops_;
  bool running_ = false;
  bool stopping_ = false;
  Code status_ = kSuccess;
  std::thread worker_;  // last: starts after the rest exists
};

std::mutex streams_mutex;
std::vector<FakeStream*> live_streams;  // guarded by streams_mutex

// cuStreamDestroy's threads: the process's exit waits for them (up to 5 s)
// before the globals they use are destroyed. Defined after those globals,
// so destroyed before them.
std::atomic<int> destroy_threads{0};
// cuStreamQuery calls, all streams together (fake_cuda_stream_queries).
std::atomic<int> stream_queries{0};
struct DestroyThreadsAtExit {
  ~DestroyThreadsAtExit() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (destroy_threads.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
} destroy_threads_at_exit;

// Host pointers are device pointers; the fake trusts the addresses.
class HostMemory final : public rasd::drivers::sim::DeviceMemoryAccess {
 public:
  rasd::Result<std::byte*> Map(rasd::drivers::DeviceAddress address, std::uint64_t, bool) override {
    return reinterpret_cast<std::byte*>(address);
  }
};

struct FakeFunction {
  const rasd::drivers::sim::SimKernel* kernel;
};

struct FakeModule {
  std::vector<std::unique_ptr<FakeFunction>> functions;
};

Code Enqueue(void* stream, std::function<Code()> op) {
  auto* target = static_cast<FakeStream*>(stream);
  if (target == nullptr) return kInvalidHandle;  // rasd never uses the legacy stream
  if (target->Destroyed()) return kContextIsDestroyed;
  if (Code sticky = target->device()->sticky.load(); sticky != kSuccess) return sticky;
  target->Enqueue(std::move(op));
  return kSuccess;
}

}  // namespace

FAKE_API void fake_cuda_hold(int device, int on) {
  devices.at(static_cast<std::size_t>(device))->held.store(on != 0);
}

// Back to a healthy, running device (tests share the library's state).
FAKE_API void fake_cuda_clear(int device) {
  auto& target = *devices.at(static_cast<std::size_t>(device));
  target.held.store(false);
  target.ecc_pending.store(false);
  target.sticky.store(kSuccess);
  target.sticky_survives_reset.store(false);
  target.pause_resets.store(false);
}

FAKE_API void fake_cuda_inject_ecc(int device) {
  devices.at(static_cast<std::size_t>(device))->ecc_pending.store(true);
}

FAKE_API Code cuInit(unsigned) {
  std::lock_guard lock(global_mutex);
  if (const char* code = std::getenv("RASD_FAKE_CUDA_INIT"); code != nullptr && std::atoi(code)) {
    return std::atoi(code);
  }
  if (!initialized) {
    const char* count = std::getenv("RASD_FAKE_CUDA_DEVICES");
    const int n = count != nullptr ? std::atoi(count) : 2;
    for (int i = 0; i < n; ++i) {
      devices.push_back(std::make_unique<FakeDevice>());
      devices.back()->index = i;
    }
    initialized = true;
  }
  return kSuccess;
}

FAKE_API Code cuDriverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}

FAKE_API Code cuGetErrorName(Code code, const char** name) {
  switch (code) {
    case kSuccess:
      *name = "CUDA_SUCCESS";
      return kSuccess;
    case kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return kSuccess;
    case 2:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return kSuccess;
    case 34:
      *name = "CUDA_ERROR_STUB_LIBRARY";
      return kSuccess;
    case 100:
      *name = "CUDA_ERROR_NO_DEVICE";
      return kSuccess;
    case kEccUncorrectable:
      *name = "CUDA_ERROR_ECC_UNCORRECTABLE";
      return kSuccess;
    case kInvalidHandle:
      *name = "CUDA_ERROR_INVALID_HANDLE";
      return kSuccess;
    case kNotReady:
      *name = "CUDA_ERROR_NOT_READY";
      return kSuccess;
    case kIllegalAddress:
      *name = "CUDA_ERROR_ILLEGAL_ADDRESS";
      return kSuccess;
    default:
      return kInvalidValue;
  }
}

FAKE_API Code cuDeviceGetCount(int* count) {
  if (!initialized) return kNotInitialized;
  *count = static_cast<int>(devices.size());
  return kSuccess;
}

FAKE_API Code cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(devices.size())) return kInvalidValue;
  *device = ordinal;
  return kSuccess;
}

FAKE_API Code cuDeviceGetName(char* name, int length, int device) {
  std::snprintf(name, static_cast<std::size_t>(length), "Fake CUDA GPU %d", device);
  return kSuccess;
}

FAKE_API Code cuDeviceTotalMem_v2(std::size_t* bytes, int) {
  *bytes = std::size_t{1} << 30;
  return kSuccess;
}

FAKE_API Code cuDeviceGetPCIBusId(char* bus_id, int length, int device) {
  // Upper case, as the real driver prints it.
  std::snprintf(bus_id, static_cast<std::size_t>(length), "0000:D%X:00.0", device + 1);
  return kSuccess;
}

FAKE_API Code cuDeviceGetUuid_v2(unsigned char* uuid, int device) {
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(0xa0 + i + device);
  return kSuccess;
}

FAKE_API Code cuDevicePrimaryCtxRetain(void** context, int device) {
  if (device < 0 || device >= static_cast<int>(devices.size())) return kInvalidValue;
  *context = devices[static_cast<std::size_t>(device)].get();
  return kSuccess;
}

FAKE_API Code cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }

#ifndef FAKE_CUDA_WITHOUT_CTX_RESET
// Called with no work of the context running through rasd (the backend
// holds every stream of the GPU meanwhile): its streams are gone at once.
FAKE_API Code cuDevicePrimaryCtxReset_v2(int device) {
  if (device < 0 || device >= static_cast<int>(devices.size())) return kInvalidValue;
  FakeDevice& target = *devices[static_cast<std::size_t>(device)];
  target.resets_waiting.fetch_add(1);
  while (target.pause_resets.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  target.resets_waiting.fetch_sub(1);
  target.context_epoch.fetch_add(1);
  target.context_resets.fetch_add(1);
  target.ecc_pending.store(false);
  if (!target.sticky_survives_reset.load()) target.sticky.store(kSuccess);
  std::vector<void*> freed;
  {
    std::lock_guard lock(allocations_mutex);
    for (auto it = allocations.begin(); it != allocations.end();) {
      if (it->second.device == &target) {
        freed.push_back(reinterpret_cast<void*>(it->first - 256));
        it = allocations.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (void* memory : freed) std::free(memory);
  // The context's streams go with it (their threads too: nothing may run
  // past the library's static destructors).
  std::vector<FakeStream*> gone;
  {
    std::lock_guard lock(streams_mutex);
    for (FakeStream* stream : live_streams) {
      if (stream->device() == &target && !stream->destroying.load()) gone.push_back(stream);
    }
    std::erase_if(live_streams, [&](FakeStream* stream) {
      return std::find(gone.begin(), gone.end(), stream) != gone.end();
    });
  }
  for (FakeStream* stream : gone) delete stream;
  return kSuccess;
}
#endif

FAKE_API void fake_cuda_sticky_survives_reset(int device, int on) {
  devices.at(static_cast<std::size_t>(device))->sticky_survives_reset.store(on != 0);
}

FAKE_API void fake_cuda_pause_resets(int device, int on) {
  devices.at(static_cast<std::size_t>(device))->pause_resets.store(on != 0);
}

FAKE_API int fake_cuda_resets_waiting(int device) {
  return devices.at(static_cast<std::size_t>(device))->resets_waiting.load();
}

FAKE_API int fake_cuda_context_resets(int device) {
  return devices.at(static_cast<std::size_t>(device))->context_resets.load();
}

FAKE_API Code cuCtxSetCurrent(void* context) {
  std::lock_guard lock(current_mutex);
  current_by_thread[std::this_thread::get_id()] = static_cast<FakeDevice*>(context);
  return kSuccess;
}

// As the real one: waits until every stream of the context is idle.
FAKE_API Code cuCtxSynchronize() {
  FakeDevice* current = Current();
  if (current == nullptr) return kInvalidContext;
  while (current->sticky.load() == kSuccess) {
    bool busy = false;
    {
      std::lock_guard lock(streams_mutex);
      for (FakeStream* stream : live_streams) {
        if (stream->device() == current && stream->Query() == kNotReady) busy = true;
      }
    }
    if (!busy) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return current->sticky.load();
}

FAKE_API Code cuStreamCreate(void** stream, unsigned) {
  FakeDevice* current = Current();
  if (current == nullptr) return kInvalidContext;
  auto* created = new FakeStream(current);
  {
    std::lock_guard lock(streams_mutex);
    live_streams.push_back(created);
  }
  *stream = created;
  return kSuccess;
}

FAKE_API Code cuStreamDestroy_v2(void* stream) {
  // The real driver lets pending work finish first; so does the worker.
  auto* target = static_cast<FakeStream*>(stream);
  {
    std::lock_guard lock(streams_mutex);
    if (std::find(live_streams.begin(), live_streams.end(), target) == live_streams.end() ||
        target->destroying.load()) {
      return kInvalidHandle;  // destroyed already, by a context reset or a destroy
    }
    target->destroying.store(true);  // its own thread deletes it, not a context reset
  }
  destroy_threads.fetch_add(1);
  std::thread([target] {
    while (target->Query() == kNotReady) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    {
      std::lock_guard lock(streams_mutex);
      std::erase(live_streams, target);
    }
    delete target;
    destroy_threads.fetch_sub(1);
  }).detach();
  return kSuccess;
}

FAKE_API Code cuStreamQuery(void* stream) {
  stream_queries.fetch_add(1);
  return static_cast<FakeStream*>(stream)->Query();
}

FAKE_API int fake_cuda_stream_queries() { return stream_queries.load(); }

FAKE_API Code cuStreamWaitEvent(void* stream, void* event, unsigned) {
  auto* target = static_cast<FakeEvent*>(event);
  return Enqueue(stream, [target] {
    while (true) {
      {
        std::lock_guard lock(target->mutex);
        if (target->complete) return kSuccess;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
}

FAKE_API Code cuStreamAddCallback(void* stream, void (*callback)(void*, Code, void*), void* user,
                                  unsigned) {
  auto* target = static_cast<FakeStream*>(stream);
  return Enqueue(stream, [target, callback, user] {
    callback(target, target->Status(), user);
    return kSuccess;
  });
}

FAKE_API Code cuEventCreate(void** event, unsigned) {
  *event = new FakeEvent;
  return kSuccess;
}

FAKE_API Code cuEventDestroy_v2(void* event) {
  delete static_cast<FakeEvent*>(event);
  return kSuccess;
}

FAKE_API Code cuEventRecord(void* event, void* stream) {
  auto* target = static_cast<FakeEvent*>(event);
  {
    std::lock_guard lock(target->mutex);
    target->recorded = true;
    target->complete = false;
  }
  return Enqueue(stream, [target] {
    std::lock_guard lock(target->mutex);
    target->complete = true;
    target->when = std::chrono::steady_clock::now();
    return kSuccess;
  });
}

FAKE_API Code cuEventQuery(void* event) {
  auto* target = static_cast<FakeEvent*>(event);
  std::lock_guard lock(target->mutex);
  return target->complete ? kSuccess : kNotReady;
}

FAKE_API Code cuEventElapsedTime_v2(float* milliseconds, void* start, void* end) {
  auto* first = static_cast<FakeEvent*>(start);
  auto* last = static_cast<FakeEvent*>(end);
  std::scoped_lock lock(first->mutex, last->mutex);
  if (!first->recorded || !last->recorded) return kInvalidHandle;
  if (!first->complete || !last->complete) return kNotReady;
  *milliseconds = std::chrono::duration<float, std::milli>(last->when - first->when).count();
  return kSuccess;
}

FAKE_API Code cuMemAlloc_v2(unsigned long long* pointer, std::size_t bytes) {
  FakeDevice* current = Current();
  if (current == nullptr) return kInvalidContext;
  if (Code sticky = current->sticky.load(); sticky != kSuccess) return sticky;
  // 256-byte aligned, as cuMemAlloc promises: no more, so that the
  // backend's own alignment is exercised.
  void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (memory == nullptr) return 2;
  *pointer = reinterpret_cast<std::uintptr_t>(memory) + 256;
  std::lock_guard lock(allocations_mutex);
  allocations[*pointer] = DeviceAllocation{current, bytes};
  return kSuccess;
}

FAKE_API Code cuMemHostAlloc(void** pointer, std::size_t bytes, unsigned) {
  *pointer = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  return *pointer != nullptr ? kSuccess : 2;
}

FAKE_API Code cuMemFreeHost(void* pointer) {
  std::free(pointer);
  return kSuccess;
}

FAKE_API Code cuMemFree_v2(unsigned long long pointer) {
  {
    std::lock_guard lock(allocations_mutex);
    if (allocations.erase(pointer) == 0) return kInvalidValue;
  }
  std::free(reinterpret_cast<void*>(pointer - 256));
  return kSuccess;
}

FAKE_API Code cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, std::size_t bytes,
                                   void* stream) {
  if (!LiveRange(dst, bytes)) return kInvalidValue;
  return Enqueue(stream, [=] {
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return kSuccess;
  });
}

FAKE_API Code cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, std::size_t bytes,
                                   void* stream) {
  if (!LiveRange(src, bytes)) return kInvalidValue;
  return Enqueue(stream, [=] {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return kSuccess;
  });
}

FAKE_API Code cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src,
                                   std::size_t bytes, void* stream) {
  if (!LiveRange(src, bytes) || !LiveRange(dst, bytes)) return kInvalidValue;
  return Enqueue(stream, [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return kSuccess;
  });
}

FAKE_API Code cuMemcpyPeerAsync(unsigned long long dst, void* dst_context, unsigned long long src,
                                void* src_context, std::size_t bytes, void* stream) {
  if (dst_context == nullptr || src_context == nullptr) return kInvalidContext;
  return cuMemcpyDtoDAsync_v2(dst, src, bytes, stream);
}

FAKE_API Code cuModuleLoadData(void** module, const void* image) {
  if (image == nullptr) return kInvalidValue;
  *module = new FakeModule;
  return kSuccess;
}

FAKE_API Code cuModuleUnload(void* module) {
  delete static_cast<FakeModule*>(module);
  return kSuccess;
}

FAKE_API Code cuModuleGetFunction(void** function, void* module, const char* name) {
  const auto* kernel = rasd::drivers::sim::FindSimKernel(name);
  if (kernel == nullptr) return kNotFound;
  auto& functions = static_cast<FakeModule*>(module)->functions;
  functions.push_back(std::make_unique<FakeFunction>(FakeFunction{kernel}));
  *function = functions.back().get();
  return kSuccess;
}

FAKE_API Code cuLaunchKernel(void* function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                             unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared,
                             void* stream, void** params, void** extra) {
  if (function == nullptr || params == nullptr || extra != nullptr) return kInvalidValue;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x * block_y * block_z > 1024) {
    return kInvalidValue;
  }
  const auto* kernel = static_cast<FakeFunction*>(function)->kernel;
  // As the GPU would: read each parameter, by the kernel's signature, now.
  std::vector<rasd::drivers::KernelArg> args;
  const auto& kinds = kernel->signature.args;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    switch (kinds[i]) {
      case rasd::drivers::ArgKind::kAddress:
        args.push_back(
            rasd::drivers::KernelArg::Address(*static_cast<unsigned long long*>(params[i])));
        break;
      case rasd::drivers::ArgKind::kInt:
        args.push_back(rasd::drivers::KernelArg::Int(*static_cast<long long*>(params[i])));
        break;
      case rasd::drivers::ArgKind::kFloat:
        args.push_back(rasd::drivers::KernelArg::Float(*static_cast<float*>(params[i])));
        break;
    }
  }
  const rasd::drivers::LaunchConfig config{
      {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared};
  FakeDevice* device = stream != nullptr ? static_cast<FakeStream*>(stream)->device() : nullptr;
  return Enqueue(stream, [kernel, args = std::move(args), config, device] {
    // A GPU faults on an address nothing maps, and the context with it.
    for (const auto& arg : args) {
      if (arg.kind == rasd::drivers::ArgKind::kAddress && !LiveRange(arg.address, 1)) {
        device->sticky.store(kIllegalAddress);
        return kIllegalAddress;
      }
    }
    HostMemory memory;
    return kernel->run(memory, config, args) ? kSuccess : 719;  // CUDA_ERROR_LAUNCH_FAILED
  });
}
