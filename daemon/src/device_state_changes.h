#pragma once

#include <map>
#include <vector>

#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The devices' gates as last seen, and what changed since: the watchers and
// the workloads each react to every change, whichever path made it (policy,
// heartbeat, operator, auto-recovery's self-test on a thread of its own), by
// comparing rather than by being told. Seeded with the states at
// construction. Not thread-safe: its owner's thread (the loop's).
class DeviceStateChanges {
 public:
  struct Change {
    int device = 0;
    runtime::HealthState from = runtime::HealthState::kHealthy;
    runtime::HealthState to = runtime::HealthState::kHealthy;
  };

  explicit DeviceStateChanges(const runtime::Runtime& runtime);

  // The devices whose state differs from the last call's (or the seed), in
  // device order; each is then seen as it is now.
  std::vector<Change> Take();

 private:
  const runtime::Runtime& runtime_;
  std::map<int, runtime::HealthState> seen_;
};

}  // namespace rasd::daemon
