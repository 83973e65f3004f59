#include "node_verdict.h"

#include <gtest/gtest.h>

namespace rasd::daemon {
namespace {

using runtime::HealthState;

TEST(NodeVerdictTest, EveryDeviceHealthyIsOk) {
  const auto verdict = JudgeNode({{0, HealthState::kHealthy, ""}, {1, HealthState::kHealthy, ""}},
                                 std::nullopt);
  EXPECT_EQ(verdict.health, NodeHealth::kOk);
  EXPECT_TRUE(verdict.findings.empty());
  EXPECT_EQ(JudgeNode({}, std::nullopt).health, NodeHealth::kOk);
}

TEST(NodeVerdictTest, ADegradedDeviceStillTakesWorkSoTheNodeIsDegradedNotAProblem) {
  const auto verdict = JudgeNode(
      {{0, HealthState::kHealthy, ""}, {1, HealthState::kDegraded, "CE rate 12/h"}}, std::nullopt);
  EXPECT_EQ(verdict.health, NodeHealth::kDegraded);
  ASSERT_EQ(verdict.findings.size(), 1u);
  EXPECT_EQ(verdict.findings[0].level, NodeHealth::kDegraded);
  EXPECT_EQ(verdict.findings[0].device, 1);
  EXPECT_EQ(verdict.findings[0].state, "degraded");
  EXPECT_EQ(verdict.findings[0].reason, "CE rate 12/h");
}

TEST(NodeVerdictTest, DrainingOrIsolatedIsAProblemListedBeforeWarnings) {
  const auto verdict = JudgeNode({{3, HealthState::kDegraded, "ce"},
                                  {2, HealthState::kIsolated, "Xid 79"},
                                  {0, HealthState::kDraining, "operator"}},
                                 std::nullopt);
  EXPECT_EQ(verdict.health, NodeHealth::kProblem);
  ASSERT_EQ(verdict.findings.size(), 3u);
  EXPECT_EQ(verdict.findings[0].device, 0);  // problems by index, then the warning
  EXPECT_EQ(verdict.findings[0].state, "draining");
  EXPECT_EQ(verdict.findings[1].device, 2);
  EXPECT_EQ(verdict.findings[2].device, 3);
  EXPECT_EQ(verdict.findings[2].level, NodeHealth::kDegraded);
}

TEST(NodeVerdictTest, ANodeFaultIsAProblemWithEveryDeviceHealthyAndComesFirst) {
  const auto verdict =
      JudgeNode({{0, HealthState::kIsolated, "x"}}, std::string("APEI fatal: host memory"));
  EXPECT_EQ(verdict.health, NodeHealth::kProblem);
  ASSERT_EQ(verdict.findings.size(), 2u);
  EXPECT_FALSE(verdict.findings[0].device.has_value());
  EXPECT_EQ(verdict.findings[0].state, "node-fault");
  EXPECT_EQ(JudgeNode({{0, HealthState::kHealthy, ""}}, std::string("fatal")).health,
            NodeHealth::kProblem);
}

TEST(NodeVerdictTest, ABackendNamedInTheConfigButMissingIsAProblem) {
  const auto verdict = JudgeNode({}, std::nullopt, {"cuda: cannot load libcuda.so.1"});
  EXPECT_EQ(verdict.health, NodeHealth::kProblem);
  ASSERT_EQ(verdict.findings.size(), 1u);
  EXPECT_EQ(verdict.findings[0].state, "backend-missing");
  EXPECT_EQ(verdict.findings[0].reason, "cuda: cannot load libcuda.so.1");
}

}  // namespace
}  // namespace rasd::daemon
