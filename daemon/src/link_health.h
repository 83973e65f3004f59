#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actuator.h"
#include "rasd/common/event_loop.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The links an accelerator's collectives depend on (the RDMA ports it uses):
// a port down takes the device out of collectives (Device::LinksUsable, read
// by CollectiveJob: the rank leaves, the job re-forms without it) and makes
// it Degraded, not isolated: its compute is fine. Once every port has stayed
// up for `up_debounce`, the device rejoins (its collectives grow back) and is
// Healthy again, if the link was what degraded it. A link that went down
// `flap_limit` times within `flap_window` is flapping: the device stays out
// until an operator's undrain.
//
// Loop thread only. The loop, runtime, actuator and jobs outlive it.
class LinkHealth {
 public:
  struct Options {
    std::chrono::milliseconds up_debounce{30000};
    std::size_t flap_limit = 5;
    std::chrono::seconds flap_window{3600};
  };
  LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, Actuator& actuator,
             jobs::JobManager& jobs, ras::StateStore& store, Options options);
  // At start: devices held for flapping, or Degraded by their link, when
  // rasd stopped stay out of collectives until the links prove themselves
  // again (saved by device UUID under the node_state key "link_health").
  void Load();
  void SetOptions(Options options) { options_ = options; }

  // Every device with RDMA ports, and which of them are down now
  // ("mlx5_0 port 1"); a device not listed has no ports and is left alone.
  void Observe(const std::map<int, std::vector<std::string>>& down_ports);
  // An operator returned the device to service: a flapping hold ends.
  void OnOperatorReturned(int device);

 private:
  struct State {
    bool down = false;            // as last observed
    bool degraded_by_us = false;  // the Degraded state is the link's doing
    std::uint64_t generation = 0;  // the actuator's, just after the link degraded it
    bool held = false;            // flapping: out until an operator acts
    std::vector<std::chrono::nanoseconds> downs;  // loop monotonic times, within flap_window
    std::unique_ptr<common::Timer> rejoin;
  };
  void Rejoin(int device);
  void Save();

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  Actuator& actuator_;
  jobs::JobManager& jobs_;
  ras::StateStore& store_;
  Options options_;
  std::map<int, State> states_;
};

}  // namespace rasd::daemon
