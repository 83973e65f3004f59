#pragma once

#include <algorithm>
#include <chrono>

namespace rasd::daemon {

// When to look again for a RAS source that is not there (no EDAC driver
// loaded, no pstore, no BERT table, no tracefs, no permission): kFirst after
// the look that failed, then twice as long after each further failure, up to
// kMax. A module loaded later is found within minutes; a host that never has
// the source pays one look every 10 minutes, not one every few seconds
// forever. Reset() once the source is there, so that it is looked for quickly
// again if it goes away. A plain value; not thread-safe.
class SourceBackoff {
 public:
  static constexpr std::chrono::seconds kFirst{10};
  static constexpr std::chrono::seconds kMax{600};

  // The delay before the next look; the one after it is twice as long.
  std::chrono::seconds Next() {
    const auto delay = next_;
    next_ = std::min<std::chrono::seconds>(next_ * 2, kMax);
    return delay;
  }
  void Reset() { next_ = kFirst; }

 private:
  std::chrono::seconds next_ = kFirst;
};

}  // namespace rasd::daemon
