// CorruptionScreening on a SimulatedEventLoop over the simulator: devices
// in service are screened in turn; a device that flips bits in what its
// kernels write becomes a suspect at its first wrong screening and is
// isolated, with its kernel and how it was confirmed, at the `confirm`th;
// the jobs hear how far back to distrust it first; healthy devices are
// never accused, and an isolated device is not screened.

#include "corruption_screening.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using runtime::HealthState;

class CorruptionScreeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("screening");
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime({.devices = 4, .memory_bytes_per_device = 32 << 20}, &sim_);
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    ASSERT_TRUE(health_->Restore().has_value());
  }
  void TearDown() override {
    screening_.reset();
    health_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // A budget far above the default: in simulated time a screening costs
  // nothing, so each device is screened as soon as its turn comes.
  void Start(
      CorruptionScreening::Options options = {
          .budget = 0.5, .interval = 600s, .elements = 1 << 14, .confirm = 2, .window = 3600s}) {
    screening_ = std::make_unique<CorruptionScreening>(loop_, *runtime_, *health_, options);
    screening_->SetVerdictListener(
        [this](const CorruptionScreening::Verdict& verdict) -> std::string {
          // Heard before the decision: the device is still in service.
          EXPECT_EQ(health_->StateOf(verdict.device), HealthState::kHealthy);
          verdicts_.push_back(verdict);
          return "chat: 3 answer(s) since its last clean cross-check: 7, 8, 9";
        });
    screening_->Start();
  }

  // Simulated time in 100 ms steps, each after the screening in progress
  // (a real thread) has finished.
  void Run(std::chrono::milliseconds simulated) {
    for (auto t = 0ms; t < simulated; t += 100ms) {
      ASSERT_TRUE(rasd::testing::Eventually(
          [&] {
            loop_.RunUntilIdle();
            return screening_->Settled();
          },
          20s));
      loop_.AdvanceBy(100ms);
      loop_.RunUntilIdle();
    }
  }
  CorruptionScreening::DeviceView View(int device) {
    return screening_->Views()[static_cast<std::size_t>(device)];
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<ras::StateStore> store_;
  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<CorruptionScreening> screening_;
  std::vector<CorruptionScreening::Verdict> verdicts_;
};

TEST_F(CorruptionScreeningTest, HealthyDevicesAreScreenedInTurnAndNeverAccused) {
  Start();
  Run(10s);
  for (int device = 0; device < static_cast<int>(runtime_->DeviceCount()); ++device) {
    const auto view = View(device);
    EXPECT_GE(view.screenings, 2u) << device;
    EXPECT_EQ(view.mismatches, 0u) << device;
    EXPECT_EQ(view.kernels_checked, view.screenings * 8) << device;
    EXPECT_TRUE(view.screened);
    EXPECT_TRUE(view.last_passed);
    EXPECT_TRUE(view.last_summary.starts_with("passed: 8 kernels")) << view.last_summary;
    EXPECT_FALSE(view.suspect);
    EXPECT_FALSE(view.overdue);
    EXPECT_EQ(health_->StateOf(device), HealthState::kHealthy);
  }
  EXPECT_TRUE(verdicts_.empty());
}

TEST_F(CorruptionScreeningTest, DevicesNoJobUsesAreScreenedFirst) {
  auto busy_0 = runtime_->CreateStream(0, {.owner = "job-a"});
  auto busy_1 = runtime_->CreateStream(1, {.owner = "job-b"});
  ASSERT_TRUE(busy_0.has_value() && busy_1.has_value());
  Start();
  auto total = [&] {
    std::uint64_t screenings = 0;
    for (const auto& view : screening_->Views()) screenings += view.screenings;
    return screenings;
  };
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] {
        Run(100ms);
        return total() >= 2;
      },
      30s));
  EXPECT_EQ(total(), 2u);
  EXPECT_EQ(View(2).screenings, 1u);
  EXPECT_EQ(View(3).screenings, 1u);
  Run(3s);
  EXPECT_GE(View(0).screenings, 1u) << "and the busy ones after them";
  EXPECT_GE(View(1).screenings, 1u);
}

// The budget is the node's, shared by the devices in service: with 10%
// and three of four devices in service, each earns 1/30 of the time, so a
// first screening (assumed to cost 50 ms until one is measured) comes
// after 1.5 s (not after the 0.5 s a budget of each device's own would
// give, nor after the 2 s of four devices sharing it); the isolated device
// earns nothing and is not screened.
TEST_F(CorruptionScreeningTest, TheBudgetIsTheNodesSharedByTheDevicesInService) {
  ASSERT_TRUE(health_
                  ->Decide({.device = 3,
                            .cause = HealthCause::kOperator,
                            .target = HealthState::kIsolated,
                            .reason = "out for the test"})
                  .has_value());
  Start({.budget = 0.1, .interval = 600s, .elements = 1 << 14, .confirm = 2, .window = 3600s});
  auto total = [&] {
    std::uint64_t screenings = 0;
    for (const auto& view : screening_->Views()) screenings += view.screenings;
    return screenings;
  };
  Run(1400ms);
  EXPECT_EQ(total(), 0u) << "nothing earned a screening yet";
  Run(500ms);
  EXPECT_GE(total(), 1u);
  Run(3s);
  for (int device : {0, 1, 2}) EXPECT_GE(View(device).screenings, 1u) << device;
  EXPECT_EQ(View(3).screenings, 0u);
}

TEST_F(CorruptionScreeningTest, ADeviceComputingWrongIsASuspectThenIsolatedWithWhatAndHow) {
  Start();
  Run(3s);  // clean screenings first: the distrust reaches back to them
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "gemm", 1).has_value());
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] {
        Run(100ms);
        return View(2).suspect || !verdicts_.empty();
      },
      30s));
  EXPECT_EQ(health_->StateOf(2), HealthState::kHealthy) << "one wrong screening is evidence only";
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] {
        Run(100ms);
        return !verdicts_.empty();
      },
      30s));
  ASSERT_EQ(verdicts_.size(), 1u);
  const auto& verdict = verdicts_[0];
  EXPECT_EQ(verdict.device, 2);
  ASSERT_EQ(verdict.evidence.size(), 2u);
  EXPECT_EQ(verdict.evidence[0].kernel, "gemm");
  EXPECT_TRUE(verdict.reason.starts_with("silent data corruption: gemm m=")) << verdict.reason;
  EXPECT_NE(verdict.reason.find("confirmed by 2 wrong result(s) in "), std::string::npos)
      << verdict.reason;
  EXPECT_NE(verdict.reason.find(": 2 known-answer screening(s);"), std::string::npos)
      << verdict.reason;
  EXPECT_GT(verdict.distrust_for, 0ns);
  const auto status = health_->StatusOf(2);
  EXPECT_EQ(status.state, HealthState::kIsolated);
  EXPECT_EQ(status.cause, HealthCause::kSilentCorruption);
  EXPECT_EQ(status.reason, verdict.reason);
  // The others stay in service; the isolated one is screened no more.
  const auto screened = View(2).screenings;
  Run(3s);
  EXPECT_EQ(View(2).screenings, screened);
  EXPECT_EQ(View(2).verdicts, 1u);
  for (int device : {0, 1, 3}) EXPECT_EQ(health_->StateOf(device), HealthState::kHealthy);
  EXPECT_EQ(verdicts_.size(), 1u);
}

TEST_F(CorruptionScreeningTest, OutvotedAnswersCountWithWrongScreeningsTowardsTheVerdict) {
  Start();
  Run(1s);
  const runtime::ScreeningMismatch wrong{"inference job chat", "request 40",
                                         "output 3 was 1.5 where devices 0 and 3 gave 1.25"};
  for (int agreed = 0; agreed < 5; ++agreed) screening_->ReportCrossCheck(1, "inference", true, {});
  screening_->ReportCrossCheck(1, "inference", false, wrong);
  EXPECT_TRUE(View(1).suspect);
  EXPECT_TRUE(verdicts_.empty());
  screening_->ReportCrossCheck(1, "inference", false, wrong);
  ASSERT_EQ(verdicts_.size(), 1u);
  EXPECT_TRUE(verdicts_[0].reason.starts_with(
      "silent data corruption: inference job chat request 40 computed wrong"))
      << verdicts_[0].reason;
  EXPECT_NE(verdicts_[0].reason.find(": 2 job result(s) outvoted by two other devices;"),
            std::string::npos)
      << verdicts_[0].reason;
  EXPECT_EQ(health_->StatusOf(1).cause, HealthCause::kSilentCorruption);
  EXPECT_EQ(View(1).cross_checks["inference"], 7u);
  EXPECT_EQ(View(1).cross_check_mismatches["inference"], 2u);
  // Once it is out, a late wrong answer from before is counted, not judged.
  screening_->ReportCrossCheck(1, "inference", false, wrong);
  EXPECT_EQ(verdicts_.size(), 1u);
}

TEST_F(CorruptionScreeningTest, WrongScreeningsFartherApartThanTheWindowNeverAddUp) {
  Start({.budget = 0.5, .interval = 600s, .elements = 1 << 14, .confirm = 2, .window = 1s});
  Run(1s);
  for (int episode = 0; episode < 2; ++episode) {
    ASSERT_TRUE(sim_->InjectSilentCorruption(1, 1e-3, "gemm", 3).has_value());
    ASSERT_TRUE(rasd::testing::Eventually(
        [&] {
          Run(100ms);
          return View(1).suspect;
        },
        30s));
    ASSERT_TRUE(sim_->InjectSilentCorruption(1, 0, "", 0).has_value());
    Run(2s);
    EXPECT_FALSE(View(1).suspect) << "its one wrong screening left the window";
  }
  EXPECT_EQ(View(1).mismatches, 2u);
  EXPECT_TRUE(verdicts_.empty());
  EXPECT_EQ(health_->StateOf(1), HealthState::kHealthy);
}

TEST_F(CorruptionScreeningTest, AScreeningThatCannotRunGivesNoVerdict) {
  Start({.budget = 0.5, .interval = 600s, .elements = 1 << 14, .confirm = 1, .window = 3600s});
  ASSERT_TRUE(sim_->InjectStickyFault(3).has_value());
  Run(3s);
  EXPECT_GE(View(3).incomplete, 1u);
  EXPECT_EQ(View(3).mismatches, 0u);
  EXPECT_TRUE(verdicts_.empty()) << "a device fault is not silent corruption";
}

TEST_F(CorruptionScreeningTest, ABudgetOfZeroScreensNothing) {
  Start({.budget = 0, .interval = 1s, .elements = 1 << 14, .confirm = 1, .window = 3600s});
  Run(3s);
  for (const auto& view : screening_->Views()) EXPECT_EQ(view.screenings, 0u);
}

}  // namespace
}  // namespace rasd::daemon
