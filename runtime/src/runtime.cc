#include "rasd/runtime/runtime.h"

#include <fmt/format.h>

namespace rasd::runtime {

Result<std::unique_ptr<Runtime>> Runtime::Create(std::unique_ptr<drivers::Driver> driver) {
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
  return std::unique_ptr<Runtime>(new Runtime(std::move(driver), std::move(devices)));
}

Runtime::Runtime(std::unique_ptr<drivers::Driver> driver,
                 std::vector<std::unique_ptr<Device>> devices)
    : driver_(std::move(driver)), devices_(std::move(devices)) {}

Result<Device*> Runtime::GetDevice(int index) {
  for (auto& device : devices_) {
    if (device->Index() == index) return device.get();
  }
  return Fail(ErrorCode::kNotFound, fmt::format("no device {}", index));
}

}  // namespace rasd::runtime
