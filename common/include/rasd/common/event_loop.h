#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"

namespace rasd::common {

// A one-shot timer on an EventLoop. Created disarmed; ArmAfter (re)arms it,
// so a periodic timer re-arms itself from its callback, and a timer that
// nobody arms costs no wake-up. Destroying the timer cancels it.
// Loop thread only.
class Timer {
 public:
  virtual ~Timer() = default;
  // Fires once, `delay` after the loop's monotonic now. Re-arming an armed
  // timer moves its deadline.
  virtual void ArmAfter(std::chrono::nanoseconds delay) = 0;
  virtual void Disarm() = 0;
  virtual bool Armed() const = 0;
  // How late the timer may fire, so that the loop can wake once for several
  // timers (an idle node sleeps longer). kDefaultSlack unless set; a
  // deadline that a detection time is promised against needs less.
  virtual void SetSlack(std::chrono::nanoseconds slack) = 0;
  static constexpr std::chrono::nanoseconds kDefaultSlack = std::chrono::milliseconds(250);
};

// Readiness of one file descriptor on an EventLoop. The loop does not own
// the descriptor: it must stay open while the watch exists. Destroying the
// watch stops it. Loop thread only.
class FdWatch {
 public:
  // The epoll bits (EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR) of a readiness.
  using Callback = std::function<void(std::uint32_t revents)>;
  virtual ~FdWatch() = default;
  virtual void SetEvents(std::uint32_t events) = 0;
  virtual void SetEnabled(bool enabled) = 0;
};

// A signal watch; destroying it stops watching. Loop thread only.
class SignalWatch {
 public:
  virtual ~SignalWatch() = default;
};

// The daemon's event loop: timers that take closures, fd watches, signals,
// tasks posted from other threads, and the clock every component reads time
// from. SdEventLoop (sd-event) runs in production; SimulatedEventLoop runs
// on a ManualClock in tests, so timers fire without sleeping.
//
// Thread safety: everything runs on the loop's thread except Post(), which
// any thread may call while the loop exists. Callbacks run on the loop
// thread, one at a time; a callback may create, re-arm and destroy any
// source, itself included.
class EventLoop {
 public:
  virtual ~EventLoop() = default;

  // The clock of this loop: timers are measured on its Monotonic().
  virtual std::shared_ptr<const Clock> SharedClock() const = 0;
  const Clock& GetClock() const { return *SharedClock(); }
  std::chrono::nanoseconds Now() const { return GetClock().Monotonic(); }

  virtual std::unique_ptr<Timer> CreateTimer(std::function<void()> on_fire) = 0;
  // Fails for a descriptor epoll cannot watch (a regular file: EPERM).
  virtual Result<std::unique_ptr<FdWatch>> WatchFd(int fd, std::uint32_t events,
                                                   FdWatch::Callback on_ready) = 0;
  // The signal must be blocked in every thread before the loop runs.
  virtual Result<std::unique_ptr<SignalWatch>> WatchSignal(int signal,
                                                           std::function<void()> on_signal) = 0;
  // Runs `task` on the loop thread soon, after what is ready now. Tasks
  // still queued when the loop is destroyed are dropped.
  virtual void Post(std::function<void()> task) = 0;

  // Runs until Exit(); returns the exit code (negative: the loop failed).
  virtual int Run() = 0;
  virtual void Exit(int code) = 0;
};

// The production loop over libsystemd's sd-event: the only code that
// includes sd-event.h. Timers use CLOCK_MONOTONIC, which is what the
// SystemClock's Monotonic() reads.
Result<std::unique_ptr<EventLoop>> CreateSdEventLoop(std::shared_ptr<const Clock> clock);

}  // namespace rasd::common
