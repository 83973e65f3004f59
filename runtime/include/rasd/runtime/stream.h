#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/runtime/device.h"

namespace rasd::runtime {

class Event;
class Runtime;

// Who a stream works for and how it is admitted to its device.
struct StreamOptions {
  std::string owner;                          // job id; OwnerOf() reports it for memory used here
  Admission admission = Admission::kNewWork;  // kAdmittedJob lets a draining device finish it
};

// An in-order queue of work on one device: kernels, copies, event records
// and waits, host callbacks. Every enqueue first checks the device's health
// gate (one atomic load) and fails fast with kDeviceIsolated.
//
// Abort(reason) fails everything pending with kAborted and that reason,
// wakes every waiter, and makes later work fail the same way: that is how a
// job is stopped when its device dies or it consumed poisoned memory.
//
// Thread-safe. Destroying a stream fails its pending work. A stream must not
// outlive its Runtime, and must not be destroyed from one of its own
// callbacks.
class Stream {
 public:
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int DeviceIndex() const { return device_.Index(); }
  Device& GetDevice() const { return device_; }
  const std::string& Owner() const { return options_.owner; }
  Admission GetAdmission() const { return options_.admission; }
  drivers::StreamHandle Handle() const { return handle_; }

  Status Launch(std::string_view kernel, std::span<const drivers::KernelArg> args,
                const drivers::LaunchConfig& config = {});
  Status CopyToDevice(drivers::DeviceAddress dst, const void* src, std::uint64_t bytes);
  Status CopyToHost(void* dst, drivers::DeviceAddress src, std::uint64_t bytes);
  // Copies from this stream's device to `dst` on `dst_device` (may be this one).
  Status CopyDeviceToDevice(drivers::DeviceAddress dst, int dst_device, drivers::DeviceAddress src,
                            std::uint64_t bytes);
  Status Record(Event& event);
  Status Wait(const Event& event);
  Status AddCallback(drivers::StreamCallback callback);

  // Waits for all work enqueued so far. The first asynchronous error of the
  // stream, kTimeout, or kAborted (with the reason) if aborted meanwhile.
  Status Synchronize(std::chrono::nanoseconds timeout);

  // Idempotent; the first reason sticks.
  Status Abort(std::string_view reason);
  bool Aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  friend class Runtime;
  Stream(Runtime& runtime, Device& device, drivers::StreamHandle handle, StreamOptions options);

  // The hot-path check before every enqueue.
  Status Admit() const { return device_.CheckGate(options_.admission); }

  Runtime& runtime_;
  Device& device_;
  const drivers::StreamHandle handle_;
  const StreamOptions options_;
  std::atomic<bool> aborted_{false};
};

// A marker in a stream's work for ordering across streams and timing.
// Thread-safe; must not outlive its Runtime.
class Event {
 public:
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  drivers::EventHandle Handle() const { return handle_; }
  Status Synchronize(std::chrono::nanoseconds timeout);
  // Time from `start` completing to this event completing.
  Result<std::chrono::nanoseconds> ElapsedSince(const Event& start) const;

 private:
  friend class Runtime;
  Event(Runtime& runtime, drivers::EventHandle handle) : runtime_(runtime), handle_(handle) {}

  Runtime& runtime_;
  const drivers::EventHandle handle_;
};

}  // namespace rasd::runtime
