#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"

namespace rasd::common {

// An EventLoop for tests: time is a ManualClock that moves only in
// AdvanceBy(), so timers (drain deadlines, recovery delays, the watchdog)
// fire deterministically and nothing sleeps. File descriptors are real:
// every step polls the watched ones without waiting, so a test can talk to
// a real control socket through it. Signals are delivered by Raise().
//
// Thread safety: Post() from any thread; everything else on the thread
// that drives the loop (the test).
class SimulatedEventLoop final : public EventLoop {
 public:
  SimulatedEventLoop();
  ~SimulatedEventLoop() override;

  std::shared_ptr<const Clock> SharedClock() const override { return clock_; }
  ManualClock& Manual() { return *clock_; }

  std::unique_ptr<Timer> CreateTimer(std::function<void()> on_fire) override;
  Result<std::unique_ptr<FdWatch>> WatchFd(int fd, std::uint32_t events,
                                           FdWatch::Callback on_ready) override;
  Result<std::unique_ptr<SignalWatch>> WatchSignal(int signal,
                                                   std::function<void()> on_signal) override;
  void Post(std::function<void()> task) override;

  // Steps until Exit(): what is ready, then the clock jumps to the next
  // timer; with no timer armed it waits for a watched descriptor (really),
  // and returns -1 when there is nothing left that could ever happen.
  int Run() override;
  void Exit(int code) override;

  // Runs posted tasks, ready descriptors and due timers until none is left,
  // without moving the clock. Returns how many callbacks ran.
  std::size_t RunUntilIdle();
  // One round: the tasks posted before it, then the ready descriptors, then
  // the due timers. Returns how many callbacks ran. (A task that posts a
  // continuation lets the descriptors in before it runs again.)
  std::size_t RunOnce() { return RunPostedOnce() + PollFdsOnce(0) + FireDueTimersOnce(); }
  // Moves the clock forward by `by`, firing each timer at its deadline (the
  // clock reads the deadline inside its callback), then runs until idle.
  void AdvanceBy(std::chrono::nanoseconds by);
  // Delivers a signal to its watch; false when nothing watches it.
  bool Raise(int signal);

  std::size_t ArmedTimers() const;
  // Callbacks run so far (timers, descriptors, posted tasks, signals): the
  // simulated loop's count of wake-ups.
  std::uint64_t Dispatched() const { return dispatched_; }
  bool Exited() const { return exited_; }

 private:
  class SimTimer;
  class SimFdWatch;
  class SimSignalWatch;
  struct TimerState {
    std::function<void()> on_fire;
    std::chrono::nanoseconds deadline{};
    bool armed = false;
    std::uint64_t sequence = 0;  // arming order breaks deadline ties
  };
  struct WatchState {
    int fd = -1;
    std::uint32_t events = 0;
    bool enabled = true;
    FdWatch::Callback on_ready;
  };

  std::size_t RunPostedOnce();
  std::size_t PollFdsOnce(int timeout_ms);
  std::size_t FireDueTimersOnce();
  // The armed timer with the earliest deadline, or nullptr.
  TimerState* NextTimer();

  std::shared_ptr<ManualClock> clock_;
  std::uint64_t next_id_ = 1;
  std::uint64_t arm_sequence_ = 0;
  std::map<std::uint64_t, TimerState> timers_;
  std::map<std::uint64_t, WatchState> watches_;
  std::map<int, std::function<void()>> signals_;
  std::mutex posted_mutex_;
  std::deque<std::function<void()>> posted_;
  std::uint64_t dispatched_ = 0;
  bool exited_ = false;
  int exit_code_ = 0;
};

}  // namespace rasd::common
