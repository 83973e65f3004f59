#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace rasd::testing {

// Looks at `condition` every `interval` until it holds (true) or `timeout`
// has passed (false): for a test that waits on work done by real threads or
// processes (a simulator's streams, a job's thread, a child rasd). Not for
// showing that something does not happen: that needs a fence (something
// that is handled after it) or a simulated clock.
inline bool Eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10),
                       std::chrono::microseconds interval = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);
  }
  return true;
}

}  // namespace rasd::testing
