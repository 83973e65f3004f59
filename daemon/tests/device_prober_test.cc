// DeviceProber on the simulator's device queries, on real threads (a
// wedged query blocks a real thread): every device is probed, a wedged
// query is seen on its device only while the others go on, and a stop
// leaves a thread stuck in a query behind instead of waiting for it.

#include "device_prober.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/testing/eventually.h"

namespace rasd::daemon {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<drivers::SimDriver> Simulator(int devices) {
  auto driver =
      drivers::SimDriver::Create({.device_count = devices, .memory_bytes_per_device = 1 << 20});
  EXPECT_TRUE(driver.has_value()) << driver.error().ToString();
  return driver ? std::move(*driver) : nullptr;
}

std::vector<DeviceProber::Device> Named(int count) {
  std::vector<DeviceProber::Device> devices;
  for (int index = 0; index < count; ++index)
    devices.push_back({.index = index, .name = "gpu" + std::to_string(index)});
  return devices;
}

bool Stuck(const DeviceProber& prober, std::string_view device, std::string_view function) {
  const auto calls = prober.RunningCalls();
  return std::any_of(calls.begin(), calls.end(), [&](const drivers::ProbeCalls::Call& call) {
    return call.device == device && call.function == function && call.running >= 50ms;
  });
}

TEST(DeviceProberTest, AWedgedQueryHoldsItsDeviceAloneWhileTheOthersKeepAnswering) {
  auto sim = Simulator(3);
  ASSERT_NE(sim, nullptr);
  DeviceProber prober(*sim->Queries(), Named(3), {.interval = 5ms});
  EXPECT_EQ(prober.Probed(), 3u);
  EXPECT_EQ(prober.DeviceNamed("gpu2"), 2);
  EXPECT_EQ(prober.DeviceNamed("gpu7"), std::nullopt);
  ASSERT_TRUE(rasd::testing::Eventually([&] { return prober.Answered() >= 6; }, 5s));

  ASSERT_TRUE(sim->InjectWedge(1, "simDeviceGetPoisonedPageCount").has_value());
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] { return Stuck(prober, "gpu1", "simDeviceGetPoisonedPageCount"); }, 5s));
  const auto answered = prober.Answered();
  ASSERT_TRUE(rasd::testing::Eventually([&] { return prober.Answered() >= answered + 8; }, 5s))
      << "the other devices' queries go on";
  for (const auto& call : prober.RunningCalls()) {
    if (call.running >= 50ms) {
      EXPECT_EQ(call.device, "gpu1") << call.function;
    }
  }

  ASSERT_TRUE(sim->ClearWedge(1).has_value());
  EXPECT_TRUE(rasd::testing::Eventually(
      [&] { return !Stuck(prober, "gpu1", "simDeviceGetPoisonedPageCount"); }, 5s));
}

TEST(DeviceProberTest, AStopLeavesAThreadInAQueryThatDoesNotReturnBehind) {
  auto sim = Simulator(2);
  ASSERT_NE(sim, nullptr);
  auto prober = std::make_unique<DeviceProber>(
      *sim->Queries(), Named(2), DeviceProber::Options{.interval = 5ms, .stop_wait = 100ms});
  ASSERT_TRUE(sim->InjectWedge(0, "").has_value());
  ASSERT_TRUE(
      rasd::testing::Eventually([&] { return Stuck(*prober, "gpu0", "simDeviceGetHealth"); }, 5s));
  const auto before = std::chrono::steady_clock::now();
  prober->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 2s) << "a stop waits stop_wait, no more";
  EXPECT_EQ(prober->LeftBehind(), 1) << "device 1's thread ended; device 0's is stuck";
  prober.reset();
  // The simulator releases the thread it left behind and waits for it.
  sim.reset();
}

TEST(DeviceProberTest, TheSimulatorRefusesAWedgeOfAQueryItDoesNotHave) {
  auto sim = Simulator(1);
  ASSERT_NE(sim, nullptr);
  auto wedged = sim->InjectWedge(0, "nvmlDeviceGetTotalEccErrors");
  ASSERT_FALSE(wedged.has_value());
  EXPECT_EQ(wedged.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(wedged.error().message.find("simDeviceGetHealth"), std::string::npos)
      << "names the queries it has: " << wedged.error().message;
  EXPECT_FALSE(sim->InjectWedge(4, "").has_value()) << "no device 4";
  auto answer = sim->Queries()->Run(0, "simDeviceGetHealth");
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(*answer, 0u) << "a healthy device";
  ASSERT_TRUE(sim->InjectStickyFault(0).has_value());
  EXPECT_EQ(sim->Queries()->Run(0, "simDeviceGetHealth").value_or(0), 1u) << "sticky";
}

}  // namespace
}  // namespace rasd::daemon
