#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/runtime/device.h"
#include "rasd/runtime/kernel_registry.h"
#include "rasd/runtime/memory_pool.h"
#include "rasd/runtime/stream.h"

namespace rasd::runtime {

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

  // A new stream on `device`. Fails with kDeviceIsolated when the device's
  // gate refuses the admission asked for.
  Result<std::unique_ptr<Stream>> CreateStream(int device, StreamOptions options = {});
  Result<std::unique_ptr<Event>> CreateEvent(int device);

  // Asynchronous error reports from the driver (ECC, sticky faults, lost
  // devices, links). Subscribers run on driver threads, must be quick, and
  // must not call back into the driver. Returns an id for Unsubscribe.
  using ErrorSubscriber = std::function<void(const drivers::DriverErrorEvent&)>;
  int SubscribeErrors(ErrorSubscriber subscriber);
  void Unsubscribe(int id);

 private:
  Runtime(std::unique_ptr<drivers::Driver> driver, std::vector<std::unique_ptr<Device>> devices,
          RuntimeOptions options);
  void Dispatch(const drivers::DriverErrorEvent& event);

  std::unique_ptr<drivers::Driver> driver_;
  std::vector<std::unique_ptr<Device>> devices_;
  KernelRegistry kernels_;
  std::vector<std::unique_ptr<MemoryPool>> pools_;
  std::mutex subscribers_mutex_;
  std::map<int, ErrorSubscriber> subscribers_;
  int next_subscriber_ = 1;
};

}  // namespace rasd::runtime
