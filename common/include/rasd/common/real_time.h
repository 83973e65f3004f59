#pragma once

#include <chrono>

namespace rasd::common {

// Real time for threads that block on their own waits: a poll() on a
// socket, a vendor library's synchronize with a timeout, a spin before a
// condition variable, a command-line tool waiting for the daemon. Code driven
// by the event loop takes time from the loop's Clock instead; a simulated
// clock could not wake these waits, so they are measured on the steady
// clock, here and nowhere else outside common/.

// A point in real time to wait until. A value type; thread-compatible (copy
// it rather than share it).
class Deadline {
 public:
  // `timeout` from now, saturating: nanoseconds::max() (or any timeout past
  // the clock's range) never expires. A timeout of zero or less has expired.
  static Deadline After(std::chrono::nanoseconds timeout);
  // Expired already: for "try now" states such as a first attempt.
  static Deadline Now();

  bool Expired() const;
  bool Never() const { return when_ == Point::max(); }
  // Time left, never negative; nanoseconds::max() for a deadline that never
  // expires.
  std::chrono::nanoseconds Left() const;
  // Time left in whole milliseconds, rounded up so a wait does not wake just
  // before the deadline, and capped at what poll() takes; 0 once expired.
  int PollMillis() const;
  // For std::condition_variable::wait_until.
  std::chrono::steady_clock::time_point When() const { return when_; }

 private:
  using Point = std::chrono::steady_clock::time_point;
  explicit Deadline(Point when) : when_(when) {}
  Point when_;
};

// Real time elapsed since it was started: the latency a tool or a benchmark
// reports. A value type.
class Stopwatch {
 public:
  Stopwatch() : started_(std::chrono::steady_clock::now()) {}
  std::chrono::nanoseconds Elapsed() const;

 private:
  std::chrono::steady_clock::time_point started_;
};

}  // namespace rasd::common
