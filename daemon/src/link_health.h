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
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The links an accelerator's collectives depend on: the RDMA ports it uses
// (the sysfs poller), its NVLinks (NVML), its HCCS / RoCE ports (DCMI). A
// link down takes the device out of collectives (Device::LinksUsable, read
// by CollectiveJob: the rank leaves, the job re-forms without it) and makes
// it Degraded, not isolated: its compute is fine (the link's hold in
// DeviceHealth). Once every link has stayed up for `up_debounce` (the value
// in force when the last link came up), the device rejoins (its
// collectives grow back) and the link's hold is lifted; another cause's
// hold stands. A device whose links went down `flap_limit`
// times within `flap_window` is flapping: it stays out until an operator's
// undrain.
//
// Loop thread only. The loop, runtime, health, jobs and store outlive it.
class LinkHealth {
 public:
  struct Options {
    std::chrono::milliseconds up_debounce{30000};
    std::size_t flap_limit = 5;
    std::chrono::seconds flap_window{3600};
  };
  LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
             jobs::JobManager& jobs, ras::StateStore& store, Options options);
  // At start: devices held for flapping, or Degraded by their link, when
  // rasd stopped stay out of collectives until the links prove themselves
  // again (saved by device UUID under the node_state key "link_health").
  void Load();
  // From the next link event on; a debounce already running keeps the
  // deadline it was armed with (and its messages quote that one).
  void SetOptions(Options options) { options_ = options; }

  // One kind of link as its source last read it: `source` is "RDMA",
  // "NVLink", "HCCS" or "RoCE"; `down_links` holds every device that has
  // links of that source, with those of them that are down now ("mlx5_0
  // port 1", "NVLink 3"). A device not listed is left as it was for that
  // source. A device is down while any source lists a link of it down.
  // `unconfirmed` are links the source cannot tell down from absent (NVML's
  // inactive-at-start NVLinks: uncabled, or down since before rasd
  // started): they count as down only for a device that was out for that
  // very link when rasd stopped (kill -9 while it was down), never
  // otherwise.
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
  std::map<std::pair<int, std::string>, std::uint64_t> DownLinks() const;

 private:
  struct State {
    // The down links as each source last listed them.
    std::map<std::string, std::vector<std::string>, std::less<>> down_links;
    bool down = false;            // any link down, as last observed
    bool held = false;            // flapping: out until an operator acts
    std::vector<std::chrono::nanoseconds> downs;  // loop monotonic times, within flap_window
    std::unique_ptr<common::Timer> rejoin;
    std::chrono::milliseconds armed_debounce{0};  // the debounce `rejoin` was armed with
    std::vector<std::string> restored_links;      // down when rasd stopped (from the saved state)
  };
  void Rejoin(int device);
  void Save();
  // "RDMA link down (mlx5_0 port 1); NVLink down (NVLink 2)" for the links
  // down now, and what ends it.
  std::string Reason(const State& state) const;
  std::vector<std::string> AllDown(const State& state) const;

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  DeviceHealth& health_;
  jobs::JobManager& jobs_;
  ras::StateStore& store_;
  Options options_;
  std::map<int, State> states_;
};

}  // namespace rasd::daemon
