#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "control_server.h"
#include "device_state_changes.h"
#include "rasd/common/event_loop.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The `watch` command's push stream: what `rasctl watch` and `rasctl events
// --follow` read instead of polling. Each subscriber's connection gets
//   {"event": "events", "last_id": N}   events up to id N are stored (fetch
//                                        them with `events` after_id)
//   {"event": "device", "device": I, "from": S0, "state": S, "reason": R}
// The first is a notification, not the events themselves, so that a
// client's filters (severity, device) stay the `events` command's.
//
// Reconcile() compares the devices' gates with what was last seen, so any
// path that changes a device (policy, heartbeat, operator, auto-recovery)
// reaches the watchers; the daemon calls it after each such change, and a
// 1 s timer runs it while anyone watches (auto-recovery's self-test ends
// on a thread of its own). Loop thread only.
class Watchers {
 public:
  using ReasonOf = std::function<std::string(int device)>;
  Watchers(common::EventLoop& loop, runtime::Runtime& runtime, ReasonOf reason_of);
  ~Watchers();
  Watchers(const Watchers&) = delete;
  Watchers& operator=(const Watchers&) = delete;

  // The reply is every device's state now, and the newest stored event id.
  Result<Subscribed> Subscribe(Push push, std::int64_t last_event_id);
  void OnStored(std::int64_t last_event_id);
  void Reconcile();
  std::size_t Count() const { return pushes_.size(); }

 private:
  void Broadcast(const nlohmann::json& message);
  void ArmSweep();

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  ReasonOf reason_of_;
  std::map<std::uint64_t, Push> pushes_;
  DeviceStateChanges changes_;
  std::uint64_t next_id_ = 1;
  std::unique_ptr<common::Timer> sweep_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rasd::daemon
