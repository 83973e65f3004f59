// The real rasd on its Ascend backend, over the stand-in libascendcl and
// libdcmi (drivers_shim/ascend/testing): two NPUs served with their DCMI
// PCI addresses, and a DCMI fault code that the site's ras.codes.ascend
// table classes FATAL isolates exactly that NPU; a code no table knows is
// recorded; kernels run through the stand-in operator library. Nothing here
// has run on Ascend hardware.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace rasd::testing {
namespace {

// rasd on its Ascend backend over the stand-ins, with `config` after the
// runtime section; returns the DCMI script the stand-in libdcmi follows, or
// an empty path (and a failure saying why) when rasd did not start.
std::filesystem::path StartOnStandInNpus(RasdInstance& rasd, const std::string& config) {
  const auto script = rasd.HostRoot().parent_path() / "dcmi-script";
  std::ofstream(script).flush();
  rasd.WriteConfig(std::string("runtime:\n  driver: ascend\n  ascend_library: ") +
                   RASD_FAKE_ASCENDCL_PATH + "\n  dcmi_library: " + RASD_FAKE_DCMI_PATH + "\n" +
                   config);
  std::string why;
  if (!rasd.Start({}, {{"RASD_FAKE_DCMI_SCRIPT", script.string()}}, &why)) {
    ADD_FAILURE() << why;
    return {};
  }
  return script;
}

TEST(AscendBackendTest, ADcmiFaultCodeClassedFatalIsolatesThatNpu) {
  RasdInstance rasd;
  const auto script =
      StartOnStandInNpus(rasd, "ras:\n  codes:\n    ascend:\n      0x80E01801: FATAL\n");
  ASSERT_FALSE(script.empty());
  auto devices = rasd.RasctlJson({"devices"})["devices"];
  ASSERT_EQ(devices.size(), 2u) << devices.dump(2) << rasd.Stderr();
  EXPECT_EQ(devices[0]["vendor"], "huawei");
  EXPECT_EQ(devices[0]["name"], "FakeAscend910B");
  EXPECT_FALSE(devices[1]["pci_bdf"].get<std::string>().empty()) << "from DCMI";
  EXPECT_EQ(rasd.RasctlJson({"status"})["devices"]["driver"], "ascend");

  std::ofstream(script, std::ios::app) << "codes 0 0x12345678\ncodes 1 0x80E01801\n";
  auto state = [&](int device) {
    const auto listed = rasd.RasctlJson({"devices"});
    return listed["devices"][device]["state"].get<std::string>();
  };
  ASSERT_TRUE(WaitUntil([&] { return state(1) == "isolated"; }, std::chrono::seconds(10)))
      << rasd.Stderr();
  EXPECT_EQ(state(0), "healthy") << "a code no table knows is recorded, not acted on";
  const auto listed = rasd.RasctlJson({"devices"});
  EXPECT_EQ(listed["devices"][1]["reason"], "FATAL ascend");
  nlohmann::json events;
  ASSERT_TRUE(
      WaitUntil([&] { return (events = rasd.RasctlJson({"events"})["events"]).size() >= 2; },
                std::chrono::seconds(5)));
  bool info_on_0 = false;
  for (const auto& event : events) {
    if (event["device"] == 0 && event["severity"] == "INFO" && event["origin"] == "ascend") {
      info_on_0 = true;
    }
  }
  EXPECT_TRUE(info_on_0) << events.dump(2);
}

// A DCMI health query that does not return (a wedged driver) takes that NPU
// out of service by the probe deadline, with the call in the reason, and
// SIGTERM still ends rasd promptly, leaving the polling thread behind.
TEST(AscendBackendTest, ADcmiCallThatDoesNotReturnTakesItsNpuOutOfServiceByTheDeadline) {
  RasdInstance rasd;
  const auto script = StartOnStandInNpus(rasd, "probe:\n  deadline_ms: 1000\n");
  ASSERT_FALSE(script.empty());
  const auto devices = rasd.RasctlJson({"devices"})["devices"];
  ASSERT_EQ(devices.size(), 2u) << devices.dump(2);
  const std::string npu1 = devices[1]["pci_bdf"];
  std::ofstream(script, std::ios::app) << "block 1 dcmi_get_device_health\n";
  const auto blocked = std::chrono::steady_clock::now();
  auto device = [&](int index) { return rasd.RasctlJson({"devices"})["devices"][index]; };
  ASSERT_TRUE(WaitUntil([&] { return device(1)["state"] == "draining"; }, std::chrono::seconds(10)))
      << rasd.Stderr();
  EXPECT_LT(std::chrono::steady_clock::now() - blocked, std::chrono::seconds(3))
      << "a poll and a deadline";
  const std::string reason = device(1)["reason"];
  EXPECT_NE(reason.find("dcmi_get_device_health"), std::string::npos) << reason;
  EXPECT_NE(reason.find(npu1), std::string::npos) << reason;
  EXPECT_EQ(device(0)["state"], "healthy");
  const auto stopping = std::chrono::steady_clock::now();
  const auto exit_status = rasd.Stop(std::chrono::seconds(10));
  EXPECT_TRUE(exit_status.has_value()) << "still running 10 s after SIGTERM";
  EXPECT_EQ(exit_status.value_or(-1), 0) << rasd.Stderr();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(5));
  EXPECT_NE(rasd.Stderr().find("left to return on its own"), std::string::npos) << rasd.Stderr();
}

// Kernels run through the stand-in operator library (libopapi.so beside the
// stand-in libascendcl, where rasd looks for it): an inference job serves
// on both NPUs with every answer checked, a DCMI fault code moves it off
// one with nothing lost, and the undrain's self-test runs every kernel the
// NPU offers.
TEST(AscendBackendTest, AnInferenceJobRunsOnTheNpusAndTheSelfTestPasses) {
  RasdInstance rasd;
  const auto script =
      StartOnStandInNpus(rasd,
                         "ras:\n  codes:\n    ascend:\n      0x80E01801: FATAL\n"
                         "jobs:\n  - name: llm\n    kind: inference\n    load_rps: 300\n");
  ASSERT_FALSE(script.empty());
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto llm = Job(rasd, "llm");
        return llm.is_object() && llm["requests"]["served"] > 100;
      },
      std::chrono::seconds(10)))
      << Job(rasd, "llm").dump(2) << rasd.Stderr();
  EXPECT_NE(rasd.Stderr().find("kernels through aclnn"), std::string::npos) << rasd.Stderr();

  std::ofstream(script, std::ios::app) << "codes 1 0x80E01801\n";
  auto state = [&](int device) {
    const auto listed = rasd.RasctlJson({"devices"});
    return listed["devices"][device]["state"].get<std::string>();
  };
  ASSERT_TRUE(WaitUntil([&] { return state(1) == "isolated"; }, std::chrono::seconds(10)))
      << rasd.Stderr();
  EXPECT_EQ(state(0), "healthy");
  ASSERT_TRUE(WaitUntil([&] { return Job(rasd, "llm")["devices"] == nlohmann::json({0}); },
                        std::chrono::seconds(10)))
      << Job(rasd, "llm").dump(2);
  const auto served = Job(rasd, "llm")["requests"]["served"].get<std::int64_t>();
  ASSERT_TRUE(WaitUntil(
      [&] { return Job(rasd, "llm")["requests"]["served"].get<std::int64_t>() > served + 50; },
      std::chrono::seconds(10)));

  // The code cleared (it was scripted): the NPU passes its self-test.
  std::ofstream(script, std::ios::app) << "codes 1\n";
  const auto undrain = rasd.Rasctl({"undrain", "1"});
  EXPECT_EQ(undrain.exit_code, 0) << undrain.err;
  EXPECT_NE(undrain.out.find("self-test passed"), std::string::npos) << undrain.out;
  EXPECT_EQ(state(1), "healthy");
  auto llm = Job(rasd, "llm");
  EXPECT_EQ(llm["requests"]["lost"], 0) << llm.dump(2);
  EXPECT_EQ(llm["load"]["wrong"], 0) << llm.dump(2);
}

// policy.auto_recover on an NPU: aclrtResetDevice frees the NPU's memory,
// the runtime's pool forgets its arenas (the action says so), the
// self-test passes on fresh memory, and the job grows back onto the NPU
// with nothing lost.
TEST(AscendBackendTest, AutoRecoveryResetsTheNpuAndItServesOnFreshMemory) {
  RasdInstance rasd;
  // 0x80E18005: MindCluster's RestartNPU, a reset (docs/recovery.md).
  const auto script =
      StartOnStandInNpus(rasd,
                         "ras:\n  codes:\n    ascend:\n      0x80E18005: FATAL\n"
                         "policy:\n  auto_recover: true\n  auto_recover_delay_ms: 200\n"
                         "jobs:\n  - name: llm\n    kind: inference\n    load_rps: 300\n");
  ASSERT_FALSE(script.empty());
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto llm = Job(rasd, "llm");
        return llm.is_object() && llm["devices"] == nlohmann::json({0, 1}) &&
               llm["requests"]["served"] > 100;
      },
      std::chrono::seconds(10)))
      << Job(rasd, "llm").dump(2) << rasd.Stderr();

  std::ofstream(script, std::ios::app) << "codes 1 0x80E18005\n";
  nlohmann::json reset;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto listed = rasd.RasctlJson({"actions", "--device", "1"});
        for (const auto& action : listed["actions"]) {
          if (action["action"] == "reset-device" && action["rule"] == "auto-recover") {
            reset = action;
            return true;
          }
        }
        return false;
      },
      std::chrono::seconds(10)))
      << rasd.Stderr();
  EXPECT_EQ(reset["result"], "ok") << reset.dump(2);
  EXPECT_NE(reset["detail"].get<std::string>().find("freed the device's memory"), std::string::npos)
      << reset.dump(2);
  std::ofstream(script, std::ios::app) << "codes 1\n";
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto listed = rasd.RasctlJson({"devices"});
        return listed["devices"][1]["state"] == "healthy";
      },
      std::chrono::seconds(10)))
      << rasd.Stderr();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "llm")["devices"] == nlohmann::json({0, 1});
      },
      std::chrono::seconds(10)))
      << Job(rasd, "llm").dump(2);
  const auto served = Job(rasd, "llm")["requests"]["served"].get<std::int64_t>();
  ASSERT_TRUE(WaitUntil(
      [&] { return Job(rasd, "llm")["requests"]["served"].get<std::int64_t>() > served + 50; },
      std::chrono::seconds(10)));
  auto llm = Job(rasd, "llm");
  EXPECT_EQ(llm["requests"]["lost"], 0) << llm.dump(2);
  EXPECT_EQ(llm["load"]["wrong"], 0) << llm.dump(2);
}

}  // namespace
}  // namespace rasd::testing
