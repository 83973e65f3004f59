// A stand-in for libascendcl.so with the entry points rasd's Ascend backend
// resolves, for tests on machines without an NPU. Device memory is host
// memory; each stream is a host thread running its tasks in order, so copies
// move real bytes, events complete when the stream reaches them, and
// callbacks run on the thread that called aclrtProcessReport, as in ACL. It
// enforces what the API reference demands of callers and the driver must get
// right: a current context, 64-byte-aligned copy addresses, host memory from
// aclrtMallocHost for host copies, peer access enabled for cross-device
// copies, and a subscribed thread for callbacks.

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "acl_types.h"
#include "testing/fake_control.h"

using namespace rasd::drivers::ascend;  // NOLINT: the aclError constants

namespace {

using Clock = std::chrono::steady_clock;

struct Context {
  int device = 0;
};

struct DeviceAllocation {
  std::byte* storage = nullptr;  // what new[] returned
  std::size_t size = 0;
  int device = 0;
};

struct Event {
  std::mutex mutex;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
  Clock::time_point completed_at;
};

struct ReportItem {
  aclrtCallback fn = nullptr;
  void* user_data = nullptr;
  std::atomic<bool> done{false};
};

// Bit d set: device d's streams stop taking tasks (a hung NPU: queued work
// never completes until released or aborted).
std::atomic<std::uint32_t> g_held_devices{0};

bool Held(int device) {
  return device >= 0 && device < 32 && ((g_held_devices.load() >> device) & 1U) != 0;
}

struct ReportQueue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::shared_ptr<ReportItem>> items;
};

class Stream {
 public:
  explicit Stream(int device) : device_(device), worker_([this] { Run(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      pending_ -= queue_.size();
      queue_.clear();
    }
    changed_.notify_all();
    worker_.join();
  }

  int device() const { return device_; }
  std::atomic<std::uint64_t> report_thread{0};

  void Push(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
      ++pending_;
    }
    changed_.notify_all();
  }

  // True when everything queued so far has run.
  bool WaitIdle(std::int32_t timeout_ms) {
    std::unique_lock lock(mutex_);
    auto idle = [this] { return pending_ == 0; };
    if (timeout_ms < 0) {
      changed_.wait(lock, idle);
      return true;
    }
    return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), idle);
  }

  void Abort() {
    {
      std::lock_guard lock(mutex_);
      pending_ -= queue_.size();
      queue_.clear();
      aborted_ = true;
    }
    changed_.notify_all();
  }

  // A task blocked on something else gives up when this turns true.
  bool Cancelled() {
    std::lock_guard lock(mutex_);
    return aborted_ || stopping_;
  }

 private:
  void Run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      if (Held(device_) && !stopping_) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lock.lock();
        continue;  // an abort meanwhile empties the queue
      }
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      --pending_;
      changed_.notify_all();
    }
  }

  const int device_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  std::size_t pending_ = 0;  // queued or running
  bool aborted_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

struct Fake {
  std::mutex mutex;
  int device_count = 2;
  int init_result = 0;
  bool initialized = false;
  std::atomic<int> fail_next_sync{0};
  std::map<int, std::unique_ptr<Context>> default_contexts;
  std::set<Context*> contexts;  // explicit ones
  std::map<std::uintptr_t, DeviceAllocation> device_memory;
  std::map<std::uintptr_t, std::size_t> host_memory;
  std::map<Stream*, std::unique_ptr<Stream>> streams;
  std::map<Event*, std::shared_ptr<Event>> events;
  std::map<std::uint64_t, std::shared_ptr<ReportQueue>> reports;
  std::set<std::pair<int, int>> peers;
  // Each thread's current context, by pthread id. Not thread_local: TSan's
  // __tls_get_addr interceptor (GCC 12) fails on dynamic TLS in a dlopened
  // library.
  std::map<std::uint64_t, Context*> current;
};

// Never destroyed: stream threads may outlive static destruction at exit.
Fake& State() {
  static Fake* fake = new Fake;
  return *fake;
}

std::uint64_t ThisThread() { return static_cast<std::uint64_t>(pthread_self()); }

bool KnownContext(Fake& fake, Context* context) {
  if (fake.contexts.contains(context)) return true;
  for (auto& [device, owned] : fake.default_contexts) {
    if (owned.get() == context) return true;
  }
  return false;
}

// The device of the calling thread's current context; caller holds mutex.
int CurrentDevice(Fake& fake) {
  auto it = fake.current.find(ThisThread());
  if (it == fake.current.end() || !KnownContext(fake, it->second)) return -1;
  return it->second->device;
}

// The device allocation holding [address, address + bytes); caller holds
// mutex.
const DeviceAllocation* FindDeviceRange(Fake& fake, const void* address, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  auto it = fake.device_memory.upper_bound(start);
  if (it == fake.device_memory.begin()) return nullptr;
  --it;
  if (start + bytes > it->first + it->second.size) return nullptr;
  return &it->second;
}

bool IsPinnedRange(Fake& fake, const void* address, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  auto it = fake.host_memory.upper_bound(start);
  if (it == fake.host_memory.begin()) return false;
  --it;
  return start + bytes <= it->first + it->second;
}

Stream* FindStream(Fake& fake, aclrtStream handle) {
  auto it = fake.streams.find(static_cast<Stream*>(handle));
  return it == fake.streams.end() ? nullptr : it->second.get();
}

std::shared_ptr<Event> FindEvent(Fake& fake, aclrtEvent handle) {
  auto it = fake.events.find(static_cast<Event*>(handle));
  return it == fake.events.end() ? nullptr : it->second;
}

}  // namespace

extern "C" {

aclError aclInit(const char*) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (fake.initialized) return kAclErrorRepeatInitialize;
  if (fake.init_result != 0) return fake.init_result;
  fake.initialized = true;
  return kAclSuccess;
}

aclError aclFinalize(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (!fake.initialized) return kAclErrorRepeatFinalize;
  fake.initialized = false;
  fake.default_contexts.clear();
  fake.current.clear();
  return kAclSuccess;
}

const char* aclGetRecentErrMsg(void) { return "fake ACL: see the return code"; }

const char* aclrtGetSocName(void) { return rasd::drivers::ascend::testing::kFakeSocName; }

aclError aclrtGetDeviceCount(uint32_t* count) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  *count = static_cast<uint32_t>(fake.device_count);
  return kAclSuccess;
}

aclError aclrtSetDevice(int32_t device_id) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (device_id < 0 || device_id >= fake.device_count) return kAclErrorRtInvalidDeviceId;
  auto& context = fake.default_contexts[device_id];
  if (!context) context = std::make_unique<Context>(Context{device_id});
  fake.current[ThisThread()] = context.get();
  return kAclSuccess;
}

aclError aclrtResetDevice(int32_t device_id) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (device_id < 0 || device_id >= fake.device_count) return kAclErrorRtInvalidDeviceId;
  // As ACL: the device's memory goes with it.
  for (auto it = fake.device_memory.begin(); it != fake.device_memory.end();) {
    if (it->second.device == device_id) {
      delete[] it->second.storage;
      it = fake.device_memory.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(fake.peers, [&](const auto& peer) {
    return peer.first == device_id || peer.second == device_id;
  });
  return kAclSuccess;
}

aclError aclrtCreateContext(aclrtContext* context, int32_t device_id) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (device_id < 0 || device_id >= fake.device_count) return kAclErrorRtInvalidDeviceId;
  auto* created = new Context{device_id};
  fake.contexts.insert(created);
  fake.current[ThisThread()] = created;
  *context = created;
  return kAclSuccess;
}

aclError aclrtDestroyContext(aclrtContext context) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  auto* doomed = static_cast<Context*>(context);
  if (fake.contexts.erase(doomed) == 0) return kAclErrorInvalidParam;
  std::erase_if(fake.current, [&](const auto& entry) { return entry.second == doomed; });
  delete doomed;
  return kAclSuccess;
}

aclError aclrtSetCurrentContext(aclrtContext context) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (!KnownContext(fake, static_cast<Context*>(context))) return kAclErrorInvalidParam;
  fake.current[ThisThread()] = static_cast<Context*>(context);
  return kAclSuccess;
}

aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free_bytes, size_t* total_bytes) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  const int device = CurrentDevice(fake);
  if (device < 0) return kAclErrorRtContextNull;
  if (attr != ACL_HBM_MEM) {
    *free_bytes = *total_bytes = 0;
    return kAclSuccess;
  }
  std::size_t used = 0;
  for (const auto& [start, allocation] : fake.device_memory) {
    if (allocation.device == device) used += allocation.size;
  }
  *total_bytes = rasd::drivers::ascend::testing::kFakeHbmBytes;
  *free_bytes = *total_bytes - used;
  return kAclSuccess;
}

aclError aclrtMalloc(void** dev_ptr, size_t size, aclrtMemMallocPolicy) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  const int device = CurrentDevice(fake);
  if (device < 0) return kAclErrorRtContextNull;
  if (size == 0) return kAclErrorInvalidParam;
  // 64 bytes past a page boundary: aligned as ACL promises, no more, so the
  // driver's own page alignment is exercised.
  auto* storage = new (std::nothrow) std::byte[size + 8192];
  if (storage == nullptr) return kAclErrorRtMemoryAllocation;
  const auto page = (reinterpret_cast<std::uintptr_t>(storage) + 4095) / 4096 * 4096;
  const std::uintptr_t start = page + 64;
  fake.device_memory[start] = DeviceAllocation{storage, size, device};
  *dev_ptr = reinterpret_cast<void*>(start);
  return kAclSuccess;
}

aclError aclrtFree(void* dev_ptr) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  auto it = fake.device_memory.find(reinterpret_cast<std::uintptr_t>(dev_ptr));
  if (it == fake.device_memory.end()) return kAclErrorInvalidParam;
  delete[] it->second.storage;
  fake.device_memory.erase(it);
  return kAclSuccess;
}

aclError aclrtMallocHost(void** host_ptr, size_t size) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (CurrentDevice(fake) < 0) return kAclErrorRtContextNull;
  if (size == 0) return kAclErrorInvalidParam;
  void* memory = std::aligned_alloc(64, (size + 63) / 64 * 64);
  if (memory == nullptr) return kAclErrorBadAlloc;
  fake.host_memory[reinterpret_cast<std::uintptr_t>(memory)] = size;
  *host_ptr = memory;
  return kAclSuccess;
}

aclError aclrtFreeHost(void* host_ptr) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (fake.host_memory.erase(reinterpret_cast<std::uintptr_t>(host_ptr)) == 0) {
    return kAclErrorInvalidParam;
  }
  std::free(host_ptr);
  return kAclSuccess;
}

aclError aclrtCreateStream(aclrtStream* stream) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  const int device = CurrentDevice(fake);
  if (device < 0) return kAclErrorRtContextNull;
  auto created = std::make_unique<Stream>(device);
  *stream = created.get();
  fake.streams.emplace(created.get(), std::move(created));
  return kAclSuccess;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  std::unique_ptr<Stream> doomed;
  {
    Fake& fake = State();
    std::lock_guard lock(fake.mutex);
    auto it = fake.streams.find(static_cast<Stream*>(stream));
    if (it == fake.streams.end()) return kAclErrorInvalidParam;
    doomed = std::move(it->second);
    fake.streams.erase(it);
  }
  return kAclSuccess;  // joins the worker outside the lock
}

aclError aclrtSynchronizeStreamWithTimeout(aclrtStream handle, int32_t timeout_ms) {
  Fake& fake = State();
  Stream* stream = nullptr;
  {
    std::lock_guard lock(fake.mutex);
    stream = FindStream(fake, handle);
  }
  if (stream == nullptr) return kAclErrorInvalidParam;
  if (!stream->WaitIdle(timeout_ms)) return kAclErrorRtStreamSyncTimeout;
  if (const int code = fake.fail_next_sync.exchange(0); code != 0) return code;
  return kAclSuccess;
}

aclError aclrtStreamQuery(aclrtStream handle, aclrtStreamStatus* status) {
  Fake& fake = State();
  Stream* stream = nullptr;
  {
    std::lock_guard lock(fake.mutex);
    stream = FindStream(fake, handle);
  }
  if (stream == nullptr || status == nullptr) return kAclErrorInvalidParam;
  *status = stream->WaitIdle(0) ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return kAclSuccess;
}

aclError aclrtStreamAbort(aclrtStream handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Stream* stream = FindStream(fake, handle);
  if (stream == nullptr) return kAclErrorInvalidParam;
  stream->Abort();
  return kAclSuccess;
}

aclError aclrtMemcpyAsync(void* dst, size_t dest_max, const void* src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  const int device = CurrentDevice(fake);
  if (device < 0) return kAclErrorRtContextNull;
  Stream* stream = FindStream(fake, handle);
  if (stream == nullptr || count == 0 || dest_max < count) return kAclErrorInvalidParam;
  if (reinterpret_cast<std::uintptr_t>(dst) % 64 != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % 64 != 0) {
    return kAclErrorInvalidParam;
  }
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_DEVICE:
      if (!IsPinnedRange(fake, src, count) || FindDeviceRange(fake, dst, count) == nullptr) {
        return kAclErrorInvalidParam;
      }
      break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
      if (!IsPinnedRange(fake, dst, count) || FindDeviceRange(fake, src, count) == nullptr) {
        return kAclErrorInvalidParam;
      }
      break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE: {
      const DeviceAllocation* from = FindDeviceRange(fake, src, count);
      const DeviceAllocation* to = FindDeviceRange(fake, dst, count);
      if (from == nullptr || to == nullptr) return kAclErrorInvalidParam;
      if (from->device != to->device && !fake.peers.contains({from->device, to->device})) {
        return kAclErrorInvalidParam;
      }
      break;
    }
    default:
      return kAclErrorRtFeatureNotSupport;
  }
  stream->Push([dst, src, count] { std::memmove(dst, src, count); });
  return kAclSuccess;
}

aclError aclrtCreateEvent(aclrtEvent* event) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (CurrentDevice(fake) < 0) return kAclErrorRtContextNull;
  auto created = std::make_shared<Event>();
  *event = created.get();
  fake.events.emplace(created.get(), std::move(created));
  return kAclSuccess;
}

aclError aclrtDestroyEvent(aclrtEvent event) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  return fake.events.erase(static_cast<Event*>(event)) == 0 ? kAclErrorInvalidParam : kAclSuccess;
}

aclError aclrtRecordEvent(aclrtEvent event_handle, aclrtStream stream_handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  auto event = FindEvent(fake, event_handle);
  Stream* stream = FindStream(fake, stream_handle);
  if (!event || stream == nullptr) return kAclErrorInvalidParam;
  std::uint64_t generation = 0;
  {
    std::lock_guard event_lock(event->mutex);
    generation = ++event->recorded;
  }
  stream->Push([event, generation] {
    std::lock_guard event_lock(event->mutex);
    event->completed = std::max(event->completed, generation);
    event->completed_at = Clock::now();
  });
  return kAclSuccess;
}

aclError aclrtStreamWaitEvent(aclrtStream stream_handle, aclrtEvent event_handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  auto event = FindEvent(fake, event_handle);
  Stream* stream = FindStream(fake, stream_handle);
  if (!event || stream == nullptr) return kAclErrorInvalidParam;
  std::uint64_t generation = 0;
  {
    std::lock_guard event_lock(event->mutex);
    generation = event->recorded;
  }
  stream->Push([event, generation, stream] {
    for (;;) {
      {
        std::lock_guard event_lock(event->mutex);
        if (event->completed >= generation) return;
      }
      if (stream->Cancelled()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  return kAclSuccess;
}

aclError aclrtQueryEventStatus(aclrtEvent event_handle, aclrtEventRecordedStatus* status) {
  Fake& fake = State();
  std::shared_ptr<Event> event;
  {
    std::lock_guard lock(fake.mutex);
    event = FindEvent(fake, event_handle);
  }
  if (!event) return kAclErrorInvalidParam;
  std::lock_guard event_lock(event->mutex);
  *status = event->completed >= event->recorded ? ACL_EVENT_RECORDED_STATUS_COMPLETE
                                                : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return kAclSuccess;
}

aclError aclrtEventElapsedTime(float* ms, aclrtEvent start_handle, aclrtEvent end_handle) {
  Fake& fake = State();
  std::shared_ptr<Event> start;
  std::shared_ptr<Event> end;
  {
    std::lock_guard lock(fake.mutex);
    start = FindEvent(fake, start_handle);
    end = FindEvent(fake, end_handle);
  }
  if (!start || !end) return kAclErrorInvalidParam;
  Clock::time_point from;
  Clock::time_point to;
  for (auto [event, at] : {std::pair{start.get(), &from}, std::pair{end.get(), &to}}) {
    std::lock_guard event_lock(event->mutex);
    if (event->recorded == 0 || event->completed < event->recorded) {
      return kAclErrorRtEventNotComplete;
    }
    *at = event->completed_at;
  }
  *ms = std::chrono::duration<float, std::milli>(to - from).count();
  return kAclSuccess;
}

aclError aclrtSubscribeReport(uint64_t thread_id, aclrtStream handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Stream* stream = FindStream(fake, handle);
  if (stream == nullptr) return kAclErrorInvalidParam;
  auto& queue = fake.reports[thread_id];
  if (!queue) queue = std::make_shared<ReportQueue>();
  stream->report_thread = thread_id;
  return kAclSuccess;
}

aclError aclrtUnSubscribeReport(uint64_t thread_id, aclrtStream handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Stream* stream = FindStream(fake, handle);
  if (stream == nullptr || stream->report_thread != thread_id) return kAclErrorInvalidParam;
  stream->report_thread = 0;
  return kAclSuccess;
}

aclError aclrtLaunchCallback(aclrtCallback fn, void* user_data, aclrtCallbackBlockType block,
                             aclrtStream handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Stream* stream = FindStream(fake, handle);
  if (stream == nullptr || fn == nullptr) return kAclErrorInvalidParam;
  auto queue = fake.reports.find(stream->report_thread);
  if (stream->report_thread == 0 || queue == fake.reports.end()) {
    return kAclErrorStreamNotSubscribe;
  }
  stream->Push([fn, user_data, block, stream, reports = queue->second] {
    auto item = std::make_shared<ReportItem>();
    item->fn = fn;
    item->user_data = user_data;
    {
      std::lock_guard report_lock(reports->mutex);
      reports->items.push_back(item);
    }
    reports->ready.notify_all();
    if (block != ACL_CALLBACK_BLOCK) return;
    while (!item->done.load() && !stream->Cancelled()) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  return kAclSuccess;
}

aclError aclrtProcessReport(int32_t timeout_ms) {
  std::shared_ptr<ReportQueue> queue;
  {
    Fake& fake = State();
    std::lock_guard lock(fake.mutex);
    auto it = fake.reports.find(ThisThread());
    if (it == fake.reports.end()) return kAclErrorThreadNotSubscribe;
    queue = it->second;
  }
  std::shared_ptr<ReportItem> item;
  {
    std::unique_lock lock(queue->mutex);
    if (!queue->ready.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                               [&] { return !queue->items.empty(); })) {
      return kAclErrorWaitCallbackTimeout;
    }
    item = queue->items.front();
    queue->items.pop_front();
  }
  item->fn(item->user_data);
  item->done.store(true);
  return kAclSuccess;
}

aclError aclrtDeviceCanAccessPeer(int32_t* can_access, int32_t device_id, int32_t peer_device_id) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  if (device_id < 0 || device_id >= fake.device_count || peer_device_id < 0 ||
      peer_device_id >= fake.device_count) {
    return kAclErrorRtInvalidDeviceId;
  }
  *can_access = device_id != peer_device_id ? 1 : 0;
  return kAclSuccess;
}

aclError aclrtDeviceEnablePeerAccess(int32_t peer_device_id, uint32_t flags) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  const int device = CurrentDevice(fake);
  if (device < 0) return kAclErrorRtContextNull;
  if (flags != 0 || device == peer_device_id || peer_device_id < 0 ||
      peer_device_id >= fake.device_count) {
    return kAclErrorInvalidParam;
  }
  fake.peers.insert({device, peer_device_id});
  return kAclSuccess;
}

// ---- for the stand-in operator library (fake_opapi.cc) ----

int fake_acl_device_of(const void* address, size_t bytes) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  const DeviceAllocation* allocation = FindDeviceRange(fake, address, bytes);
  return allocation == nullptr ? -1 : allocation->device;
}

int fake_acl_current_device(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  return CurrentDevice(fake);
}

int fake_acl_stream_device(aclrtStream handle) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Stream* stream = FindStream(fake, handle);
  return stream == nullptr ? -1 : stream->device();
}

int fake_acl_stream_push(aclrtStream handle, void (*task)(void*), void* argument) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  Stream* stream = FindStream(fake, handle);
  if (stream == nullptr || task == nullptr) return kAclErrorInvalidParam;
  stream->Push([task, argument] { task(argument); });
  return kAclSuccess;
}

// ---- test controls ----

void fake_acl_reset(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  fake.device_count = 2;
  fake.init_result = 0;
  fake.fail_next_sync = 0;
  g_held_devices = 0;
}

void fake_acl_hold(int device, int on) {
  if (device < 0 || device >= 32) return;
  if (on) {
    g_held_devices.fetch_or(1U << device);
  } else {
    g_held_devices.fetch_and(~(1U << device));
  }
}

void fake_acl_set_device_count(int count) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  fake.device_count = count;
}

void fake_acl_set_init_result(int code) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  fake.init_result = code;
}

void fake_acl_fail_next_sync(int code) { State().fail_next_sync = code; }

int fake_acl_live_objects(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  return static_cast<int>(fake.streams.size() + fake.events.size() + fake.contexts.size() +
                          fake.device_memory.size() + fake.host_memory.size());
}

int fake_acl_initialized(void) {
  Fake& fake = State();
  std::lock_guard lock(fake.mutex);
  return fake.initialized ? 1 : 0;
}

}  // extern "C"
