#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "device_health.h"
#include "rasd/common/event_loop.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/link_policy.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// Carries out ras::LinkPolicy's rules for the links an accelerator's
// collectives depend on (the RDMA ports it uses, from the sysfs poller; its
// NVLinks, from NVML; its HCCS / RoCE ports, from DCMI): the links-usable
// flag (Device::SetLinksUsable, read by CollectiveJob: the rank leaves, the
// job re-forms without it) and the link's Degraded hold in DeviceHealth
// (its compute is fine: not isolated). It arms one timer at the policy's
// next deadline and saves the policy's state across restarts (by device
// UUID under the node_state key "link_health").
//
// Loop thread only. The loop, runtime, health, jobs and store outlive it.
class LinkHealth {
 public:
  using Options = ras::LinkPolicy::Options;
  LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
             jobs::JobManager& jobs, ras::StateStore& store, Options options);
  // At start: devices held for flapping, or Degraded by their link, when
  // rasd stopped stay out of collectives until the links prove themselves
  // again.
  void Load();
  // From the next link event on; a debounce already running keeps the
  // deadline it was armed with (and its messages quote that one).
  void SetOptions(Options options) { policy_.SetOptions(options); }

  // One kind of link as its source last read it: `source` is "RDMA",
  // "NVLink", "HCCS" or "RoCE"; `down_links` holds every device that has
  // links of that source, with those of them that are down now ("mlx5_0
  // port 1", "NVLink 3"). `unconfirmed`: links the source cannot tell down
  // from absent (ras::LinkPolicy's restart rule).
  void Observe(std::string_view source, const std::map<int, std::vector<std::string>>& down_links,
               const std::map<int, std::vector<std::string>>& unconfirmed = {});
  // The RDMA ports' form (the source "RDMA").
  void Observe(const std::map<int, std::vector<std::string>>& down_ports) {
    Observe("RDMA", down_ports);
  }
  // An operator returned the device to service: a flapping hold ends.
  void OnOperatorReturned(int device);
  // What ends a link's Degraded, for `rasctl devices`' `clears`; nullopt
  // where the device's state is not the link's doing.
  std::optional<std::string> Clears(int device) const;
  // (device, source) -> links down now, for every source that listed the
  // device (the metrics' rasd_device_links_down).
  std::map<std::pair<int, std::string>, std::uint64_t> DownLinks() const {
    return policy_.DownLinks();
  }

 private:
  void Carry(const std::vector<ras::LinkPolicy::Decision>& decisions);
  void ArmDeadline();
  void Save();

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  DeviceHealth& health_;
  jobs::JobManager& jobs_;
  ras::StateStore& store_;
  ras::LinkPolicy policy_;
  std::unique_ptr<common::Timer> deadline_;
};

}  // namespace rasd::daemon
