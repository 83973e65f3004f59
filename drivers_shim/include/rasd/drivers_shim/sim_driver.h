#pragma once

#include <cstdint>
#include <memory>

#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers {

struct SimDriverOptions {
  int device_count = 4;
  std::uint64_t memory_bytes_per_device = std::uint64_t{1} << 30;
};

// The CPU simulator: N devices backed by host memory, so the whole daemon
// runs, and is tested, on a machine with no accelerator. kInvalidArgument
// for a device count outside 1..64 or zero memory.
Result<std::unique_ptr<Driver>> MakeSimDriver(const SimDriverOptions& options);

}  // namespace rasd::drivers
