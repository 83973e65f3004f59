#include "rasd/jobs/job_manager.h"

#include <gtest/gtest.h>

namespace rasd::jobs {
namespace {

TEST(JobManagerTest, TracksJobsAndTheirDevices) {
  JobManager manager;
  ASSERT_TRUE(
      manager.Add({.id = "llm-0", .kind = JobKind::kInference, .devices = {0, 1}}).has_value());
  ASSERT_TRUE(manager.Add({.id = "train-0", .kind = JobKind::kCollective, .devices = {1, 2, 3}})
                  .has_value());
  EXPECT_EQ(manager.Count(), 2u);

  const auto on_one = manager.OnDevice(1);
  ASSERT_EQ(on_one.size(), 2u);
  const auto on_three = manager.OnDevice(3);
  ASSERT_EQ(on_three.size(), 1u);
  EXPECT_EQ(on_three[0].id, "train-0");
  EXPECT_TRUE(manager.OnDevice(7).empty());

  ASSERT_TRUE(manager.SetState("llm-0", JobState::kDraining).has_value());
  EXPECT_EQ(manager.Find("llm-0")->state, JobState::kDraining);
  ASSERT_TRUE(manager.Remove("llm-0").has_value());
  EXPECT_FALSE(manager.Find("llm-0").has_value());
}

TEST(JobManagerTest, RejectsDuplicateEmptyAndUnknownIds) {
  JobManager manager;
  ASSERT_TRUE(manager.Add({.id = "a"}).has_value());
  EXPECT_EQ(manager.Add({.id = "a"}).error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(manager.Add({.id = ""}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(manager.SetState("b", JobState::kAborted).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(manager.Remove("b").error().code, ErrorCode::kNotFound);
}

TEST(JobManagerTest, NamesAreStable) {
  EXPECT_EQ(JobKindName(JobKind::kCollective), "collective");
  EXPECT_EQ(JobStateName(JobState::kRequeued), "requeued");
}

}  // namespace
}  // namespace rasd::jobs
