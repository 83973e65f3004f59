#include "rasd/common/real_time.h"

#include <gtest/gtest.h>

#include <climits>

namespace rasd::common {
namespace {

using namespace std::chrono_literals;

TEST(DeadlineTest, AZeroOrNegativeTimeoutHasExpiredAndLeavesNothingToWait) {
  for (const std::chrono::nanoseconds timeout : {0ns, std::chrono::nanoseconds(-5ms)}) {
    const auto deadline = Deadline::After(timeout);
    EXPECT_TRUE(deadline.Expired());
    EXPECT_EQ(deadline.Left(), 0ns);
    EXPECT_EQ(deadline.PollMillis(), 0);
  }
  EXPECT_TRUE(Deadline::Now().Expired());
}

TEST(DeadlineTest, TheLargestTimeoutSaturatesToNeverInsteadOfWrappingIntoThePast) {
  const auto never = Deadline::After(std::chrono::nanoseconds::max());
  EXPECT_TRUE(never.Never());
  EXPECT_FALSE(never.Expired());
  EXPECT_EQ(never.Left(), std::chrono::nanoseconds::max());
  EXPECT_EQ(never.PollMillis(), INT_MAX);
  // Just under max is past the steady clock's range from now as well.
  EXPECT_TRUE(Deadline::After(std::chrono::nanoseconds::max() - 1s).Never());
}

TEST(DeadlineTest, AnHourAheadHasNotExpiredAndRoundsItsPollTimeoutUp) {
  const auto deadline = Deadline::After(1h);
  EXPECT_FALSE(deadline.Expired());
  EXPECT_FALSE(deadline.Never());
  EXPECT_GT(deadline.Left(), 59min);
  EXPECT_LE(deadline.Left(), 1h);
  EXPECT_GT(deadline.PollMillis(), 59 * 60 * 1000);
  EXPECT_LE(deadline.PollMillis(), 60 * 60 * 1000);
  // A sub-millisecond remainder still waits one millisecond, not zero:
  // a poll(0) would spin until the deadline.
  const auto close = Deadline::After(1h + 1ns);
  EXPECT_GE(close.PollMillis(), deadline.PollMillis());
}

}  // namespace
}  // namespace rasd::common
