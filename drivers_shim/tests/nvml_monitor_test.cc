// The NVML monitor against tests/fake_nvml.cc, a library with NVML's entry
// points whose GPUs and errors come from a script file.

#include "rasd/drivers_shim/nvml_monitor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;

class NvmlMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = std::filesystem::temp_directory_path() /
              ("rasd-nvml-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::ofstream(script_, std::ios::trunc).flush();
    ::setenv("RASD_FAKE_NVML_SCRIPT", script_.c_str(), 1);
    ::setenv("RASD_FAKE_NVML_GPUS", "0000:c1:00.0,0000:C2:00.0", 1);
    ::unsetenv("RASD_FAKE_NVML_INIT");
  }
  void TearDown() override {
    monitor_.reset();
    std::filesystem::remove(script_);
  }

  void Script(const std::string& line) {
    std::ofstream out(script_, std::ios::app);
    out << line << '\n';
  }

  Status Start(std::chrono::milliseconds poll = 20ms, std::chrono::milliseconds stop_wait = 2s) {
    auto monitor = NvmlMonitor::Start({.library = RASD_FAKE_NVML_PATH,
                                       .counter_poll = poll,
                                       .event_wait = 20ms,
                                       .stop_wait = stop_wait},
                                      [this](const DriverErrorEvent& event) {
                                        std::lock_guard lock(mutex_);
                                        reports_.push_back(event);
                                        arrived_.notify_all();
                                      });
    if (!monitor) return Fail(monitor.error());
    monitor_ = std::move(*monitor);
    return {};
  }

  // Waits for the `n`th report (1-based) and returns it.
  DriverErrorEvent Nth(std::size_t n) {
    std::unique_lock lock(mutex_);
    const bool arrived = arrived_.wait_for(lock, 5s, [&] { return reports_.size() >= n; });
    EXPECT_TRUE(arrived) << "only " << reports_.size() << " report(s), waited for " << n;
    return arrived ? reports_[n - 1] : DriverErrorEvent{};
  }
  std::size_t Count() {
    std::lock_guard lock(mutex_);
    return reports_.size();
  }
  // The calls running on one GPU. Each GPU has a poller of its own, so a
  // snapshot may also hold another GPU's call caught mid-poll.
  std::vector<ProbeCalls::Call> CallsOn(std::string_view device) {
    std::vector<ProbeCalls::Call> on_device;
    for (auto& call : monitor_->RunningCalls())
      if (call.device == device) on_device.push_back(std::move(call));
    return on_device;
  }

  std::filesystem::path script_;
  std::unique_ptr<NvmlMonitor> monitor_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<DriverErrorEvent> reports_;
};

TEST_F(NvmlMonitorTest, MissingLibraryIsUnavailable) {
  auto monitor = NvmlMonitor::Start({.library = "libnvidia-ml-rasd-missing.so.1"}, nullptr);
  ASSERT_FALSE(monitor);
  EXPECT_EQ(monitor.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(monitor.error().message.find("libnvidia-ml-rasd-missing.so.1"), std::string::npos);
}

TEST_F(NvmlMonitorTest, ALibraryWithoutNvmlsSymbolsIsUnavailable) {
  auto monitor = NvmlMonitor::Start({.library = "libm.so.6"}, nullptr);
  ASSERT_FALSE(monitor);
  EXPECT_EQ(monitor.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(monitor.error().message.find("nvmlInit_v2"), std::string::npos)
      << monitor.error().message;
}

TEST_F(NvmlMonitorTest, NoDriverIsUnavailableWithNvmlsReason) {
  ::setenv("RASD_FAKE_NVML_INIT", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  auto started = Start();
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(started.error().message.find("Driver Not Loaded (9)"), std::string::npos)
      << started.error().message;
}

TEST_F(NvmlMonitorTest, NamesGpusByTheKernelsPciAddressForm) {
  Script("noevents 1");
  ASSERT_TRUE(Start());
  const auto& gpus = monitor_->Gpus();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].pci_bdf, "0000:c1:00.0");  // NVML's "00000000:c1:00.0"
  EXPECT_EQ(gpus[1].pci_bdf, "0000:c2:00.0");
  EXPECT_EQ(gpus[0].name, "Fake NVIDIA GPU");
  EXPECT_EQ(gpus[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(gpus[0].event_types, 0x2u | 0x8u);  // Xid, DBE; not SBE (the counter), not P-state
  EXPECT_EQ(gpus[1].event_types, 0u);
}

TEST_F(NvmlMonitorTest, XidAndEccEventsBecomeReportsNamingTheGpuByPciAddress) {
  ASSERT_TRUE(Start(/*poll=*/10s));
  Script("xid 1 79");
  const DriverErrorEvent xid = Nth(1);
  EXPECT_EQ(xid.kind, DriverErrorKind::kVendorCode);
  EXPECT_EQ(xid.code_space, VendorCodeSpace::kNvidiaXid);
  EXPECT_EQ(xid.vendor_code, 79);
  EXPECT_EQ(xid.device, -1);
  EXPECT_EQ(xid.pci_bdf, "0000:c2:00.0");
  EXPECT_NE(xid.message.find("Xid 79"), std::string::npos);

  Script("sbe 0");  // not registered: the corrected counter reports these
  Script("dbe 0");
  const DriverErrorEvent dbe = Nth(2);
  EXPECT_EQ(dbe.kind, DriverErrorKind::kVendorCode);
  EXPECT_EQ(dbe.vendor_code, 48);
  EXPECT_EQ(dbe.pci_bdf, "0000:c1:00.0");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(monitor_->Reports(), 2u);
}

// A GPU flooding one Xid (20,000 events at once): its first is reported at
// once, the rest as one report a window with their exact count; the other
// GPU's counters are still read and reported.
TEST_F(NvmlMonitorTest, AFloodOfOneXidIsOneReportAWindowWithItsExactCountAndOtherGpusArePolled) {
  ASSERT_TRUE(Start(/*poll=*/20ms));
  Script("ecc 0 100 0");  // the baseline
  std::this_thread::sleep_for(100ms);
  Script("xids 1 92 20000");
  Script("ecc 0 105 0");
  std::uint64_t flooded = 0;
  std::size_t flood_reports = 0;
  bool other_gpu_polled = false;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline && (flooded < 20000 || !other_gpu_polled)) {
    std::this_thread::sleep_for(50ms);
    std::lock_guard lock(mutex_);
    flooded = 0;
    flood_reports = 0;
    for (const auto& report : reports_) {
      if (report.vendor_code == 92 && report.pci_bdf == "0000:c2:00.0") {
        flooded += std::max<std::uint64_t>(report.count, 1);
        ++flood_reports;
      }
      if (report.kind == DriverErrorKind::kCorrectedEcc && report.pci_bdf == "0000:c1:00.0" &&
          report.count == 5)
        other_gpu_polled = true;
    }
  }
  EXPECT_EQ(flooded, 20000u) << "every event counted";
  EXPECT_LE(flood_reports, 12u) << "the first, then one a second at most";
  EXPECT_TRUE(other_gpu_polled);
}

// Whether `condition` holds within `timeout`, looking every 10 ms.
bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// A counter call that does not return on GPU 1 holds GPU 1's poller alone:
// GPU 0's counters are still read on time.
TEST_F(NvmlMonitorTest, ACallStuckOnOneGpuLeavesTheOthersPolled) {
  ASSERT_TRUE(Start(/*poll=*/20ms, /*stop_wait=*/200ms));
  Script("block 1 nvmlDeviceGetTotalEccErrors");
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& call : monitor_->RunningCalls())
          if (call.device == "0000:c2:00.0" && call.running > 100ms) return true;
        return false;
      },
      5s));
  Script("ecc 0 7 0");
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::lock_guard lock(mutex_);
        return std::any_of(reports_.begin(), reports_.end(), [](const DriverErrorEvent& report) {
          return report.kind == DriverErrorKind::kCorrectedEcc &&
                 report.pci_bdf == "0000:c1:00.0" && report.count == 7;
        });
      },
      2s))
      << "GPU 0's counters were not read while GPU 1's call was stuck";
  Script("unblock 1");
}

TEST_F(NvmlMonitorTest, CounterIncreasesAreReportedAndTheFirstReadingIsTheBaseline) {
  // Counts from before rasd started are not news.
  Script("ecc 0 1000 3");
  Script("retire 0 sbe 0x1000");
  Script("replay 0 7");
  Script("noevents 1");
  ASSERT_TRUE(Start());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Count(), 0u);

  Script("ecc 0 1005 4");  // GPU 0 has DBE events: the uncorrected count is theirs to report
  const DriverErrorEvent corrected = Nth(1);
  EXPECT_EQ(corrected.kind, DriverErrorKind::kCorrectedEcc);
  EXPECT_EQ(corrected.count, 5u);
  EXPECT_EQ(corrected.pci_bdf, "0000:c1:00.0");

  Script("ecc 1 0 2");  // GPU 1 has no events: the counter is the only report
  const DriverErrorEvent uncorrected = Nth(2);
  EXPECT_EQ(uncorrected.kind, DriverErrorKind::kVendorCode);
  EXPECT_EQ(uncorrected.vendor_code, 48);
  EXPECT_EQ(uncorrected.count, 2u);
  EXPECT_EQ(uncorrected.pci_bdf, "0000:c2:00.0");

  Script("retire 0 dbe 0x2000");
  const DriverErrorEvent retired = Nth(3);
  EXPECT_EQ(retired.vendor_code, 63);
  EXPECT_NE(retired.message.find("0x2000"), std::string::npos);
  EXPECT_FALSE(retired.address) << "a framebuffer page is not a device virtual address";

  Script("remap 1 2 1 1 0");
  const DriverErrorEvent remapped = Nth(4);
  EXPECT_EQ(remapped.vendor_code, 63);
  EXPECT_EQ(remapped.count, 3u);
  EXPECT_NE(remapped.message.find("reset is pending"), std::string::npos);
  Script("remap 1 2 1 1 1");
  const DriverErrorEvent failed = Nth(5);
  EXPECT_EQ(failed.vendor_code, 64);

  Script("replay 0 10");
  const DriverErrorEvent replays = Nth(6);
  EXPECT_EQ(replays.code_space, VendorCodeSpace::kNone);
  EXPECT_EQ(replays.count, 3u);

  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Count(), 6u) << "an unchanged counter is reported once";
}

// The compute processes of one GPU, for kill-consumer's evidence: by PCI
// address in either case, more than the first buffer holds, none, and an
// address no GPU has.
TEST_F(NvmlMonitorTest, ListsTheComputeProcessesOfTheGpuAtAnAddress) {
  ASSERT_TRUE(Start(/*poll=*/10s));
  Script("procs 1 4242 17");
  auto listed = monitor_->ComputeProcesses("0000:c2:00.0");
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  EXPECT_EQ(*listed, (std::vector<std::int64_t>{17, 4242}));
  auto none = monitor_->ComputeProcesses("0000:C1:00.0");
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_TRUE(none->empty());

  std::string many = "procs 0";
  for (int pid = 1000; pid < 1100; ++pid) {
    many += ' ';
    many += std::to_string(pid);  // not " " + ...: GCC 12's -Wrestrict false positive
  }
  Script(many);
  auto hundred = monitor_->ComputeProcesses("0000:c1:00.0");
  ASSERT_TRUE(hundred.has_value()) << hundred.error().message;
  EXPECT_EQ(hundred->size(), 100U) << "a list longer than the first buffer is read whole";

  auto elsewhere = monitor_->ComputeProcesses("0000:99:00.0");
  ASSERT_FALSE(elsewhere.has_value());
  EXPECT_EQ(elsewhere.error().code, ErrorCode::kNotFound);
}

// The driver's recovery verdict is Xid 154's evidence: reported when it
// becomes an action (at the first poll too: a pending action is news) and
// when it changes, never while it stays.
TEST_F(NvmlMonitorTest, TheRecoveryActionFieldIsReportedAsXid154WithTheAction) {
  Script("recovery 1 1");
  ASSERT_TRUE(Start());
  const DriverErrorEvent reset = Nth(1);
  EXPECT_EQ(reset.kind, DriverErrorKind::kVendorCode);
  EXPECT_EQ(reset.code_space, VendorCodeSpace::kNvidiaXid);
  EXPECT_EQ(reset.vendor_code, 154);
  EXPECT_EQ(reset.vendor_action, 1);
  EXPECT_EQ(reset.pci_bdf, "0000:c2:00.0");
  std::this_thread::sleep_for(100ms);  // several polls of the same action
  EXPECT_EQ(Count(), 1u) << "an action that stays is reported once";
  Script("recovery 1 0");
  Script("ecc 0 1 0");  // a fence: polled after the clear
  EXPECT_EQ(Nth(2).kind, DriverErrorKind::kCorrectedEcc);
  Script("recovery 1 2");
  const DriverErrorEvent reboot = Nth(3);
  EXPECT_EQ(reboot.vendor_action, 2);
  EXPECT_EQ(Count(), 3u);
}

// The caller (rasd's loop) waits query_wait at most; the call goes on on a
// thread of its own, and the GPU has one such thread at a time.
TEST_F(NvmlMonitorTest, AProcessListingThatDoesNotReturnTimesOutAndHoldsOneThread) {
  auto monitor = NvmlMonitor::Start({.library = RASD_FAKE_NVML_PATH,
                                     .counter_poll = 10s,
                                     .event_wait = 20ms,
                                     .query_wait = 100ms},
                                    nullptr);
  ASSERT_TRUE(monitor.has_value()) << monitor.error().message;
  monitor_ = std::move(*monitor);
  Script("procs 1 4242");
  Script("block 1 nvmlDeviceGetComputeRunningProcesses_v2");
  const auto begin = std::chrono::steady_clock::now();
  auto stuck = monitor_->ComputeProcesses("0000:c2:00.0");
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s) << "query_wait, not the call";
  ASSERT_FALSE(stuck.has_value());
  EXPECT_EQ(stuck.error().code, ErrorCode::kTimeout);
  EXPECT_NE(stuck.error().message.find("0000:c2:00.0"), std::string::npos) << stuck.error().message;
  ASSERT_EQ(CallsOn("0000:c2:00.0").size(), 1u) << "the call goes on, seen by the probe deadline";

  auto again = monitor_->ComputeProcesses("0000:c2:00.0");
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("earlier"), std::string::npos) << again.error().message;
  EXPECT_EQ(CallsOn("0000:c2:00.0").size(), 1u) << "no second thread for the same GPU";
  auto other = monitor_->ComputeProcesses("0000:c1:00.0");
  EXPECT_TRUE(other.has_value()) << "the other GPU answers";

  Script("unblock 1");
  std::optional<std::vector<std::int64_t>> listed;
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!listed && std::chrono::steady_clock::now() < give_up) {
    if (auto answer = monitor_->ComputeProcesses("0000:c2:00.0")) listed = *answer;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(listed.has_value()) << "answers again once the call returned";
  EXPECT_EQ(*listed, (std::vector<std::int64_t>{4242}));
}

// A GPU whose opening does not return is left out past start_wait, its
// call seen under its NVML index; the other GPU is watched, and a start
// never waits for the stuck call.
TEST_F(NvmlMonitorTest, AGpuWhoseOpeningDoesNotReturnIsLeftOutAndTheOthersAreWatched) {
  Script("block 1 nvmlDeviceGetHandleByIndex_v2");
  const auto begin = std::chrono::steady_clock::now();
  auto monitor = NvmlMonitor::Start({.library = RASD_FAKE_NVML_PATH,
                                     .counter_poll = 20ms,
                                     .event_wait = 20ms,
                                     .stop_wait = 200ms,
                                     .start_wait = 200ms},
                                    [this](const DriverErrorEvent& event) {
                                      std::lock_guard lock(mutex_);
                                      reports_.push_back(event);
                                      arrived_.notify_all();
                                    });
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 2s) << "start_wait, not the call";
  ASSERT_TRUE(monitor.has_value()) << monitor.error().message;
  monitor_ = std::move(*monitor);
  ASSERT_EQ(monitor_->Gpus().size(), 1u);
  EXPECT_EQ(monitor_->Gpus()[0].pci_bdf, "0000:c1:00.0");
  EXPECT_EQ(monitor_->Unopened(), (std::vector<unsigned>{1}));
  const auto stuck = CallsOn("GPU 1");
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0].function, "nvmlDeviceGetHandleByIndex_v2");

  Script("ecc 0 4 0");
  const DriverErrorEvent polled = Nth(1);
  EXPECT_EQ(polled.pci_bdf, "0000:c1:00.0") << "GPU 0 is polled";
  EXPECT_EQ(polled.count, 4u);

  // The opening returns: the GPU stays out (until a restart), and nothing
  // of it is reported.
  Script("unblock 1");
  EXPECT_TRUE(WaitUntil([&] { return CallsOn("GPU 1").empty(); }, 2s));
  Script("ecc 1 9 0");
  Script("ecc 0 5 0");
  EXPECT_EQ(Nth(2).pci_bdf, "0000:c1:00.0");
  EXPECT_EQ(monitor_->Gpus().size(), 1u);
  monitor_.reset();
  std::lock_guard lock(mutex_);
  for (const auto& report : reports_) EXPECT_NE(report.pci_bdf, "0000:c2:00.0");
}

// A polled call that does not return (a wedged driver) is seen running,
// with its GPU and NVML function, for as long as it is stuck; once it
// returns it is gone, and polling goes on.
TEST_F(NvmlMonitorTest, ACallThatDoesNotReturnIsSeenWithItsGpuAndFunctionUntilItReturns) {
  ASSERT_TRUE(Start());
  for (const auto& call : monitor_->RunningCalls()) EXPECT_LT(call.running, 1s);
  Script("block 1 nvmlDeviceGetTotalEccErrors");
  auto stuck = [&](std::chrono::milliseconds at_least) {
    const auto calls = CallsOn("0000:c2:00.0");
    return !calls.empty() && calls[0].running >= at_least;
  };
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!stuck(300ms) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(10ms);
  const auto calls = CallsOn("0000:c2:00.0");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].function, "nvmlDeviceGetTotalEccErrors");
  EXPECT_GE(calls[0].running, 300ms);

  Script("unblock 1");
  Script("ecc 0 10 0");
  EXPECT_EQ(Nth(1).kind, DriverErrorKind::kCorrectedEcc) << "polling goes on";
  // GPU 1's poller returns once the stand-in reads the unblock (GPU 0's
  // poller may read it, and report, first).
  EXPECT_TRUE(WaitUntil([&] { return !stuck(0ms); }, 2s));
}

// A stop does not wait for a call that does not return: past stop_wait the
// thread is left behind, and nothing it finds later reaches the listener.
TEST_F(NvmlMonitorTest, AStopLeavesACallThatDoesNotReturnBehindAndHearsNothingAfter) {
  Script("ecc 0 5 0");
  ASSERT_TRUE(Start(/*poll=*/20ms, /*stop_wait=*/200ms));
  Script("block 1 nvmlDeviceGetRemappedRows");
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < give_up) {
    const auto calls = CallsOn("0000:c2:00.0");
    if (!calls.empty() && calls[0].running >= 100ms) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(CallsOn("0000:c2:00.0").empty());
  const std::size_t before = Count();
  const auto begin = std::chrono::steady_clock::now();
  monitor_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s) << "200 ms, not the stuck call";
  Script("ecc 0 50 0");  // news the thread left behind would find
  Script("unblock 1");
  std::this_thread::sleep_for(300ms);  // the call returns; the thread ends and shuts NVML down
  EXPECT_EQ(Count(), before) << "no report after the stop";
}

TEST_F(NvmlMonitorTest, StopsPromptly) {
  ASSERT_TRUE(Start(/*poll=*/10s));
  const auto begin = std::chrono::steady_clock::now();
  monitor_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s);
}

}  // namespace
}  // namespace rasd::drivers

namespace rasd::drivers {
namespace {

// NVLinks: state changes are typed link reports, error counters' increases
// kLinkCorrected reports with their count; links the GPU does not have
// (NOT_SUPPORTED below 18, INVALID_ARGUMENT from 18) are never reported.
TEST_F(NvmlMonitorTest, NvlinkStateChangesAndCounterIncreasesAreTypedReports) {
  Script("nvlinks 0 4");
  Script("nvlinkerr 0 2 2 100");  // counts since the driver loaded: the baseline
  ASSERT_TRUE(Start());
  Script("nvlinkerr 0 2 2 105");
  auto report = Nth(1);
  EXPECT_EQ(report.kind, DriverErrorKind::kLinkCorrected);
  EXPECT_EQ(report.pci_bdf, "0000:c1:00.0");
  EXPECT_EQ(report.device, -1);
  EXPECT_EQ(report.count, 5u);
  ASSERT_TRUE(report.link.has_value());
  EXPECT_EQ(*report.link,
            (DeviceLink{.kind = LinkKind::kNvlink, .index = 2, .counter = "crc_flit"}));

  // The counter is reset (driver reload): re-based, not a report. Link 3's
  // down and up mark polls that have seen the reset.
  Script("nvlinkerr 0 2 2 1");
  Script("nvlink 0 3 down");
  report = Nth(2);
  EXPECT_EQ(report.kind, DriverErrorKind::kLinkDown);
  ASSERT_TRUE(report.link.has_value());
  EXPECT_EQ(report.link->index, 3u);
  EXPECT_NE(report.message.find("NVLink 3 down"), std::string::npos) << report.message;
  Script("nvlink 0 3 up");
  report = Nth(3);
  EXPECT_EQ(report.kind, DriverErrorKind::kLinkUp);
  EXPECT_EQ(report.link->index, 3u);
  Script("nvlinkerr 0 2 0 7");  // replay: another counter of the same link
  Script("nvlinkerr 0 2 2 4");
  report = Nth(4);
  EXPECT_EQ(report.kind, DriverErrorKind::kLinkCorrected);
  std::map<std::string, std::uint64_t> counts;
  counts[report.link->counter] = report.count;
  report = Nth(5);
  counts[report.link->counter] = report.count;
  EXPECT_EQ(counts, (std::map<std::string, std::uint64_t>{{"replay", 7}, {"crc_flit", 3}}));
  std::this_thread::sleep_for(100ms);  // several polls: nothing else to report
  EXPECT_EQ(Count(), 5u);
}

// A link inactive when the monitor starts is not reported: NVML reads an
// uncabled NVLink (a PCIe GPU without its bridge) so, and such a GPU must
// stay in its collectives. It is listed as inactive at start, and once it
// comes up it is watched like any other.
TEST_F(NvmlMonitorTest, ALinkInactiveAtStartIsListedNotReportedDown) {
  Script("nvlinks 1 2");
  Script("nvlink 1 1 down");
  ASSERT_TRUE(Start());
  ASSERT_EQ(monitor_->Gpus().size(), 2u);
  EXPECT_EQ(monitor_->Gpus()[1].nvlinks_inactive_at_start, std::vector<unsigned>{1});
  EXPECT_TRUE(monitor_->Gpus()[0].nvlinks_inactive_at_start.empty());
  EXPECT_TRUE(monitor_->PollsNvlinks());
  Script("nvlink 1 1 up");
  auto report = Nth(1);
  EXPECT_EQ(report.kind, DriverErrorKind::kLinkUp);
  EXPECT_EQ(report.pci_bdf, "0000:c2:00.0");
  ASSERT_TRUE(report.link.has_value());
  EXPECT_EQ(report.link->index, 1u);
  EXPECT_EQ(report.link->kind, LinkKind::kNvlink);
  Script("nvlink 1 1 down");
  report = Nth(2);
  EXPECT_EQ(report.kind, DriverErrorKind::kLinkDown);
  EXPECT_EQ(report.link->index, 1u);
}

// An older libnvidia-ml without the NVLink entry points: no NVLink polling,
// everything else as before.
TEST_F(NvmlMonitorTest, ALibraryWithoutNvlinkQueriesStillReportsTheRest) {
  Script("nvlinks 0 2");
  Script("nvlink 0 0 down");
  auto monitor = NvmlMonitor::Start(
      {.library = RASD_FAKE_NVML_NO_NVLINK_PATH, .counter_poll = 20ms, .event_wait = 20ms},
      [this](const DriverErrorEvent& event) {
        std::lock_guard lock(mutex_);
        reports_.push_back(event);
        arrived_.notify_all();
      });
  ASSERT_TRUE(monitor) << monitor.error().message;
  monitor_ = std::move(*monitor);
  Script("ecc 0 3 0");
  const auto report = Nth(1);
  EXPECT_EQ(report.kind, DriverErrorKind::kCorrectedEcc);
  EXPECT_EQ(report.count, 3u);
  EXPECT_FALSE(report.link.has_value());
}

}  // namespace
}  // namespace rasd::drivers
