// The real rasd on its CUDA backend, over a stand-in libcuda
// (drivers_shim/tests/fake_cuda.cc: host memory, the simulator's kernels
// behind cuLaunchKernel) and the stand-in NVML naming the same GPUs: an
// inference job runs on the GPUs, an Xid 79 from NVML isolates one, the
// job moves with nothing lost, and an undrain's self-test (every kernel,
// pool memory) returns it. Also: backends together, and none at all.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"

namespace rasd::testing {
namespace {

nlohmann::json Devices(RasdInstance& rasd) { return rasd.RasctlJson({"devices"})["devices"]; }

std::map<std::string, std::string> FakeGpus(const std::filesystem::path& script) {
  return {{"RASD_FAKE_CUDA_DEVICES", "2"},
          {"RASD_FAKE_NVML_GPUS", "0000:d1:00.0,0000:d2:00.0"},
          {"RASD_FAKE_NVML_SCRIPT", script.string()}};
}

// rasd on its CUDA backend over the stand-ins, NVML polled every 100 ms,
// with `config` after the ras section; returns the script the stand-in
// NVML follows, or an empty path (and a failure saying why) when rasd did
// not start.
std::filesystem::path StartOnStandInGpus(RasdInstance& rasd, const std::string& config = "") {
  const auto script = rasd.HostRoot().parent_path() / "nvml-script";
  std::ofstream(script).flush();
  rasd.WriteConfig(std::string("runtime:\n  driver: cuda\n  cuda_library: ") + RASD_FAKE_CUDA_PATH +
                   "\nras:\n  nvml_library: " + RASD_FAKE_NVML_PATH + "\n  nvml_poll_ms: 100\n" +
                   config);
  std::string why;
  if (!rasd.Start({}, FakeGpus(script), &why)) {
    ADD_FAILURE() << why;
    return {};
  }
  return script;
}

TEST(CudaBackendTest, AnNvmlXidIsolatesTheGpuAtItsPciAddress) {
  RasdInstance rasd;
  const auto script = StartOnStandInGpus(rasd);
  ASSERT_FALSE(script.empty());
  auto devices = Devices(rasd);
  ASSERT_EQ(devices.size(), 2u) << devices.dump(2);
  EXPECT_EQ(devices[0]["vendor"], "nvidia");
  EXPECT_EQ(devices[1]["pci_bdf"], "0000:d2:00.0");
  EXPECT_EQ(rasd.RasctlJson({"status"})["devices"]["driver"], "cuda");
  std::ofstream(script, std::ios::app) << "xid 1 79\n";
  ASSERT_TRUE(WaitUntil([&] { return Devices(rasd)[1]["state"] == "isolated"; }, 5s))
      << rasd.Stderr();
  EXPECT_EQ(Devices(rasd)[0]["state"], "healthy");
  EXPECT_EQ(Devices(rasd)[1]["reason"], "FATAL nvidia_xid");
}

// A polled NVML call that does not return on one GPU (a wedged driver):
// that GPU takes no new work within one probe deadline, with the call in
// its reason, and is isolated after three; the other stays healthy, and
// the control socket answers at once all along.
TEST(CudaBackendTest, AnNvmlCallThatDoesNotReturnTakesItsGpuOutOfServiceByTheDeadline) {
  RasdInstance rasd;
  const auto script = StartOnStandInGpus(rasd, "probe:\n  deadline_ms: 400\n  isolate_after: 3\n");
  ASSERT_FALSE(script.empty());
  ASSERT_EQ(Devices(rasd).size(), 2u);
  std::ofstream(script, std::ios::app) << "block 1 nvmlDeviceGetTotalEccErrors\n";
  const auto blocked = std::chrono::steady_clock::now();
  RawClient client(rasd.Socket());
  ASSERT_TRUE(client.Connected());
  double slowest_ping_ms = 0;
  auto state_of = [&](int device) {
    const double took = PingMilliseconds(client);
    EXPECT_GE(took, 0) << "no answer to a ping";
    slowest_ping_ms = std::max(slowest_ping_ms, took);
    return Devices(rasd)[device];
  };
  ASSERT_TRUE(WaitUntil([&] { return state_of(1)["state"] == "draining"; }, 5s)) << rasd.Stderr();
  EXPECT_LT(std::chrono::steady_clock::now() - blocked, 2s) << "a deadline and a poll";
  const std::string reason = state_of(1)["reason"];
  EXPECT_NE(reason.find("nvmlDeviceGetTotalEccErrors"), std::string::npos) << reason;
  ASSERT_TRUE(WaitUntil([&] { return state_of(1)["state"] == "isolated"; }, 5s)) << rasd.Stderr();
  EXPECT_EQ(state_of(0)["state"], "healthy");
  EXPECT_LT(slowest_ping_ms, 100.0) << "the loop never waits for the stuck call";
  // SIGTERM with the call still stuck: rasd leaves NVML's thread behind.
  const auto stopping = std::chrono::steady_clock::now();
  const auto status = rasd.Stop(10s);
  EXPECT_TRUE(status.has_value()) << "still running 10 s after SIGTERM";
  EXPECT_EQ(status.value_or(-1), 0) << rasd.Stderr();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 5s);
  EXPECT_NE(rasd.Stderr().find("left to return on its own"), std::string::npos) << rasd.Stderr();
}

// A GPU whose NVML opening does not return (nvmlDeviceGetHandleByIndex_v2
// wedged at start): rasd starts with the other GPU watched, and the GPU,
// named by elimination from the runtime's PCI addresses, leaves service by
// the probe deadline as for any call that does not return.
TEST(CudaBackendTest, AGpuWhoseNvmlOpeningDoesNotReturnLeavesServiceByTheDeadline) {
  RasdInstance rasd;
  const auto script = rasd.HostRoot().parent_path() / "nvml-script";
  std::ofstream(script) << "block 1 nvmlDeviceGetHandleByIndex_v2\n";
  rasd.WriteConfig(std::string("runtime:\n  driver: cuda\n  cuda_library: ") + RASD_FAKE_CUDA_PATH +
                   "\nras:\n  nvml_library: " + RASD_FAKE_NVML_PATH +
                   "\n  nvml_poll_ms: 100\nprobe:\n  deadline_ms: 400\n  isolate_after: 3\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, FakeGpus(script), &why)) << why;
  ASSERT_EQ(Devices(rasd).size(), 2u);
  const auto nvml = rasd.RasctlJson({"status"})["ras"]["sources"]["nvml"];
  EXPECT_EQ(nvml["state"], "active") << nvml.dump();
  EXPECT_NE(nvml["reason"].get<std::string>().find("GPU 1 not watched"), std::string::npos)
      << nvml.dump();
  ASSERT_TRUE(WaitUntil([&] { return Devices(rasd)[1]["state"] == "isolated"; }, 5s))
      << rasd.Stderr();
  const std::string reason = Devices(rasd)[1]["reason"];
  EXPECT_NE(reason.find("nvmlDeviceGetHandleByIndex_v2 on GPU 1"), std::string::npos) << reason;
  EXPECT_EQ(Devices(rasd)[0]["state"], "healthy");
  // GPU 0 is watched: its Xid still reaches rasd.
  std::ofstream(script, std::ios::app) << "xid 0 79\n";
  ASSERT_TRUE(WaitUntil([&] { return Devices(rasd)[0]["state"] == "isolated"; }, 5s))
      << rasd.Stderr();
  const auto stopping = std::chrono::steady_clock::now();
  const auto status = rasd.Stop(10s);
  EXPECT_TRUE(status.has_value()) << "still running 10 s after SIGTERM";
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 5s);
}

// NVML's recovery-action field is the driver's verdict that Xid 154 prints:
// read every poll, it takes the GPU out of service with the driver's action
// as the suggestion, also where that kernel line is never read.
TEST(CudaBackendTest, NvmlsRecoveryActionFieldActsAsXid154Does) {
  RasdInstance rasd;
  const auto script = StartOnStandInGpus(rasd);
  ASSERT_FALSE(script.empty());
  ASSERT_EQ(Devices(rasd).size(), 2u);
  std::ofstream(script, std::ios::app) << "recovery 1 2\n";
  ASSERT_TRUE(WaitUntil([&] { return Devices(rasd)[1]["state"] == "isolated"; }, 5s))
      << rasd.Stderr();
  const auto gpu = rasd.RasctlJson({"devices", "1"})["devices"][0];
  EXPECT_EQ(gpu["suggested_action"], "reboot-node") << gpu.dump(2);
  EXPECT_NE(gpu["suggested_why"].get<std::string>().find("GPU_RECOVERY_ACTION_NODE_REBOOT"),
            std::string::npos)
      << gpu["suggested_why"];
  EXPECT_EQ(Devices(rasd)[0]["state"], "healthy");
}

// Jobs need the kernels, which only a build that found nvcc has.
#if RASD_HAVE_CUDA_KERNELS
TEST(CudaBackendTest, JobsRunOnTheGpusAndAnNvmlXidMovesThemOffOne) {
  RasdInstance rasd;
  const auto script =
      StartOnStandInGpus(rasd, "jobs:\n  - name: llm\n    kind: inference\n    load_rps: 300\n");
  ASSERT_FALSE(script.empty());
  auto devices = Devices(rasd);
  ASSERT_EQ(devices.size(), 2u) << devices.dump(2);
  EXPECT_EQ(devices[0]["vendor"], "nvidia");
  EXPECT_EQ(devices[1]["pci_bdf"], "0000:d2:00.0");
  EXPECT_EQ(rasd.RasctlJson({"status"})["devices"]["driver"], "cuda");
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto llm = Job(rasd, "llm");
        return llm.is_object() && llm["requests"]["served"] > 100;
      },
      10s))
      << Job(rasd, "llm").dump(2) << rasd.Stderr();

  std::ofstream(script, std::ios::app) << "xid 1 79\n";
  ASSERT_TRUE(WaitUntil([&] { return Devices(rasd)[1]["state"] == "isolated"; }, 5s))
      << rasd.Stderr();
  EXPECT_EQ(Devices(rasd)[0]["state"], "healthy");
  ASSERT_TRUE(WaitUntil([&] { return Job(rasd, "llm")["devices"] == nlohmann::json({0}); }, 10s))
      << Job(rasd, "llm").dump(2);
  const auto served = Job(rasd, "llm")["requests"]["served"].get<std::int64_t>();
  ASSERT_TRUE(WaitUntil(
      [&] { return Job(rasd, "llm")["requests"]["served"].get<std::int64_t>() > served + 50; },
      10s));

  // The GPU itself is fine (the Xid was scripted): the self-test passes.
  const auto undrain = rasd.Rasctl({"undrain", "1"});
  EXPECT_EQ(undrain.exit_code, 0) << undrain.err;
  EXPECT_NE(undrain.out.find("self-test passed"), std::string::npos) << undrain.out;
  EXPECT_EQ(Devices(rasd)[1]["state"], "healthy");
  auto llm = Job(rasd, "llm");
  EXPECT_EQ(llm["requests"]["lost"], 0) << llm.dump(2);
  EXPECT_EQ(llm["load"]["wrong"], 0) << llm.dump(2);
}
#endif  // RASD_HAVE_CUDA_KERNELS

TEST(CudaBackendTest, BackendsServeTogetherNumberedInOrder) {
  RasdInstance rasd;
  rasd.WriteConfig(std::string("runtime:\n  driver: [cuda, sim]\n  cuda_library: ") +
                   RASD_FAKE_CUDA_PATH + "\nsimulator:\n  devices: 3\n  memory_mib: 64\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {{"RASD_FAKE_CUDA_DEVICES", "2"}}, &why)) << why;
  const auto devices = Devices(rasd);
  ASSERT_EQ(devices.size(), 5u) << devices.dump(2);
  EXPECT_EQ(devices[1]["vendor"], "nvidia");
  EXPECT_EQ(devices[2]["vendor"], "sim");
  EXPECT_EQ(devices[4]["index"], 4);
  EXPECT_EQ(rasd.RasctlJson({"status"})["devices"]["driver"], "cuda+sim");
}

// A fatal SXid takes the NVLink fabric down: every NVIDIA GPU is out of
// collectives (Degraded, its compute is fine), the simulated devices beside
// them serve on, and the node is not drained. A GSP timeout's Xid names its
// GPU: that one is isolated.
TEST(CudaBackendTest, AFatalSxidIsALinkFaultOfTheGpusAndAGspTimeoutIsolatesItsGpu) {
  RasdInstance rasd;
  rasd.WriteConfig(std::string("runtime:\n  driver: [cuda, sim]\n  cuda_library: ") +
                   RASD_FAKE_CUDA_PATH +
                   "\nsimulator:\n  devices: 2\n  memory_mib: 64\npolicy:\n"
                   "  link_up_debounce_s: 1\n  nic_fault_hold_s: 2\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {{"RASD_FAKE_CUDA_DEVICES", "2"}}, &why)) << why;
  rasd.AppendKmsg(
      "3,1,1000,-;nvidia-nvswitch3: SXid (PCI:0000:87:00.0): 24007, Fatal, Link 44 sourcetrack "
      "TCEN0 crumbstore ECC DBE Error\n");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return DeviceOf(rasd, 0)["state"] == "degraded" && DeviceOf(rasd, 1)["state"] == "degraded";
      },
      5s))
      << Devices(rasd).dump(2) << rasd.Stderr();
  EXPECT_NE(DeviceOf(rasd, 0)["reason"].get<std::string>().find("nvswitch"), std::string::npos)
      << DeviceOf(rasd, 0).dump();
  for (int sim : {2, 3}) EXPECT_EQ(DeviceOf(rasd, sim)["state"], "healthy") << sim;
  auto actions = rasd.RasctlJson({"actions"})["actions"];
  for (const auto& action : actions) EXPECT_NE(action["action"], "drain-node") << actions.dump(2);
  // Back once the switch has been quiet for the hold and the debounce.
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 0)["state"] == "healthy"; }, 15s))
      << rasd.Stderr();

  rasd.AppendKmsg(
      "3,2,9000,-;NVRM: Xid (PCI:0000:d2:00): 119, pid=2201, name=python3, Timeout after 6s of "
      "waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL).\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "isolated"; }, 5s))
      << Devices(rasd).dump(2) << rasd.Stderr();
  EXPECT_EQ(DeviceOf(rasd, 0)["state"], "healthy");
}

TEST(CudaBackendTest, AnUnavailableBackendIsLoggedAndRasdServesWithout) {
  RasdInstance rasd;
  rasd.WriteConfig(
      "runtime:\n  driver: [cuda, ascend]\n  cuda_library: librasd-no-cuda.so.1\n"
      "  ascend_library: librasd-no-acl.so\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_TRUE(Devices(rasd).empty());
  EXPECT_EQ(rasd.RasctlJson({"status"})["devices"]["driver"], "none");
  EXPECT_NE(rasd.Stderr().find("the cuda backend is not available: cannot load "
                               "librasd-no-cuda.so.1"),
            std::string::npos)
      << rasd.Stderr();
  EXPECT_NE(rasd.Stderr().find("the ascend backend is not available"), std::string::npos);
  EXPECT_NE(rasd.Stderr().find("serving host errors only"), std::string::npos);
  // Host errors are still handled.
  rasd.AppendKmsg(
      "3,101,5000000,-;EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 "
      "(channel:2 slot:0 page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM "
      "err_code:0001:0092 socket:0 ha:0)\n");
  ASSERT_TRUE(WaitUntil([&] { return !rasd.RasctlJson({"events"})["events"].empty(); }, 5s))
      << rasd.Stderr();
}

}  // namespace
}  // namespace rasd::testing
