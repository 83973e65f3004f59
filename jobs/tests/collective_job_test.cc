// The collective job on the simulator: a fault-free run matches the host's
// checksums, and so does a run that loses a rank to a FATAL fault, drains
// one, has its streams killed, or waits below its minimum of ranks.

#include "rasd/jobs/collective_job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

#include "rasd/testing/eventually.h"
#include "sim_runtime_test.h"

namespace rasd::jobs {
namespace {

using namespace std::chrono_literals;

class CollectiveTest : public testing::SimRuntimeTest {
 protected:
  CollectiveOptions Options(std::vector<int> devices, int min_ranks = 1) {
    return {.id = "allreduce",
            .devices = std::move(devices),
            .elements = 1 << 14,
            .steps = 600,
            .checkpoint_every = 10,
            .min_ranks = min_ranks,
            .step_timeout = 2s};
  }

  std::unique_ptr<CollectiveJob> Start(const CollectiveOptions& options) {
    auto job = CollectiveJob::Create(*runtime_, options);
    EXPECT_TRUE(job.has_value()) << job.error().ToString();
    return job ? std::move(*job) : nullptr;
  }

  // Waits until the job has completed at least `step` steps.
  void WaitForStep(CollectiveJob& job, int step) {
    (void)rasd::testing::Eventually([&] { return job.GetProgress().step >= step; }, 20s);
    ASSERT_GE(job.GetProgress().step, step);
  }

  // Waits until the job runs on exactly `devices`.
  void WaitForDevices(CollectiveJob& job, const std::vector<int>& devices) {
    (void)rasd::testing::Eventually([&] { return job.GetProgress().devices == devices; }, 20s);
  }

  void ExpectFinishedLikeAFaultFreeRun(CollectiveJob& job, const CollectiveOptions& options) {
    ASSERT_TRUE(job.Wait(30s));
    const auto progress = job.GetProgress();
    ASSERT_EQ(progress.state, CollectiveJob::State::kFinished) << progress.last_error;
    EXPECT_EQ(job.Checksums(), CollectiveJob::ExpectedChecksums(options));
    EXPECT_EQ(progress.checksum_mismatches, 0u);
  }
};

// Float arithmetic on the state is exact only while its values stay below
// 2^24: the state must stay within a few units of where it started however
// long the job runs (it once grew by about 8 a step and went wrong after 2M
// steps, half an hour of a soak).
TEST(CollectiveChecksumTest, TheStateStaysSmallHoweverManyStepsRun) {
  CollectiveOptions options;
  options.devices = {0, 1, 2, 3, 4, 5, 6, 7};
  options.elements = 1;
  options.steps = 3'000'000;
  const auto checksums = CollectiveJob::ExpectedChecksums(options);
  ASSERT_EQ(checksums.size(), 3'000'000u);
  // One element, starting at 0: the checksum is its value (mod 2^64).
  std::int64_t lowest = 0, highest = 0;
  for (const std::uint64_t checksum : checksums) {
    const auto value = static_cast<std::int64_t>(checksum);
    lowest = std::min(lowest, value);
    highest = std::max(highest, value);
  }
  EXPECT_GE(lowest, -64);
  EXPECT_LE(highest, 64);
  EXPECT_LT(highest - lowest, 1 << 24);
}

TEST_F(CollectiveTest, ALongRunKeepsAWindowOfChecksumsAndChecksEveryStep) {
  auto options = Options({0, 1});
  options.steps = static_cast<int>(CollectiveJob::kChecksumWindow) + 300;
  options.elements = 16;
  options.checkpoint_every = 1000;
  auto job = Start(options);
  ASSERT_TRUE(job->Wait(60s));
  const auto progress = job->GetProgress();
  ASSERT_EQ(progress.state, CollectiveJob::State::kFinished) << progress.last_error;
  EXPECT_EQ(progress.checksum_mismatches, 0u);
  const auto expected = CollectiveJob::ExpectedChecksums(options);
  const auto window = job->Checksums();
  ASSERT_EQ(window.size(), CollectiveJob::kChecksumWindow) << "bounded, not one per step";
  EXPECT_TRUE(std::equal(window.begin(), window.end(), expected.end() - window.size()))
      << "the latest steps, oldest first";
}

TEST_F(CollectiveTest, AFaultFreeRunMatchesTheHostsChecksums) {
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  EXPECT_EQ(job->GetProgress().reforms, 0u);
  EXPECT_EQ(job->GetProgress().devices, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(CollectiveTest, ARankLostMidRunIsDroppedAndTheResultIsTheSame) {
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  WaitForStep(*job, 25);
  ASSERT_TRUE(sim_->InjectFallOffBus(2).has_value());
  Device(2).SetHealth(runtime::HealthState::kIsolated);  // as the policy does
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.devices, (std::vector<int>{0, 1, 3})) << "shrunk to the healthy devices";
  EXPECT_GE(progress.reforms, 1u);
  EXPECT_LT(progress.last_release, 50ms) << "every rank released at once";
  EXPECT_GT(progress.last_recovery, 0ns);
}

// A rank that computes wrong without saying so spoils the shared state;
// moving the job off it is not enough: what it touched is computed again
// from a checkpoint taken before the corruption began.
TEST_F(CollectiveTest, ADistrustedDeviceIsLeftAndItsStepsAreComputedAgainFromBeforeIt) {
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  WaitForStep(*job, 25);
  const common::SystemClock clock;
  const auto began = clock.Monotonic();
  const int injected_at = job->GetProgress().step;
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "", 5).has_value());
  ASSERT_TRUE(
      rasd::testing::Eventually([&] { return job->GetProgress().checksum_mismatches > 0; }, 20s))
      << "the corruption reaches the result";
  const auto wrong_at = job->GetProgress().step;
  job->Distrust(2, clock.Monotonic() - began + 1ms);
  // As the verdict does, after; the job may re-form before it sees this,
  // and leaves device 2 out all the same.
  std::this_thread::sleep_for(20ms);
  Device(2).SetHealth(runtime::HealthState::kIsolated);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.devices, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(progress.distrust_rollbacks, 1u);
  EXPECT_GE(static_cast<int>(progress.steps_redone), wrong_at - injected_at)
      << "back to a checkpoint from before the injection";
}

TEST_F(CollectiveTest, ADistrustedDeviceStaysOutUntilItHasBeenOutOfServiceAndBack) {
  auto options = Options({0, 1, 2, 3});
  options.steps = 1'000'000;  // stopped once it has grown back
  auto job = Start(options);
  WaitForStep(*job, 25);
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "", 5).has_value());
  ASSERT_TRUE(
      rasd::testing::Eventually([&] { return job->GetProgress().checksum_mismatches > 0; }, 20s));
  // Its isolation never comes: the job leaves it all the same.
  job->Distrust(2, std::chrono::hours(1));
  WaitForDevices(*job, {0, 1, 3});
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 0, "", 0).has_value());
  WaitForStep(*job, 400);
  EXPECT_EQ(job->GetProgress().devices, (std::vector<int>{0, 1, 3}));
  // Out of service and back (repaired): it gets its rank back.
  Device(2).SetHealth(runtime::HealthState::kIsolated);
  std::this_thread::sleep_for(50ms);
  Device(2).SetHealth(runtime::HealthState::kHealthy);
  WaitForDevices(*job, {0, 1, 2, 3});
  const int grown_at = job->GetProgress().step;
  WaitForStep(*job, grown_at + 50);
  job->Stop();
  ASSERT_TRUE(job->Wait(10s));
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(progress.checksum_mismatches, 0u);
  const auto checksums = job->Checksums();
  EXPECT_EQ(checksums, CollectiveJob::ExpectedChecksums(options, checksums.size()));
}

TEST_F(CollectiveTest, LeavingACorruptingDeviceWithoutRollingBackKeepsTheWrongState) {
  // Why Distrust is needed: a drain keeps the state just computed.
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  WaitForStep(*job, 25);
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "", 5).has_value());
  ASSERT_TRUE(
      rasd::testing::Eventually([&] { return job->GetProgress().checksum_mismatches > 0; }, 20s));
  // Past a checkpoint that holds the wrong state: an isolation that lands
  // inside a step (its launch refused) restores that checkpoint, wrong too,
  // rather than one from before the corruption.
  WaitForStep(*job, job->GetProgress().step + options.checkpoint_every + 1);
  Device(2).SetHealth(runtime::HealthState::kIsolated);
  ASSERT_TRUE(job->Wait(30s));
  EXPECT_GT(job->GetProgress().checksum_mismatches, 0u);
  EXPECT_NE(job->Checksums(), CollectiveJob::ExpectedChecksums(options));
}

// Cross-checks (cross_check_every): the part of rank ((step + 1) / every)
// % ranks is computed again on the next rank's device, and on the one after
// when the two differ.
class CollectiveCrossCheckTest : public CollectiveTest {
 protected:
  CollectiveOptions Checked(std::vector<int> devices, int steps) {
    auto options = Options(std::move(devices));
    options.steps = steps;
    options.cross_check_every = 1;
    options.on_cross_check = [this](const CrossCheck& check) {
      std::lock_guard lock(mutex_);
      checks_.push_back(check);
    };
    return options;
  }
  std::vector<CrossCheck> Checks() {
    std::lock_guard lock(mutex_);
    return checks_;
  }
  std::vector<CrossCheck> Outvoted() {
    std::vector<CrossCheck> outvoted;
    for (const auto& check : Checks())
      if (!check.agreed) outvoted.push_back(check);
    return outvoted;
  }

 private:
  std::mutex mutex_;
  std::vector<CrossCheck> checks_;
};

TEST_F(CollectiveCrossCheckTest, HealthyRanksAgreeOnEveryPartAndNobodyIsAccused) {
  const auto options = Checked({0, 1, 2, 3}, 120);
  auto job = Start(options);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.cross_checks, 120u);
  EXPECT_EQ(progress.disagreements, 0u);
  const auto checks = Checks();
  ASSERT_EQ(checks.size(), 240u) << "the rank checked and its checker, each step";
  std::set<int> devices;
  for (const auto& check : checks) {
    EXPECT_TRUE(check.agreed) << check.device << ": " << check.detail;
    EXPECT_EQ(check.job, CrossCheck::Job::kCollective);
    devices.insert(check.device);
  }
  EXPECT_EQ(devices, (std::set<int>{0, 1, 2, 3})) << "every rank's part in turn";
}

// A budget of 0.1% of the job's time: after a check, the job steps for a
// thousand times that check's time before the next, whatever
// cross_check_every asks (here every step).
TEST_F(CollectiveCrossCheckTest, ABudgetSpacesTheChecksByTheirCost) {
  auto options = Checked({0, 1, 2, 3}, 400);
  options.cross_check_budget = 0.001;
  auto job = Start(options);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_GE(progress.cross_checks, 1u) << "the first step is checked: no cost known yet";
  EXPECT_LE(progress.cross_checks, 40u)
      << "of 400 steps, a check costing at least a tenth of a step";
  EXPECT_EQ(progress.disagreements, 0u);
}

// One step on three ranks: step 1 checks rank 1's part (on device 2, then
// device 0), so a device 1 whose fill is wrong is outvoted and the step goes
// on with the right part.
TEST_F(CollectiveCrossCheckTest, ARanksWrongPartIsOutvotedAndReplacedBeforeTheAllReduce) {
  const auto options = Checked({0, 1, 2}, 1);
  ASSERT_TRUE(sim_->InjectSilentCorruption(1, 1e-2, "fill", 3).has_value());
  auto job = Start(options);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.disagreements, 1u);
  EXPECT_EQ(progress.parts_corrected, 1u);
  const auto outvoted = Outvoted();
  ASSERT_EQ(outvoted.size(), 1u);
  EXPECT_EQ(outvoted[0].device, 1);
  EXPECT_EQ(outvoted[0].step, 1);
  EXPECT_EQ(outvoted[0].kernels, "fill");
  EXPECT_NE(outvoted[0].detail.find("where devices 2 and 0 gave"), std::string::npos)
      << outvoted[0].detail;
  EXPECT_EQ(Checks().size(), 3u);

  // The same fault with no cross-check reaches the result.
  auto unchecked = options;
  unchecked.cross_check_every = 0;
  auto wrong = Start(unchecked);
  ASSERT_TRUE(wrong->Wait(30s));
  EXPECT_NE(wrong->Checksums(), CollectiveJob::ExpectedChecksums(unchecked));
}

// The checker can be the one wrong: rank 0's part (fill, then axpy with the
// state) is checked at step 3 on device 1, whose axpy is wrong; device 2
// sides with device 0, and rank 0's part stays as it was.
TEST_F(CollectiveCrossCheckTest, AWrongCheckerIsOutvotedAndThePartItDoubtedIsKept) {
  const auto options = Checked({0, 1, 2}, 3);
  ASSERT_TRUE(sim_->InjectSilentCorruption(1, 1e-2, "axpy", 4).has_value());
  auto job = Start(options);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.cross_checks, 3u);
  EXPECT_EQ(progress.disagreements, 1u);
  EXPECT_EQ(progress.parts_corrected, 0u);
  const auto outvoted = Outvoted();
  ASSERT_EQ(outvoted.size(), 1u);
  EXPECT_EQ(outvoted[0].device, 1);
  EXPECT_EQ(outvoted[0].step, 3);
  EXPECT_EQ(outvoted[0].kernels, "fill, axpy");
}

TEST_F(CollectiveCrossCheckTest, TwoRanksThatDisagreeAccuseNeither) {
  const auto options = Checked({0, 1}, 1);  // step 1 checks rank 1's part on device 0
  ASSERT_TRUE(sim_->InjectSilentCorruption(1, 1e-2, "fill", 3).has_value());
  auto job = Start(options);
  ASSERT_TRUE(job->Wait(30s));
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.disagreements, 1u);
  EXPECT_EQ(progress.parts_corrected, 0u);
  EXPECT_TRUE(Checks().empty()) << "no verdict either way from two";
  EXPECT_NE(job->Checksums(), CollectiveJob::ExpectedChecksums(options))
      << "and the wrong part stays: a third device is needed to know which";
}

TEST_F(CollectiveTest, ADrainMovesTheJobAtAStepBoundary) {
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  WaitForStep(*job, 33);
  Device(1).SetHealth(runtime::HealthState::kDraining);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  EXPECT_EQ(job->GetProgress().devices, (std::vector<int>{0, 2, 3}));
}

// Repaired and undrained, a device gets its rank back at the next
// checkpoint: 4 -> 3 -> 4 ranks, and every step's checksum is still a
// fault-free run's.
TEST_F(CollectiveTest, ARepairedDeviceGetsItsRankBackAtTheNextCheckpoint) {
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  WaitForStep(*job, 33);
  Device(1).SetHealth(runtime::HealthState::kDraining);
  WaitForDevices(*job, {0, 2, 3});
  ASSERT_EQ(job->GetProgress().devices, (std::vector<int>{0, 2, 3}));
  const int shrunk_at = job->GetProgress().step;
  Device(1).SetHealth(runtime::HealthState::kHealthy);  // undrained after its self-test
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  const auto progress = job->GetProgress();
  EXPECT_EQ(progress.devices, (std::vector<int>{0, 1, 2, 3})) << "grown back";
  EXPECT_EQ(progress.grown, 1u);
  EXPECT_EQ(progress.reforms, 2u) << "one down, one up";
  EXPECT_LT(shrunk_at, options.steps - 100) << "the job still had work to grow into";
}

TEST_F(CollectiveTest, WithoutGrowOnReturnItStaysOnFewerRanks) {
  auto options = Options({0, 1, 2, 3});
  options.grow_on_return = false;
  auto job = Start(options);
  WaitForStep(*job, 33);
  Device(1).SetHealth(runtime::HealthState::kDraining);
  WaitForDevices(*job, {0, 2, 3});
  Device(1).SetHealth(runtime::HealthState::kHealthy);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  EXPECT_EQ(job->GetProgress().devices, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(job->GetProgress().grown, 0u);
}

TEST_F(CollectiveTest, KillingItsStreamsRestoresTheCheckpointOnTheSameDevices) {
  const auto options = Options({0, 1, 2, 3});
  auto job = Start(options);
  WaitForStep(*job, 15);
  EXPECT_GE(runtime_->AbortOwner("allreduce", "consumed poisoned memory"), 4u);
  ExpectFinishedLikeAFaultFreeRun(*job, options);
  EXPECT_EQ(job->GetProgress().devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_GE(job->GetProgress().restores, 1u);
}

TEST_F(CollectiveTest, BelowItsMinimumItWaitsForAReplacement) {
  const auto options = Options({0, 1}, /*min_ranks=*/2);
  auto job = Start(options);
  WaitForStep(*job, 10);
  Device(1).SetHealth(runtime::HealthState::kIsolated);
  (void)rasd::testing::Eventually(
      [&] { return job->GetProgress().state == CollectiveJob::State::kWaiting; }, 5s);
  ASSERT_EQ(job->GetProgress().state, CollectiveJob::State::kWaiting);
  const int waiting_at = job->GetProgress().step;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(job->GetProgress().step, waiting_at) << "no progress on one rank";
  Device(1).SetHealth(runtime::HealthState::kHealthy);  // repaired and undrained
  job->Reconsider();
  ExpectFinishedLikeAFaultFreeRun(*job, options);
}

TEST_F(CollectiveTest, StopEndsItAndBadOptionsAreRefused) {
  auto options = Options({0, 1});
  options.steps = 1'000'000;
  auto job = Start(options);
  WaitForStep(*job, 3);
  job->Stop();
  ASSERT_TRUE(job->Wait(5s));
  EXPECT_EQ(job->GetProgress().state, CollectiveJob::State::kStopped);
  EXPECT_FALSE(CollectiveJob::Create(*runtime_, Options({})).has_value());
  EXPECT_FALSE(CollectiveJob::Create(*runtime_, Options({0, 9})).has_value());
  EXPECT_FALSE(CollectiveJob::Create(*runtime_, Options({0}, 2)).has_value());
}

}  // namespace
}  // namespace rasd::jobs
