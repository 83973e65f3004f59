#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/runtime/device.h"

namespace rasd::runtime {

// The device runtime over one Driver: owns the driver and one Device per
// device it reports. Devices are fixed for the Runtime's lifetime (a device
// that disappears is isolated, not removed), so Device references stay valid
// as long as the Runtime. Thread-safe.
class Runtime {
 public:
  // Enumerates the driver's devices. Fails when the driver cannot.
  static Result<std::unique_ptr<Runtime>> Create(std::unique_ptr<drivers::Driver> driver);

  std::string_view DriverName() const { return driver_->Name(); }
  std::size_t DeviceCount() const { return devices_.size(); }
  // kNotFound for an index the driver did not report.
  Result<Device*> GetDevice(int index);
  const std::vector<std::unique_ptr<Device>>& Devices() const { return devices_; }

 private:
  Runtime(std::unique_ptr<drivers::Driver> driver, std::vector<std::unique_ptr<Device>> devices);

  std::unique_ptr<drivers::Driver> driver_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace rasd::runtime
