#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/runtime/memory_pool.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// Device liveness: a tiny kernel ("empty") per device in service, one at a
// time on a stream of its own, with a deadline. A backend without kernels
// (Ascend: rasd builds none) is beaten with a 64-byte copy inside a scratch
// block of the device's pool instead: its copy engine and stream must still
// make progress. A device whose heartbeat
// stays unfinished past `misses` deadlines in a row has stopped completing
// work (a hang: DCGM's "GPU not responding", a timeout Xid, an Ascend task
// timeout): it is reported once as a kHang driver error through the
// runtime, so that it takes the path of every device fault (an event, the
// policy's drain and isolate). Only devices that take new work are beaten; the
// hang clears only when an undrain's or auto-recovery's reset and self-test
// put the device back in service.
//
// The runtime's own evidence shortens the wait: when jobs gave up on work
// on the device (Device::OpTimeouts() grew since the beat was launched),
// one missed deadline is enough. Evidence alone never makes a hang: a job
// may give a long kernel too short a deadline, and a collective's healthy
// ranks time out waiting for a hung peer.
//
// Polled from the event loop (a stream query never blocks), so a hung
// device costs the loop nothing; no new beat is launched on a device whose
// last one is still pending. Loop thread only.
//
// The beat runs where there is work to watch: a device with a job's stream
// on it, or a workload attached to it (the busy probe), is beaten every
// `period`; one without is beaten every
// `idle_period`, so that an idle node sleeps (each beat wakes the loop and
// the device's own thread). A job's first stream on an idle device (the
// runtime's work listener) brings its next beat forward at once, so a
// device that hangs under new work is found as fast as one that was busy
// all along. Between beats nothing is armed but the next one.
//
// A device that hangs is reported within `period` + `misses` x `deadline`:
// its next beat is launched at most a period later, and the tick that
// counts each deadline lands on it (the timer's slack is a millisecond, not
// the loop's default). The defaults (1 s, 2 x 800 ms) find a hung busy
// device within 2.6 periods; an empty kernel on a stream of its own takes
// microseconds, so 800 ms is still thousands of times what a healthy
// device needs behind other work.
class DeviceHeartbeat {
 public:
  struct Options {
    std::chrono::milliseconds period{1000};    // between beats; 0: off
    std::chrono::milliseconds deadline{800};   // for one beat to finish
    int misses = 2;                            // deadlines in a row that make a hang
    // Between beats of a device no job uses; 0: every `period` as well.
    std::chrono::milliseconds idle_period{0};
  };
  struct DeviceStats {
    int device = 0;
    std::uint64_t beats = 0;    // finished
    std::uint64_t misses = 0;   // deadlines passed
    std::uint64_t hangs = 0;    // reported
    std::uint64_t op_timeouts = 0;  // jobs' work past its deadline (Device::OpTimeouts)
    std::chrono::nanoseconds last_latency{0};  // launch to seen finished
  };

  DeviceHeartbeat(common::EventLoop& loop, runtime::Runtime& runtime, Options options);
  ~DeviceHeartbeat();
  DeviceHeartbeat(const DeviceHeartbeat&) = delete;
  DeviceHeartbeat& operator=(const DeviceHeartbeat&) = delete;

  void Start();
  // Work rasd's runtime does not see (a process attached to the device):
  // `busy(device)` true makes the device beaten at the busy period. Loop
  // thread, called at each tick.
  void SetBusyProbe(std::function<bool(int device)> busy) { busy_probe_ = std::move(busy); }
  // Takes effect from the next tick (config reload).
  void SetOptions(Options options);
  // Any thread (the metrics exposer reads it): a copy taken at the last tick.
  std::vector<DeviceStats> Stats() const;
  // Whether the device has nothing of the heartbeat's left to run: no beat
  // pending, or the pending one has finished on the device (the next tick
  // counts it). Loop thread. Tests move simulated time on only once it
  // holds for every device that answers, instead of guessing how much real
  // time the device threads need.
  bool BeatSettled(int device);

 private:
  struct Beat {
    std::unique_ptr<runtime::Stream> stream;
    bool pending = false;
    std::chrono::nanoseconds launched{0};
    bool ever_launched = false;  // `launched` is a beat's, not the default
    int missed = 0;          // deadlines passed by the pending beat
    std::uint64_t op_timeouts_at_launch = 0;
    bool copy_beat = false;         // the backend has no kernels
    runtime::Allocation scratch;    // for copy beats, from the device's pool
    bool reported = false;   // the hang, once per episode
    DeviceStats stats;
  };
  void Tick();
  void ArmNext(std::chrono::nanoseconds next);
  void OnWork(int device);
  std::chrono::nanoseconds IntervalOf(int device) const;
  void Publish();
  void DropStream(int device, Beat& beat, std::string_view why);
  void Poll(const runtime::Device& device, Beat& beat, std::chrono::nanoseconds now);
  void Launch(const runtime::Device& device, Beat& beat, std::chrono::nanoseconds now);
  std::chrono::nanoseconds TickPeriod() const;

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  Options options_;
  std::vector<Beat> beats_;  // by device index
  std::unique_ptr<common::Timer> timer_;
  std::chrono::nanoseconds armed_for_{0};  // when timer_ fires, while armed
  std::function<bool(int)> busy_probe_;
  // Tasks the work listener posted find the heartbeat gone through this.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  mutable std::mutex stats_mutex_;
  std::vector<DeviceStats> published_;  // guarded by stats_mutex_
};

}  // namespace rasd::daemon
