#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::daemon {

// The simulator's RDMA NICs as the kernel would show them, so that a
// simulated link fault takes the real path: the InfiniBand sysfs poller
// reads the port state, ras::AcceleratorsOfNic ties the NIC to its device,
// LinkHealth moves the collective. Device i (PCI ffff:BB:00.0) gets the NIC
// `rasdsim_i` (ffff:(e1+i):00.0) behind a PCIe switch of its own that both
// share: <root>/sys/class/infiniband/rasdsim_i/{device,ports/1/...} and
// <root>/sys/bus/pci/devices/<bdf> -> <root>/sys/devices/pciffff:00/....
//
// Only under a fixture root: Create refuses a host.root of `/` (the real
// sysfs is never written). Files that exist are left as they are, except
// the ports this tree owns.
//
// Loop thread only (it writes files); `host` outlives it.
class SimLinkTree {
 public:
  // kPermissionDenied for a host.root of `/`; kIoError when the tree cannot
  // be written.
  static Result<std::unique_ptr<SimLinkTree>> Create(
      const common::HostEnv& host, const std::vector<drivers::DeviceProperties>& devices);

  // The device's NIC port goes down (state "1: DOWN", phys_state
  // "3: Disabled", counters/link_downed +1) or comes back ("4: ACTIVE",
  // "5: LinkUp"). kInvalidArgument for a device the tree has no NIC for.
  Status SetPortUp(int device, bool up);
  // "rasdsim_1 port 1".
  std::string PortName(int device) const;

 private:
  SimLinkTree(const common::HostEnv& host, std::vector<int> devices)
      : host_(host), devices_(std::move(devices)) {}
  const common::HostEnv& host_;
  std::vector<int> devices_;  // driver indices with a NIC
  std::vector<std::uint64_t> link_downed_;
};

}  // namespace rasd::daemon
