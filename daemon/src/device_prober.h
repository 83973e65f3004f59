#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rasd/drivers_shim/driver.h"
#include "rasd/drivers_shim/probe_calls.h"

namespace rasd::daemon {

// Runs each device's health and counter queries (drivers::DeviceQueries)
// every `interval`, one after another, on a thread of that device's own: a
// query that never returns holds its device's thread and no other device's,
// and drivers::ProbeCalls shows it to the ProbeWatchdog, which takes the
// device out of service. One thread per device, so a wedged driver holds at
// most one thread per device, never a growing pile.
//
// Stop (and the destructor) gives the threads `stop_wait` to finish their
// query; a thread still inside one is left behind, detached: nothing can
// end a call stuck in the kernel, and a stop must not wait for it. A thread
// left behind touches only state it shares with this prober, and the
// DeviceQueries, which must outlive it (the simulator releases its wedges
// when destroyed and waits for the thread to leave).
//
// Thread-safe: RunningCalls, Answered and LeftBehind from any thread; Stop
// from the owner's.
class DeviceProber {
 public:
  struct Options {
    std::chrono::milliseconds interval{1000};
    std::chrono::milliseconds stop_wait{2000};
  };

  struct Device {
    int index = 0;     // the driver's
    std::string name;  // in reasons and RunningCalls: its PCI address, where it has one
  };
  // A device without queries is skipped.
  DeviceProber(drivers::DeviceQueries& queries, std::vector<Device> devices, Options options);
  DeviceProber(const DeviceProber&) = delete;
  DeviceProber& operator=(const DeviceProber&) = delete;
  ~DeviceProber();

  void Stop();

  // Queries in progress; a call's `device` is the device's name.
  std::vector<drivers::ProbeCalls::Call> RunningCalls() const;
  // The index of the device probed under `name`.
  std::optional<int> DeviceNamed(std::string_view name) const;
  // Queries that have returned, with an answer or an error.
  std::uint64_t Answered() const;
  // Threads the last Stop left inside a query.
  int LeftBehind() const { return left_behind_; }
  // Devices with a thread of their own.
  std::size_t Probed() const { return threads_.size(); }

 private:
  struct Shared;
  // A device's thread: its queries, every `interval`, until the stop.
  static void ProbeDevice(const std::shared_ptr<Shared>& shared, drivers::DeviceQueries* queries,
                          int device, const std::string& device_name,
                          const std::vector<std::string>& names, std::chrono::milliseconds interval,
                          std::size_t slot);

  std::shared_ptr<Shared> shared_;
  Options options_;
  std::vector<Device> devices_;  // the probed ones
  std::vector<std::thread> threads_;  // threads_[i]'s flag is Shared::finished[i]
  int left_behind_ = 0;
};

}  // namespace rasd::daemon
