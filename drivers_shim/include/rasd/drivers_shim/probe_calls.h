#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rasd::drivers {

// The vendor calls a monitor's thread is inside, so that another thread
// can tell a call that never returned (a wedged driver: NVML blocked for
// tens of seconds behind a GPU in an error storm) from a quiet device. A
// monitor wraps each call that concerns one device in a Scope; the daemon
// reads Running() on its own clock and decides what a call past its
// deadline means. Nothing here can end a stuck call: a thread in the
// kernel cannot be killed.
//
// Thread-safe: any thread may Begin and read. A Scope must not outlive
// its ProbeCalls.
class ProbeCalls {
  struct Entry {
    std::string device;
    std::string function;
    std::chrono::steady_clock::time_point since;
  };

 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // Monitors call on real time (their threads own their waits); tests pass
  // a clock of their own.
  explicit ProbeCalls(Clock clock = [] { return std::chrono::steady_clock::now(); });
  ProbeCalls(const ProbeCalls&) = delete;
  ProbeCalls& operator=(const ProbeCalls&) = delete;

  // A call in progress; ends when destroyed.
  class [[nodiscard]] Scope {
   public:
    Scope(Scope&& other) noexcept;
    Scope& operator=(Scope&&) = delete;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope();

   private:
    friend class ProbeCalls;
    Scope(ProbeCalls* calls, std::list<Entry>::iterator entry);
    ProbeCalls* calls_;
    std::list<Entry>::iterator entry_;
  };

  // `device`: how the monitor names the device (a PCI address); `function`:
  // the vendor entry point, as its headers spell it.
  Scope Begin(std::string device, std::string_view function);

  struct Call {
    std::string device;
    std::string function;
    std::chrono::nanoseconds running{0};
  };
  // Every call in progress now and how long it has run, the longest first.
  std::vector<Call> Running() const;
  // Calls begun so far (a monitor that makes none is not probing).
  std::uint64_t Begun() const;

 private:
  Clock clock_;
  mutable std::mutex mutex_;
  std::list<Entry> running_;  // guarded by mutex_
  std::uint64_t begun_ = 0;   // guarded by mutex_
};

}  // namespace rasd::drivers
