// The job manager starts, reports and stops the built-in kinds on the
// simulator.

#include "rasd/jobs/job_manager.h"

#include <gtest/gtest.h>

#include <thread>

#include "rasd/testing/eventually.h"
#include "sim_runtime_test.h"

namespace rasd::jobs {
namespace {

using namespace std::chrono_literals;

class JobManagerTest : public testing::SimRuntimeTest {
 protected:
};

TEST_F(JobManagerTest, StartsReportsAndStopsBothKinds) {
  JobManager manager(*runtime_, 1s);
  ASSERT_TRUE(
      manager.Start({.name = "llm", .kind = JobKind::kInference, .load_rps = 2000}).has_value());
  ASSERT_TRUE(manager
                  .Start({.name = "train",
                          .kind = JobKind::kCollective,
                          .devices = {1, 2},
                          .elements = 4096,
                          .steps = 50})
                  .has_value());
  EXPECT_EQ(manager.Start({.name = "llm"}).error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(manager.Start({.name = "bad name!"}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(manager.Start({.name = "far", .devices = {9}}).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(manager.Count(), 2u);
  ASSERT_NE(manager.Inference("llm"), nullptr);
  EXPECT_EQ(manager.Inference("train"), nullptr);

  std::vector<JobReport> reports;
  (void)rasd::testing::Eventually(
      [&] {
        reports = manager.Report();
        return reports.size() == 2 && reports[0].served > 100 && reports[1].state == "finished";
      },
      10s, 10ms);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].name, "llm");
  EXPECT_EQ(reports[0].state, "serving");
  EXPECT_EQ(reports[0].devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_GT(reports[0].served, 100u);
  EXPECT_GT(reports[0].load_sent, 0u);
  EXPECT_EQ(reports[0].load_wrong, 0u);
  EXPECT_EQ(reports[1].state, "finished");
  EXPECT_EQ(reports[1].step, 50);
  EXPECT_TRUE(reports[1].checksums_match);

  (**runtime_->GetDevice(3)).SetHealth(runtime::HealthState::kIsolated);
  manager.Reconsider();
  EXPECT_EQ(manager.Report()[0].state, "degraded");
  EXPECT_EQ(manager.Report()[0].devices, (std::vector<int>{0, 1, 2}));

  ASSERT_TRUE(manager.Stop("llm").has_value());
  EXPECT_EQ(manager.Stop("llm").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(manager.Count(), 1u);
}

TEST(JobKindTest, NamesRoundTrip) {
  EXPECT_EQ(ParseJobKind(JobKindName(JobKind::kCollective)), JobKind::kCollective);
  EXPECT_EQ(ParseJobKind("training"), std::nullopt);
}

// An LLM job under its own load: a poisoned KV block (where an injected
// fault with --job lands) costs its sequences a recompute, is contained by
// the job itself (kill-consumer finds nothing to abort), and no answer is
// wrong or lost. A fault in its weights is not the job's to contain.
TEST_F(JobManagerTest, AnLlmJobContainsAPoisonedKvBlockAndLosesNothing) {
  JobManager manager(*runtime_, 1s);
  ASSERT_TRUE(manager
                  .Start({.name = "chat",
                          .kind = JobKind::kLlm,
                          .devices = {0, 1},
                          .load_rps = 200,
                          .tokens_per_block = 4,
                          .preemption = Preemption::kSwap})
                  .has_value());
  EXPECT_EQ(ParseJobKind("llm"), JobKind::kLlm);
  EXPECT_EQ(JobKindName(JobKind::kLlm), "llm");
  std::optional<drivers::DeviceAddress> target;
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] {
        target = manager.MemoryFaultTarget("chat", 0);
        return target.has_value() && manager.Report()[0].served > 10;
      },
      10s, 10ms));
  EXPECT_FALSE(manager.MemoryFaultTarget("nobody", 0).has_value());
  // As the daemon's kill-consumer asks after a retired page: the job takes
  // the page's four blocks out of use itself.
  EXPECT_TRUE(runtime_->ContainMemoryFault("chat", 0, *target))
      << "a KV block is the job's to contain";
  JobReport report;
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] {
        report = manager.Report()[0];
        return report.kv_blocks_retired == 4;
      },
      10s, 10ms))
      << report.progress;
  const auto served_before = report.served;
  const auto pool = *runtime_->Pool(0);
  const auto weights = pool->Allocations().front();  // the first allocation: Wq
  ASSERT_EQ(weights.owner, "chat");
  EXPECT_FALSE(runtime_->ContainMemoryFault("chat", 0, weights.address))
      << "weights are read by every sequence: not a KV block";
  EXPECT_FALSE(runtime_->ContainMemoryFault("other", 0, *target));

  // Poison consumed by the job's next read of the block: the driver's
  // report names the page, and the job recomputes the sequences on it.
  // The target is a block in use, or the one handed out next; when its
  // sequence ends before reading it again and a lower block is freed
  // meanwhile, nothing reads it soon: then another is poisoned.
  bool consumed = false;
  for (int attempt = 0; attempt < 5 && !consumed; ++attempt) {
    std::optional<drivers::DeviceAddress> again;
    ASSERT_TRUE(rasd::testing::Eventually(
        [&] { return (again = manager.MemoryFaultTarget("chat", 0)).has_value(); }, 10s, 1ms));
    ASSERT_TRUE(sim_->InjectUncorrectedEcc(0, *again).has_value());
    consumed = rasd::testing::Eventually([&] { return manager.Report()[0].kv_blocks_retired >= 8; },
                                         3s, 10ms);
  }
  ASSERT_TRUE(consumed) << manager.Report()[0].progress;
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] {
        report = manager.Report()[0];
        // The sequence that read it is recomputed (or, when its first
        // step read it, simply prefilled again elsewhere).
        return report.served > served_before + 40;
      },
      20s, 10ms))
      << report.progress;
  EXPECT_EQ(report.load_wrong, 0u);
  EXPECT_EQ(report.load_errors, 0u);
  EXPECT_GT(report.load_checked, 0u) << "answers compared with the reference";
  EXPECT_EQ(report.kind, JobKind::kLlm);
  EXPECT_EQ(report.preemption, "swap");
  EXPECT_EQ(report.state, "serving");
  EXPECT_GT(report.kv_blocks_total, 0u);
  EXPECT_EQ(report.lost, 0u);
  ASSERT_TRUE(manager.Stop("chat").has_value());
}

}  // namespace
}  // namespace rasd::jobs
