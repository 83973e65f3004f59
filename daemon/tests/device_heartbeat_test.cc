// DeviceHeartbeat on a SimulatedEventLoop over the simulator and the CUDA
// stand-in: a device that stops completing work is reported hung exactly
// once, after `misses` deadlines of simulated time; healthy devices are not;
// a device out of service is not beaten, and back in service it beats again.

#include "device_heartbeat.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/ascend_driver.h"
#include "rasd/drivers_shim/cuda_driver.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/testing/eventually.h"

namespace rasd::daemon {
namespace {

using namespace std::chrono_literals;
using runtime::HealthState;

class HeartbeatTest : public ::testing::Test {
 protected:
  void Use(std::unique_ptr<drivers::Driver> driver,
           DeviceHeartbeat::Options options = {.period = 100ms, .deadline = 200ms, .misses = 2}) {
    auto runtime = runtime::Runtime::Create(std::move(driver), {.pool = {.arena_bytes = 8 << 20}});
    ASSERT_TRUE(runtime.has_value()) << runtime.error().ToString();
    runtime_ = std::move(*runtime);
    runtime_->SubscribeErrors([this](const drivers::DriverErrorEvent& event) {
      if (event.kind != drivers::DriverErrorKind::kHang) return;
      std::lock_guard lock(mutex_);
      hangs_.push_back({event.device, loop_.Now()});
    });
    heartbeat_ = std::make_unique<DeviceHeartbeat>(loop_, *runtime_, options);
    heartbeat_->Start();
  }
  void TearDown() override {
    heartbeat_.reset();
    runtime_.reset();
  }

  // Simulated time in steps of 10 ms. Before each step every device that
  // answers (all but those in `unanswering_`) has finished the beat it was
  // given, however long its thread takes in real time: a loaded machine
  // slows the test, never turns a healthy device into a missed deadline.
  void Run(std::chrono::milliseconds simulated, std::chrono::milliseconds step = 10ms) {
    for (auto t = 0ms; t < simulated; t += step) {
      ASSERT_TRUE(rasd::testing::Eventually(
          [&] {
            for (int device = 0; device < static_cast<int>(runtime_->DeviceCount()); ++device) {
              if (!unanswering_.contains(device) && !heartbeat_->BeatSettled(device)) return false;
            }
            return true;
          },
          10s))
          << "a device that answers never finished its beat";
      loop_.AdvanceBy(step);
      loop_.RunUntilIdle();
    }
  }
  std::vector<std::pair<int, std::chrono::nanoseconds>> Hangs() {
    std::lock_guard lock(mutex_);
    return hangs_;
  }
  std::uint64_t Beats(int device) {
    return heartbeat_->Stats()[static_cast<std::size_t>(device)].beats;
  }

  common::SimulatedEventLoop loop_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<DeviceHeartbeat> heartbeat_;
  std::mutex mutex_;
  std::vector<std::pair<int, std::chrono::nanoseconds>> hangs_;
  std::set<int> unanswering_;  // hung or held by the test
};

TEST_F(HeartbeatTest, PeriodZeroArmsNothingAndAReloadToAPeriodStartsTheBeats) {
  auto driver =
      drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(driver.has_value());
  Use(std::move(*driver), {.period = 0ms, .deadline = 200ms, .misses = 2});
  EXPECT_EQ(loop_.ArmedTimers(), 0u) << "off: not even a tick to find nothing to do";
  loop_.AdvanceBy(1h);
  EXPECT_EQ(Beats(0), 0u);
  EXPECT_EQ(Beats(1), 0u);

  heartbeat_->SetOptions({.period = 100ms, .deadline = 200ms, .misses = 2});
  EXPECT_EQ(loop_.ArmedTimers(), 1u);
  Run(500ms);
  EXPECT_GE(Beats(0), 3u);
  EXPECT_TRUE(Hangs().empty());
}

TEST_F(HeartbeatTest, AHungSimulatedDeviceIsReportedOnceAfterTwoDeadlines) {
  auto driver = drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(driver.has_value());
  auto* sim = driver->get();
  Use(std::move(*driver));
  Run(500ms);
  ASSERT_GE(Beats(0), 3U);
  ASSERT_GE(Beats(1), 3U);
  EXPECT_TRUE(Hangs().empty());

  const auto injected = loop_.Now();
  ASSERT_TRUE(sim->InjectHang(1).has_value());
  unanswering_.insert(1);
  Run(2000ms);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1U) << "one fault, one report";
  EXPECT_EQ(hangs[0].first, 1);
  // The beat launched after the hang (within a period) is overdue after two
  // deadlines: found between 400 and 400 + 100 + a tick ms after it.
  const auto latency = hangs[0].second - injected;
  EXPECT_GE(latency, 400ms);
  EXPECT_LE(latency, 530ms);
  EXPECT_GE(Beats(0), 20U) << "the healthy device kept beating";
  EXPECT_EQ(heartbeat_->Stats()[1].hangs, 1U);

  // Isolated: not beaten, its stuck stream dropped. Reset and back in
  // service: it beats again and no second hang is reported.
  (*runtime_->GetDevice(1))->SetHealth(HealthState::kIsolated);
  Run(300ms);
  ASSERT_TRUE(runtime_->Driver().ResetDevice(1).has_value());
  unanswering_.erase(1);
  (*runtime_->GetDevice(1))->SetHealth(HealthState::kHealthy);
  const auto before = Beats(1);
  Run(500ms);
  EXPECT_GE(Beats(1), before + 3);
  EXPECT_EQ(Hangs().size(), 1U);
}

// About the defaults' ratios (deadline 0.8 of the period, 2 misses) on a
// device a job uses: wherever in the period the hang lands, it is reported
// within a period and two deadlines, on the tick of the second deadline
// rather than at the tick period after it (83 ms is no multiple of the
// 10 ms tick). Time moves a millisecond at a time so that a late tick shows.
TEST_F(HeartbeatTest, AHungBusyDeviceIsReportedWithinAPeriodAndTwoDeadlinesAtAnyPhase) {
  auto driver =
      drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(driver.has_value());
  auto* sim = driver->get();
  Use(std::move(*driver), {.period = 100ms, .deadline = 83ms, .misses = 2, .idle_period = 60s});
  auto stream = runtime_->CreateStream(1, {.owner = "job-3"});
  ASSERT_TRUE(stream.has_value()) << stream.error().ToString();
  Run(300ms);
  // A beat is seen finished at the tick after its launch; the hang lands
  // that long after it, and later: the worst is just after the next launch
  // (93 ms: the next beat is a whole period away).
  for (const auto after_beat : {0ms, 31ms, 62ms, 93ms}) {
    SCOPED_TRACE(::testing::Message() << "hang " << after_beat.count() << " ms after a beat");
    const auto beats = Beats(1);
    for (int step = 0; step < 200 && Beats(1) == beats; ++step) Run(1ms, 1ms);
    ASSERT_GT(Beats(1), beats);
    Run(after_beat, 1ms);
    const auto hangs_before = Hangs().size();
    const auto injected = loop_.Now();
    ASSERT_TRUE(sim->InjectHang(1).has_value());
    unanswering_.insert(1);
    Run(400ms, 1ms);
    const auto hangs = Hangs();
    ASSERT_EQ(hangs.size(), hangs_before + 1);
    const auto latency = hangs.back().second - injected;
    EXPECT_GE(latency, 166ms) << "not before two deadlines";
    EXPECT_LE(latency, 266ms) << "a period and two deadlines";

    (*runtime_->GetDevice(1))->SetHealth(HealthState::kIsolated);
    Run(20ms);
    ASSERT_TRUE(runtime_->Driver().ResetDevice(1).has_value());
    unanswering_.erase(1);
    (*runtime_->GetDevice(1))->SetHealth(HealthState::kHealthy);
    Run(250ms);
  }
}

TEST_F(HeartbeatTest, JobsGivingUpOnTheDeviceMakeOneMissedDeadlineAHang) {
  auto driver = drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(driver.has_value());
  auto* sim = driver->get();
  Use(std::move(*driver));
  Run(300ms);
  // Evidence alone is no hang: a job gave a kernel too short a deadline on
  // a device that keeps beating.
  (*runtime_->GetDevice(0))->NoteOpTimeout();
  Run(600ms);
  EXPECT_TRUE(Hangs().empty());
  EXPECT_EQ(heartbeat_->Stats()[0].op_timeouts, 1U);

  const auto injected = loop_.Now();
  ASSERT_TRUE(sim->InjectHang(1).has_value());
  unanswering_.insert(1);
  Run(150ms);
  (*runtime_->GetDevice(1))->NoteOpTimeout();  // a job abandoned its batch there
  Run(1000ms);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1U);
  EXPECT_EQ(hangs[0].first, 1);
  // One deadline (200 ms) after the beat that stuck, not two.
  const auto latency = hangs[0].second - injected;
  EXPECT_GE(latency, 200ms);
  EXPECT_LE(latency, 330ms);
  EXPECT_EQ(heartbeat_->Stats()[1].hangs, 1U);
}

// An idle node sleeps: a device no job uses is beaten every idle period,
// and between beats nothing but the next one is armed. A job's first
// stream on an idle device brings its beat forward at once, so that a hang
// under the new work is found within the busy period's deadlines.
TEST_F(HeartbeatTest, IdleDevicesAreBeatenRarelyAndAJobsFirstStreamBringsTheBeatForward) {
  auto driver =
      drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(driver.has_value());
  auto* sim = driver->get();
  Use(std::move(*driver), {.period = 100ms, .deadline = 200ms, .misses = 2, .idle_period = 1000ms});
  Run(3500ms);
  for (int device : {0, 1}) {
    EXPECT_GE(Beats(device), 3U) << device;
    EXPECT_LE(Beats(device), 4U) << device << ": an idle device every second, not every 100 ms";
  }
  EXPECT_EQ(loop_.ArmedTimers(), 1u) << "one timer, for the next beat";

  // A job's stream on device 1, half-way between its idle beats.
  const auto before = Beats(1);
  auto stream = runtime_->CreateStream(1, {.owner = "job-7"});
  ASSERT_TRUE(stream.has_value()) << stream.error().ToString();
  Run(30ms);
  EXPECT_EQ(Beats(1), before + 1) << "beaten at once, not at the next idle beat";
  Run(1000ms);
  EXPECT_GE(Beats(1), before + 9) << "busy: every 100 ms";
  EXPECT_LE(Beats(0), 6U) << "device 0 still idle";

  const auto injected = loop_.Now();
  ASSERT_TRUE(sim->InjectHang(1).has_value());
  unanswering_.insert(1);
  Run(800ms);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1U);
  EXPECT_EQ(hangs[0].first, 1);
  EXPECT_LE(hangs[0].second - injected, 520ms) << "two deadlines after the beat that stuck";

  // The job gone: the device is beaten at the idle period again (a stream
  // dropped with no job on the device).
  stream->reset();
  EXPECT_TRUE(runtime_->JobsOn(1).empty());
}

// A job's stream that opens just after an idle beat gets the next beat a
// busy period after that one, not an idle period later; a device an
// attached process uses (the busy probe) is beaten at the busy period.
TEST_F(HeartbeatTest, WorkJustAfterAnIdleBeatAndAttachedWorkloadsAreBeatenAtTheBusyPeriod) {
  auto driver =
      drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(driver.has_value());
  Use(std::move(*driver), {.period = 100ms, .deadline = 200ms, .misses = 2, .idle_period = 10s});
  Run(60ms);  // the first beats, launched at the first tick and seen finished at the next
  const auto first = Beats(0);
  ASSERT_EQ(first, 1U);
  auto stream = runtime_->CreateStream(0, {.owner = "job-9"});
  ASSERT_TRUE(stream.has_value());
  Run(150ms);
  EXPECT_EQ(Beats(0), first + 1) << "a busy period after the idle beat";
  EXPECT_EQ(Beats(1), 1U) << "device 1 still idle";

  bool attached = false;
  heartbeat_->SetBusyProbe([&](int device) { return attached && device == 1; });
  Run(10s);
  const auto idle = Beats(1);
  EXPECT_LE(idle, 2U) << "every 10 s while nothing is attached";
  attached = true;
  Run(10s + 500ms);
  EXPECT_GE(Beats(1), idle + 5) << "attached: every 100 ms from its next beat";
}

// Ascend's heartbeat is the "empty" kernel through the stand-in operator
// library (aclnnInplaceZero on the stream), which a held NPU never finishes.
TEST_F(HeartbeatTest, AHeldNpuOfTheAscendStandInIsReportedHung) {
  auto driver = drivers::CreateAscendDriver(
      {.acl_library = RASD_FAKE_ASCENDCL_PATH, .dcmi_library = RASD_FAKE_DCMI_PATH});
  ASSERT_TRUE(driver.has_value()) << driver.error().ToString();
  void* fake = ::dlopen(RASD_FAKE_ASCENDCL_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake, nullptr);
  auto hold = reinterpret_cast<void (*)(int, int)>(::dlsym(fake, "fake_acl_hold"));
  ASSERT_NE(hold, nullptr);
  Use(std::move(*driver));
  Run(500ms);
  ASSERT_GE(Beats(0), 3U) << "kernel beats finish on a healthy NPU";
  ASSERT_GE(Beats(1), 3U);
  const auto held = loop_.Now();
  hold(1, 1);
  unanswering_.insert(1);
  Run(2000ms);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1U);
  EXPECT_EQ(hangs[0].first, 1);
  EXPECT_LE(hangs[0].second - held, 530ms);
  EXPECT_GE(Beats(0), 20U);
  hold(1, 0);
  unanswering_.erase(1);
  (*runtime_->GetDevice(1))->SetHealth(HealthState::kIsolated);
  Run(100ms);
  (*runtime_->GetDevice(1))->SetHealth(HealthState::kHealthy);
  const auto before = Beats(1);
  Run(500ms);
  EXPECT_GE(Beats(1), before + 3);
  heartbeat_.reset();
  runtime_.reset();
  ::dlclose(fake);
}

#if RASD_HAVE_CUDA_KERNELS
TEST_F(HeartbeatTest, AHeldGpuOfTheCudaStandInIsReportedHung) {
  ::setenv("RASD_FAKE_CUDA_DEVICES", "2", 1);
  auto driver = drivers::CudaDriver::Create({.library = RASD_FAKE_CUDA_PATH});
  ASSERT_TRUE(driver.has_value()) << driver.error().ToString();
  void* fake = ::dlopen(RASD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake, nullptr);
  auto hold = reinterpret_cast<void (*)(int, int)>(::dlsym(fake, "fake_cuda_hold"));
  ASSERT_NE(hold, nullptr);
  Use(std::move(*driver));
  Run(500ms);
  ASSERT_GE(Beats(0), 3U);
  const auto held = loop_.Now();
  hold(0, 1);
  unanswering_.insert(0);
  Run(2000ms);
  const auto hangs = Hangs();
  ASSERT_EQ(hangs.size(), 1U);
  EXPECT_EQ(hangs[0].first, 0);
  EXPECT_LE(hangs[0].second - held, 530ms);
  EXPECT_GE(Beats(1), 20U);
  hold(0, 0);  // the held work runs; the GPU answers again
  unanswering_.erase(0);
  (*runtime_->GetDevice(0))->SetHealth(HealthState::kIsolated);
  Run(100ms);
  (*runtime_->GetDevice(0))->SetHealth(HealthState::kHealthy);
  const auto before = Beats(0);
  Run(500ms);
  EXPECT_GE(Beats(0), before + 3);
  heartbeat_.reset();
  runtime_.reset();
  ::dlclose(fake);
}
#endif

}  // namespace
}  // namespace rasd::daemon
