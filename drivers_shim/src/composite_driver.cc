#include "rasd/drivers_shim/composite_driver.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::drivers {
namespace {

constexpr int kBackendShift = 56;
constexpr std::uint64_t kHandleMask = (std::uint64_t{1} << kBackendShift) - 1;

}  // namespace

// Sends each injection to the backend owning the device, renumbered to the
// backend's index. No state of its own beyond the composite's, which is
// fixed at construction: thread-safe as the backends' injectors are.
class CompositeDriver::RoutedFaults final : public FaultInjector {
 public:
  explicit RoutedFaults(const CompositeDriver& composite) : composite_(composite) {}
  ~RoutedFaults() override = default;

  Status InjectCorrectedEcc(int device, DeviceAddress address) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectCorrectedEcc(target->device, address);
  }
  Status InjectUncorrectedEcc(int device, DeviceAddress address) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectUncorrectedEcc(target->device, address);
  }
  Status InjectActionOptionalEcc(int device, DeviceAddress address) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectActionOptionalEcc(target->device, address);
  }
  Status InjectLatentUncorrectedEcc(int device, DeviceAddress address) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectLatentUncorrectedEcc(target->device, address);
  }
  Status InjectStickyFault(int device) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectStickyFault(target->device);
  }
  Status InjectHang(int device) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectHang(target->device);
  }
  Status InjectLoadFault(int device) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectLoadFault(target->device);
  }
  Status InjectFallOffBus(int device) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectFallOffBus(target->device);
  }
  Status InjectLinkError(int device_a, int device_b) override {
    auto a = composite_.DeviceOf(device_a);
    if (!a) return Fail(a.error());
    auto b = composite_.DeviceOf(device_b);
    if (!b) return Fail(b.error());
    if (a->backend != b->backend) {
      return Fail(ErrorCode::kNotSupported,
                  fmt::format("devices {} ({}) and {} ({}) are on different backends: no link "
                              "joins them",
                              device_a, composite_.backends_[a->backend].driver->Name(), device_b,
                              composite_.backends_[b->backend].driver->Name()));
    }
    auto target = Route(device_a);
    if (!target) return Fail(target.error());
    return target->faults->InjectLinkError(target->device, b->device);
  }
  Status InjectWedge(int device, std::string_view query) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->InjectWedge(target->device, query);
  }
  Status ClearWedge(int device) override {
    auto target = Route(device);
    if (!target) return Fail(target.error());
    return target->faults->ClearWedge(target->device);
  }

 private:
  struct Target {
    FaultInjector* faults;
    int device;  // the backend's own index
  };

  Result<Target> Route(int device) const {
    auto local = composite_.DeviceOf(device);
    if (!local) return Fail(local.error());
    const Backend& backend = composite_.backends_[local->backend];
    if (backend.faults == nullptr) {
      const std::string_view name = backend.driver->Name();
      return Fail(
          ErrorCode::kNotSupported,
          fmt::format("device {} is a {} device: {} cannot inject faults", device, name, name));
    }
    return Target{backend.faults, local->device};
  }

  const CompositeDriver& composite_;
};

// Sends each query to the backend owning the device; a device of a backend
// without queries has none. Thread-safe as RoutedFaults is.
class CompositeDriver::RoutedQueries final : public DeviceQueries {
 public:
  explicit RoutedQueries(const CompositeDriver& composite) : composite_(composite) {}
  ~RoutedQueries() override = default;

  std::vector<std::string> Names(int device) const override {
    auto local = composite_.DeviceOf(device);
    if (!local) return {};
    DeviceQueries* queries = composite_.backends_[local->backend].queries;
    return queries == nullptr ? std::vector<std::string>{} : queries->Names(local->device);
  }
  Result<std::uint64_t> Run(int device, std::string_view query) override {
    auto local = composite_.DeviceOf(device);
    if (!local) return Fail(local.error());
    DeviceQueries* queries = composite_.backends_[local->backend].queries;
    if (queries == nullptr) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("device {} ({}) has no query '{}'", device,
                              composite_.backends_[local->backend].driver->Name(), query));
    }
    return queries->Run(local->device, query);
  }

 private:
  const CompositeDriver& composite_;
};

Result<std::unique_ptr<CompositeDriver>> CompositeDriver::Create(
    std::vector<std::unique_ptr<Driver>> drivers) {
  if (drivers.size() > 255) return Fail(ErrorCode::kInvalidArgument, "too many backends");
  std::vector<Backend> backends;
  int next = 0;
  for (auto& driver : drivers) {
    if (!driver) return Fail(ErrorCode::kInvalidArgument, "a null backend");
    auto devices = driver->EnumerateDevices();
    if (!devices) return Fail(devices.error());
    const int count = static_cast<int>(devices->size());
    FaultInjector* faults = driver->Faults();
    DeviceQueries* queries = driver->Queries();
    backends.push_back({std::move(driver), next, count, faults, queries});
    next += count;
  }
  return std::unique_ptr<CompositeDriver>(new CompositeDriver(std::move(backends)));
}

CompositeDriver::CompositeDriver(std::vector<Backend> backends) : backends_(std::move(backends)) {
  for (const auto& backend : backends_) {
    if (!name_.empty()) name_ += "+";
    name_ += backend.driver->Name();
    auto devices = backend.driver->EnumerateDevices();
    if (!devices) continue;
    for (auto& device : *devices) {
      device.index += backend.first_device;
      devices_.push_back(std::move(device));
    }
  }
  if (name_.empty()) name_ = "none";
  const bool any_faults =
      std::any_of(backends_.begin(), backends_.end(),
                  [](const Backend& backend) { return backend.faults != nullptr; });
  if (any_faults) faults_ = std::make_unique<RoutedFaults>(*this);
  const bool any_queries =
      std::any_of(backends_.begin(), backends_.end(),
                  [](const Backend& backend) { return backend.queries != nullptr; });
  if (any_queries) queries_ = std::make_unique<RoutedQueries>(*this);
}

CompositeDriver::~CompositeDriver() {
  for (auto& backend : backends_) backend.driver->SetErrorListener(nullptr);
}

Result<CompositeDriver::Local> CompositeDriver::DeviceOf(int device) const {
  for (std::size_t i = 0; i < backends_.size(); ++i) {
    const auto& backend = backends_[i];
    if (device >= backend.first_device && device < backend.first_device + backend.device_count) {
      return Local{i, device - backend.first_device};
    }
  }
  return Fail(ErrorCode::kInvalidArgument, fmt::format("no device {}", device));
}

std::uint64_t CompositeDriver::Tag(std::size_t backend, std::uint64_t handle) {
  return (static_cast<std::uint64_t>(backend) << kBackendShift) | (handle & kHandleMask);
}

std::uint64_t CompositeDriver::Untag(std::uint64_t handle) { return handle & kHandleMask; }

Result<std::size_t> CompositeDriver::BackendOf(std::uint64_t handle) const {
  const std::size_t backend = handle >> kBackendShift;
  if (backend >= backends_.size()) return Fail(ErrorCode::kInvalidArgument, "unknown handle");
  return backend;
}

Result<std::vector<DeviceProperties>> CompositeDriver::EnumerateDevices() { return devices_; }

std::vector<KernelSignature> CompositeDriver::Kernels() const {
  if (backends_.empty()) return {};
  std::vector<KernelSignature> common = backends_.front().driver->Kernels();
  for (std::size_t i = 1; i < backends_.size(); ++i) {
    const auto others = backends_[i].driver->Kernels();
    std::erase_if(common, [&](const KernelSignature& kernel) {
      return std::none_of(others.begin(), others.end(), [&](const KernelSignature& other) {
        return other.name == kernel.name && other.args == kernel.args;
      });
    });
  }
  return common;
}

Result<DeviceAddress> CompositeDriver::ReserveMemory(int device, std::uint64_t bytes) {
  auto local = DeviceOf(device);
  if (!local) return Fail(local.error());
  return backends_[local->backend].driver->ReserveMemory(local->device, bytes);
}

bool CompositeDriver::IsStableDeviceAddress(int device, DeviceAddress address) const {
  auto local = DeviceOf(device);
  return local && backends_[local->backend].driver->IsStableDeviceAddress(local->device, address);
}

Status CompositeDriver::ReleaseMemory(int device, DeviceAddress base) {
  auto local = DeviceOf(device);
  if (!local) return Fail(local.error());
  return backends_[local->backend].driver->ReleaseMemory(local->device, base);
}

Result<StreamHandle> CompositeDriver::CreateStream(int device) {
  auto local = DeviceOf(device);
  if (!local) return Fail(local.error());
  auto stream = backends_[local->backend].driver->CreateStream(local->device);
  if (!stream) return stream;
  if (stream->value > kHandleMask) return Fail(ErrorCode::kInternal, "backend handle too large");
  return StreamHandle{Tag(local->backend, stream->value)};
}

// The backend and the backend's own handle, or the error to return.
#define RASD_ROUTE(handle, backend_var, local_var)                    \
  auto backend_var##_index = BackendOf((handle).value);               \
  if (!backend_var##_index) return Fail(backend_var##_index.error()); \
  Driver& backend_var = *backends_[*backend_var##_index].driver;      \
  const decltype(handle) local_var { Untag((handle).value) }

Status CompositeDriver::DestroyStream(StreamHandle stream) {
  RASD_ROUTE(stream, backend, local);
  return backend.DestroyStream(local);
}

Status CompositeDriver::CopyHostToDevice(StreamHandle stream, DeviceAddress dst, const void* src,
                                         std::uint64_t bytes) {
  RASD_ROUTE(stream, backend, local);
  return backend.CopyHostToDevice(local, dst, src, bytes);
}

Status CompositeDriver::CopyDeviceToHost(StreamHandle stream, void* dst, DeviceAddress src,
                                         std::uint64_t bytes) {
  RASD_ROUTE(stream, backend, local);
  return backend.CopyDeviceToHost(local, dst, src, bytes);
}

Status CompositeDriver::CopyDeviceToDevice(StreamHandle stream, DeviceAddress dst, int dst_device,
                                           DeviceAddress src, std::uint64_t bytes) {
  RASD_ROUTE(stream, backend, local);
  auto target = DeviceOf(dst_device);
  if (!target) return Fail(target.error());
  if (target->backend != *backend_index) {
    return Fail(ErrorCode::kNotSupported,
                fmt::format("device {} is on another backend ({}): no direct copy", dst_device,
                            backends_[target->backend].driver->Name()));
  }
  return backend.CopyDeviceToDevice(local, dst, target->device, src, bytes);
}

Status CompositeDriver::LaunchKernel(StreamHandle stream, std::string_view kernel,
                                     const LaunchConfig& config, std::span<const KernelArg> args) {
  RASD_ROUTE(stream, backend, local);
  return backend.LaunchKernel(local, kernel, config, args);
}

Status CompositeDriver::EnqueueCallback(StreamHandle stream, StreamCallback callback) {
  RASD_ROUTE(stream, backend, local);
  return backend.EnqueueCallback(local, std::move(callback));
}

Result<EventHandle> CompositeDriver::CreateEvent(int device) {
  auto local = DeviceOf(device);
  if (!local) return Fail(local.error());
  auto event = backends_[local->backend].driver->CreateEvent(local->device);
  if (!event) return event;
  if (event->value > kHandleMask) return Fail(ErrorCode::kInternal, "backend handle too large");
  return EventHandle{Tag(local->backend, event->value)};
}

Status CompositeDriver::DestroyEvent(EventHandle event) {
  RASD_ROUTE(event, backend, local);
  return backend.DestroyEvent(local);
}

Status CompositeDriver::RecordEvent(EventHandle event, StreamHandle stream) {
  RASD_ROUTE(event, backend, local_event);
  if ((stream.value >> kBackendShift) != *backend_index) {
    return Fail(ErrorCode::kNotSupported, "event and stream are on different backends");
  }
  return backend.RecordEvent(local_event, StreamHandle{Untag(stream.value)});
}

Status CompositeDriver::StreamWaitEvent(StreamHandle stream, EventHandle event) {
  RASD_ROUTE(stream, backend, local_stream);
  if ((event.value >> kBackendShift) != *backend_index) {
    return Fail(ErrorCode::kNotSupported, "event and stream are on different backends");
  }
  return backend.StreamWaitEvent(local_stream, EventHandle{Untag(event.value)});
}

Status CompositeDriver::SynchronizeEvent(EventHandle event, std::chrono::nanoseconds timeout) {
  RASD_ROUTE(event, backend, local);
  return backend.SynchronizeEvent(local, timeout);
}

Result<std::chrono::nanoseconds> CompositeDriver::ElapsedTime(EventHandle start, EventHandle end) {
  RASD_ROUTE(start, backend, local_start);
  if ((end.value >> kBackendShift) != *backend_index) {
    return Fail(ErrorCode::kNotSupported, "events on different backends");
  }
  return backend.ElapsedTime(local_start, EventHandle{Untag(end.value)});
}

Status CompositeDriver::SynchronizeStream(StreamHandle stream, std::chrono::nanoseconds timeout) {
  RASD_ROUTE(stream, backend, local);
  return backend.SynchronizeStream(local, timeout);
}

Status CompositeDriver::AbortStream(StreamHandle stream, const Error& reason) {
  RASD_ROUTE(stream, backend, local);
  return backend.AbortStream(local, reason);
}

#undef RASD_ROUTE

Result<MemoryAfterReset> CompositeDriver::ResetDevice(int device) {
  auto local = DeviceOf(device);
  if (!local) return Fail(local.error());
  return backends_[local->backend].driver->ResetDevice(local->device);
}

void CompositeDriver::SetErrorListener(ErrorListener listener) {
  for (std::size_t i = 0; i < backends_.size(); ++i) {
    if (!listener) {
      backends_[i].driver->SetErrorListener(nullptr);
      continue;
    }
    const int offset = backends_[i].first_device;
    backends_[i].driver->SetErrorListener([listener, offset, i](const DriverErrorEvent& event) {
      DriverErrorEvent renumbered = event;
      if (renumbered.device >= 0) renumbered.device += offset;
      if (renumbered.peer_device) *renumbered.peer_device += offset;
      if (renumbered.stream) renumbered.stream = StreamHandle{Tag(i, renumbered.stream->value)};
      listener(renumbered);
    });
  }
}

FaultInjector* CompositeDriver::Faults() { return faults_.get(); }

DeviceQueries* CompositeDriver::Queries() { return queries_.get(); }

bool CompositeDriver::MonitorsDevices() const {
  return std::any_of(backends_.begin(), backends_.end(),
                     [](const Backend& backend) { return backend.driver->MonitorsDevices(); });
}

std::vector<ProbeCalls::Call> CompositeDriver::RunningCalls() const {
  std::vector<ProbeCalls::Call> calls;
  for (const auto& backend : backends_) {
    for (auto& call : backend.driver->RunningCalls()) calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace rasd::drivers
