#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"

namespace rasd::drivers {

// What the runtime needs to know about one device, as the vendor library
// reports it (cuDeviceGetAttribute / aclrtGetDeviceInfo / the simulator).
struct DeviceProperties {
  int index = 0;        // the driver's ordinal
  std::string name;     // "NVIDIA H200", "Ascend 910B", "rasd-sim"
  std::string vendor;   // "nvidia", "huawei", "sim"
  std::string pci_bdf;  // "0000:07:00.0"; empty where there is no PCI device
  std::string uuid;     // stable across reboots where the vendor gives one
  std::uint64_t memory_bytes = 0;
};

// The boundary between rasd and a vendor's device library. Everything vendor
// specific (CUDA driver API + NVML, Ascend ACL + DCMI, the CPU simulator)
// lives behind it, so the runtime above never includes a vendor header.
//
// Contract: implementations are thread-safe; errors are returned, never
// thrown. This first cut covers discovery; memory, streams, launch and the
// asynchronous error channel extend it with the runtime.
class Driver {
 public:
  virtual ~Driver() = default;

  // Short stable name: "sim", "cuda", "ascend".
  virtual std::string_view Name() const = 0;

  // The devices this driver can see, in ordinal order. kUnavailable when the
  // vendor library is present but has no usable device.
  virtual Result<std::vector<DeviceProperties>> EnumerateDevices() = 0;
};

}  // namespace rasd::drivers
