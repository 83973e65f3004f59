#pragma once

#include <memory>
#include <vector>

#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers {

// Several backends as one Driver, for a host with more than one kind of
// accelerator (or none): the devices of the first backend come first, then
// those of the next, numbered on. Each call goes to the backend owning the
// device or handle; handles carry their backend in their top byte. A copy
// between devices of different backends returns kNotSupported (no vendor
// API copies between them; the runtime stages through the host). Error
// reports are renumbered to the composite's device indices.
//
// Faults() forwards each injection to the backend owning the device, with
// the backend's own index; a device of a backend without an injector gets
// kNotSupported, and so does a link between devices of two backends.
//
// With no backend it is a driver with no devices: rasd on a host without
// accelerators still reads and acts on host errors.
//
// Thread-safety: as the backends'; the composite's own state is fixed at
// construction.
class CompositeDriver final : public Driver {
 public:
  // kInvalidArgument for more than 255 backends or a null one.
  static Result<std::unique_ptr<CompositeDriver>> Create(
      std::vector<std::unique_ptr<Driver>> backends);
  ~CompositeDriver() override;

  // "cuda+ascend"; "none" without backends.
  std::string_view Name() const override { return name_; }
  Result<std::vector<DeviceProperties>> EnumerateDevices() override;
  // The kernels every backend has (a kernel must run wherever the runtime
  // places work).
  std::vector<KernelSignature> Kernels() const override;
  Result<DeviceAddress> ReserveMemory(int device, std::uint64_t bytes) override;
  bool IsStableDeviceAddress(int device, DeviceAddress address) const override;
  Status ReleaseMemory(int device, DeviceAddress base) override;
  Result<StreamHandle> CreateStream(int device) override;
  Status DestroyStream(StreamHandle stream) override;
  Status CopyHostToDevice(StreamHandle stream, DeviceAddress dst, const void* src,
                          std::uint64_t bytes) override;
  Status CopyDeviceToHost(StreamHandle stream, void* dst, DeviceAddress src,
                          std::uint64_t bytes) override;
  Status CopyDeviceToDevice(StreamHandle stream, DeviceAddress dst, int dst_device,
                            DeviceAddress src, std::uint64_t bytes) override;
  Status LaunchKernel(StreamHandle stream, std::string_view kernel, const LaunchConfig& config,
                      std::span<const KernelArg> args) override;
  Status EnqueueCallback(StreamHandle stream, StreamCallback callback) override;
  Result<EventHandle> CreateEvent(int device) override;
  Status DestroyEvent(EventHandle event) override;
  Status RecordEvent(EventHandle event, StreamHandle stream) override;
  Status StreamWaitEvent(StreamHandle stream, EventHandle event) override;
  Status SynchronizeEvent(EventHandle event, std::chrono::nanoseconds timeout) override;
  Result<std::chrono::nanoseconds> ElapsedTime(EventHandle start, EventHandle end) override;
  Status SynchronizeStream(StreamHandle stream, std::chrono::nanoseconds timeout) override;
  Status AbortStream(StreamHandle stream, const Error& reason) override;
  Result<MemoryAfterReset> ResetDevice(int device) override;
  void SetErrorListener(ErrorListener listener) override;
  // Null when no backend can inject faults (or there is no backend).
  FaultInjector* Faults() override;
  // Null when no backend has device queries.
  DeviceQueries* Queries() override;
  // Any backend's; the calls of all of them.
  bool MonitorsDevices() const override;
  std::vector<ProbeCalls::Call> RunningCalls() const override;

 private:
  class RoutedFaults;
  class RoutedQueries;
  struct Backend {
    std::unique_ptr<Driver> driver;
    int first_device = 0;
    int device_count = 0;
    FaultInjector* faults = nullptr;   // the backend's; null where it has none
    DeviceQueries* queries = nullptr;  // likewise
  };
  struct Local {
    std::size_t backend;
    int device;  // the backend's own index
  };

  explicit CompositeDriver(std::vector<Backend> backends);
  Result<Local> DeviceOf(int device) const;
  Result<std::size_t> BackendOf(std::uint64_t handle) const;
  static std::uint64_t Tag(std::size_t backend, std::uint64_t handle);
  static std::uint64_t Untag(std::uint64_t handle);

  std::vector<Backend> backends_;
  std::string name_;
  std::vector<DeviceProperties> devices_;
  std::unique_ptr<RoutedFaults> faults_;    // null when no backend has an injector
  std::unique_ptr<RoutedQueries> queries_;  // null when no backend has queries
};

}  // namespace rasd::drivers
