#include "rasd/common/real_time.h"

#include <algorithm>
#include <climits>

namespace rasd::common {

Deadline Deadline::After(std::chrono::nanoseconds timeout) {
  const Point now = std::chrono::steady_clock::now();
  if (timeout <= std::chrono::nanoseconds(0)) return Deadline(now);
  if (timeout > Point::max() - now) return Deadline(Point::max());
  return Deadline(now + std::chrono::duration_cast<Point::duration>(timeout));
}

Deadline Deadline::Now() { return Deadline(std::chrono::steady_clock::now()); }

bool Deadline::Expired() const { return !Never() && std::chrono::steady_clock::now() >= when_; }

std::chrono::nanoseconds Deadline::Left() const {
  if (Never()) return std::chrono::nanoseconds::max();
  const auto left = when_ - std::chrono::steady_clock::now();
  return std::max(std::chrono::nanoseconds(0),
                  std::chrono::duration_cast<std::chrono::nanoseconds>(left));
}

int Deadline::PollMillis() const {
  if (Never()) return INT_MAX;
  const auto millis = std::chrono::ceil<std::chrono::milliseconds>(Left()).count();
  return static_cast<int>(std::min<long long>(millis, INT_MAX));
}

std::chrono::nanoseconds Stopwatch::Elapsed() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              started_);
}

}  // namespace rasd::common
