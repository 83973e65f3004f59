// DeviceLifecycle on a SimulatedEventLoop: drain deadlines and recovery
// delays fire on simulated time, so nothing here sleeps for a timer. The
// self-test runs for real on the simulator in a worker thread; the tests
// wait for its completion to reach the loop, while the loop keeps serving.

#include "device_lifecycle.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "actuator.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using runtime::HealthState;

class DeviceLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("lifecycle");
    fs::create_directories(dir_ / "host");
    host_ = std::make_unique<common::HostEnv>(dir_ / "host", loop_.SharedClock());
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ =
        testing::SimRuntime({.memory_bytes_per_device = 32 << 20, .arena_bytes = 8 << 20}, &sim_);
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    node_fault_ = std::make_unique<NodeFault>(*store_, loop_.GetClock());
    actuator_ = std::make_unique<Actuator>(*host_, *store_, *runtime_, *health_, *node_fault_,
                                           Actuator::Options{});
    jobs_ = std::make_unique<jobs::JobManager>(*runtime_, 1000ms);
  }
  void TearDown() override {
    lifecycle_.reset();
    jobs_.reset();
    actuator_.reset();
    health_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  DeviceLifecycle& Make(DeviceLifecycle::Options options = {}) {
    options.self_test.pattern_bytes = 4 << 20;
    lifecycle_ = std::make_unique<DeviceLifecycle>(loop_, *runtime_, *health_, *node_fault_, *jobs_,
                                                   *store_, nullptr, options);
    return *lifecycle_;
  }

  HealthState StateOf(int device) { return (*runtime_->GetDevice(device))->Health(); }

  // Runs the loop until `done` or 20 s of real time (the self-test's worker
  // thread is real); simulated time does not move.
  bool RunUntil(const std::function<bool()>& done) {
    return rasd::testing::Eventually(
        [&] {
          loop_.RunUntilIdle();
          return done();
        },
        20s);
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<common::HostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<NodeFault> node_fault_;  // before actuator_: it outlives it
  std::unique_ptr<Actuator> actuator_;
  std::unique_ptr<jobs::JobManager> jobs_;
  std::unique_ptr<DeviceLifecycle> lifecycle_;
};

TEST_F(DeviceLifecycleTest, DrainArmsItsDeadlineOnTheLoopClock) {
  auto& lifecycle = Make({.drain_deadline = 30s});
  auto drained = lifecycle.Drain(1, "", 2500ms);
  ASSERT_TRUE(drained.has_value()) << drained.error().message;
  EXPECT_EQ(drained->state, HealthState::kDraining);
  EXPECT_EQ(drained->was, HealthState::kHealthy);
  EXPECT_EQ(drained->deadline, 2500ms);
  EXPECT_EQ(StateOf(1), HealthState::kDraining);
  EXPECT_EQ(lifecycle.PendingDrainDeadlines(), 1u);
  loop_.AdvanceBy(2499ms);
  EXPECT_EQ(lifecycle.PendingDrainDeadlines(), 1u);
  loop_.AdvanceBy(1ms);
  EXPECT_EQ(lifecycle.PendingDrainDeadlines(), 0u);
  // Without an explicit deadline, the configured one.
  drained = lifecycle.Drain(0, "maintenance", std::nullopt);
  ASSERT_TRUE(drained.has_value());
  EXPECT_EQ(drained->deadline, 30s);
  loop_.AdvanceBy(29s);
  EXPECT_EQ(lifecycle.PendingDrainDeadlines(), 1u);
  loop_.AdvanceBy(1s);
  EXPECT_EQ(lifecycle.PendingDrainDeadlines(), 0u);
  EXPECT_EQ(loop_.ArmedTimers(), 0u) << "nothing left armed once the deadlines passed";
}

TEST_F(DeviceLifecycleTest, RefusesWhatCannotBeDoneWithAClearError) {
  auto& lifecycle = Make();
  auto missing = lifecycle.Isolate(7, "");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(lifecycle.Isolate(0, "bad fan").has_value());
  auto drain = lifecycle.Drain(0, "", std::nullopt);
  ASSERT_FALSE(drain.has_value());
  EXPECT_NE(drain.error().message.find("isolated: nothing runs there"), std::string::npos);
  std::optional<Result<StateChange>> undrained;
  lifecycle.Undrain(9, "", false, [&](Result<StateChange> change) { undrained = change; });
  ASSERT_TRUE(undrained.has_value()) << "an unknown device is answered at once";
  EXPECT_EQ(undrained->error().code, ErrorCode::kNotFound);
}

TEST_F(DeviceLifecycleTest, TheSelfTestRunsOffTheLoopAndASecondUndrainIsRefused) {
  auto& lifecycle = Make();
  ASSERT_TRUE(lifecycle.Isolate(1, "").has_value());
  std::optional<Result<StateChange>> first, second;
  lifecycle.Undrain(1, "", false, [&](Result<StateChange> change) { first = change; });
  EXPECT_FALSE(first.has_value()) << "the answer waits for the self-test";
  EXPECT_TRUE(lifecycle.SelfTestRunning(1));
  // The loop is free: another undrain of the same device is refused at once.
  lifecycle.Undrain(1, "", false, [&](Result<StateChange> change) { second = change; });
  ASSERT_TRUE(second.has_value());
  ASSERT_FALSE(second->has_value());
  EXPECT_EQ(second->error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second->error().message.find("self-test already"), std::string::npos);
  // And the other device can be changed meanwhile.
  EXPECT_TRUE(lifecycle.Drain(0, "", 1s).has_value());

  ASSERT_TRUE(RunUntil([&] { return first.has_value(); }));
  ASSERT_TRUE(first->has_value()) << first->error().message;
  EXPECT_EQ((*first)->state, HealthState::kHealthy);
  EXPECT_EQ((*first)->was, HealthState::kIsolated);
  ASSERT_TRUE((*first)->self_test.has_value());
  EXPECT_TRUE((*first)->self_test->passed);
  EXPECT_FALSE(lifecycle.SelfTestRunning(1));
  EXPECT_EQ(StateOf(1), HealthState::kHealthy);
  auto last = lifecycle.LastSelfTest(1);
  ASSERT_TRUE(last.has_value());
  EXPECT_TRUE(last->passed);
  EXPECT_EQ(last->time, loop_.GetClock().Wall());
}

TEST_F(DeviceLifecycleTest, AFailedSelfTestKeepsTheDeviceIsolatedUnlessForced) {
  auto& lifecycle = Make();
  ASSERT_TRUE(sim_->InjectStickyFault(0).has_value());
  ASSERT_TRUE(lifecycle.Isolate(0, "").has_value());
  std::optional<Result<StateChange>> refused;
  lifecycle.Undrain(0, "", false, [&](Result<StateChange> change) { refused = change; });
  ASSERT_TRUE(RunUntil([&] { return refused.has_value(); }));
  ASSERT_FALSE(refused->has_value());
  EXPECT_NE(refused->error().message.find("stays isolated"), std::string::npos);
  EXPECT_EQ(StateOf(0), HealthState::kIsolated) << "the gate is closed again";

  std::optional<Result<StateChange>> forced;
  lifecycle.Undrain(0, "operator knows", true,
                    [&](Result<StateChange> change) { forced = change; });
  ASSERT_TRUE(RunUntil([&] { return forced.has_value(); }));
  ASSERT_TRUE(forced->has_value());
  EXPECT_TRUE((*forced)->forced);
  EXPECT_EQ(StateOf(0), HealthState::kHealthy);
}

TEST_F(DeviceLifecycleTest, AStateChangedDuringTheSelfTestIsNotUndone) {
  auto& lifecycle = Make();
  ASSERT_TRUE(lifecycle.Isolate(1, "").has_value());
  std::optional<Result<StateChange>> undrained;
  lifecycle.Undrain(1, "", false, [&](Result<StateChange> change) { undrained = change; });
  // While the test runs, the device is isolated again (the policy, say):
  // the self-test's completion must not put the gate back to Draining.
  ASSERT_TRUE(health_->DecideAndSave({.device = 1,
                                      .cause = HealthCause::kPolicy,
                                      .target = HealthState::kIsolated,
                                      .reason = "again"}));
  ASSERT_TRUE(RunUntil([&] { return undrained.has_value(); }));
  // The test passed on a healthy simulator, but the newer isolation stands.
  ASSERT_FALSE(undrained->has_value());
  EXPECT_EQ(undrained->error().code, ErrorCode::kAborted);
  EXPECT_NE(undrained->error().message.find("changed state during its self-test"),
            std::string::npos);
  EXPECT_EQ(StateOf(1), HealthState::kIsolated);
}

TEST_F(DeviceLifecycleTest, AutomaticRecoveryWaitsItsDelayAndGivesUpWithinTheWindow) {
  auto& lifecycle = Make({.auto_recover = true,
                          .auto_recover_delay = 5000ms,
                          .auto_recover_window = std::chrono::hours(1)});
  ras::Action isolate{.kind = ras::ActionKind::kIsolateDevice, .device = 0, .rule = "test"};
  actuator_->Execute(isolate, ras::RasEvent{}, std::nullopt);
  loop_.RunUntilIdle();  // the recovery is scheduled after the batch
  EXPECT_EQ(lifecycle.PendingRecoveries(), 1u);
  EXPECT_TRUE(lifecycle.RecoveryScheduled(0));
  EXPECT_FALSE(lifecycle.RecoveryScheduled(1));
  loop_.AdvanceBy(4999ms);
  EXPECT_EQ(StateOf(0), HealthState::kIsolated);
  EXPECT_EQ(lifecycle.PendingRecoveries(), 1u);
  loop_.AdvanceBy(1ms);
  EXPECT_EQ(lifecycle.PendingRecoveries(), 0u);
  ASSERT_TRUE(RunUntil([&] { return StateOf(0) == HealthState::kHealthy; }));

  // Isolated again 10 minutes later (inside the 1 h window): no second
  // automatic recovery; it waits for an operator.
  loop_.AdvanceBy(10min);
  actuator_->Execute(isolate, ras::RasEvent{}, std::nullopt);
  loop_.RunUntilIdle();  // the recovery is scheduled after the batch
  EXPECT_EQ(lifecycle.PendingRecoveries(), 0u);
  EXPECT_FALSE(lifecycle.RecoveryScheduled(0));
  EXPECT_NE(health_->StatusOf(0).reason.find("needs an operator"), std::string::npos);
  loop_.AdvanceBy(1h);
  EXPECT_EQ(StateOf(0), HealthState::kIsolated);
}

TEST_F(DeviceLifecycleTest, ThePolicysDecisionsDuringTheRecoverysSelfTestDoNotStopIt) {
  auto& lifecycle = Make({.auto_recover = true, .auto_recover_delay = 1000ms});
  ras::Action isolate{.kind = ras::ActionKind::kIsolateDevice, .device = 0, .rule = "test"};
  actuator_->Execute(isolate, ras::RasEvent{}, std::nullopt);
  loop_.RunUntilIdle();
  loop_.AdvanceBy(1000ms);  // the reset, then the self-test on its thread
  ASSERT_TRUE(lifecycle.SelfTestRunning(0));
  // Corrected errors on the device while it is tested: a policy decision.
  ras::Action degrade{.kind = ras::ActionKind::kDegradeDevice, .device = 0, .rule = "ce-device"};
  actuator_->Execute(degrade, ras::RasEvent{}, std::nullopt);
  ASSERT_TRUE(RunUntil([&] { return !lifecycle.SelfTestRunning(0); }));
  EXPECT_EQ(StateOf(0), HealthState::kHealthy) << health_->StatusOf(0).reason;
}

TEST_F(DeviceLifecycleTest, AnOperatorsIsolationDuringTheRecoveryKeepsTheDeviceOut) {
  auto& lifecycle = Make({.auto_recover = true, .auto_recover_delay = 1000ms});
  ras::Action isolate{.kind = ras::ActionKind::kIsolateDevice, .device = 1, .rule = "test"};
  actuator_->Execute(isolate, ras::RasEvent{}, std::nullopt);
  loop_.RunUntilIdle();
  loop_.AdvanceBy(1000ms);
  ASSERT_TRUE(lifecycle.SelfTestRunning(1));
  ASSERT_TRUE(lifecycle.Isolate(1, "pulled for inspection").has_value());
  ASSERT_TRUE(RunUntil([&] { return !lifecycle.SelfTestRunning(1); }));
  EXPECT_EQ(StateOf(1), HealthState::kIsolated);
  EXPECT_EQ(health_->StatusOf(1).reason, "pulled for inspection");
}

TEST_F(DeviceLifecycleTest, NoRecoveryWithoutAutoRecover) {
  auto& lifecycle = Make({.auto_recover = false});
  ras::Action isolate{.kind = ras::ActionKind::kIsolateDevice, .device = 1, .rule = "test"};
  actuator_->Execute(isolate, ras::RasEvent{}, std::nullopt);
  loop_.RunUntilIdle();  // the recovery is scheduled after the batch
  EXPECT_EQ(lifecycle.PendingRecoveries(), 0u);
  EXPECT_EQ(loop_.ArmedTimers(), 0u);
}

}  // namespace
}  // namespace rasd::daemon
