#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "rasd/common/host_env.h"
#include "rasd/ras/state_store.h"

namespace rasd::daemon {

// The node's counterpart of DeviceHealth: whether the node as a whole
// cannot continue (a drain-node action ran, with or without a scheduler to
// tell), why and since when. Saved (it outlives restarts and reboots) until
// Clear (an operator's undrain that leaves no device isolated); `rasctl
// check` reports it as a problem. A saved fault that cannot be read back
// stands, with a reason that says so: the safe reading.
//
// Loop thread only. The store and the clock outlive it.
class NodeFault {
 public:
  struct Record {
    std::string reason;
    std::chrono::system_clock::time_point since;
  };

  NodeFault(ras::StateStore& store, const common::Clock& clock) : store_(store), clock_(clock) {}

  // Reads the saved fault, if any.
  void Restore();
  // The node cannot continue, for `reason`. The first fault stands (its
  // reason and time) until Clear; true when this one is new.
  bool Declare(const std::string& reason);
  void Clear();
  const std::optional<Record>& Current() const { return fault_; }

 private:
  void Save();

  ras::StateStore& store_;
  const common::Clock& clock_;
  std::optional<Record> fault_;
};

}  // namespace rasd::daemon
