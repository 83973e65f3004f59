// NVIDIA's reports through NVML, end to end in the real rasd: a stand-in
// libnvidia-ml (drivers_shim/tests/fake_nvml.cc, loaded by dlopen as the
// real one would be) names GPUs at the simulated devices' PCI addresses;
// an Xid event isolates exactly that device through the policy, a counter
// increase is a CE event with its count, and a host without NVML runs on.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace rasd::testing {
namespace {

std::string StateOf(RasdInstance& rasd, int device) {
  const auto devices = rasd.RasctlJson({"devices"});
  if (!devices.is_object() || !devices.contains("devices")) return "?";
  return devices["devices"][device]["state"].get<std::string>();
}

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = rasd_.HostRoot().parent_path() / "nvml-script";
    std::ofstream(script_).flush();
  }
  void Script(const std::string& line) { std::ofstream(script_, std::ios::app) << line << '\n'; }
  bool Start() {
    rasd_.WriteConfig(std::string("ras:\n  nvml_library: ") + RASD_FAKE_NVML_PATH +
                      "\n  nvml_poll_ms: 100\n");
    std::string why;
    const bool started =
        rasd_.Start({},
                    {{"RASD_FAKE_NVML_GPUS", "ffff:c1:00.0,ffff:c2:00.0,ffff:c3:00.0,ffff:c4:00.0"},
                     {"RASD_FAKE_NVML_SCRIPT", script_.string()}},
                    &why);
    EXPECT_TRUE(started) << why;
    return started;
  }

  RasdInstance rasd_;
  std::filesystem::path script_;
};

TEST_F(NvmlTest, AnXidFromNvmlIsolatesTheDeviceAtThatPciAddress) {
  ASSERT_TRUE(Start());
  const auto status = rasd_.RasctlJson({"status"});
  EXPECT_EQ(status["ras"]["nvml_gpus"], 4) << status.dump(2);
  EXPECT_NE(rasd_.Stderr().find("NVML: GPU 2 Fake NVIDIA GPU at ffff:c3:00.0"), std::string::npos)
      << rasd_.Stderr();

  Script("xid 2 79");
  ASSERT_TRUE(WaitUntil([&] { return StateOf(rasd_, 2) == "isolated"; }, 5s)) << rasd_.Stderr();
  for (int other : {0, 1, 3}) EXPECT_EQ(StateOf(rasd_, other), "healthy") << other;
  auto device = rasd_.RasctlJson({"devices"})["devices"][2];
  EXPECT_EQ(device["reason"], "FATAL nvidia_xid");
  ASSERT_FALSE(device["recent_events"].empty());
  EXPECT_EQ(device["recent_events"][0]["vendor_code"], 79);
  EXPECT_EQ(device["recent_events"][0]["source"], "driver");
  EXPECT_EQ(rasd_.RasctlJson({"status"})["ras"]["nvml_reports"], 1);
}

TEST_F(NvmlTest, CorrectedEccCountsAreEventsOfThatDeviceAndAnApplicationXidIsOnlyRecorded) {
  Script("ecc 1 40 0");  // before the start: the baseline
  ASSERT_TRUE(Start());
  Script("ecc 1 52 0");
  Script("xid 0 13");  // a warp exception: the job failed, not the GPU
  nlohmann::json events;
  ASSERT_TRUE(
      WaitUntil([&] { return (events = rasd_.RasctlJson({"events"})["events"]).size() >= 2; }, 5s))
      << rasd_.Stderr();
  bool saw_ce = false, saw_info = false;
  for (const auto& event : events) {
    if (event["severity"] == "CE") {
      saw_ce = true;
      EXPECT_EQ(event["device"], 1);
      EXPECT_EQ(event["count"], 12);
      EXPECT_EQ(event["origin"], "nvml");
    }
    if (event["severity"] == "INFO") {
      saw_info = true;
      EXPECT_EQ(event["device"], 0);
      EXPECT_EQ(event["vendor_code"], 13);
    }
  }
  EXPECT_TRUE(saw_ce && saw_info) << events.dump(2);
  EXPECT_EQ(StateOf(rasd_, 0), "healthy");
  EXPECT_EQ(StateOf(rasd_, 1), "healthy");
}

// An Xid that names no process (NVML's events never do): the GPU's compute
// processes at that moment are the evidence. One process listed is the
// consumer and only it is killed; two listed prove nothing, and nobody is.
TEST_F(NvmlTest, AnXidWithoutAPidKillsTheOnlyProcessNvmlListsOnTheGpu) {
  ASSERT_TRUE(Start());
  auto run = [&](const std::string& name) {
    return std::make_unique<Process>(ProcessOptions{
        .argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "run", "--devices", "2",
                 "--name", name, "--", "/bin/sh", "-c", "while :; do sleep 0.05; done"},
        .stdout_path = rasd_.Dir() / (name + ".out"),
        .stderr_path = rasd_.Dir() / (name + ".err")});
  };
  auto first = run("first");
  auto second = run("second");
  std::map<std::string, std::int64_t> pids;
  ASSERT_TRUE(WaitUntil(
      [&] {
        pids.clear();
        const auto jobs = rasd_.RasctlJson({"jobs"});  // not a temporary's member in the for
        for (const auto& workload : jobs["workloads"])
          pids[workload["name"].get<std::string>()] = workload["pid"].get<std::int64_t>();
        return pids.size() == 2;
      },
      5s))
      << ReadText(rasd_.Dir() / "first.err") << ReadText(rasd_.Dir() / "second.err");
  auto actions = [&] { return rasd_.RasctlJson({"actions", "--device", "2"})["actions"]; };

  Script(fmt::format("procs 2 {} {}", pids["first"], pids["second"]));
  Script("xid 2 94");
  ASSERT_TRUE(WaitUntil([&] { return !actions().empty(); }, 5s)) << rasd_.Stderr();
  auto action = actions()[0];
  EXPECT_EQ(action["action"], "kill-consumer");
  EXPECT_EQ(action["result"], "skipped") << action.dump();
  EXPECT_NE(action["detail"].get<std::string>().find("NVML lists 2 computing on the device"),
            std::string::npos)
      << action.dump();
  EXPECT_FALSE(first->Wait(200ms).has_value());
  EXPECT_FALSE(second->Wait(0ms).has_value());

  Script(fmt::format("procs 2 {}", pids["first"]));
  Script("xid 2 94");
  const auto code = first->Wait(5s);
  ASSERT_TRUE(code.has_value()) << "the only process on the GPU still runs; " << rasd_.Stderr();
  EXPECT_EQ(*code, 128 + SIGKILL);
  action = actions()[0];
  EXPECT_EQ(action["result"], "ok") << action.dump();
  EXPECT_NE(action["detail"].get<std::string>().find(
                fmt::format("workload 'first' (pid {}) killed", pids["first"])),
            std::string::npos)
      << action.dump();
  EXPECT_NE(action["detail"].get<std::string>().find("the only one NVML lists"), std::string::npos);
  EXPECT_FALSE(second->Wait(200ms).has_value()) << "the other workload runs on";
  EXPECT_EQ(StateOf(rasd_, 2), "healthy") << "a contained error: the GPU serves on";
}

std::string Reason(RasdInstance& rasd, int index) {
  const auto device = DeviceOf(rasd, index);
  return device["reason"].is_string() ? device["reason"].get<std::string>() : "";
}

// GPUs with four NVLinks each at the simulated devices' addresses, and a
// collective over the four devices.
class NvlinkTest : public NvmlTest {
 protected:
  bool StartWithCollective(const std::string& policy = "") {
    rasd_.WriteConfig(std::string("ras:\n  nvml_library: ") + RASD_FAKE_NVML_PATH +
                      "\n  nvml_poll_ms: 100\npolicy:\n  link_up_debounce_s: 1\n" + policy +
                      kAllreduceJob);
    std::string why;
    const bool started =
        rasd_.Start({},
                    {{"RASD_FAKE_NVML_GPUS", "ffff:c1:00.0,ffff:c2:00.0,ffff:c3:00.0,ffff:c4:00.0"},
                     {"RASD_FAKE_NVML_NVLINKS", "4"},
                     {"RASD_FAKE_NVML_SCRIPT", script_.string()}},
                    &why);
    EXPECT_TRUE(started) << why;
    return started;
  }
  bool OnRanks(const nlohmann::json& devices, std::chrono::milliseconds timeout = 10s) {
    return WaitUntil([&] { return Job(rasd_, "allreduce")["devices"] == devices; }, timeout);
  }
};

// An NVLink down under a collective's rank: the rank leaves (the job
// re-forms on the others) and the GPU is Degraded, not isolated; the reason
// names exactly the links down now; a kill -9 while it is down keeps it out
// after the restart; once the link has stayed up for the debounce the GPU is
// Healthy and the job grows back, every checksum equal to a fault-free run's.
TEST_F(NvlinkTest, AnNvlinkDownMovesTheCollectiveOffItsGpuUntilTheLinkIsStable) {
  ASSERT_TRUE(StartWithCollective());
  ASSERT_TRUE(OnRanks({0, 1, 2, 3})) << Job(rasd_, "allreduce").dump();
  Script("nvlink 1 2 down");
  ASSERT_TRUE(OnRanks({0, 2, 3})) << Job(rasd_, "allreduce").dump() << rasd_.Stderr();
  auto device = DeviceOf(rasd_, 1);
  EXPECT_EQ(device["state"], "degraded");
  EXPECT_EQ(device["links_usable"], false);
  EXPECT_NE(Reason(rasd_, 1).find("NVLink link down (NVLink 2)"), std::string::npos)
      << device.dump();
  EXPECT_NE(device["clears"].get<std::string>().find("by itself"), std::string::npos)
      << device.dump();
  // A second link down and back: the reason follows the links down now.
  Script("nvlink 1 3 down");
  ASSERT_TRUE(WaitUntil(
      [&] { return Reason(rasd_, 1).find("NVLink 2, NVLink 3") != std::string::npos; }, 5s))
      << Reason(rasd_, 1);
  Script("nvlink 1 3 up");
  ASSERT_TRUE(
      WaitUntil([&] { return Reason(rasd_, 1).find("(NVLink 2)") != std::string::npos; }, 5s))
      << Reason(rasd_, 1);
  EXPECT_EQ(DeviceOf(rasd_, 1)["state"], "degraded") << "one link is still down";
  const int port = rasd_.RasctlJson({"status"})["metrics"]["port"];
  const std::string metrics = Http(port, "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_device_links_down{device=\"1\",link=\"NVLink\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("rasd_device_links_down{device=\"0\",link=\"NVLink\"} 0\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("rasd_device_links_usable{device=\"1\"} 0\n"), std::string::npos);
  // The link-down report is recorded, not acted on by a rule.
  bool recorded = false;
  const auto recent = rasd_.RasctlJson({"events", "--limit", "100"});
  for (const auto& event : recent["events"]) {
    if (event["origin"] == "nvml" && event["device"] == 1 &&
        event["summary"].get<std::string>().find("NVLink 2 down") != std::string::npos) {
      recorded = true;
      EXPECT_EQ(event["severity"], "INFO") << event.dump();
    }
  }
  EXPECT_TRUE(recorded) << recent.dump(1);

  // kill -9 while the link is down: the restarted rasd keeps the GPU out.
  rasd_.Proc().Signal(SIGKILL);
  ASSERT_TRUE(rasd_.Proc().Wait(5s).has_value());
  ASSERT_TRUE(StartWithCollective());
  EXPECT_EQ(DeviceOf(rasd_, 1)["links_usable"], false);
  EXPECT_EQ(DeviceOf(rasd_, 1)["state"], "degraded");
  ASSERT_TRUE(OnRanks({0, 2, 3})) << Job(rasd_, "allreduce").dump();
  const auto up_at = std::chrono::steady_clock::now();
  Script("nvlink 1 2 up");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd_, 1)["state"] == "healthy"; }, 10s))
      << rasd_.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - up_at, 900ms) << "rejoined before the debounce";
  EXPECT_EQ(DeviceOf(rasd_, 1)["links_usable"], true);
  ASSERT_TRUE(OnRanks({0, 1, 2, 3}, 15s)) << Job(rasd_, "allreduce").dump();
  const auto job = Job(rasd_, "allreduce");
  EXPECT_EQ(job["checksums_match"], true) << job.dump();
  EXPECT_GE(job["grown"], 1) << job.dump();

  // An error counter's increase is a CE event of that GPU with its count.
  Script("nvlinkerr 1 0 3 9");
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto events = rasd_.RasctlJson({"events", "--limit", "100"});
        for (const auto& event : events["events"])
          if (event["severity"] == "CE" && event["device"] == 1 && event["count"] == 9) return true;
        return false;
      },
      5s))
      << rasd_.RasctlJson({"events"}).dump(2);
  const int metrics_port = rasd_.RasctlJson({"status"})["metrics"]["port"];
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Http(metrics_port, "GET", "/metrics")
                   .find(
                       "rasd_device_link_errors_total{device=\"1\",link=\"NVLink\","
                       "counter=\"crc_data\"} 9\n") != std::string::npos;
      },
      5s))
      << Http(metrics_port, "GET", "/metrics");
}

// A GPU whose NVLinks NVML reads as inactive from the start (a PCIe GPU
// without its bridge) is not taken out of collectives for them.
TEST_F(NvlinkTest, LinksInactiveSinceTheStartAreNotALinkDown) {
  Script("nvlink 3 0 down");
  Script("nvlink 3 1 down");
  ASSERT_TRUE(StartWithCollective());
  ASSERT_TRUE(OnRanks({0, 1, 2, 3})) << Job(rasd_, "allreduce").dump();
  EXPECT_EQ(DeviceOf(rasd_, 3)["state"], "healthy");
  EXPECT_EQ(DeviceOf(rasd_, 3)["links_usable"], true);
  // Cabled later and then lost: that is a link down.
  Script("nvlink 3 0 up");
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto events = rasd_.RasctlJson({"events", "--limit", "100"});
        for (const auto& event : events["events"])
          if (event["summary"].get<std::string>().find("GPU 3 (ffff:c4:00.0) NVLink 0 up") !=
              std::string::npos)
            return true;
        return false;
      },
      5s));
  Script("nvlink 3 0 down");
  ASSERT_TRUE(OnRanks({0, 1, 2})) << Job(rasd_, "allreduce").dump() << rasd_.Stderr();
  EXPECT_NE(Reason(rasd_, 3).find("(NVLink 0)"), std::string::npos) << Reason(rasd_, 3);
}

// A GPU whose NVLink keeps going down stays out until an operator acts, and
// says so (helper's find: the reason still promised a return after the
// debounce, and `clears` named nothing for a link that clears by itself).
TEST_F(NvlinkTest, AFlappingNvlinkKeepsItsGpuOutUntilAnOperatorUndrains) {
  ASSERT_TRUE(StartWithCollective("  link_flap_limit: 2\n"));
  ASSERT_TRUE(OnRanks({0, 1, 2, 3})) << Job(rasd_, "allreduce").dump();
  Script("nvlink 2 0 down");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd_, 2)["state"] == "degraded"; }, 5s));
  Script("nvlink 2 0 up");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return DeviceOf(rasd_, 2)["clears"].get<std::string>().find("its links are up") !=
               std::string::npos;
      },
      5s))
      << DeviceOf(rasd_, 2).dump();
  Script("nvlink 2 1 down");  // another link of the same GPU: a second down of the device
  ASSERT_TRUE(WaitUntil([&] { return Reason(rasd_, 2).find("flapping") != std::string::npos; }, 5s))
      << Reason(rasd_, 2) << rasd_.Stderr();
  Script("nvlink 2 1 up");
  ASSERT_TRUE(OnRanks({0, 1, 3})) << Job(rasd_, "allreduce").dump();
  auto device = DeviceOf(rasd_, 2);
  EXPECT_EQ(Reason(rasd_, 2).find("until it stays up"), std::string::npos) << device.dump();
  EXPECT_NE(device["clears"].get<std::string>().find("rasctl undrain"), std::string::npos)
      << device.dump();
  // Past the debounce with every link up: still out.
  ASSERT_FALSE(WaitUntil([&] { return DeviceOf(rasd_, 2)["links_usable"] == true; }, 1500ms));
  EXPECT_EQ(DeviceOf(rasd_, 2)["state"], "degraded");
  ASSERT_EQ(rasd_.Rasctl({"undrain", "2"}).exit_code, 0);
  EXPECT_EQ(DeviceOf(rasd_, 2)["state"], "healthy");
  EXPECT_EQ(DeviceOf(rasd_, 2)["links_usable"], true);
  ASSERT_TRUE(OnRanks({0, 1, 2, 3}, 15s)) << Job(rasd_, "allreduce").dump();
  EXPECT_EQ(Job(rasd_, "allreduce")["checksums_match"], true);
}

// An older libnvidia-ml without the NVLink queries: rasd says so once and
// reports everything else.
TEST_F(NvmlTest, ALibraryWithoutNvlinkQueriesIsUsedWithoutNvlinkPolling) {
  rasd_.WriteConfig(std::string("ras:\n  nvml_library: ") + RASD_FAKE_NVML_NO_NVLINK_PATH +
                    "\n  nvml_poll_ms: 100\n");
  std::string why;
  ASSERT_TRUE(rasd_.Start({},
                          {{"RASD_FAKE_NVML_GPUS", "ffff:c1:00.0,ffff:c2:00.0"},
                           {"RASD_FAKE_NVML_NVLINKS", "4"},
                           {"RASD_FAKE_NVML_SCRIPT", script_.string()}},
                          &why))
      << why;
  EXPECT_NE(rasd_.Stderr().find("has no NVLink queries"), std::string::npos) << rasd_.Stderr();
  Script("nvlink 1 0 down");
  Script("xid 1 79");
  ASSERT_TRUE(WaitUntil([&] { return StateOf(rasd_, 1) == "isolated"; }, 5s)) << rasd_.Stderr();
  EXPECT_EQ(DeviceOf(rasd_, 1)["links_usable"], true);
}

TEST(NvmlAbsentTest, AHostWithoutNvmlRunsOnAndSaysWhy) {
  RasdInstance rasd;
  rasd.WriteConfig("ras:\n  nvml_library: librasd-no-nvml-here.so.1\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_EQ(rasd.RasctlJson({"status"})["ras"]["nvml_gpus"], 0);
  EXPECT_NE(rasd.Stderr().find("NVML: not used (cannot load librasd-no-nvml-here.so.1"),
            std::string::npos)
      << rasd.Stderr();
}

// The simulator's NVLink fault (rasctl inject link --via nvlink) is
// reported as NVML's poll reports a real GPU's: typed link reports, which
// LinkHealth takes the same way, so the collective moves off both devices,
// they stay Degraded (not isolated) and rejoin after the debounce with
// every checksum equal.
TEST(SimulatedNvlinkTest, TheSimulatorsNvlinkFaultTakesTheNvmlPath) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(policy:
  link_up_debounce_s: 1
)" + std::string(kAllreduceJob));
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto on_ranks = [&](const nlohmann::json& devices, std::chrono::milliseconds timeout) {
    return WaitUntil([&] { return Job(rasd, "allreduce")["devices"] == devices; }, timeout);
  };
  ASSERT_TRUE(on_ranks({0, 1, 2, 3}, 10s)) << Job(rasd, "allreduce").dump();
  const auto bad = rasd.Rasctl({"inject", "link", "--device", "1", "--peer", "2", "--via", "pcie"});
  EXPECT_NE(bad.exit_code, 0) << "only nvlink is a link kind to name";
  const auto down =
      rasd.Rasctl({"inject", "link", "--device", "1", "--peer", "2", "--via", "nvlink"});
  ASSERT_EQ(down.exit_code, 0) << down.out << down.err;
  ASSERT_TRUE(on_ranks({0, 3}, 10s)) << Job(rasd, "allreduce").dump() << rasd.Stderr();
  for (const auto& [index, peer] : {std::pair{1, 2}, std::pair{2, 1}}) {
    const auto device = DeviceOf(rasd, index);
    EXPECT_EQ(device["state"], "degraded") << device.dump();  // not isolated
    EXPECT_EQ(device["links_usable"], false) << device.dump();
    // Each device's link is numbered by the device at its other end.
    EXPECT_NE(Reason(rasd, index).find("NVLink link down (NVLink " + std::to_string(peer) + ")"),
              std::string::npos)
        << device.dump();
  }
  const auto up_at = std::chrono::steady_clock::now();
  const auto up =
      rasd.Rasctl({"inject", "link-up", "--device", "1", "--peer", "2", "--via", "nvlink"});
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  ASSERT_TRUE(on_ranks({0, 1, 2, 3}, 15s)) << Job(rasd, "allreduce").dump() << rasd.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - up_at, 900ms) << "rejoined before the debounce";
  EXPECT_EQ(DeviceOf(rasd, 1)["state"], "healthy");
  const auto job = Job(rasd, "allreduce");
  EXPECT_EQ(job["checksums_match"], true) << job.dump();
}

}  // namespace
}  // namespace rasd::testing
