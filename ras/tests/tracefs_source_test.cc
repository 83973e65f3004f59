// TracefsSource on a fixture tree standing in for tracefs (format files of
// a real 6.18 kernel, a per-CPU pipe that is a plain file of raw pages),
// and, where this machine allows it, on a real private instance of the
// real tracefs with a benign event (ftrace's print, through trace_marker)
// and a SIGBUS this process sends itself: other real RAS events cannot be
// fired on demand.

#include "rasd/ras/tracefs_source.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "trace_pages.h"

namespace rasd::ras {
namespace {

namespace fs = std::filesystem;
using testing::Bytes;
using testing::GhesEvent;
using testing::McEvent;
using testing::Page;

std::string ReadText(const fs::path& path) {
  std::ifstream file(path);
  std::string text;
  std::getline(file, text);
  return text;
}

class TracefsFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("rasd-tracefs-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    tracing_ = root_ / "sys/kernel/tracing";
    fs::create_directories(tracing_ / "instances");
  }
  void TearDown() override { fs::remove_all(root_); }

  // What the kernel shows in a fresh instance, with `pages` waiting on cpu0.
  fs::path MakeInstance(const std::string& name, const std::vector<Bytes>& pages) {
    const fs::path instance = tracing_ / "instances" / name;
    fs::create_directories(instance);
    fs::copy(RASD_TRACEFS_FIXTURES "/events", instance / "events", fs::copy_options::recursive);
    for (const auto& entry : fs::recursive_directory_iterator(instance / "events")) {
      if (entry.path().filename() == "format")
        std::ofstream(entry.path().parent_path() / "enable") << "0\n";
      if (entry.path().filename() == "format")
        std::ofstream(entry.path().parent_path() / "filter") << "none\n";
    }
    std::ofstream(instance / "buffer_percent") << "50\n";
    for (int cpu = 0; cpu < 2; ++cpu) {
      const fs::path dir = instance / "per_cpu" / ("cpu" + std::to_string(cpu));
      fs::create_directories(dir);
      std::ofstream pipe(dir / "trace_pipe_raw", std::ios::binary);
      if (cpu == 0)
        for (const auto& page : pages)
          pipe.write(reinterpret_cast<const char*>(page.data()),
                     static_cast<std::streamsize>(page.size()));
    }
    return instance;
  }

  common::HostEnv Host() const { return common::HostEnv(root_, clock_); }

  std::shared_ptr<common::ManualClock> clock_ = std::make_shared<common::ManualClock>();
  fs::path root_;
  fs::path tracing_;
};

TEST_F(TracefsFixtureTest, EnablesTheEventsThisKernelHasAndDecodesEachCpusPages) {
  const fs::path instance =
      MakeInstance("rasd", {Page({McEvent(2206, 0, 2, 3, 0x4000, "DIMM_A1")}),
                            Page({GhesEvent(2205, 2), McEvent(2206, 1, 1, 0, 0x8000, "DIMM_B1")})});
  auto host = Host();
  auto source = TracefsSource::Open(host, "rasd", TracefsSource::RasEvents());
  ASSERT_TRUE(source.has_value()) << source.error().ToString();
  EXPECT_EQ((*source)->Events(),
            (std::vector<std::string>{
                "ras/mc_event", "ras/arm_event", "ras/non_standard_event", "cxl/cxl_general_media",
                "cxl/cxl_dram", "cxl/cxl_memory_module", "cxl/cxl_poison",
                "cxl/cxl_aer_uncorrectable_error", "cxl/cxl_aer_correctable_error",
                "cxl/cxl_overflow", "devlink/devlink_health_report", "signal/signal_generate",
                "block/block_rq_error", "ras/reri_event"}))
      << "block_rq_complete is left off where block_rq_error carries the failed requests";
  EXPECT_EQ((*source)->Absent(),
            (std::vector<std::string>{"ras/aer_event", "ras/memory_failure_event",
                                      "ras/extlog_mem_event", "mce/mce_record"}))
      << "events without a format are reported, not an error";
  EXPECT_EQ(ReadText(instance / "events/ras/mc_event/enable"), "1");
  EXPECT_EQ(ReadText(instance / "events/signal/signal_generate/filter"), "sig == 7")
      << "every signal of the machine is not rasd's";
  EXPECT_EQ(ReadText(instance / "buffer_percent"), "0") << "poll must wake for one event";
  EXPECT_EQ(ReadText(instance / "events/block/block_rq_complete/enable"), "0")
      << "every completed request of the machine is not rasd's";
  ASSERT_EQ((*source)->CpuCount(), 2u);

  clock_->Advance(std::chrono::seconds(5));
  const auto events = (*source)->ReadEvents(0);
  ASSERT_EQ(events.size(), 3u);
  for (const auto& event : events) EXPECT_EQ(event.time, clock_->Wall()) << "the host's clock";
  EXPECT_EQ(events[0].origin, "edac");
  EXPECT_EQ(events[0].severity, Severity::kCe);
  EXPECT_EQ(events[0].count, 2u);
  EXPECT_EQ(events[0].mc, 3);
  EXPECT_EQ(events[1].origin, "arm");
  EXPECT_EQ(events[1].severity, Severity::kUce);
  EXPECT_EQ(events[2].address, Address::Of(0x8000));
  EXPECT_TRUE((*source)->ReadEvents(1).empty());
  EXPECT_EQ((*source)->GetStats().pages, 2u);

  source->reset();
  EXPECT_EQ(ReadText(instance / "events/ras/mc_event/enable"), "0")
      << "the events are switched off again on exit";
}

// Kernels before 5.18 have no block_rq_error: the completions are read,
// filtered in the kernel to the failed ones.
TEST_F(TracefsFixtureTest, AKernelWithoutBlockRqErrorGivesTheFailedCompletionsOnly) {
  const fs::path instance = MakeInstance("rasd", {});
  fs::remove_all(instance / "events/block/block_rq_error");
  auto host = Host();
  auto source = TracefsSource::Open(host, "rasd", TracefsSource::RasEvents());
  ASSERT_TRUE(source.has_value()) << source.error().ToString();
  const auto& events = (*source)->Events();
  EXPECT_NE(std::find(events.begin(), events.end(), "block/block_rq_complete"), events.end());
  EXPECT_EQ(ReadText(instance / "events/block/block_rq_complete/enable"), "1");
  EXPECT_EQ(ReadText(instance / "events/block/block_rq_complete/filter"), "error != 0");
  const auto& absent = (*source)->Absent();
  EXPECT_NE(std::find(absent.begin(), absent.end(), "block/block_rq_error"), absent.end())
      << "the newer event is reported absent, not an error";
}

TEST_F(TracefsFixtureTest, ASecondOwnerIsRefusedAndLeavesTheFirstOnesInstanceAlone) {
  const fs::path instance = MakeInstance("rasd", {Page({McEvent(2206, 0, 2, 3, 0x4000, "DIMM_A1")})});
  auto host = Host();
  auto first = TracefsSource::Open(host, "rasd", TracefsSource::RasEvents());
  ASSERT_TRUE(first.has_value()) << first.error().ToString();

  auto second = TracefsSource::Open(host, "rasd", TracefsSource::RasEvents());
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second.error().message.find("in use by another rasd"), std::string::npos)
      << second.error().message;
  EXPECT_TRUE(fs::exists(instance)) << "the refused one removed nothing";
  EXPECT_EQ(ReadText(instance / "events/ras/mc_event/enable"), "1")
      << "and switched nothing off";
  EXPECT_EQ((*first)->ReadEvents(0).size(), 1u) << "the owner reads on";

  first->reset();  // (the fixture's files keep its directory from being removed)
  auto after = TracefsSource::Open(host, "rasd", TracefsSource::RasEvents());
  EXPECT_TRUE(after.has_value()) << "the lock went with its owner: "
                                 << (after ? "" : after.error().ToString());
}

TEST_F(TracefsFixtureTest, MissingTracefsOrEventsAreClearErrors) {
  auto host = Host();
  fs::remove_all(tracing_);
  auto none = TracefsSource::Open(host, "rasd", TracefsSource::RasEvents());
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  EXPECT_NE(none.error().message.find("mount -t tracefs"), std::string::npos)
      << none.error().message;

  fs::create_directories(tracing_ / "instances");
  MakeInstance("rasd", {});
  auto missing = TracefsSource::Open(host, "rasd", {"mce/mce_record"});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);

  EXPECT_EQ(TracefsSource::Open(host, "../escape", TracefsSource::RasEvents()).error().code,
            ErrorCode::kInvalidArgument);
}

// The real thing: needs root and tracefs (mounted here if it is not).
class RealTracefsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "creating a tracing instance needs root";
    if (!fs::exists("/sys/kernel/tracing/instances")) {
      if (::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) != 0)
        GTEST_SKIP() << "tracefs is not mounted and cannot be mounted here: "
                     << std::strerror(errno);
      mounted_ = true;
    }
  }
  void TearDown() override {
    if (mounted_) (void)::umount("/sys/kernel/tracing");
  }
  bool mounted_ = false;
};

TEST_F(RealTracefsTest, ReadsRealPagesFromAPrivateInstanceAndRemovesIt) {
  common::HostEnv host("/", std::make_shared<common::SystemClock>());
  const std::string name = "rasd-test-" + std::to_string(::getpid());
  std::vector<std::string> wanted = TracefsSource::RasEvents();
  wanted.push_back("ftrace/print");
  auto source = TracefsSource::Open(host, name, wanted);
  ASSERT_TRUE(source.has_value()) << source.error().ToString();
  const fs::path instance = (*source)->InstanceDir();
  EXPECT_EQ(instance, fs::path("/sys/kernel/tracing/instances") / name);
  EXPECT_EQ(ReadText(instance / "buffer_percent"), "0");
  for (const auto& event : (*source)->Events()) {
    if (event.starts_with("ras/")) {
      EXPECT_EQ(ReadText(instance / "events" / event / "enable"), "1") << event;
    }
  }

  const std::string marker = "rasd tracefs self-test " + std::to_string(::getpid());
  { std::ofstream(instance / "trace_marker") << marker; }
  std::vector<std::string> printed;
  std::vector<pollfd> fds;
  for (std::size_t cpu = 0; cpu < (*source)->CpuCount(); ++cpu)
    fds.push_back({(*source)->CpuFd(cpu), POLLIN, 0});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (printed.empty() && std::chrono::steady_clock::now() < deadline) {
    // The reader wakes for one event only because buffer_percent is 0.
    (void)::poll(fds.data(), fds.size(), 200);
    for (std::size_t cpu = 0; cpu < fds.size(); ++cpu) {
      (*source)->ReadPages(cpu, [&](std::span<const std::uint8_t> page) {
        (*source)->Decoder().ForEachRecord(page, [&](const TraceRecord& record) {
          if (record.System() == "ftrace" && record.Name() == "print")
            printed.push_back(record.Text("buf"));
        });
      });
    }
  }
  ASSERT_EQ(printed.size(), 1u) << "the marker never came out of trace_pipe_raw";
  EXPECT_EQ(printed[0].substr(0, marker.size()), marker);
  EXPECT_GE((*source)->GetStats().pages, 1u);

  source->reset();
  EXPECT_FALSE(fs::exists(instance)) << "the instance is removed on exit";
}

// A SIGBUS with a memory-error code, sent by this process to itself (the
// kernel lets a process give itself any si_code), goes through the real
// kernel's signal_generate tracepoint and the filter rasd sets: the one
// RAS event a test can fire on demand without touching the kernel log or
// poisoning a page.
TEST_F(RealTracefsTest, AMemoryErrorSigbusIsReadFromTheRealKernelAndOtherSignalsAreFiltered) {
  common::HostEnv host("/", std::make_shared<common::SystemClock>());
  const std::string name = "rasd-test-sigbus-" + std::to_string(::getpid());
  auto source = TracefsSource::Open(host, name, {"signal/signal_generate"});
  if (!source && source.error().code == ErrorCode::kNotFound)
    GTEST_SKIP() << "this kernel has no signal:signal_generate: " << source.error().ToString();
  ASSERT_TRUE(source.has_value()) << source.error().ToString();
  ASSERT_EQ((*source)->Events(), std::vector<std::string>{"signal/signal_generate"})
      << "absent: " << ((*source)->Absent().empty() ? "" : (*source)->Absent().front());

  // Blocked, so that the signals wait instead of killing the test; taken
  // back below, so that none is left pending.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGBUS);
  sigaddset(&signals, SIGUSR2);
  sigset_t old_mask;
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &signals, &old_mask), 0);
  auto send = [](int sig, int code) {
    siginfo_t info{};
    info.si_signo = sig;
    info.si_code = code;
    return ::syscall(SYS_rt_tgsigqueueinfo, ::getpid(), ::gettid(), sig, &info);
  };
  EXPECT_EQ(send(SIGUSR2, SI_QUEUE), 0) << std::strerror(errno);
  EXPECT_EQ(send(SIGBUS, BUS_MCEERR_AO), 0) << std::strerror(errno);
  // Traced too, though the first SIGBUS is still pending.
  EXPECT_EQ(send(SIGBUS, BUS_ADRERR), 0) << std::strerror(errno);
  std::vector<RasEvent> events;
  std::vector<pollfd> fds;
  for (std::size_t cpu = 0; cpu < (*source)->CpuCount(); ++cpu)
    fds.push_back({(*source)->CpuFd(cpu), POLLIN, 0});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (events.empty() && std::chrono::steady_clock::now() < deadline) {
    (void)::poll(fds.data(), fds.size(), 200);
    for (std::size_t cpu = 0; cpu < fds.size(); ++cpu) {
      auto read = (*source)->ReadEvents(cpu);
      events.insert(events.end(), read.begin(), read.end());
    }
  }
  const timespec no_wait{};
  while (::sigtimedwait(&signals, nullptr, &no_wait) > 0) {
  }
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr), 0);

  ASSERT_EQ(events.size(), 1u) << "only the memory-error SIGBUS is a RAS event";
  EXPECT_EQ(events[0].origin, "memory_failure");
  EXPECT_EQ(events[0].severity, Severity::kSrao);
  EXPECT_EQ(events[0].pid, ::gettid()) << events[0].summary;
  EXPECT_GE((*source)->GetStats().pages, 1u);
  source->reset();
  EXPECT_FALSE(fs::exists(fs::path("/sys/kernel/tracing/instances") / name));
}

}  // namespace
}  // namespace rasd::ras
