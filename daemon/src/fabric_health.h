#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/ras/link_policy.h"
#include "rasd/ras/ras_event.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The fatal health of a switch of the accelerators' fabrics: a NIC's or an
// NVSwitch's.
//
// A NIC's own fatal health (mlx5's firmware fatal error, a failed health
// recovery, a devlink fw_fatal report: a FATAL record of origin mlx5 or
// devlink about a PCI function that is not a runtime device) is a link
// fault of the accelerators behind that NIC, found as the RDMA poller
// finds them (ras::AcceleratorsOfNic: the same PCIe switch, else the same
// NUMA node). It reports them as links down (source "NIC health"), so
// that LinkPolicy takes them out of collectives, Degraded, not isolated:
// their compute is fine, and the node is not drained for one NIC. The
// fault holds for `hold` after the NIC's last fatal record (the driver
// resets the function meanwhile; its RDMA ports, if any, are the RDMA
// poller's to judge), then the devices are reported up and rejoin after
// LinkPolicy's debounce; its flap rule keeps out a device whose NIC keeps
// failing. The faults are not saved: a device out for its NIC when rasd
// stopped is kept out by LinkPolicy's restart rule until a source finds
// its links up, and this one does so for every device `hold` after the
// start, unless a fatal record came meanwhile (the RDMA poller has read
// the ports by then, and a port down still counts).
//
// An NVSwitch's fatal SXid (origin nvswitch, the kernel's or Fabric
// Manager's) is the same kind of fault of the other fabric: every NVIDIA
// GPU is behind it, as on an HGX baseboard every GPU has NVLinks to every
// switch. Its faults are reported under the same link source, "NIC health",
// the name LinkPolicy already holds devices under.
//
// Loop thread only; the loop, host and runtime outlive it.
class FabricHealth {
 public:
  using Deliver = std::function<void(ras::LinkReport)>;
  FabricHealth(common::EventLoop& loop, const common::HostEnv& host,
               const runtime::Runtime& runtime, std::chrono::seconds hold, Deliver deliver);
  // The batch's NIC faults, as the report to decide with its events;
  // nullopt when there are none.
  std::optional<ras::LinkReport> Observe(const std::vector<ras::RasEvent>& events);
  void SetHold(std::chrono::seconds hold) { hold_ = hold; }
  static bool IsFabricFault(const ras::RasEvent& event);

 private:
  struct Fault {
    std::vector<int> devices;  // the accelerators behind the NIC
    std::string reason;        // "mlx5 0000:03:00.0 fatal health"
    std::chrono::nanoseconds until{};
  };
  ras::LinkReport Report(bool every_device) const;
  void Expire();
  void Arm();

  common::EventLoop& loop_;
  const common::HostEnv& host_;
  const runtime::Runtime& runtime_;
  std::chrono::seconds hold_;
  Deliver deliver_;
  std::map<std::string, Fault> faults_;  // by the NIC's PCI address
  std::set<int> reported_;               // devices a report listed (down or up)
  bool started_ = false;                 // the report `hold` after the start was made
  std::unique_ptr<common::Timer> timer_;
};

}  // namespace rasd::daemon
