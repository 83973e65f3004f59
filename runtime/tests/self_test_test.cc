// The device self-test that gates a return to service: it passes on a
// healthy device, and catches a sticky fault, a poisoned page and a device
// that fails only under load.

#include "rasd/runtime/self_test.h"

#include "runtime_test_util.h"

namespace rasd::runtime::testing {
namespace {

SelfTestOptions AllOfIt() {
  // The fixture's devices have 64 MiB: the pattern covers every byte the
  // pool can hand out.
  return {.pattern_bytes = 64ULL << 20, .chunk_bytes = 4ULL << 20, .step_timeout = 5s};
}

TEST_F(RuntimeTest, SelfTestPassesOnAHealthyDeviceAndChecksEveryKernel) {
  const auto report = RunSelfTest(*runtime_, 2, AllOfIt());
  EXPECT_TRUE(report.passed) << report.Summary();
  std::vector<std::string> kernels;
  for (const auto& check : report.checks)
    if (check.name.starts_with("kernel ")) kernels.push_back(check.name.substr(7));
  EXPECT_EQ(kernels, (std::vector<std::string>{"empty", "sleep_us", "fill", "axpy", "add", "mul",
                                               "relu", "gemm", "softmax", "reduce_sum"}));
  // Every byte but what the kernel checks' freed blocks keep in the pool's
  // small-size caches.
  EXPECT_GE(report.pattern_bytes_tested, 63ULL << 20);
  EXPECT_LE(report.pattern_bytes_tested, 64ULL << 20);
  EXPECT_EQ(Pool(2).Stats().allocated_bytes, 0u) << "everything it allocated is freed";
  EXPECT_EQ(runtime_->OwnersOn(2), std::vector<std::string>{}) << "its stream is gone";
  EXPECT_TRUE(report.Summary().starts_with("passed: 10 kernel(s), 6"))  // 63 or 64 MiB
      << report.Summary();
  EXPECT_NE(report.Summary().find(", screen 4 x 1048576 elements, "), std::string::npos)
      << report.Summary();
}

TEST_F(RuntimeTest, ADeviceThatComputesWrongWithoutSayingSoFailsItsSelfTest) {
  // One flipped bit in about 100k outputs, in one kernel: the kernel checks
  // (a few thousand outputs each) pass it; the screening's rounds do not.
  ASSERT_TRUE(runtime_->Driver().Faults()->InjectSilentCorruption(1, 1e-5, "mul", 3).has_value());
  auto options = AllOfIt();
  const auto report = RunSelfTest(*runtime_, 1, options);
  EXPECT_FALSE(report.passed);
  EXPECT_TRUE(report.Summary().starts_with("failed: screen 4 x 1048576 elements: round "))
      << report.Summary();
  EXPECT_NE(report.Summary().find("mul n=1048576: element "), std::string::npos)
      << report.Summary();
  // Without the screening phase it would have come back.
  options.screen_rounds = 0;
  EXPECT_TRUE(RunSelfTest(*runtime_, 1, options).passed);
}

// Moves on by `step` each time its monotonic time is read: a run that reads
// it at its start and its end takes exactly `step`.
class SteppingClock final : public common::Clock {
 public:
  explicit SteppingClock(std::chrono::nanoseconds step) : step_(step) {}
  std::chrono::nanoseconds Monotonic() const override {
    const auto now = clock_.Monotonic();
    clock_.Advance(step_);
    return now;
  }
  std::chrono::system_clock::time_point Wall() const override { return clock_.Wall(); }
  std::chrono::nanoseconds SinceBoot() const override { return clock_.SinceBoot(); }

 private:
  mutable common::ManualClock clock_;
  const std::chrono::nanoseconds step_;
};

TEST_F(RuntimeTest, TheSelfTestsDurationIsMeasuredOnTheClockItIsGiven) {
  const SteppingClock clock(1500ms);
  auto options = AllOfIt();
  options.screen_rounds = 0;  // it reads the clock too: each screening's time is its own
  const auto report = RunSelfTest(*runtime_, 2, options, clock);
  ASSERT_TRUE(report.passed) << report.Summary();
  EXPECT_EQ(report.duration, 1500ms);
  EXPECT_TRUE(report.Summary().ends_with(", 1500 ms")) << report.Summary();
}

TEST_F(RuntimeTest, SelfTestLoadsSeveralStreamsAtOnce) {
  const auto report = RunSelfTest(*runtime_, 2, AllOfIt());
  ASSERT_TRUE(report.passed) << report.Summary();
  const auto load = std::find_if(report.checks.begin(), report.checks.end(),
                                 [](const auto& check) { return check.name == "load 4 streams"; });
  ASSERT_NE(load, report.checks.end());
  EXPECT_EQ(load->detail, "16 rounds of 64 KiB on each, axpy");
  EXPECT_NE(report.Summary().find(", load 4 streams, "), std::string::npos) << report.Summary();
}

// A fault that shows only when the device is busy: the one-at-a-time kernel
// checks and the pattern pass it; the load phase does not. Repeated, since
// whether two streams overlap is up to the scheduler.
TEST_F(RuntimeTest, OnlyTheLoadPhaseCatchesAFaultThatShowsUnderLoad) {
  ASSERT_TRUE(sim_->InjectLoadFault(1).has_value());
  SelfTestOptions idle = AllOfIt();
  idle.load_streams = 0;
  const auto without_load = RunSelfTest(*runtime_, 1, idle);
  EXPECT_TRUE(without_load.passed) << "one operation at a time shows nothing: "
                                   << without_load.Summary();
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto report = RunSelfTest(*runtime_, 1, AllOfIt());
    EXPECT_FALSE(report.passed) << "attempt " << attempt;
    EXPECT_NE(report.Summary().find("failed: load 4 streams: stream "), std::string::npos)
        << report.Summary();
    EXPECT_NE(report.Summary().find("only under load"), std::string::npos) << report.Summary();
  }
  EXPECT_EQ(Pool(1).Stats().allocated_bytes, 0u) << "a failed load phase frees what it took";
  EXPECT_EQ(runtime_->OwnersOn(1), std::vector<std::string>{}) << "its streams are gone";
  // A hardware defect: a reset does not cure it.
  ASSERT_TRUE(sim_->ResetDevice(1).has_value());
  EXPECT_FALSE(RunSelfTest(*runtime_, 1, AllOfIt()).passed);
  EXPECT_TRUE(RunSelfTest(*runtime_, 0, AllOfIt()).passed) << "the other devices are fine";
}

TEST_F(RuntimeTest, SelfTestRunsOnADrainingDeviceButNotAnIsolatedOne) {
  Device& device = **runtime_->GetDevice(1);
  device.SetHealth(HealthState::kDraining);
  EXPECT_TRUE(RunSelfTest(*runtime_, 1, AllOfIt()).passed);
  device.SetHealth(HealthState::kIsolated);
  const auto refused = RunSelfTest(*runtime_, 1, AllOfIt());
  EXPECT_FALSE(refused.passed);
  ASSERT_FALSE(refused.checks.empty());
  EXPECT_EQ(refused.checks[0].name, "start");
}

TEST_F(RuntimeTest, SelfTestCatchesAStickyFault) {
  ASSERT_TRUE(sim_->InjectStickyFault(0).has_value());
  const auto report = RunSelfTest(*runtime_, 0, AllOfIt());
  EXPECT_FALSE(report.passed);
  EXPECT_NE(report.Summary().find("failed: start: device 0: sticky fault"), std::string::npos)
      << report.Summary();
}

TEST_F(RuntimeTest, SelfTestCatchesAPoisonedPageAndPassesOnceItIsRetired) {
  DeviceAddress poisoned = 0;
  {
    auto stream = NewStream(3, "probe");
    auto allocation = Alloc(1 << 20, *stream);
    poisoned = allocation.address + 5 * 4096 + 12;
    ASSERT_TRUE(stream->Synchronize(5s).has_value());
    ASSERT_TRUE(Pool(3).Free(allocation).has_value());
  }
  ASSERT_TRUE(sim_->InjectUncorrectedEcc(3, poisoned).has_value());
  const auto report = RunSelfTest(*runtime_, 3, AllOfIt());
  EXPECT_FALSE(report.passed);
  EXPECT_NE(report.Summary().find("uncorrectable ECC error consumed"), std::string::npos)
      << report.Summary();
  ASSERT_TRUE(Pool(3).Retire(poisoned).has_value());
  const auto after = RunSelfTest(*runtime_, 3, AllOfIt());
  EXPECT_TRUE(after.passed) << after.Summary();
  EXPECT_LT(after.pattern_bytes_tested, report.pattern_bytes_tested + (64ULL << 20));
  EXPECT_GE(after.pattern_bytes_tested, 62ULL << 20) << "all but the retired page and caches";
}

}  // namespace
}  // namespace rasd::runtime::testing
