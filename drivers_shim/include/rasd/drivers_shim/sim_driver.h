#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "rasd/common/host_env.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers {

struct SimDriverOptions {
  int device_count = 4;
  std::uint64_t memory_bytes_per_device = std::uint64_t{1} << 30;
  // How long an idle stream worker spins before it sleeps: work that
  // arrives meanwhile starts without a futex wake-up (CUDA's spin-wait
  // scheduling does the same).
  std::chrono::microseconds worker_spin{50};
  // What events' ElapsedTime is measured on; null, the system's clock.
  std::shared_ptr<const common::Clock> clock;
};

// The CPU simulator: N devices whose memory is host memory, one worker
// thread per stream running its work in order, kernels that are real CPU
// code, and fault injection (FaultInjector, also returned by Faults())
// reported through the same channels a real driver uses (returned errors,
// stream status, the error listener), and the device queries a monitor
// polls (DeviceQueries, returned by Queries()).
//
// Thread-safe, like every Driver. Destroying it stops every worker; pending
// work fails with kAborted.
class SimDriver : public Driver, public FaultInjector, public DeviceQueries {
 public:
  // kInvalidArgument for a device count outside 1..64 or zero memory.
  static Result<std::unique_ptr<SimDriver>> Create(const SimDriverOptions& options);

  // Every device fault of FaultInjector; `Inject*` may also be called on
  // the SimDriver directly.
  FaultInjector* Faults() override { return this; }
  // Each device's health (simDeviceGetHealth: 0 ok, 1 sticky fault, 2 off
  // the bus) and poisoned-page count (simDeviceGetPoisonedPageCount); both
  // can be wedged (InjectWedge).
  DeviceQueries* Queries() override { return this; }
};

}  // namespace rasd::drivers
