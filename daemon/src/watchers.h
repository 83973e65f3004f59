#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "control_server.h"
#include "device_health.h"
#include "rasd/common/event_loop.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// The `watch` command's push stream: what `rasctl watch` and `rasctl events
// --follow` read instead of polling. Each subscriber's connection gets
//   {"event": "events", "last_id": N}   events up to id N are stored (fetch
//                                        them with `events` after_id)
//       and "grown": [ids] where rows stored before (up to kMaxGrownIds of
//       them) took more errors: a storm's row per component and minute
//       grows instead of adding rows (fetch them with `events` ids)
//   {"event": "device", "device": I, "from": S0, "state": S, "reason": R}
// The first is a notification, not the events themselves, so that a
// client's filters (severity, device) stay the `events` command's.
//
// Every change of a device's state reaches it as a DeviceStateChanged (the
// daemon subscribes it to DeviceHealth), whichever cause made it. Loop
// thread only.
class Watchers {
 public:
  using ReasonOf = std::function<std::string(int device)>;
  Watchers(common::EventLoop& loop, runtime::Runtime& runtime, ReasonOf reason_of);
  ~Watchers();
  Watchers(const Watchers&) = delete;
  Watchers& operator=(const Watchers&) = delete;

  // The reply is every device's state now, and the newest stored event id.
  Result<Subscribed> Subscribe(Push push, std::int64_t last_event_id);
  static constexpr std::size_t kMaxGrownIds = 256;
  // The rows a batch stored: new ones, and older ones that grew.
  void OnStored(const std::vector<std::int64_t>& event_ids);
  void OnDeviceStateChanged(const DeviceStateChanged& change);
  std::size_t Count() const { return pushes_.size(); }

 private:
  void Broadcast(const nlohmann::json& message);

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  ReasonOf reason_of_;
  std::map<std::uint64_t, Push> pushes_;
  std::uint64_t next_id_ = 1;
  std::int64_t newest_stored_ = 0;  // rows up to it were announced; one that
                                    // comes again has grown
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rasd::daemon
