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

}  // namespace
}  // namespace rasd::jobs
