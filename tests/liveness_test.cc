// Device liveness on the real rasd with the simulator: a device that stops
// completing work (rasctl inject hang) is found by its heartbeat, reported
// once as a hang (UCE), drained and isolated while the inference job moves
// off it; an undrain without a repair is refused by the self-test, and the
// automatic recovery (reset + self-test) returns it to service.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"

namespace rasd::testing {
namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json Json(RasdInstance& rasd, std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  const auto result = rasd.Rasctl(args);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out, nullptr, false);
}

std::string StateOf(RasdInstance& rasd, int device) {
  return Json(rasd, {"devices", std::to_string(device)})["devices"][0]["state"];
}

int HangEvents(RasdInstance& rasd, int device) {
  int hangs = 0;
  const auto events = Json(rasd, {"events", "--device", std::to_string(device)});
  for (const auto& event : events["events"]) {
    if (event.value("summary", std::string()).find("not responding") != std::string::npos) ++hangs;
  }
  return hangs;
}

TEST(LivenessTest, AHungDeviceIsFoundIsolatedOnceAndRecoveredOnlyByAResetAndSelfTest) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
liveness:
  period_ms: 100
  deadline_ms: 200
  misses: 2
policy:
  auto_recover: false
jobs:
  - name: llm
    kind: inference
    load_rps: 200
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto status = Json(rasd, {"status"});
        return status["liveness"]["devices"][1]["beats"].get<int>() >= 3;
      },
      10s));

  const auto injected = Clock::now();
  Json(rasd, {"inject", "hang", "--device", "1"});
  ASSERT_TRUE(WaitUntil([&] { return StateOf(rasd, 1) == "isolated"; }, 10s))
      << rasd.Stderr();
  const auto found_after = Clock::now() - injected;
  // Two deadlines of 200 ms, a tick of 20 ms, the pipeline: well under 2 s.
  EXPECT_LT(found_after, 2s);
  EXPECT_GE(found_after, 400ms) << "not before two deadlines passed";
  EXPECT_EQ(HangEvents(rasd, 1), 1) << "one fault, one event";
  const auto actions = Json(rasd, {"actions", "--device", "1"});
  bool isolated_by_rule = false;
  for (const auto& action : actions["actions"])
    if (action["action"] == "isolate-device" && action["rule"] == "uce-device") isolated_by_rule = true;
  EXPECT_TRUE(isolated_by_rule) << actions.dump(1);
  const auto status = Json(rasd, {"status"});
  EXPECT_EQ(status["liveness"]["devices"][1]["hangs"], 1);
  EXPECT_GE(status["liveness"]["devices"][1]["misses"], 2);
  // The other devices kept beating and are healthy.
  EXPECT_EQ(StateOf(rasd, 0), "healthy");
  EXPECT_EQ(status["liveness"]["devices"][0]["hangs"], 0);

  // Still hung: an undrain's self-test fails and the device stays out.
  // (Each step of its test waits out the step timeout on a hung device.)
  const auto refused = rasd.Rasctl({"--timeout", "30", "undrain", "1"});
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.err.find("self-test failed"), std::string::npos) << refused.err;
  EXPECT_EQ(StateOf(rasd, 1), "isolated");

  // The job lost nothing: its batches on the hung device were re-run elsewhere.
  const auto job = Json(rasd, {"jobs"})["jobs"][0];
  EXPECT_EQ(job["requests"]["lost"], 0) << job.dump();
}

TEST(LivenessTest, AutomaticRecoveryResetsAHungDeviceAndItsSelfTestReturnsIt) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
liveness:
  period_ms: 100
  deadline_ms: 200
  idle_period_ms: 0
policy:
  auto_recover: true
  auto_recover_delay_ms: 200
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  Json(rasd, {"inject", "hang", "--device", "2"});
  ASSERT_TRUE(WaitUntil([&] { return HangEvents(rasd, 2) == 1; }, 10s)) << rasd.Stderr();
  ASSERT_TRUE(WaitUntil([&] { return StateOf(rasd, 2) == "healthy"; }, 20s)) << rasd.Stderr();
  // Back in service, it beats again and reports no second hang.
  const auto beats = [&] {
    return Json(rasd, {"status"})["liveness"]["devices"][2]["beats"].get<int>();
  };
  const int before = beats();
  ASSERT_TRUE(WaitUntil([&] { return beats() >= before + 3; }, 5s));
  EXPECT_EQ(HangEvents(rasd, 2), 1);
}

// No job: the devices are beaten at the idle period; with a job on them,
// every period (the timing of a job's first stream is DeviceHeartbeat's
// unit test, on a simulated clock).
TEST(LivenessTest, AnIdleDeviceIsBeatenAtTheIdlePeriodAndABusyOneEveryPeriod) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
liveness:
  period_ms: 100
  idle_period_ms: 600000
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const auto beats = [&](int device) {
    return Json(rasd, {"status"})["liveness"]["devices"][device]["beats"].get<int>();
  };
  ASSERT_TRUE(WaitUntil([&] { return beats(0) == 1; }, 5s)) << "one beat at the start";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(beats(0), 1) << "not every 100 ms on an idle device";
  EXPECT_EQ(Json(rasd, {"status"})["liveness"]["idle_period_ms"], 600000);
  rasd.WriteConfig(R"(simulator:
  memory_mib: 64
liveness:
  period_ms: 100
  idle_period_ms: 600000
jobs:
  - name: llm
    kind: inference
    load_rps: 50
)");
  ASSERT_TRUE(rasd.Stop().has_value());  // jobs start with rasd
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(WaitUntil([&] { return beats(0) >= 5; }, 5s)) << rasd.Stderr();
}

TEST(LivenessTest, PeriodZeroTurnsTheHeartbeatOff) {
  RasdInstance rasd;
  rasd.WriteConfig("liveness:\n  period_ms: 0\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  // The key reaches the heartbeat; that nothing beats however long it runs
  // is DeviceHeartbeat's unit test, on a simulated clock.
  const auto status = Json(rasd, {"status"});
  EXPECT_EQ(status["liveness"]["period_ms"], 0);
  EXPECT_EQ(status["liveness"]["devices"][0]["beats"], 0);
}

}  // namespace
}  // namespace rasd::testing
