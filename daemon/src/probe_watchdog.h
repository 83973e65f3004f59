#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "device_health.h"
#include "rasd/common/event_loop.h"
#include "rasd/drivers_shim/probe_calls.h"

namespace rasd::daemon {

// Turns a vendor call that has not returned within its deadline into the
// probe cause's decision on that call's device: a wedged driver leaves a
// monitor blind, so the device leaves service rather than being reported
// healthy on no evidence. Past one deadline the device is Draining (no new
// work; what runs there goes on), past `isolate_after` deadlines Isolated;
// the reason names the source, the function and how long it has been
// stuck. Once no call of the device is past its deadline for a whole
// deadline, a Draining hold lifts; an isolation stays until an operator
// undrains the device. An undrain while the call is still stuck is heeded,
// and the call judged again from the undrain.
//
// The monitors' calls run on their own threads (drivers::ProbeCalls); the
// watchdog reads them on a timer every quarter deadline, on the loop. Loop
// thread only, but for Stuck().
class ProbeWatchdog {
 public:
  struct Options {
    std::chrono::milliseconds deadline{5000};
    int isolate_after = 3;  // deadlines
  };
  // Calls in progress now (a monitor's RunningCalls).
  using Running = std::function<std::vector<drivers::ProbeCalls::Call>()>;
  // The runtime device a call's device name (a PCI address) is; nullopt
  // for a device rasd does not run.
  using DeviceOf = std::function<std::optional<int>(std::string_view name)>;

  ProbeWatchdog(common::EventLoop& loop, DeviceHealth& health, Options options);
  ProbeWatchdog(const ProbeWatchdog&) = delete;
  ProbeWatchdog& operator=(const ProbeWatchdog&) = delete;

  // `source` names the monitor in reasons ("NVML").
  void Watch(std::string source, Running running, DeviceOf device_of);

  // The devices the probe cause holds now, and at which state.
  std::map<int, runtime::HealthState> Held() const;

  struct StuckCall {
    int device = 0;      // the runtime's
    std::string source;  // as Watch named it
    drivers::ProbeCalls::Call call;
  };
  // Each device's longest call past its deadline at the last check (at most
  // a quarter deadline ago), by device. Unlike the rest, any thread (the
  // metrics exporter's) may call it.
  std::vector<StuckCall> Stuck() const;
  std::chrono::milliseconds Deadline() const { return options_.deadline; }

 private:
  struct Watched {
    std::string source;
    Running running;
    DeviceOf device_of;
  };
  struct Hold {
    runtime::HealthState state = runtime::HealthState::kHealthy;
    std::chrono::nanoseconds clear_since{-1};  // no call stuck since then; -1: one is
    // An operator undrained the device with its call still stuck: the call
    // is judged from then on (-1: from its start), so that the device
    // leaves service again after a deadline more, not at once.
    std::chrono::nanoseconds judged_from{-1};
  };
  std::vector<StuckCall> FindStuck() const;
  void Check();
  void Decide(int device, runtime::HealthState target, const std::string& reason);

  common::EventLoop& loop_;
  DeviceHealth& health_;
  Options options_;
  std::vector<Watched> watched_;
  std::map<int, Hold> held_;
  std::unique_ptr<common::Timer> timer_;
  mutable std::mutex stuck_mutex_;
  std::vector<StuckCall> last_stuck_;  // guarded by stuck_mutex_
};

}  // namespace rasd::daemon
