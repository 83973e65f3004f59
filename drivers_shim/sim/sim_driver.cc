#include "rasd/drivers_shim/sim_driver.h"

#include <fmt/format.h>

namespace rasd::drivers {
namespace {

constexpr int kMaxSimDevices = 64;

class SimDriver final : public Driver {
 public:
  explicit SimDriver(const SimDriverOptions& options) : options_(options) {}

  std::string_view Name() const override { return "sim"; }

  Result<std::vector<DeviceProperties>> EnumerateDevices() override {
    std::vector<DeviceProperties> devices;
    devices.reserve(static_cast<std::size_t>(options_.device_count));
    for (int index = 0; index < options_.device_count; ++index) {
      DeviceProperties properties;
      properties.index = index;
      properties.name = "rasd-sim";
      properties.vendor = "sim";
      properties.uuid =
          fmt::format("SIM-{:08x}-0000-0000-0000-{:012x}",
                      0x5a5d0000u + static_cast<unsigned>(index), static_cast<unsigned>(index));
      properties.memory_bytes = options_.memory_bytes_per_device;
      devices.push_back(std::move(properties));
    }
    return devices;
  }

 private:
  SimDriverOptions options_;
};

}  // namespace

Result<std::unique_ptr<Driver>> MakeSimDriver(const SimDriverOptions& options) {
  if (options.device_count < 1 || options.device_count > kMaxSimDevices) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("simulator device count {} is outside 1..{}", options.device_count,
                            kMaxSimDevices));
  }
  if (options.memory_bytes_per_device == 0) {
    return Fail(ErrorCode::kInvalidArgument, "simulator device memory must be more than 0 bytes");
  }
  return std::unique_ptr<Driver>(std::make_unique<SimDriver>(options));
}

}  // namespace rasd::drivers
