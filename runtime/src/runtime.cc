#include "rasd/runtime/runtime.h"

#include <fmt/format.h>

namespace rasd::runtime {

Result<std::unique_ptr<Runtime>> Runtime::Create(std::unique_ptr<drivers::Driver> driver,
                                                 RuntimeOptions options) {
  if (!driver) return Fail(ErrorCode::kInvalidArgument, "runtime needs a driver");
  auto properties = driver->EnumerateDevices();
  if (!properties) {
    return Fail(properties.error().code, fmt::format("{} driver cannot enumerate devices: {}",
                                                     driver->Name(), properties.error().message));
  }
  std::vector<std::unique_ptr<Device>> devices;
  devices.reserve(properties->size());
  for (auto& device_properties : *properties) {
    devices.push_back(std::make_unique<Device>(std::move(device_properties)));
  }
  std::unique_ptr<Runtime> runtime(new Runtime(std::move(driver), std::move(devices), options));
  return runtime;
}

Runtime::Runtime(std::unique_ptr<drivers::Driver> driver,
                 std::vector<std::unique_ptr<Device>> devices, RuntimeOptions options)
    : driver_(std::move(driver)), devices_(std::move(devices)), kernels_(driver_->Kernels()) {
  for (auto& device : devices_)
    pools_.push_back(std::make_unique<MemoryPool>(*driver_, *device, options.pool));
  driver_->SetErrorListener([this](const drivers::DriverErrorEvent& event) { Dispatch(event); });
}

Runtime::~Runtime() {
  driver_->SetErrorListener(nullptr);
  pools_.clear();  // returns the arenas while the driver still exists
}

Result<Device*> Runtime::GetDevice(int index) {
  if (index < 0 || index >= static_cast<int>(devices_.size())) {
    return Fail(ErrorCode::kNotFound, fmt::format("no device {}", index));
  }
  return devices_[static_cast<std::size_t>(index)].get();
}

Result<MemoryPool*> Runtime::Pool(int device) {
  if (device < 0 || device >= static_cast<int>(pools_.size())) {
    return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
  }
  return pools_[static_cast<std::size_t>(device)].get();
}

Result<ResetReport> Runtime::ResetDevice(int device) {
  auto pool = Pool(device);
  if (!pool) return Fail(pool.error());
  auto memory = driver_->ResetDevice(device);
  if (!memory) return Fail(memory.error());
  ResetReport report;
  if (*memory == drivers::MemoryAfterReset::kFreed) {
    report.memory_freed = true;
    report.allocations_lost = (*pool)->ForgetArenas();
    // Whoever kept data on the device (a replica's weights) must build it
    // again: an aborted stream is how every holder learns its work was cut.
    std::lock_guard lock(streams_mutex_);
    for (Stream* stream : streams_) {
      if (stream->DeviceIndex() != device) continue;
      (void)stream->Abort("the device was reset and its memory freed");
      ++report.streams_aborted;
    }
  }
  return report;
}

Result<std::unique_ptr<Stream>> Runtime::CreateStream(int device_index, StreamOptions options) {
  auto device = GetDevice(device_index);
  if (!device) return Fail(device.error());
  if (auto admitted = (*device)->CheckGate(options.admission); !admitted)
    return Fail(admitted.error());
  auto handle = driver_->CreateStream(device_index);
  if (!handle) return Fail(handle.error());
  return std::unique_ptr<Stream>(new Stream(*this, **device, *handle, std::move(options)));
}

Result<std::unique_ptr<Event>> Runtime::CreateEvent(int device_index) {
  if (auto device = GetDevice(device_index); !device) return Fail(device.error());
  auto handle = driver_->CreateEvent(device_index);
  if (!handle) return Fail(handle.error());
  return std::unique_ptr<Event>(new Event(*this, *handle));
}

void Runtime::RegisterStream(Stream* stream) {
  std::lock_guard lock(streams_mutex_);
  streams_.push_back(stream);
  if (work_listener_ && !stream->Owner().empty() && !stream->Owner().starts_with("rasd-"))
    work_listener_(stream->DeviceIndex());
}

void Runtime::SetWorkListener(WorkListener listener) {
  std::lock_guard lock(streams_mutex_);
  work_listener_ = std::move(listener);
}

void Runtime::UnregisterStream(Stream* stream) {
  std::lock_guard lock(streams_mutex_);
  std::erase(streams_, stream);
}

std::size_t Runtime::AbortOwner(std::string_view owner, std::string_view reason) {
  if (owner.empty()) return 0;
  // Under the registry lock: a stream being destroyed waits in
  // UnregisterStream until the abort is done with it.
  std::lock_guard lock(streams_mutex_);
  std::size_t aborted = 0;
  for (Stream* stream : streams_) {
    if (stream->Owner() != owner) continue;
    (void)stream->Abort(reason);
    ++aborted;
  }
  return aborted;
}

std::vector<int> Runtime::DevicesOf(std::string_view owner) const {
  std::lock_guard lock(streams_mutex_);
  std::vector<int> devices;
  for (const Stream* stream : streams_) {
    if (owner.empty() || stream->Owner() != owner) continue;
    devices.push_back(stream->DeviceIndex());
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

std::vector<std::string> Runtime::JobsOn(int device) const {
  auto owners = OwnersOn(device);
  std::erase_if(owners, [](const std::string& owner) { return owner.starts_with("rasd-"); });
  return owners;
}

std::vector<std::string> Runtime::OwnersOn(int device) const {
  std::lock_guard lock(streams_mutex_);
  std::vector<std::string> owners;
  for (const Stream* stream : streams_) {
    if (stream->DeviceIndex() != device || stream->Owner().empty()) continue;
    if (std::find(owners.begin(), owners.end(), stream->Owner()) == owners.end())
      owners.push_back(stream->Owner());
  }
  return owners;
}

int Runtime::SubscribeErrors(ErrorSubscriber subscriber) {
  std::lock_guard lock(subscribers_mutex_);
  const int id = next_subscriber_++;
  subscribers_.emplace(id, std::move(subscriber));
  return id;
}

void Runtime::Unsubscribe(int id) {
  std::lock_guard lock(subscribers_mutex_);
  subscribers_.erase(id);
}

void Runtime::SetMemoryFaultContainment(const std::string& owner, MemoryFaultContainment contain) {
  std::lock_guard lock(containment_mutex_);
  if (contain) {
    containment_[owner] = std::move(contain);
  } else {
    containment_.erase(owner);
  }
}

bool Runtime::ContainMemoryFault(std::string_view owner, int device,
                                 drivers::DeviceAddress address) {
  std::lock_guard lock(containment_mutex_);
  const auto it = containment_.find(owner);
  return it != containment_.end() && it->second(device, address);
}

void Runtime::Dispatch(const drivers::DriverErrorEvent& event) {
  std::lock_guard lock(subscribers_mutex_);
  for (auto& [id, subscriber] : subscribers_) subscriber(event);
}

}  // namespace rasd::runtime
