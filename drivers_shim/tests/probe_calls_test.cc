// ProbeCalls on a clock the test moves: calls in progress, how long each
// has run, and that a call that returned is gone.

#include "rasd/drivers_shim/probe_calls.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;

TEST(ProbeCallsTest, ListsTheCallsInProgressLongestFirstAndForgetsThoseThatReturned) {
  auto now = std::chrono::steady_clock::time_point(100s);
  ProbeCalls calls([&now] { return now; });
  EXPECT_TRUE(calls.Running().empty());
  std::optional<ProbeCalls::Scope> first(
      calls.Begin("0000:07:00.0", "nvmlDeviceGetTotalEccErrors"));
  now += 2s;
  {
    auto second = calls.Begin("0000:08:00.0", "nvmlDeviceGetPcieReplayCounter");
    now += 1s;
    const auto running = calls.Running();
    ASSERT_EQ(running.size(), 2u);
    EXPECT_EQ(running[0].device, "0000:07:00.0");
    EXPECT_EQ(running[0].function, "nvmlDeviceGetTotalEccErrors");
    EXPECT_EQ(running[0].running, 3s);
    EXPECT_EQ(running[1].function, "nvmlDeviceGetPcieReplayCounter");
    EXPECT_EQ(running[1].running, 1s);
  }
  ASSERT_EQ(calls.Running().size(), 1u) << "the second returned";
  auto moved = std::move(*first);
  first.reset();
  EXPECT_EQ(calls.Running().size(), 1u) << "a moved scope is the same call";
  EXPECT_EQ(calls.Begun(), 2u);
}

TEST(ProbeCallsTest, ACallOnAnotherThreadIsSeenUntilItReturns) {
  ProbeCalls calls;
  std::atomic<bool> release = false;
  std::atomic<bool> inside = false;
  std::thread monitor([&] {
    auto scope = calls.Begin("0000:07:00.0", "dcmi_get_device_health");
    inside = true;
    while (!release) std::this_thread::sleep_for(1ms);
  });
  while (!inside) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  const auto running = calls.Running();
  ASSERT_EQ(running.size(), 1u);
  EXPECT_GE(running[0].running, 20ms);
  release = true;
  monitor.join();
  EXPECT_TRUE(calls.Running().empty());
}

}  // namespace
}  // namespace rasd::drivers
