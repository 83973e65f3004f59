#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers::sim {

// How a simulated kernel reaches device memory: every buffer is mapped
// through the driver, which checks bounds and poisoned pages, as a GPU's MMU
// and ECC logic would.
class DeviceMemoryAccess {
 public:
  virtual ~DeviceMemoryAccess() = default;
  // A host pointer for [address, address + bytes) of the launching device,
  // or kInvalidArgument (out of any reservation: an illegal address) or
  // kDeviceFault (a read of a poisoned page).
  virtual Result<std::byte*> Map(DeviceAddress address, std::uint64_t bytes, bool for_write) = 0;

  template <typename T>
  Result<T*> MapArray(DeviceAddress address, std::int64_t count, bool for_write) {
    if (count < 0) return Fail(ErrorCode::kInvalidArgument, "negative element count");
    auto mapped = Map(address, static_cast<std::uint64_t>(count) * sizeof(T), for_write);
    if (!mapped) return Fail(mapped.error());
    return reinterpret_cast<T*>(*mapped);
  }
};

using SimKernelFunction = Status (*)(DeviceMemoryAccess& memory, const LaunchConfig& config,
                                     std::span<const KernelArg> args);

struct SimKernel {
  KernelSignature signature;
  SimKernelFunction run;
};

// The simulator's kernels: real CPU code whose results tests check against
// plain references. The CUDA backend builds the same names with the same
// arguments.
const std::vector<SimKernel>& SimKernels();
const SimKernel* FindSimKernel(std::string_view name);

}  // namespace rasd::drivers::sim
