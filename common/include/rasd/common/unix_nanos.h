#pragma once

#include <chrono>
#include <cstdint>

namespace rasd::common {

// Wall times as stored (SQLite rows, saved JSON): nanoseconds since the Unix
// epoch, and back.
inline std::int64_t UnixNanos(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

inline std::chrono::system_clock::time_point FromUnixNanos(std::int64_t nanos) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(nanos)));
}

}  // namespace rasd::common
