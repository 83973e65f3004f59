#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/runtime/device.h"
#include "rasd/runtime/kernel_registry.h"
#include "rasd/runtime/memory_pool.h"
#include "rasd/runtime/stream.h"

namespace rasd::runtime {

// What Runtime::ResetDevice did beyond clearing the device's faults.
struct ResetReport {
  // The vendor's reset freed the device's memory; the pool reserves afresh.
  bool memory_freed = false;
  // Live allocations whose memory went with it (their holders' data is gone).
  std::uint64_t allocations_lost = 0;
  // Streams on the device aborted so that their holders rebuild what they
  // kept there.
  std::uint64_t streams_aborted = 0;
};

struct RuntimeOptions {
  PoolOptions pool;
};

// The device runtime over one Driver: owns the driver, one Device (with its
// health gate) and one MemoryPool per device the driver reports, and the
// kernel registry. Devices are fixed for the Runtime's lifetime (a device
// that disappears is isolated, not removed), so references to them stay
// valid as long as the Runtime. Streams and events it creates must be
// destroyed before it. Thread-safe.
class Runtime {
 public:
  // Enumerates the driver's devices. Fails when the driver cannot.
  static Result<std::unique_ptr<Runtime>> Create(std::unique_ptr<drivers::Driver> driver,
                                                 RuntimeOptions options = {});
  ~Runtime();

  std::string_view DriverName() const { return driver_->Name(); }
  drivers::Driver& Driver() { return *driver_; }
  const KernelRegistry& Kernels() const { return kernels_; }

  std::size_t DeviceCount() const { return devices_.size(); }
  // kNotFound for an index the driver did not report.
  Result<Device*> GetDevice(int index);
  const std::vector<std::unique_ptr<Device>>& Devices() const { return devices_; }
  Result<MemoryPool*> Pool(int device);

  // Resets the device through the driver (pending work fails with
  // kAborted, a sticky fault or hang is cleared) and, where the reset freed
  // the device's memory, makes its pool forget the arenas it held and
  // aborts every stream on the device: their holders' device data is gone
  // (a job re-prepares, as after any abort). Call it on an isolated device:
  // work admitted meanwhile may find its memory gone. Errors are the
  // driver's.
  Result<ResetReport> ResetDevice(int device);

  // A new stream on `device`. Fails with kDeviceIsolated when the device's
  // gate refuses the admission asked for.
  Result<std::unique_ptr<Stream>> CreateStream(int device, StreamOptions options = {});
  Result<std::unique_ptr<Event>> CreateEvent(int device);

  // Aborts every live stream whose owner is `owner` (on any device: a job
  // is stopped as a whole), with `reason`. Returns how many were aborted;
  // 0 when the owner has none. Streams with an empty owner are never
  // matched.
  std::size_t AbortOwner(std::string_view owner, std::string_view reason);
  // The owners (job ids) with live streams on `device`.
  std::vector<std::string> OwnersOn(int device) const;
  // The same without rasd's own streams (owners named "rasd-...": the
  // heartbeat, the self-test): the jobs an operator would name.
  std::vector<std::string> JobsOn(int device) const;
  // The devices where `owner` has live streams, ascending.
  std::vector<int> DevicesOf(std::string_view owner) const;
  // Called with the device each time a job's stream (an owner not named
  // "rasd-...") opens on it, on the thread that opens it, under the stream
  // registry's lock: it must be quick and must not call back into the
  // runtime (posting to an event loop is what it is for). One listener;
  // nullptr removes it, and once that returns it is not called again.
  using WorkListener = std::function<void(int device)>;
  void SetWorkListener(WorkListener listener);

  // Asynchronous error reports from the driver (ECC, sticky faults, lost
  // devices, links). Subscribers run on driver threads, must be quick, and
  // must not call back into the driver. Returns an id for Unsubscribe.
  using ErrorSubscriber = std::function<void(const drivers::DriverErrorEvent&)>;
  int SubscribeErrors(ErrorSubscriber subscriber);
  // Reports an error the runtime itself found (a device that stopped
  // completing work) to the subscribers, as if the driver had.
  void ReportError(const drivers::DriverErrorEvent& event) { Dispatch(event); }
  void Unsubscribe(int id);

  // A job that survives a poisoned page of its own memory at a finer grain
  // than the whole job (the LLM service: the KV blocks on the page, and
  // the sequences using them) registers how: `contain(device, address)`
  // returns true when it has taken the page out of its use. Kill-consumer
  // asks ContainMemoryFault before it aborts the owner's streams. One per
  // owner; nullptr removes it, and once that returns it is not called
  // again. `contain` runs on the caller's thread and must be quick.
  using MemoryFaultContainment = std::function<bool(int device, drivers::DeviceAddress address)>;
  void SetMemoryFaultContainment(const std::string& owner, MemoryFaultContainment contain);
  // Whether `owner` contained the fault at `address` on `device` itself;
  // false when it registered no containment or the address is not its to
  // contain.
  bool ContainMemoryFault(std::string_view owner, int device, drivers::DeviceAddress address);

 private:
  Runtime(std::unique_ptr<drivers::Driver> driver, std::vector<std::unique_ptr<Device>> devices,
          RuntimeOptions options);
  void Dispatch(const drivers::DriverErrorEvent& event);
  friend class Stream;
  void RegisterStream(Stream* stream);
  void UnregisterStream(Stream* stream);

  std::unique_ptr<drivers::Driver> driver_;
  std::vector<std::unique_ptr<Device>> devices_;
  KernelRegistry kernels_;
  std::vector<std::unique_ptr<MemoryPool>> pools_;
  mutable std::mutex streams_mutex_;
  std::vector<Stream*> streams_;  // live streams, guarded by streams_mutex_
  WorkListener work_listener_;    // guarded by streams_mutex_
  std::mutex subscribers_mutex_;
  std::map<int, ErrorSubscriber> subscribers_;
  int next_subscriber_ = 1;
  std::mutex containment_mutex_;
  std::map<std::string, MemoryFaultContainment, std::less<>> containment_;
};

}  // namespace rasd::runtime
