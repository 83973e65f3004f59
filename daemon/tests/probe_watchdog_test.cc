// ProbeWatchdog on a SimulatedEventLoop, a simulator runtime and a real
// store: a call past its deadline drains its device, one past N deadlines
// isolates it, a call that returns lifts the drain after a deadline, and an
// isolation waits for the operator.

#include "probe_watchdog.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "rasd/common/simulated_event_loop.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using runtime::HealthState;

class ProbeWatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("probe-watchdog");
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime({.devices = 4});
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    ASSERT_TRUE(health_->Restore().has_value());
    watchdog_ = std::make_unique<ProbeWatchdog>(
        loop_, *health_, ProbeWatchdog::Options{.deadline = 1000ms, .isolate_after = 3});
    watchdog_->Watch(
        "NVML",
        [this] {
          std::vector<drivers::ProbeCalls::Call> calls;
          for (const auto& [name, since] : running_)
            calls.push_back({name, "nvmlDeviceGetTotalEccErrors", loop_.Now() - since});
          return calls;
        },
        [](std::string_view name) -> std::optional<int> {
          if (name == "0000:01:00.0") return 1;
          if (name == "0000:02:00.0") return 2;
          return std::nullopt;
        });
  }
  void TearDown() override {
    watchdog_.reset();
    health_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  HealthState Gate(int device) { return (*runtime_->GetDevice(device))->Health(); }
  // As rasctl undrain decides (without its self-test).
  bool Undrain(int device) {
    return health_
        ->DecideAndSave({.device = device,
                         .cause = HealthCause::kOperator,
                         .target = HealthState::kHealthy,
                         .reason = "undrained"})
        .has_value();
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<ProbeWatchdog> watchdog_;
  std::map<std::string, std::chrono::nanoseconds> running_;  // device name -> call start
};

TEST_F(ProbeWatchdogTest, AStuckCallDrainsItsDeviceThenIsolatesItAndNamesTheCall) {
  running_["0000:01:00.0"] = loop_.Now();
  loop_.AdvanceBy(900ms);
  EXPECT_EQ(Gate(1), HealthState::kHealthy) << "within its deadline: slow, not stuck";
  loop_.AdvanceBy(350ms);
  EXPECT_EQ(Gate(1), HealthState::kDraining) << "one deadline: no new work";
  EXPECT_EQ(health_->StatusOf(1).cause, HealthCause::kProbe);
  const std::string reason = health_->StatusOf(1).reason;
  EXPECT_NE(reason.find("nvmlDeviceGetTotalEccErrors"), std::string::npos) << reason;
  EXPECT_NE(reason.find("NVML"), std::string::npos) << reason;
  EXPECT_EQ(Gate(0), HealthState::kHealthy);
  EXPECT_EQ(Gate(2), HealthState::kHealthy) << "only the device whose call is stuck";

  loop_.AdvanceBy(2s);
  EXPECT_EQ(Gate(1), HealthState::kIsolated) << "three deadlines";
  running_.clear();  // the call returns at last
  loop_.AdvanceBy(5s);
  EXPECT_EQ(Gate(1), HealthState::kIsolated) << "an isolation waits for the operator";
  EXPECT_EQ(watchdog_->Held().at(1), HealthState::kIsolated);
}

TEST_F(ProbeWatchdogTest, ADrainLiftsADeadlineAfterTheCallReturns) {
  running_["0000:02:00.0"] = loop_.Now();
  loop_.AdvanceBy(1500ms);
  EXPECT_EQ(Gate(2), HealthState::kDraining);
  running_.clear();
  loop_.AdvanceBy(500ms);
  EXPECT_EQ(Gate(2), HealthState::kDraining) << "the debounce: a deadline of calls that return";
  loop_.AdvanceBy(1s);
  EXPECT_EQ(Gate(2), HealthState::kHealthy);
  EXPECT_TRUE(watchdog_->Held().empty());
}

// An operator's undrain is heeded even with the call still stuck, and the
// call is judged again from the undrain: out of service after a deadline
// more, not at once, and never forgotten.
TEST_F(ProbeWatchdogTest, AnUndrainWithTheCallStillStuckIsJudgedAgainFromTheUndrain) {
  running_["0000:01:00.0"] = loop_.Now();
  loop_.AdvanceBy(3500ms);
  ASSERT_EQ(Gate(1), HealthState::kIsolated);
  ASSERT_TRUE(Undrain(1));
  ASSERT_EQ(Gate(1), HealthState::kHealthy);
  loop_.AdvanceBy(750ms);
  EXPECT_EQ(Gate(1), HealthState::kHealthy) << "within a deadline of the undrain";
  loop_.AdvanceBy(500ms);
  EXPECT_EQ(Gate(1), HealthState::kDraining) << "a deadline after the undrain, still stuck";
  loop_.AdvanceBy(2s);
  EXPECT_EQ(Gate(1), HealthState::kIsolated) << "three deadlines after the undrain";
  running_.clear();
  ASSERT_TRUE(Undrain(1));
  loop_.AdvanceBy(3s);
  EXPECT_EQ(Gate(1), HealthState::kHealthy) << "the call returned: nothing to judge";
  EXPECT_TRUE(watchdog_->Held().empty());
}

TEST_F(ProbeWatchdogTest, ACallAboutADeviceRasdDoesNotRunDecidesNothing) {
  running_["0000:99:00.0"] = loop_.Now();
  loop_.AdvanceBy(10s);
  for (int device = 0; device < 4; ++device) EXPECT_EQ(Gate(device), HealthState::kHealthy);
  EXPECT_TRUE(watchdog_->Held().empty());
}

}  // namespace
}  // namespace rasd::daemon
