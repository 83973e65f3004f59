// DeviceHealth on a SimulatedEventLoop, a simulator runtime and a real
// SQLite store: holds per cause, the worst one in force, each cause lifting
// only its own; typed changes pushed to subscribers; the self-test's
// window; holds saved with the state and read back at start, damaged or not.

#include "device_health.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"
#include "state_db_sql.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using runtime::HealthState;

class DeviceHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("health");
    Boot();
  }
  void TearDown() override {
    health_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // A fresh daemon's worth of state on the same state directory.
  void Boot() {
    health_.reset();
    runtime_.reset();
    store_.reset();
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime();
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    ASSERT_TRUE(health_->Restore().has_value());
  }

  HealthOutcome Decide(int device, HealthCause cause, HealthState target,
                       const std::string& reason = "why") {
    auto decided = health_->DecideAndSave(
        {.device = device, .cause = cause, .target = target, .reason = reason});
    EXPECT_TRUE(decided.has_value()) << decided.error().message;
    return decided.value_or(HealthOutcome{});
  }
  HealthState Gate(int device) { return (*runtime_->GetDevice(device))->Health(); }

  void Sql(const std::string& sql) { ExecStateSql(dir_ / "state", sql); }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<DeviceHealth> health_;
};

TEST_F(DeviceHealthTest, TheWorstHoldIsInForceAndACauseLiftsOnlyItsOwn) {
  EXPECT_TRUE(Decide(0, HealthCause::kLink, HealthState::kDegraded, "link down").Changed());
  const auto isolated = Decide(0, HealthCause::kPolicy, HealthState::kIsolated, "xid 79");
  EXPECT_EQ(isolated.from, HealthState::kDegraded);
  EXPECT_EQ(isolated.to, HealthState::kIsolated);
  EXPECT_EQ(Gate(0), HealthState::kIsolated);
  EXPECT_EQ(health_->StatusOf(0).reason, "xid 79");
  EXPECT_EQ(health_->StatusOf(0).cause, HealthCause::kPolicy);

  // The link comes back: its hold goes, the policy's isolation stands.
  EXPECT_FALSE(Decide(0, HealthCause::kLink, HealthState::kHealthy, "links up").Changed());
  EXPECT_EQ(Gate(0), HealthState::kIsolated);
  EXPECT_FALSE(health_->Holds(0, HealthCause::kLink));

  // A hold only grows: a milder decision of the same cause changes nothing.
  EXPECT_FALSE(Decide(0, HealthCause::kPolicy, HealthState::kDegraded).Changed());
  EXPECT_EQ(Gate(0), HealthState::kIsolated);
  EXPECT_EQ(Gate(1), HealthState::kHealthy) << "the other device is untouched";
}

TEST_F(DeviceHealthTest, AMilderCauseOutlivesAWorseOneThatLifts) {
  Decide(1, HealthCause::kPolicy, HealthState::kDegraded, "CE over threshold");
  Decide(1, HealthCause::kLink, HealthState::kDegraded, "link down");
  Decide(1, HealthCause::kLink, HealthState::kHealthy, "links up");
  EXPECT_EQ(Gate(1), HealthState::kDegraded) << "the policy's Degraded stands";
  EXPECT_EQ(health_->StatusOf(1).reason, "CE over threshold");
  EXPECT_EQ(health_->WorstExcept(1, HealthCause::kLink), HealthState::kDegraded);
}

TEST_F(DeviceHealthTest, OnlyTheOperatorLiftsEveryHoldAndRecoveryOnlyThePolicys) {
  Decide(0, HealthCause::kPolicy, HealthState::kIsolated);
  Decide(0, HealthCause::kOperator, HealthState::kDraining, "maintenance");
  EXPECT_EQ(Decide(0, HealthCause::kRecovery, HealthState::kHealthy).to, HealthState::kDraining)
      << "recovery lifts the policy's isolation, not the operator's drain";
  EXPECT_FALSE(health_->Holds(0, HealthCause::kPolicy));
  EXPECT_EQ(Gate(0), HealthState::kDraining);

  Decide(0, HealthCause::kLink, HealthState::kDegraded);
  Decide(0, HealthCause::kRestore, HealthState::kIsolated);
  const auto undrained = Decide(0, HealthCause::kOperator, HealthState::kHealthy, "repaired");
  EXPECT_EQ(undrained.from, HealthState::kIsolated);
  EXPECT_EQ(undrained.to, HealthState::kHealthy);
  EXPECT_TRUE(health_->StatusOf(0).holds.empty());
  EXPECT_EQ(health_->StatusOf(0).reason, "repaired");
  EXPECT_EQ(Gate(0), HealthState::kHealthy);
}

TEST_F(DeviceHealthTest, SubscribersHearEachChangeOnceWithItsCause) {
  std::vector<DeviceStateChanged> heard;
  auto subscription =
      health_->Subscribe([&](const DeviceStateChanged& change) { heard.push_back(change); });
  Decide(1, HealthCause::kPolicy, HealthState::kDraining);
  Decide(1, HealthCause::kPolicy, HealthState::kDegraded);  // no change
  Decide(1, HealthCause::kLink, HealthState::kDegraded);    // no change
  Decide(1, HealthCause::kOperator, HealthState::kHealthy);
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[0].device, 1);
  EXPECT_EQ(heard[0].from, HealthState::kHealthy);
  EXPECT_EQ(heard[0].to, HealthState::kDraining);
  EXPECT_EQ(heard[0].cause, HealthCause::kPolicy);
  EXPECT_EQ(heard[1].to, HealthState::kHealthy);
  EXPECT_EQ(heard[1].cause, HealthCause::kOperator);
  EXPECT_EQ(Gate(1), HealthState::kHealthy) << "the gate is set before subscribers hear";

  subscription.reset();
  Decide(1, HealthCause::kPolicy, HealthState::kIsolated);
  EXPECT_EQ(heard.size(), 2u) << "a dropped subscription hears nothing";
}

TEST_F(DeviceHealthTest, ASubscriberThatDecidesInTurnSeesItsOwnChange) {
  std::vector<HealthState> heard;
  auto subscription = health_->Subscribe([&](const DeviceStateChanged& change) {
    heard.push_back(change.to);
    if (change.to == HealthState::kIsolated)
      (void)health_->Decide({.device = 0,
                             .cause = HealthCause::kRecovery,
                             .target = HealthState::kIsolated,
                             .reason = "needs an operator"});
  });
  Decide(0, HealthCause::kPolicy, HealthState::kIsolated);
  EXPECT_EQ(heard, std::vector<HealthState>{HealthState::kIsolated});
  EXPECT_TRUE(health_->Holds(0, HealthCause::kRecovery));
  EXPECT_EQ(health_->StatusOf(0).reason, "needs an operator") << "the later of equal holds";
}

TEST_F(DeviceHealthTest, ASelfTestOpensAnIsolatedGateToDrainingAndADecisionMeanwhileStands) {
  Decide(0, HealthCause::kOperator, HealthState::kIsolated);
  ASSERT_TRUE(health_->OpenForSelfTest(0).has_value());
  EXPECT_EQ(Gate(0), HealthState::kDraining) << "the test runs as an admitted job";
  EXPECT_EQ(health_->StateOf(0), HealthState::kIsolated) << "the holds are unchanged";
  EXPECT_FALSE(health_->CloseSelfTest(0).overtaken);
  EXPECT_EQ(Gate(0), HealthState::kIsolated);

  ASSERT_TRUE(health_->OpenForSelfTest(0).has_value());
  Decide(0, HealthCause::kPolicy, HealthState::kIsolated, "again");
  EXPECT_EQ(Gate(0), HealthState::kIsolated) << "the newer isolation closes the gate at once";
  EXPECT_TRUE(health_->CloseSelfTest(0).overtaken);
  EXPECT_EQ(Gate(0), HealthState::kIsolated);

  EXPECT_FALSE(health_
                   ->Decide({.device = 0,
                             .cause = HealthCause::kSelfTest,
                             .target = HealthState::kHealthy,
                             .reason = "x"})
                   .has_value())
      << "a self-test holds nothing";
  EXPECT_FALSE(health_->OpenForSelfTest(9).has_value());
}

TEST_F(DeviceHealthTest, APolicyDecisionMilderThanIsolatedLeavesTheTestRunningButOvertakesIt) {
  Decide(0, HealthCause::kPolicy, HealthState::kIsolated);
  ASSERT_TRUE(health_->OpenForSelfTest(0).has_value());
  Decide(0, HealthCause::kPolicy, HealthState::kDegraded, "CE over threshold");
  EXPECT_EQ(Gate(0), HealthState::kDraining) << "the test is not cut short";
  EXPECT_TRUE(health_->CloseSelfTest(0).overtaken) << "an undrain must not return it on this test";
  EXPECT_EQ(Gate(0), HealthState::kIsolated);
}

TEST_F(DeviceHealthTest, ALinksDegradedDuringASelfTestDoesNotOvertakeIt) {
  Decide(0, HealthCause::kPolicy, HealthState::kIsolated);
  std::vector<DeviceStateChanged> heard;
  auto subscription =
      health_->Subscribe([&](const DeviceStateChanged& change) { heard.push_back(change); });
  ASSERT_TRUE(health_->OpenForSelfTest(0).has_value());
  Decide(0, HealthCause::kLink, HealthState::kDegraded, "reset dropped the links");
  EXPECT_EQ(Gate(0), HealthState::kDraining) << "the test goes on";
  EXPECT_FALSE(health_->CloseSelfTest(0).overtaken);
  EXPECT_TRUE(heard.empty()) << "the window moves the gate, not the state subscribers hear of";
  EXPECT_EQ(Decide(0, HealthCause::kRecovery, HealthState::kHealthy).to, HealthState::kDegraded)
      << "recovered, and Degraded for its links";
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].from, HealthState::kIsolated);
  EXPECT_EQ(heard[0].to, HealthState::kDegraded);
}

TEST_F(DeviceHealthTest, ALinkDecisionThatChangesNothingWritesNoActionRow) {
  Decide(0, HealthCause::kPolicy, HealthState::kIsolated);
  Decide(0, HealthCause::kLink, HealthState::kDegraded);
  Decide(0, HealthCause::kLink, HealthState::kHealthy);
  Decide(1, HealthCause::kOperator, HealthState::kIsolated);
  Decide(1, HealthCause::kOperator, HealthState::kIsolated);
  EXPECT_TRUE(store_->QueryActions(0, 10)->empty()) << "the device stayed isolated throughout";
  EXPECT_EQ(store_->QueryActions(1, 10)->size(), 2u) << "an operator's every call is recorded";
}

TEST_F(DeviceHealthTest, AStateFromBeforeHoldsIsClaimedByTheCauseThatKnowsItMadeIt) {
  Decide(0, HealthCause::kLink, HealthState::kDegraded, "link down");
  health_.reset();
  runtime_.reset();
  store_.reset();
  Sql("UPDATE device_states SET holds = '';");
  Boot();
  EXPECT_TRUE(health_->Holds(0, HealthCause::kRestore));
  EXPECT_FALSE(health_->ClaimRestoredHold(0, HealthCause::kLink, HealthState::kIsolated))
      << "only a hold at the state the cause knows";
  EXPECT_TRUE(health_->ClaimRestoredHold(0, HealthCause::kLink, HealthState::kDegraded));
  EXPECT_FALSE(health_->Holds(0, HealthCause::kRestore));
  Decide(0, HealthCause::kLink, HealthState::kHealthy);
  EXPECT_EQ(Gate(0), HealthState::kHealthy) << "the link lifts it as before the upgrade";
  EXPECT_FALSE(health_->ClaimRestoredHold(1, HealthCause::kLink, HealthState::kDegraded));
}

TEST_F(DeviceHealthTest, HoldsSurviveARestartWithTheirCauses) {
  Decide(0, HealthCause::kPolicy, HealthState::kDegraded, "CE over threshold");
  Decide(0, HealthCause::kLink, HealthState::kDegraded, "link down");
  Decide(1, HealthCause::kOperator, HealthState::kIsolated, "bad fan");
  Boot();
  EXPECT_EQ(Gate(0), HealthState::kDegraded);
  EXPECT_TRUE(health_->Holds(0, HealthCause::kPolicy));
  EXPECT_TRUE(health_->Holds(0, HealthCause::kLink));
  EXPECT_EQ(Gate(1), HealthState::kIsolated);
  EXPECT_EQ(health_->StatusOf(1).reason, "bad fan");
  // The link's hold lifts after the restart as before it; the policy's stays.
  Decide(0, HealthCause::kLink, HealthState::kHealthy);
  EXPECT_EQ(Gate(0), HealthState::kDegraded);
  EXPECT_EQ(health_->StatusOf(0).cause, HealthCause::kPolicy);
}

TEST_F(DeviceHealthTest, AStateSavedWithoutReadableHoldsStandsUntilAnOperatorLiftsIt) {
  Decide(0, HealthCause::kLink, HealthState::kDegraded, "link down");
  Decide(1, HealthCause::kLink, HealthState::kIsolated, "x");
  health_.reset();
  runtime_.reset();
  store_.reset();
  // One row as an older rasd wrote it (no holds), the other's holds damaged.
  Sql("UPDATE device_states SET holds = '[{\"cause\": 7}]';"
      "UPDATE device_states SET holds = '' WHERE device_uuid = "
      "(SELECT MIN(device_uuid) FROM device_states);");
  Boot();
  for (int device : {0, 1}) {
    SCOPED_TRACE(device);
    EXPECT_NE(Gate(device), HealthState::kHealthy);
    EXPECT_TRUE(health_->Holds(device, HealthCause::kRestore));
    Decide(device, HealthCause::kLink, HealthState::kHealthy);
    EXPECT_NE(Gate(device), HealthState::kHealthy) << "the link cannot lift what it may not own";
    Decide(device, HealthCause::kOperator, HealthState::kHealthy);
    EXPECT_EQ(Gate(device), HealthState::kHealthy);
  }
}

TEST_F(DeviceHealthTest, ThePolicysRowsWaitForTheBatchAndOtherCausesWriteAnActionRow) {
  ASSERT_TRUE(health_
                  ->Decide({.device = 0,
                            .cause = HealthCause::kPolicy,
                            .target = HealthState::kDraining,
                            .reason = "r",
                            .rule = "xid-79"})
                  .has_value());
  EXPECT_EQ(health_->UnsavedStates(), 1u);
  ras::StoreBatch batch;
  health_->TakePending(batch);
  ASSERT_EQ(batch.states.size(), 1u);
  EXPECT_EQ(batch.states[0].state, "draining");
  EXPECT_NE(batch.states[0].holds.find("\"policy\""), std::string::npos);
  EXPECT_TRUE(batch.actions.empty()) << "the actuator writes the policy's action row";
  ASSERT_TRUE(store_->Commit(batch).has_value());
  health_->Committed();
  EXPECT_EQ(health_->UnsavedStates(), 0u);

  Decide(0, HealthCause::kOperator, HealthState::kHealthy, "fixed");
  const auto actions = store_->QueryActions(0, 10);
  ASSERT_TRUE(actions.has_value());
  ASSERT_EQ(actions->size(), 1u);
  EXPECT_EQ((*actions)[0].action, "undrain-device");
  EXPECT_EQ((*actions)[0].rule, "operator");
  EXPECT_EQ((*actions)[0].detail, "draining -> healthy");
}

TEST_F(DeviceHealthTest, ADecisionThatCannotBeSavedStandsSaysSoAndWaitsForTheNextBatch) {
  int retries_armed = 0;
  health_->SetUnsavedCallback([&] { ++retries_armed; });
  store_->SetWriteFault([](std::string_view what) -> std::optional<Error> {
    if (what == "batch") return Error{ErrorCode::kIoError, "database or disk is full"};
    return std::nullopt;
  });
  auto isolated = health_->DecideAndSave({.device = 1,
                                          .cause = HealthCause::kOperator,
                                          .target = HealthState::kIsolated,
                                          .reason = "bad fan"});
  ASSERT_FALSE(isolated.has_value());
  EXPECT_EQ(isolated.error().code, ErrorCode::kIoError);
  EXPECT_NE(isolated.error().message.find("could not be saved"), std::string::npos);
  EXPECT_NE(isolated.error().message.find("disk is full"), std::string::npos);
  EXPECT_EQ(Gate(1), HealthState::kIsolated) << "the gate is closed all the same";
  EXPECT_EQ(retries_armed, 1);
  EXPECT_EQ(health_->UnsavedStates(), 1u);

  store_->SetWriteFault(nullptr);
  ras::StoreBatch batch;  // the pipeline's retry
  health_->TakePending(batch);
  ASSERT_EQ(batch.states.size(), 1u);
  ASSERT_EQ(batch.actions.size(), 1u) << "the action row waited with the state";
  ASSERT_TRUE(store_->Commit(batch).has_value());
  health_->Committed();
  Boot();
  EXPECT_EQ(Gate(1), HealthState::kIsolated);
  EXPECT_EQ(health_->StatusOf(1).reason, "bad fan");
}

TEST_F(DeviceHealthTest, CauseNamesReadBack) {
  for (HealthCause cause : {HealthCause::kPolicy, HealthCause::kLink, HealthCause::kOperator,
                            HealthCause::kSelfTest, HealthCause::kRecovery, HealthCause::kRestore,
                            HealthCause::kProbe, HealthCause::kSilentCorruption}) {
    EXPECT_EQ(ParseHealthCause(HealthCauseName(cause)), cause);
  }
  EXPECT_FALSE(ParseHealthCause("nobody").has_value());
}

}  // namespace
}  // namespace rasd::daemon
