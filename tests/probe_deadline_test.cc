// A wedged driver on the real rasd with the simulator: a device whose
// health and counter queries stop returning (rasctl inject wedge) leaves
// service by the probe deadline with the stuck query named, while the loop
// keeps answering and the other devices stay in service; a drain by the
// deadline lifts once the queries return, an isolation waits for the
// operator, and SIGTERM ends rasd with a query still stuck.

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"

namespace rasd::testing {
namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json Device(RasdInstance& rasd, int device) {
  return rasd.RasctlJson({"devices", std::to_string(device)})["devices"][0];
}

TEST(ProbeDeadlineTest, AWedgedDeviceLeavesServiceByTheDeadlineAndTheOthersStayIn) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(simulator:
  devices: 3
  memory_mib: 64
metrics:
  listen: 127.0.0.1:0
probe:
  deadline_ms: 1000
  isolate_after: 3
  interval_ms: 100
)");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  // The loop's answer to a ping on a connection of its own (rasctl ping's
  // request, without a process start, which a loaded machine makes slow).
  RawClient client(rasd.Socket());
  ASSERT_TRUE(client.Connected());
  double slowest_ping_ms = 0;
  auto ping = [&] {
    const double took = PingMilliseconds(client);
    EXPECT_GE(took, 0) << "no answer to a ping";
    slowest_ping_ms = std::max(slowest_ping_ms, took);
  };

  const auto wedged = Clock::now();
  const auto inject = rasd.Rasctl({"inject", "wedge", "--device", "1"});
  ASSERT_EQ(inject.exit_code, 0) << inject.err;
  // Pinging the loop all the while.
  auto reaches = [&](int device, const std::string& state) {
    return WaitUntil(
        [&] {
          ping();
          return Device(rasd, device)["state"] == state;
        },
        10s);
  };
  ASSERT_TRUE(reaches(1, "draining")) << rasd.Stderr();
  const auto drained_after = Clock::now() - wedged;
  EXPECT_LT(drained_after, 3s) << "within 3 probe deadlines";
  const std::string reason = Device(rasd, 1)["reason"];
  EXPECT_NE(reason.find("simDeviceGetHealth"), std::string::npos) << reason;
  EXPECT_NE(reason.find("ffff:c2:00.0"), std::string::npos) << "names the device: " << reason;
  ASSERT_TRUE(reaches(1, "isolated")) << rasd.Stderr();
  EXPECT_EQ(Device(rasd, 0)["state"], "healthy");
  EXPECT_EQ(Device(rasd, 2)["state"], "healthy");
  EXPECT_LT(slowest_ping_ms, 100.0) << "the loop never waits for a stuck query";
  std::cout << "wedged device draining after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(drained_after).count()
            << " ms (deadline 1000 ms); slowest ping " << slowest_ping_ms << " ms\n";
  // status and /metrics name the stuck call and how long it has run.
  const auto status = rasd.RasctlJson({"status"});
  ASSERT_EQ(status["probe"]["stuck"].size(), 1u) << status["probe"].dump();
  EXPECT_EQ(status["probe"]["stuck"][0]["device"], 1);
  EXPECT_EQ(status["probe"]["stuck"][0]["function"], "simDeviceGetHealth");
  EXPECT_GE(status["probe"]["stuck"][0]["running_ms"].get<int>(), 1000);
  const std::string text = rasd.Rasctl({"status"}).out;
  EXPECT_NE(text.find("simDeviceGetHealth on ffff:c2:00.0 has not returned for"), std::string::npos)
      << text;
  const std::string metrics = Http(status["metrics"]["port"].get<int>(), "GET", "/metrics");
  const auto at = metrics.find("rasd_device_probe_stuck_seconds{device=\"1\"} ");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GE(std::stod(metrics.substr(at + 44)), 1.0) << metrics.substr(at, 80);
  EXPECT_NE(metrics.find("rasd_device_probe_stuck_seconds{device=\"0\"} 0"), std::string::npos);

  // The queries return again: the isolation stays for the operator.
  ASSERT_EQ(rasd.Rasctl({"inject", "unwedge", "--device", "1"}).exit_code, 0);
  std::this_thread::sleep_for(1500ms);  // past a deadline of returning queries
  EXPECT_EQ(Device(rasd, 1)["state"], "isolated");

  // One query of device 2 only: a drain, lifted once it returns.
  const auto one =
      rasd.Rasctl({"inject", "wedge", "--device", "2", "--call", "simDeviceGetPoisonedPageCount"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_TRUE(WaitUntil([&] { return Device(rasd, 2)["state"] == "draining"; }, 10s));
  const std::string reason2 = Device(rasd, 2)["reason"];
  EXPECT_NE(reason2.find("simDeviceGetPoisonedPageCount"), std::string::npos) << reason2;
  ASSERT_EQ(rasd.Rasctl({"inject", "unwedge", "--device", "2"}).exit_code, 0);
  EXPECT_TRUE(WaitUntil([&] { return Device(rasd, 2)["state"] == "healthy"; }, 10s))
      << Device(rasd, 2).dump();

  // A query nobody has, and --call without wedge: refused, nothing changed.
  const auto unknown = rasd.Rasctl({"inject", "wedge", "--device", "0", "--call", "nvmlInit"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("simDeviceGetHealth"), std::string::npos) << unknown.err;
  EXPECT_EQ(rasd.Rasctl({"inject", "hang", "--device", "0", "--call", "x"}).exit_code, 1);
  EXPECT_EQ(Device(rasd, 0)["state"], "healthy");

  // SIGTERM with a query stuck: rasd leaves its thread behind.
  ASSERT_EQ(rasd.Rasctl({"inject", "wedge", "--device", "0"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return Device(rasd, 0)["state"] == "draining"; }, 10s));
  const auto stopping = Clock::now();
  const auto exit_status = rasd.Stop(10s);
  EXPECT_TRUE(exit_status.has_value()) << "still running 10 s after SIGTERM";
  EXPECT_EQ(exit_status.value_or(-1), 0) << rasd.Stderr();
  EXPECT_LT(Clock::now() - stopping, 5s);
  EXPECT_NE(rasd.Stderr().find("left behind"), std::string::npos) << rasd.Stderr();
}

}  // namespace
}  // namespace rasd::testing
