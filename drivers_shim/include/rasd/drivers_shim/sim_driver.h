#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers {

struct SimDriverOptions {
  int device_count = 4;
  std::uint64_t memory_bytes_per_device = std::uint64_t{1} << 30;
  // How long an idle stream worker spins before it sleeps: work that
  // arrives meanwhile starts without a futex wake-up (CUDA's spin-wait
  // scheduling does the same).
  std::chrono::microseconds worker_spin{50};
};

// The CPU simulator: N devices whose memory is host memory, one worker
// thread per stream running its work in order, kernels that are real CPU
// code, and fault injection reported through the same channels a real
// driver uses (returned errors, stream status, the error listener).
//
// Thread-safe, like every Driver. Destroying it stops every worker; pending
// work fails with kAborted.
class SimDriver : public Driver {
 public:
  // kInvalidArgument for a device count outside 1..64 or zero memory.
  static Result<std::unique_ptr<SimDriver>> Create(const SimDriverOptions& options);

  // Fault injection, as `rasctl inject` and the tests use it. Each returns
  // kInvalidArgument for an unknown device.

  // A corrected ECC error at `address`: reported, data intact.
  virtual Status InjectCorrectedEcc(int device, DeviceAddress address) = 0;
  // An uncorrected ECC error: the page holding `address` is poisoned and
  // reported. A later kernel or copy that reads it fails (kDeviceFault),
  // fails its stream, and is reported again with consumed=true and the
  // stream, so that the runtime can find and stop exactly that consumer.
  // The poison is a hardware defect: it outlives a reset.
  virtual Status InjectUncorrectedEcc(int device, DeviceAddress address) = 0;
  // The same, reported as action-optional (a patrol scrub found it).
  virtual Status InjectActionOptionalEcc(int device, DeviceAddress address) = 0;
  // The device context fails (CUDA error 719): every call and all pending
  // work on the device fail with kDeviceFault until ResetDevice.
  virtual Status InjectStickyFault(int device) = 0;
  // The device stops making progress: streams keep accepting work but run
  // none of it until ResetDevice. Nothing is reported: only timeouts tell.
  virtual Status InjectHang(int device) = 0;
  // The device falls off the bus (Xid 79): every call fails with
  // kDeviceFault, pending work fails, and no reset brings it back.
  virtual Status InjectFallOffBus(int device) = 0;
  // The link between two devices fails: peer copies between them fail until
  // either is reset.
  virtual Status InjectLinkError(int device_a, int device_b) = 0;
};

}  // namespace rasd::drivers
