#include "rasd/drivers_shim/sim_driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "rasd/common/real_time.h"
#include "sim_kernels.h"

namespace rasd::drivers {

std::string_view DriverErrorKindName(DriverErrorKind kind) {
  switch (kind) {
    case DriverErrorKind::kCorrectedEcc:
      return "corrected_ecc";
    case DriverErrorKind::kUncorrectedEcc:
      return "uncorrected_ecc";
    case DriverErrorKind::kStickyFault:
      return "sticky_fault";
    case DriverErrorKind::kFellOffBus:
      return "fell_off_bus";
    case DriverErrorKind::kLinkError:
      return "link_error";
    case DriverErrorKind::kHang:
      return "hang";
    case DriverErrorKind::kVendorCode:
      return "vendor_code";
    case DriverErrorKind::kLinkDown:
      return "link_down";
    case DriverErrorKind::kLinkUp:
      return "link_up";
    case DriverErrorKind::kLinkCorrected:
      return "link_corrected";
  }
  return "unknown";
}

std::string_view LinkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvlink:
      return "NVLink";
    case LinkKind::kHccs:
      return "HCCS";
    case LinkKind::kRoce:
      return "RoCE";
  }
  return "link";
}

namespace {

constexpr int kMaxSimDevices = 64;
constexpr std::uint64_t kPageSize = 4096;
// Device addresses: device d owns [(d + 1) << 40, (d + 2) << 40), so an
// address names its device and stale addresses are never reissued.
constexpr int kAddressShift = 40;
// The device's queries (DeviceQueries), named as a vendor's would be.
constexpr std::string_view kHealthQuery = "simDeviceGetHealth";
constexpr std::string_view kPoisonedPagesQuery = "simDeviceGetPoisonedPageCount";
constexpr std::string_view kAllQueries = "*";

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::uint64_t PageOf(DeviceAddress address) { return address & ~(kPageSize - 1); }

enum class DeviceCondition : int { kOk, kSticky, kLost };

struct Reservation {
  DeviceAddress base = 0;
  std::uint64_t size = 0;
  std::unique_ptr<std::byte[]> bytes;
};

struct SimDevice {
  DeviceProperties properties;
  std::atomic<DeviceCondition> condition{DeviceCondition::kOk};
  std::atomic<bool> hung{false};
  // InjectLoadFault: a device-to-host copy flips a bit while another stream
  // of the device has work queued or running: the device is busy.
  std::atomic<bool> load_fault{false};
  // InjectSilentCorruption: bits flipped in what kernels write.
  struct Corruption {
    double rate = 0;
    std::string kernel;  // empty: every kernel
    std::mt19937_64 random;
    std::uint64_t skip = 0;  // elements written before the next flip
    std::uint64_t flipped = 0;
  };
  std::atomic<bool> corrupting{false};
  std::mutex corruption_mutex;
  Corruption corruption;                     // guarded by corruption_mutex
  std::atomic<std::int64_t> pending_ops{0};  // enqueued, not yet finished, all streams
  // Guarded by SimDriverImpl::memory_mutex_.
  std::map<DeviceAddress, Reservation> reservations;
  std::set<DeviceAddress> poisoned_pages;
  DeviceAddress next_address = 0;
  std::uint64_t reserved_bytes = 0;

  Status CheckUsable() const {
    switch (condition.load(std::memory_order_acquire)) {
      case DeviceCondition::kOk:
        return {};
      case DeviceCondition::kSticky:
        return Fail(
            ErrorCode::kDeviceFault,
            fmt::format("device {}: sticky fault, context unusable until reset", properties.index));
      case DeviceCondition::kLost:
        return Fail(ErrorCode::kDeviceFault,
                    fmt::format("device {}: fell off the bus", properties.index));
    }
    return {};
  }
};

// Elements written before the next flipped one: geometric, so that each
// element is flipped with probability `rate` whatever the kernels' sizes.
std::uint64_t NextCorruptionSkip(SimDevice::Corruption& corruption) {
  return std::geometric_distribution<std::uint64_t>(corruption.rate)(corruption.random);
}

// Flips one bit in a fraction of the 32-bit elements of `written` (the
// ranges a kernel mapped for writing), if the device corrupts `kernel`'s.
void CorruptWrites(SimDevice& device, std::string_view kernel,
                   const std::vector<std::pair<std::byte*, std::uint64_t>>& written) {
  std::lock_guard lock(device.corruption_mutex);
  auto& corruption = device.corruption;
  if (corruption.rate <= 0 || (!corruption.kernel.empty() && corruption.kernel != kernel)) return;
  for (const auto& [data, bytes] : written) {
    const std::uint64_t elements = bytes / 4;
    std::uint64_t at = 0;
    while (elements - at > corruption.skip) {
      at += corruption.skip;
      std::uint32_t value;
      std::memcpy(&value, data + at * 4, 4);
      value ^= std::uint32_t{1} << (corruption.random() % 32);
      std::memcpy(data + at * 4, &value, 4);
      ++corruption.flipped;
      ++at;
      corruption.skip = NextCorruptionSkip(corruption);
    }
    corruption.skip -= elements - at;
  }
}

struct SimEvent {
  int device = 0;
  std::mutex mutex;
  std::condition_variable completed_cv;
  std::uint64_t recorded = 0;   // generation of the last record
  std::uint64_t completed = 0;  // generation of the last completed record
  std::chrono::nanoseconds completed_at{0};  // on `clock`'s Monotonic()
  std::shared_ptr<const common::Clock> clock;

  void Complete(std::uint64_t generation) {
    {
      std::lock_guard lock(mutex);
      if (generation > completed) {
        completed = generation;
        completed_at = clock->Monotonic();
      }
    }
    completed_cv.notify_all();
  }
};

struct Op {
  enum class Kind : std::uint8_t {
    kKernel,
    kHostToDevice,
    kDeviceToHost,
    kDeviceToDevice,
    kRecord,
    kWait,
    kCallback
  };
  Kind kind = Kind::kKernel;
  std::uint8_t arg_count = 0;
  const sim::SimKernel* kernel = nullptr;
  LaunchConfig config;
  std::array<KernelArg, kMaxKernelArgs> args;
  DeviceAddress dst = 0;
  DeviceAddress src = 0;
  int dst_device = 0;
  const void* host_src = nullptr;
  void* host_dst = nullptr;
  std::uint64_t bytes = 0;
  std::shared_ptr<SimEvent> event;
  std::uint64_t generation = 0;
  StreamCallback callback;
};

class SimDriverImpl;

// One stream: a queue and the worker thread that drains it in order. The
// worker takes the whole queue at once and runs the batch without the lock,
// so an enqueue rarely meets the worker on the mutex and never allocates
// once the two buffers have grown.
class SimStream {
 public:
  SimStream(SimDriverImpl& driver, SimDevice& device, StreamHandle handle,
            std::chrono::microseconds spin)
      : driver_(driver), device_(device), handle_(handle), spin_(spin), worker_([this] {
          Run();
        }) {}

  ~SimStream() {
    Abort(Error{ErrorCode::kAborted, "stream destroyed"});
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    work_cv_.notify_all();
    worker_.join();
  }

  SimDevice& Device() { return device_; }
  StreamHandle Handle() const { return handle_; }
  bool Aborted() const { return aborted_.load(std::memory_order_acquire); }

  Status Enqueue(Op&& op) {
    if (auto usable = device_.CheckUsable(); !usable) return usable;
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      if (error_) return Fail(*error_);
      queue_.push_back(std::move(op));
      ++enqueued_;
      device_.pending_ops.fetch_add(1);
      queued_.store(queue_.size(), std::memory_order_release);
      wake = sleeping_;
    }
    if (wake) work_cv_.notify_one();
    return {};
  }

  Status Synchronize(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = enqueued_;
    waiters_.fetch_add(1);
    const bool done = done_cv_.wait_for(lock, timeout, [&] {
      return finished_.load() >= target || aborted_.load(std::memory_order_acquire);
    });
    waiters_.fetch_sub(1);
    if (error_) return Fail(*error_);
    if (!done) {
      return Fail(
          ErrorCode::kTimeout,
          fmt::format("stream on device {} did not finish within {} ms ({} operation(s) pending)",
                      device_.properties.index,
                      std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count(),
                      target - finished_.load()));
    }
    return {};
  }

  // Drops work that has not started (queued, or in the worker's batch),
  // failing it with `reason`. With `sticky`, the stream stays failed
  // (abort); without, it is usable again afterwards (device reset).
  void Abort(const Error& reason, bool sticky = true) {
    std::vector<Op> dropped;
    {
      std::lock_guard lock(mutex_);
      dropped.swap(queue_);
      queued_.store(0, std::memory_order_release);
      {
        std::lock_guard batch_lock(batch_mutex_);
        for (std::size_t i = batch_next_; i < batch_.size(); ++i)
          dropped.push_back(std::move(batch_[i]));
        batch_next_ = batch_.size();
      }
      if (sticky) {
        SetError(reason);
        aborted_.store(true, std::memory_order_release);
      } else {
        error_.reset();
        has_error_.store(false, std::memory_order_release);
        // An op the worker is running now failed under the old state: its
        // failure must not become the stream's error after this reset.
        ++reset_epoch_;
      }
      finished_.fetch_add(dropped.size(), std::memory_order_acq_rel);
      device_.pending_ops.fetch_sub(static_cast<std::int64_t>(dropped.size()));
    }
    done_cv_.notify_all();
    work_cv_.notify_all();
    const Status failed = Fail(reason);
    {
      // An op the worker is running still touches memory: the dropped ops'
      // callbacks (a pool's promotion of frees among them) wait until it
      // has finished, as they would have on the stream.
      std::lock_guard batch_lock(batch_mutex_);
      if (executing_) {
        for (auto& op : dropped) failed_after_running_.emplace_back(std::move(op), failed);
        return;
      }
    }
    for (auto& op : dropped) Finish(op, failed);
  }

  void Wake() { work_cv_.notify_all(); }
  // Whether another stream of the device has work queued or running (this
  // one's own, the op running now included, subtracted).
  bool OthersBusy() {
    std::lock_guard lock(mutex_);
    const auto own = static_cast<std::int64_t>(enqueued_ - finished_.load());
    return device_.pending_ops.load() - own > 0;
  }
  std::uint64_t reset_epoch_ = 0;  // guarded by mutex_: non-sticky aborts (resets) so far

 private:
  // Caller holds mutex_.
  void SetError(const Error& error) {
    error_ = error;
    has_error_.store(true, std::memory_order_release);
  }
  void Run();
  Status Execute(Op& op);
  // Counts one operation as finished and wakes synchronizers if any wait.
  // `epoch`: the reset epoch the op started in; a failure from before a
  // reset is the op's own, not the stream's.
  void MarkFinished(const Status& status, std::uint64_t epoch);
  // Completes an op's side channels (callback, event) with its status.
  static void Finish(Op& op, const Status& status) {
    if (op.kind == Op::Kind::kCallback && op.callback) op.callback(status);
    // A failed record still completes its event: waiters must not hang on
    // work that will never run.
    if (op.kind == Op::Kind::kRecord && op.event) op.event->Complete(op.generation);
  }

  SimDriverImpl& driver_;
  SimDevice& device_;
  const StreamHandle handle_;
  const std::chrono::microseconds spin_;

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<Op> queue_;               // guarded by mutex_
  std::atomic<std::size_t> queued_{0};  // queue_.size(), for the spinning worker
  std::uint64_t enqueued_ = 0;          // guarded by mutex_
  std::atomic<std::uint64_t> finished_{0};
  std::atomic<int> waiters_{0};
  bool sleeping_ = false;               // guarded by mutex_
  bool closing_ = false;                // guarded by mutex_
  std::optional<Error> error_;          // guarded by mutex_; set through SetError
  std::atomic<bool> has_error_{false};  // error_ is set: lets the worker skip the lock
  // The batch the worker is running; Abort takes what it has not started.
  // Lock order: mutex_, then batch_mutex_.
  std::mutex batch_mutex_;
  std::vector<Op> batch_;       // guarded by batch_mutex_
  std::size_t batch_next_ = 0;  // guarded by batch_mutex_
  bool executing_ = false;      // guarded by batch_mutex_: the worker runs an op
  // Ops an abort dropped while one ran: failed once it has finished.
  std::vector<std::pair<Op, Status>> failed_after_running_;  // guarded by batch_mutex_
  std::atomic<bool> aborted_{false};
  std::thread worker_;  // last: started once everything above exists
};

class SimDriverImpl final : public SimDriver {
 public:
  explicit SimDriverImpl(const SimDriverOptions& options) : options_(options) {
    if (!options_.clock) options_.clock = std::make_shared<common::SystemClock>();
    devices_.reserve(static_cast<std::size_t>(options.device_count));
    for (int index = 0; index < options.device_count; ++index) {
      auto device = std::make_unique<SimDevice>();
      device->properties.index = index;
      device->properties.name = "rasd-sim";
      device->properties.vendor = "sim";
      device->properties.uuid =
          fmt::format("SIM-{:08x}-0000-0000-0000-{:012x}",
                      0x5a5d0000u + static_cast<unsigned>(index), static_cast<unsigned>(index));
      // A PCI address of its own, so that kernel-log records (Xid, AER) in
      // tests and demos can name a simulated device the way they name a GPU;
      // in PCI domain ffff, which no real device uses (domains are numbered
      // from 0; VMD's start at 10000), so that a real GPU's record never
      // lands on a simulated device.
      device->properties.pci_bdf = fmt::format("ffff:{:02x}:00.0", 0xc1 + index);
      device->properties.memory_bytes = options.memory_bytes_per_device;
      device->properties.retire_granularity = kPageSize;
      device->next_address = static_cast<DeviceAddress>(index + 1) << kAddressShift;
      devices_.push_back(std::move(device));
    }
  }

  ~SimDriverImpl() override {
    {
      // A thread left inside a wedged query (its caller gave up waiting)
      // returns now, and is out before the devices go.
      std::unique_lock lock(wedge_mutex_);
      releasing_wedges_ = true;
      wedge_changed_.notify_all();
      wedge_changed_.wait(lock, [this] { return queries_inside_ == 0; });
    }
    std::unordered_map<std::uint64_t, std::shared_ptr<SimStream>> streams;
    {
      std::unique_lock lock(handles_mutex_);
      streams.swap(streams_);
    }
    streams.clear();  // joins the workers
  }

  std::string_view Name() const override { return "sim"; }

  Result<std::vector<DeviceProperties>> EnumerateDevices() override {
    std::vector<DeviceProperties> properties;
    for (const auto& device : devices_) properties.push_back(device->properties);
    return properties;
  }

  std::vector<KernelSignature> Kernels() const override {
    std::vector<KernelSignature> signatures;
    for (const auto& kernel : sim::SimKernels()) signatures.push_back(kernel.signature);
    return signatures;
  }

  // Each device's memory starts at a fixed base and is handed out in order:
  // the same page has the same address in every run.
  bool IsStableDeviceAddress(int device_index, DeviceAddress address) const override {
    if (device_index < 0 || static_cast<std::size_t>(device_index) >= devices_.size()) return false;
    const DeviceAddress base = static_cast<DeviceAddress>(device_index + 1) << kAddressShift;
    return address >= base &&
           address - base <
               devices_[static_cast<std::size_t>(device_index)]->properties.memory_bytes;
  }

  Result<DeviceAddress> ReserveMemory(int device_index, std::uint64_t bytes) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    if (auto usable = (*device)->CheckUsable(); !usable) return Fail(usable.error());
    if (bytes == 0) return Fail(ErrorCode::kInvalidArgument, "cannot reserve 0 bytes");
    const std::uint64_t rounded = (bytes + kPageSize - 1) & ~(kPageSize - 1);
    std::unique_lock lock(memory_mutex_);
    SimDevice& d = **device;
    if (rounded > d.properties.memory_bytes - d.reserved_bytes) {
      return Fail(ErrorCode::kOutOfMemory,
                  fmt::format("device {}: cannot reserve {} bytes, {} of {} in use", device_index,
                              rounded, d.reserved_bytes, d.properties.memory_bytes));
    }
    Reservation reservation;
    reservation.base = d.next_address;
    reservation.size = rounded;
    reservation.bytes.reset(new (std::nothrow) std::byte[rounded]);
    if (!reservation.bytes) {
      return Fail(ErrorCode::kOutOfMemory,
                  fmt::format("host memory for {} simulated bytes", rounded));
    }
    d.next_address += rounded;
    d.reserved_bytes += rounded;
    const DeviceAddress base = reservation.base;
    d.reservations.emplace(base, std::move(reservation));
    return base;
  }

  Status ReleaseMemory(int device_index, DeviceAddress base) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    // Exclusive: waits for kernels and copies that are using device memory.
    std::unique_lock lock(memory_mutex_);
    auto it = (*device)->reservations.find(base);
    if (it == (*device)->reservations.end()) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("device {}: 0x{:x} is not a reservation", device_index, base));
    }
    (*device)->reserved_bytes -= it->second.size;
    (*device)->reservations.erase(it);
    return {};
  }

  Result<StreamHandle> CreateStream(int device_index) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    if (auto usable = (*device)->CheckUsable(); !usable) return Fail(usable.error());
    const StreamHandle handle{next_handle_.fetch_add(1)};
    auto stream = std::make_shared<SimStream>(*this, **device, handle, options_.worker_spin);
    std::unique_lock lock(handles_mutex_);
    streams_.emplace(handle.value, std::move(stream));
    return handle;
  }

  Status DestroyStream(StreamHandle handle) override {
    std::shared_ptr<SimStream> stream;
    {
      std::unique_lock lock(handles_mutex_);
      auto it = streams_.find(handle.value);
      if (it == streams_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown stream");
      stream = std::move(it->second);
      streams_.erase(it);
    }
    return {};  // the last reference joins the worker
  }

  Status CopyHostToDevice(StreamHandle handle, DeviceAddress dst, const void* src,
                          std::uint64_t bytes) override {
    Op op;
    op.kind = Op::Kind::kHostToDevice;
    op.dst = dst;
    op.host_src = src;
    op.bytes = bytes;
    return Submit(handle, std::move(op));
  }

  Status CopyDeviceToHost(StreamHandle handle, void* dst, DeviceAddress src,
                          std::uint64_t bytes) override {
    Op op;
    op.kind = Op::Kind::kDeviceToHost;
    op.host_dst = dst;
    op.src = src;
    op.bytes = bytes;
    return Submit(handle, std::move(op));
  }

  Status CopyDeviceToDevice(StreamHandle handle, DeviceAddress dst, int dst_device,
                            DeviceAddress src, std::uint64_t bytes) override {
    if (auto device = GetDevice(dst_device); !device) return Fail(device.error());
    Op op;
    op.kind = Op::Kind::kDeviceToDevice;
    op.dst = dst;
    op.dst_device = dst_device;
    op.src = src;
    op.bytes = bytes;
    return Submit(handle, std::move(op));
  }

  Status LaunchKernel(StreamHandle handle, std::string_view name, const LaunchConfig& config,
                      std::span<const KernelArg> args) override {
    const sim::SimKernel* kernel = sim::FindSimKernel(name);
    if (kernel == nullptr)
      return Fail(ErrorCode::kNotSupported, fmt::format("no kernel '{}'", name));
    if (args.size() != kernel->signature.args.size()) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("kernel '{}' takes {} arguments, not {}", name,
                              kernel->signature.args.size(), args.size()));
    }
    Op op;
    op.kind = Op::Kind::kKernel;
    op.kernel = kernel;
    op.config = config;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i].kind != kernel->signature.args[i]) {
        return Fail(ErrorCode::kInvalidArgument,
                    fmt::format("kernel '{}': argument {} has the wrong kind", name, i));
      }
      op.args[i] = args[i];
    }
    op.arg_count = static_cast<std::uint8_t>(args.size());
    return Submit(handle, std::move(op));
  }

  Status EnqueueCallback(StreamHandle handle, StreamCallback callback) override {
    if (!callback) return Fail(ErrorCode::kInvalidArgument, "empty callback");
    Op op;
    op.kind = Op::Kind::kCallback;
    op.callback = std::move(callback);
    return Submit(handle, std::move(op));
  }

  Result<EventHandle> CreateEvent(int device_index) override {
    if (auto device = GetDevice(device_index); !device) return Fail(device.error());
    auto event = std::make_shared<SimEvent>();
    event->device = device_index;
    event->clock = options_.clock;
    const EventHandle handle{next_handle_.fetch_add(1)};
    std::unique_lock lock(handles_mutex_);
    events_.emplace(handle.value, std::move(event));
    return handle;
  }

  Status DestroyEvent(EventHandle handle) override {
    std::unique_lock lock(handles_mutex_);
    if (events_.erase(handle.value) == 0) return Fail(ErrorCode::kInvalidArgument, "unknown event");
    return {};
  }

  Status RecordEvent(EventHandle event_handle, StreamHandle stream_handle) override {
    auto event = FindEvent(event_handle);
    if (!event) return Fail(event.error());
    Op op;
    op.kind = Op::Kind::kRecord;
    op.event = *event;
    {
      std::lock_guard lock((*event)->mutex);
      op.generation = ++(*event)->recorded;
    }
    return Submit(stream_handle, std::move(op));
  }

  Status StreamWaitEvent(StreamHandle stream_handle, EventHandle event_handle) override {
    auto event = FindEvent(event_handle);
    if (!event) return Fail(event.error());
    Op op;
    op.kind = Op::Kind::kWait;
    op.event = *event;
    {
      std::lock_guard lock((*event)->mutex);
      op.generation = (*event)->recorded;
    }
    if (op.generation == 0) return {};  // never recorded: nothing to wait for (as CUDA)
    return Submit(stream_handle, std::move(op));
  }

  Status SynchronizeEvent(EventHandle handle, std::chrono::nanoseconds timeout) override {
    auto event = FindEvent(handle);
    if (!event) return Fail(event.error());
    std::unique_lock lock((*event)->mutex);
    const std::uint64_t target = (*event)->recorded;
    if (!(*event)->completed_cv.wait_for(lock, timeout,
                                         [&] { return (*event)->completed >= target; })) {
      return Fail(ErrorCode::kTimeout, "event did not complete in time");
    }
    return {};
  }

  Result<std::chrono::nanoseconds> ElapsedTime(EventHandle start, EventHandle end) override {
    auto first = FindEvent(start);
    if (!first) return Fail(first.error());
    auto second = FindEvent(end);
    if (!second) return Fail(second.error());
    std::chrono::nanoseconds from{0}, to{0};
    for (auto [event, at] : {std::pair{*first, &from}, {*second, &to}}) {
      std::lock_guard lock(event->mutex);
      if (event->recorded == 0 || event->completed < event->recorded) {
        return Fail(ErrorCode::kUnavailable, "event has not completed");
      }
      *at = event->completed_at;
    }
    return to - from;
  }

  Status SynchronizeStream(StreamHandle handle, std::chrono::nanoseconds timeout) override {
    auto stream = FindStream(handle);
    if (!stream) return Fail(stream.error());
    return (*stream)->Synchronize(timeout);
  }

  Status AbortStream(StreamHandle handle, const Error& reason) override {
    auto stream = FindStream(handle);
    if (!stream) return Fail(stream.error());
    (*stream)->Abort(reason);
    return {};
  }

  Result<MemoryAfterReset> ResetDevice(int device_index) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    if ((*device)->condition.load() == DeviceCondition::kLost) {
      return Fail(
          ErrorCode::kDeviceFault,
          fmt::format("device {} fell off the bus; a reset cannot bring it back", device_index));
    }
    const Error reason{ErrorCode::kAborted, fmt::format("device {} reset", device_index)};
    for (auto& stream : StreamsOf(device_index)) stream->Abort(reason, /*sticky=*/false);
    (*device)->condition.store(DeviceCondition::kOk);
    (*device)->hung.store(false);
    {
      std::lock_guard lock(links_mutex_);
      std::erase_if(links_down_, [&](const auto& link) {
        return link.first == device_index || link.second == device_index;
      });
    }
    for (auto& stream : StreamsOf(device_index)) stream->Wake();
    return MemoryAfterReset::kKept;  // the simulator's memory is the process's: nothing is lost
  }

  void SetErrorListener(ErrorListener listener) override {
    std::lock_guard lock(listener_mutex_);
    listener_ = std::move(listener);
  }

  // ---- fault injection ----

  Status InjectCorrectedEcc(int device_index, DeviceAddress address) override {
    if (auto device = GetDevice(device_index); !device) return Fail(device.error());
    Emit({.device = device_index,
          .kind = DriverErrorKind::kCorrectedEcc,
          .address = address,
          .message = fmt::format("corrected ECC error at 0x{:x}", address)});
    return {};
  }

  Status InjectUncorrectedEcc(int device_index, DeviceAddress address) override {
    return Poison(device_index, address, /*action_optional=*/false);
  }

  Status InjectActionOptionalEcc(int device_index, DeviceAddress address) override {
    return Poison(device_index, address, /*action_optional=*/true);
  }

  Status InjectLatentUncorrectedEcc(int device_index, DeviceAddress address) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    std::unique_lock lock(memory_mutex_);
    (*device)->poisoned_pages.insert(PageOf(address));  // reported when a read consumes it
    return {};
  }

  // Poisons the page holding `address` and reports it, as a UCNA or (found
  // by a patrol scrub) an action-optional error.
  Status Poison(int device_index, DeviceAddress address, bool action_optional) {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    {
      std::unique_lock lock(memory_mutex_);
      (*device)->poisoned_pages.insert(PageOf(address));
    }
    Emit({.device = device_index,
          .kind = DriverErrorKind::kUncorrectedEcc,
          .address = address,
          .action_optional = action_optional,
          .message = fmt::format("uncorrected ECC error at 0x{:x}{}; page 0x{:x} poisoned{}",
                                 address, action_optional ? " found by patrol scrub" : "",
                                 PageOf(address), action_optional ? ", action optional" : "")});
    return {};
  }

  Status InjectStickyFault(int device_index) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    (*device)->condition.store(DeviceCondition::kSticky);
    for (auto& stream : StreamsOf(device_index)) stream->Wake();
    Emit({.device = device_index,
          .kind = DriverErrorKind::kStickyFault,
          .message = "device context failed (sticky fault); reset required"});
    return {};
  }

  Status InjectHang(int device_index) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    (*device)->hung.store(true);
    return {};
  }

  Status InjectSilentCorruption(int device_index, double rate, std::string_view kernel,
                                std::uint64_t seed) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    if (!(rate >= 0 && rate <= 1)) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("a corruption rate is 0 to 1 per element, not {}", rate));
    }
    if (!kernel.empty() && sim::FindSimKernel(kernel) == nullptr) {
      return Fail(ErrorCode::kInvalidArgument, fmt::format("no kernel '{}'", kernel));
    }
    std::lock_guard lock((*device)->corruption_mutex);
    auto& corruption = (*device)->corruption;
    corruption.rate = rate;
    corruption.kernel = std::string(kernel);
    corruption.random.seed(seed);
    corruption.skip = rate > 0 ? NextCorruptionSkip(corruption) : 0;
    (*device)->corrupting.store(rate > 0);
    return {};
  }

  Status InjectLoadFault(int device_index) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    (*device)->load_fault.store(true);
    return {};
  }

  Status InjectFallOffBus(int device_index) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    (*device)->condition.store(DeviceCondition::kLost);
    const Error reason{ErrorCode::kDeviceFault,
                       fmt::format("device {}: fell off the bus", device_index)};
    for (auto& stream : StreamsOf(device_index)) stream->Abort(reason);
    Emit({.device = device_index,
          .kind = DriverErrorKind::kFellOffBus,
          .message = "GPU has fallen off the bus"});
    return {};
  }

  Status InjectLinkError(int device_a, int device_b) override {
    if (auto device = GetDevice(device_a); !device) return Fail(device.error());
    if (auto device = GetDevice(device_b); !device) return Fail(device.error());
    if (device_a == device_b)
      return Fail(ErrorCode::kInvalidArgument, "a link joins two different devices");
    {
      std::lock_guard lock(links_mutex_);
      links_down_.insert({std::min(device_a, device_b), std::max(device_a, device_b)});
    }
    Emit({.device = device_a,
          .kind = DriverErrorKind::kLinkError,
          .peer_device = device_b,
          .message =
              fmt::format("link between device {} and device {} failed", device_a, device_b)});
    return {};
  }

  Status SetLinkState(int device_a, int device_b, bool up) override {
    if (auto device = GetDevice(device_a); !device) return Fail(device.error());
    if (auto device = GetDevice(device_b); !device) return Fail(device.error());
    if (device_a == device_b)
      return Fail(ErrorCode::kInvalidArgument, "a link joins two different devices");
    std::lock_guard lock(links_mutex_);
    const std::pair<int, int> link{std::min(device_a, device_b), std::max(device_a, device_b)};
    if (up) {
      links_down_.erase(link);
    } else {
      links_down_.insert(link);
    }
    return {};
  }

  Status InjectNvlinkState(int device_a, int device_b, bool up) override {
    if (auto set = SetLinkState(device_a, device_b, up); !set) return set;
    for (const auto& [device, peer] : {std::pair{device_a, device_b}, std::pair{device_b, device_a}}) {
      Emit({.device = device,
            .kind = up ? DriverErrorKind::kLinkUp : DriverErrorKind::kLinkDown,
            .peer_device = peer,
            .message = fmt::format("NVLink {} (to device {}) {}", peer, peer,
                                   up ? "active" : "inactive"),
            .link = DeviceLink{.kind = LinkKind::kNvlink, .index = static_cast<unsigned>(peer)}});
    }
    return {};
  }

  // ---- the device's queries (DeviceQueries) ----

  std::vector<std::string> Names(int device_index) const override {
    if (device_index < 0 || device_index >= static_cast<int>(devices_.size())) return {};
    return {std::string(kHealthQuery), std::string(kPoisonedPagesQuery)};
  }

  Result<std::uint64_t> Run(int device_index, std::string_view query) override {
    auto device = GetDevice(device_index);
    if (!device) return Fail(device.error());
    if (query != kHealthQuery && query != kPoisonedPagesQuery) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("device {} has no query '{}'", device_index, query));
    }
    {
      std::unique_lock lock(wedge_mutex_);
      ++queries_inside_;
      wedge_changed_.wait(lock, [&] {
        if (releasing_wedges_) return true;
        auto wedged = wedged_.find(device_index);
        return wedged == wedged_.end() ||
               (!wedged->second.contains(kAllQueries) && !wedged->second.contains(query));
      });
      if (--queries_inside_ == 0) wedge_changed_.notify_all();
      if (releasing_wedges_) return Fail(ErrorCode::kAborted, "the simulator is shutting down");
    }
    if (query == kHealthQuery)
      return static_cast<std::uint64_t>((*device)->condition.load(std::memory_order_acquire));
    std::shared_lock lock(memory_mutex_);
    return static_cast<std::uint64_t>((*device)->poisoned_pages.size());
  }

  Status InjectWedge(int device_index, std::string_view query) override {
    if (auto device = GetDevice(device_index); !device) return Fail(device.error());
    if (!query.empty() && query != kHealthQuery && query != kPoisonedPagesQuery) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("device {} has no query '{}': it has {} and {}", device_index, query,
                              kHealthQuery, kPoisonedPagesQuery));
    }
    std::lock_guard lock(wedge_mutex_);
    wedged_[device_index].emplace(query.empty() ? kAllQueries : query);
    return {};
  }

  Status ClearWedge(int device_index) override {
    if (auto device = GetDevice(device_index); !device) return Fail(device.error());
    std::lock_guard lock(wedge_mutex_);
    wedged_.erase(device_index);
    wedge_changed_.notify_all();
    return {};
  }

  // ---- used by streams ----

  void Emit(const DriverErrorEvent& event) {
    std::lock_guard lock(listener_mutex_);
    if (listener_) listener_(event);
  }

  bool LinkDown(int a, int b) {
    if (a == b) return false;
    std::lock_guard lock(links_mutex_);
    return links_down_.contains({std::min(a, b), std::max(a, b)});
  }

  std::shared_mutex& MemoryMutex() { return memory_mutex_; }

  // Finds [address, address + bytes) on `device`. Caller holds MemoryMutex.
  Result<std::byte*> Translate(SimDevice& device, DeviceAddress address, std::uint64_t bytes,
                               bool for_write, std::optional<DeviceAddress>* poisoned_hit) {
    auto it = device.reservations.upper_bound(address);
    if (it == device.reservations.begin()) return IllegalAddress(device, address, bytes);
    --it;
    const Reservation& reservation = it->second;
    if (address + bytes < address || address + bytes > reservation.base + reservation.size) {
      return IllegalAddress(device, address, bytes);
    }
    if (!for_write && bytes > 0 && !device.poisoned_pages.empty()) {
      auto poisoned = device.poisoned_pages.lower_bound(PageOf(address));
      if (poisoned != device.poisoned_pages.end() && *poisoned < address + bytes) {
        *poisoned_hit = std::max(*poisoned, address);
        return Fail(ErrorCode::kDeviceFault,
                    fmt::format("device {}: uncorrectable ECC error consumed at 0x{:x}",
                                device.properties.index, **poisoned_hit));
      }
    }
    return reservation.bytes.get() + (address - reservation.base);
  }

  Result<SimDevice*> GetDevice(int index) {
    if (index < 0 || index >= static_cast<int>(devices_.size())) {
      return Fail(ErrorCode::kInvalidArgument, fmt::format("no device {}", index));
    }
    return devices_[static_cast<std::size_t>(index)].get();
  }

 private:
  static Result<std::byte*> IllegalAddress(SimDevice& device, DeviceAddress address,
                                           std::uint64_t bytes) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("device {}: illegal address 0x{:x} (+{} bytes)",
                            device.properties.index, address, bytes));
  }

  Status Submit(StreamHandle handle, Op&& op) {
    auto stream = FindStream(handle);
    if (!stream) return Fail(stream.error());
    return (*stream)->Enqueue(std::move(op));
  }

  Result<std::shared_ptr<SimStream>> FindStream(StreamHandle handle) {
    std::shared_lock lock(handles_mutex_);
    auto it = streams_.find(handle.value);
    if (it == streams_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown stream");
    return it->second;
  }

  Result<std::shared_ptr<SimEvent>> FindEvent(EventHandle handle) {
    std::shared_lock lock(handles_mutex_);
    auto it = events_.find(handle.value);
    if (it == events_.end()) return Fail(ErrorCode::kInvalidArgument, "unknown event");
    return it->second;
  }

  std::vector<std::shared_ptr<SimStream>> StreamsOf(int device_index) {
    std::vector<std::shared_ptr<SimStream>> result;
    std::shared_lock lock(handles_mutex_);
    for (auto& [id, stream] : streams_) {
      if (stream->Device().properties.index == device_index) result.push_back(stream);
    }
    return result;
  }

  SimDriverOptions options_;
  std::vector<std::unique_ptr<SimDevice>> devices_;
  std::shared_mutex memory_mutex_;
  std::shared_mutex handles_mutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<SimStream>> streams_;
  std::unordered_map<std::uint64_t, std::shared_ptr<SimEvent>> events_;
  std::atomic<std::uint64_t> next_handle_{1};
  std::mutex links_mutex_;
  std::set<std::pair<int, int>> links_down_;
  std::mutex listener_mutex_;
  ErrorListener listener_;
  // InjectWedge: per device, the queries that do not return (kAllQueries
  // for every one); a query waits on wedge_changed_ while it is wedged.
  std::mutex wedge_mutex_;
  std::condition_variable wedge_changed_;
  std::map<int, std::set<std::string, std::less<>>> wedged_;  // guarded by wedge_mutex_
  int queries_inside_ = 0;                                    // guarded by wedge_mutex_
  bool releasing_wedges_ = false;                             // guarded by wedge_mutex_
};

// Maps kernel buffers on the launching device and remembers a poisoned read.
class StreamMemoryAccess final : public sim::DeviceMemoryAccess {
 public:
  StreamMemoryAccess(SimDriverImpl& driver, SimDevice& device) : driver_(driver), device_(device) {}
  Result<std::byte*> Map(DeviceAddress address, std::uint64_t bytes, bool for_write) override {
    auto mapped = driver_.Translate(device_, address, bytes, for_write, &poisoned_hit);
    if (mapped && for_write) written.emplace_back(*mapped, bytes);
    return mapped;
  }
  std::optional<DeviceAddress> poisoned_hit;
  std::vector<std::pair<std::byte*, std::uint64_t>> written;  // what the kernel may have written

 private:
  SimDriverImpl& driver_;
  SimDevice& device_;
};

void SimStream::MarkFinished(const Status& status, std::uint64_t epoch) {
  if (!status) {
    std::lock_guard lock(mutex_);
    if (!error_ && epoch == reset_epoch_) SetError(status.error());
  }
  // Sequentially consistent with the waiter's increment of waiters_ and its
  // read of finished_: either it sees this op finished, or we see it waiting.
  finished_.fetch_add(1);
  device_.pending_ops.fetch_sub(1);
  if (waiters_.load() > 0) {
    { std::lock_guard lock(mutex_); }  // the waiter is inside wait() now
    done_cv_.notify_all();
  }
}

void SimStream::Run() {
  std::vector<Op> spare;  // the other buffer: swapped with queue_ batch by batch
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (queue_.empty()) {
        if (closing_) return;
        // Spin briefly: the next operation usually follows at once.
        lock.unlock();
        const auto spin = common::Deadline::After(spin_);
        while (queued_.load(std::memory_order_acquire) == 0 && !spin.Expired()) {
          CpuRelax();
        }
        lock.lock();
        while (queue_.empty() && !closing_) {
          sleeping_ = true;
          work_cv_.wait(lock);
          sleeping_ = false;
        }
        continue;
      }
      std::lock_guard batch_lock(batch_mutex_);
      spare.swap(batch_);  // batch_ is empty: take its capacity
      batch_.swap(queue_);
      queue_.swap(spare);
      batch_next_ = 0;
      queued_.store(0, std::memory_order_release);
    }
    for (;;) {
      // A hung device makes no progress; a reset or abort ends the hang by
      // taking the rest of the batch.
      while (device_.hung.load(std::memory_order_acquire)) {
        std::unique_lock lock(mutex_);
        bool remaining = false;
        {
          std::lock_guard batch_lock(batch_mutex_);
          remaining = batch_next_ < batch_.size();
        }
        if (closing_ || !remaining) break;
        work_cv_.wait_for(lock, std::chrono::milliseconds(5));
      }
      Op op;
      std::uint64_t epoch = 0;
      {
        std::lock_guard lock(mutex_);
        epoch = reset_epoch_;
      }
      {
        std::lock_guard batch_lock(batch_mutex_);
        if (batch_next_ == batch_.size()) {
          batch_.clear();
          batch_next_ = 0;
          break;
        }
        op = std::move(batch_[batch_next_++]);
        executing_ = true;
      }
      std::optional<Error> failed_before;
      if (has_error_.load(std::memory_order_acquire)) {
        std::lock_guard lock(mutex_);
        failed_before = error_;
      }
      const Status status = failed_before ? Status(Fail(*failed_before)) : Execute(op);
      Finish(op, status);
      MarkFinished(status, epoch);
      std::vector<std::pair<Op, Status>> dropped;
      {
        std::lock_guard batch_lock(batch_mutex_);
        executing_ = false;
        dropped.swap(failed_after_running_);
      }
      for (auto& [dropped_op, failed] : dropped) Finish(dropped_op, failed);
    }
  }
}

Status SimStream::Execute(Op& op) {
  if (auto usable = device_.CheckUsable(); !usable) return usable;
  switch (op.kind) {
    case Op::Kind::kKernel: {
      StreamMemoryAccess memory(driver_, device_);
      Status status;
      {
        std::shared_lock lock(driver_.MemoryMutex());
        status = op.kernel->run(memory, op.config,
                                std::span<const KernelArg>(op.args.data(), op.arg_count));
        if (status && device_.corrupting.load(std::memory_order_relaxed))
          CorruptWrites(device_, op.kernel->signature.name, memory.written);
      }
      if (memory.poisoned_hit) {
        driver_.Emit({.device = device_.properties.index,
                      .kind = DriverErrorKind::kUncorrectedEcc,
                      .address = memory.poisoned_hit,
                      .consumed = true,
                      .stream = handle_,
                      .message = fmt::format("kernel '{}' consumed poisoned memory at 0x{:x}",
                                             op.kernel->signature.name, *memory.poisoned_hit)});
      }
      return status;
    }
    case Op::Kind::kHostToDevice: {
      std::shared_lock lock(driver_.MemoryMutex());
      std::optional<DeviceAddress> unused;
      auto dst = driver_.Translate(device_, op.dst, op.bytes, true, &unused);
      if (!dst) return Fail(dst.error());
      std::memcpy(*dst, op.host_src, op.bytes);
      return {};
    }
    case Op::Kind::kDeviceToHost:
    case Op::Kind::kDeviceToDevice: {
      std::optional<DeviceAddress> poisoned_hit;
      Status status;
      {
        std::shared_lock lock(driver_.MemoryMutex());
        auto src = driver_.Translate(device_, op.src, op.bytes, false, &poisoned_hit);
        if (!src) {
          status = Fail(src.error());
        } else if (op.kind == Op::Kind::kDeviceToHost) {
          std::memcpy(op.host_dst, *src, op.bytes);
          if (op.bytes > 0 && device_.load_fault.load(std::memory_order_relaxed) &&
              OthersBusy()) {
            static_cast<unsigned char*>(op.host_dst)[op.bytes / 2] ^= 0x10;
          }
        } else {
          auto dst_device = driver_.GetDevice(op.dst_device);
          if (driver_.LinkDown(device_.properties.index, op.dst_device)) {
            status = Fail(ErrorCode::kDeviceFault,
                          fmt::format("link between device {} and device {} is down",
                                      device_.properties.index, op.dst_device));
          } else if (auto usable = (*dst_device)->CheckUsable(); !usable) {
            status = usable;
          } else {
            std::optional<DeviceAddress> unused;
            auto dst = driver_.Translate(**dst_device, op.dst, op.bytes, true, &unused);
            if (!dst) {
              status = Fail(dst.error());
            } else {
              std::memmove(*dst, *src, op.bytes);
            }
          }
        }
      }
      if (poisoned_hit) {
        driver_.Emit(
            {.device = device_.properties.index,
             .kind = DriverErrorKind::kUncorrectedEcc,
             .address = poisoned_hit,
             .consumed = true,
             .stream = handle_,
             .message = fmt::format("copy consumed poisoned memory at 0x{:x}", *poisoned_hit)});
      }
      return status;
    }
    case Op::Kind::kRecord:
      return {};  // Finish() completes the event
    case Op::Kind::kWait: {
      std::unique_lock lock(op.event->mutex);
      while (op.event->completed < op.generation) {
        if (Aborted())
          return Fail(ErrorCode::kAborted, "stream aborted while waiting for an event");
        op.event->completed_cv.wait_for(lock, std::chrono::milliseconds(5));
      }
      return {};
    }
    case Op::Kind::kCallback:
      return {};  // Finish() runs it
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SimDriver>> SimDriver::Create(const SimDriverOptions& options) {
  if (options.device_count < 1 || options.device_count > kMaxSimDevices) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("simulator device count {} is outside 1..{}", options.device_count,
                            kMaxSimDevices));
  }
  if (options.memory_bytes_per_device == 0) {
    return Fail(ErrorCode::kInvalidArgument, "simulator device memory must be more than 0 bytes");
  }
  return std::unique_ptr<SimDriver>(std::make_unique<SimDriverImpl>(options));
}

}  // namespace rasd::drivers
