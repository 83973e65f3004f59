// LinkHealth on a SimulatedEventLoop: link reports handed to the pipeline as
// the sources hand them, LinkPolicy's decisions carried out on a simulator
// runtime (the links-usable flag, the link's hold in DeviceHealth), its one
// timer on simulated time, its state saved in the pipeline's transaction in
// a real store and read back after a restart. Nothing here sleeps.

#include "link_health.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using runtime::HealthState;

class LinkHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("link-health");
    Boot();
  }
  void TearDown() override {
    Drop();
    fs::remove_all(dir_);
  }
  void Drop() {
    links_.reset();
    pipeline_.reset();
    actuator_.reset();
    node_fault_.reset();
    jobs_.reset();
    health_.reset();
    runtime_.reset();
    host_.reset();
    store_.reset();
  }
  // A fresh daemon's worth of state on the same state directory.
  void Boot() {
    Drop();
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime();
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    ASSERT_TRUE(health_->Restore().has_value());
    jobs_ = std::make_unique<jobs::JobManager>(*runtime_, 1000ms);
    fs::create_directories(dir_ / "host");
    host_ = std::make_unique<common::HostEnv>(dir_ / "host", loop_.SharedClock());
    node_fault_ = std::make_unique<NodeFault>(*store_, loop_.GetClock());
    actuator_ = std::make_unique<Actuator>(*host_, *store_, *runtime_, *health_, *node_fault_,
                                           Actuator::Options{});
    pipeline_ = std::make_unique<RasPipeline>(loop_, *runtime_, policy_, *actuator_, *health_,
                                              *store_, RasPipeline::Options{});
    links_ = std::make_unique<LinkHealth>(
        loop_, *runtime_, *health_, *jobs_, *store_, *pipeline_,
        LinkHealth::Options{.up_debounce = 30s, .flap_limit = 3, .flap_window = 3600s});
    links_->Load();
  }

  HealthState Gate(int device) { return (*runtime_->GetDevice(device))->Health(); }
  bool Usable(int device) { return (*runtime_->GetDevice(device))->LinksUsable(); }
  // The RDMA poller's report, in a batch of its own.
  static ras::LinkReport Report(int device, std::vector<std::string> down) {
    return {.source = "RDMA", .down = {{device, std::move(down)}}};
  }
  void Down(int device) { pipeline_->Handle({}, {}, {Report(device, {"mlx5_0 port 1"})}); }
  void Up(int device) { pipeline_->Handle({}, {}, {Report(device, {})}); }
  // The link state as saved, by device UUID.
  nlohmann::json Saved() {
    auto value = store_->LoadNodeValue("link_health");
    if (!value || !*value) return nullptr;
    return nlohmann::json::parse(**value);
  }
  std::string Uuid(int device) { return (*runtime_->GetDevice(device))->Properties().uuid; }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<jobs::JobManager> jobs_;
  std::unique_ptr<common::HostEnv> host_;
  ras::PolicyEngine policy_;
  std::unique_ptr<NodeFault> node_fault_;
  std::unique_ptr<Actuator> actuator_;
  std::unique_ptr<RasPipeline> pipeline_;
  std::unique_ptr<LinkHealth> links_;
};

TEST_F(LinkHealthTest, ADeviceWhoseLinkIsDownIsOutOfCollectivesUntilTheDebounceEnds) {
  const std::size_t pipeline_timers = loop_.ArmedTimers();  // its hourly retention
  Down(1);
  EXPECT_FALSE(Usable(1));
  EXPECT_EQ(Gate(1), HealthState::kDegraded);
  EXPECT_TRUE(health_->Holds(1, HealthCause::kLink));
  EXPECT_TRUE(Usable(0));
  Up(1);
  EXPECT_EQ(links_->Clears(1), "by itself: its links are up, it rejoins once they stayed up 30 s");
  loop_.AdvanceBy(29s);
  EXPECT_FALSE(Usable(1));
  loop_.AdvanceBy(1s);
  EXPECT_TRUE(Usable(1));
  EXPECT_EQ(Gate(1), HealthState::kHealthy);
  loop_.AdvanceBy(1s);  // the store's checkpoint after the last commit
  EXPECT_EQ(loop_.ArmedTimers(), pipeline_timers) << "nothing left pending";
  const auto actions = store_->QueryActions(1, 10);
  ASSERT_TRUE(actions.has_value());
  ASSERT_EQ(actions->size(), 2u);
  EXPECT_EQ((*actions)[0].rule, "link-up");
  EXPECT_EQ((*actions)[1].rule, "link-down");
}

TEST_F(LinkHealthTest, TheLinksReturnLiftsOnlyItsOwnHold) {
  Down(0);
  ASSERT_TRUE(health_
                  ->DecideAndSave({.device = 0,
                                   .cause = HealthCause::kPolicy,
                                   .target = HealthState::kDegraded,
                                   .reason = "CE over threshold"})
                  .has_value());
  EXPECT_FALSE(links_->Clears(0).has_value()) << "not the link's doing alone";
  Up(0);
  loop_.AdvanceBy(30s);
  EXPECT_TRUE(Usable(0)) << "back in collectives";
  EXPECT_EQ(Gate(0), HealthState::kDegraded) << "the policy's Degraded stands";
  EXPECT_EQ(health_->StatusOf(0).reason, "CE over threshold");
}

TEST_F(LinkHealthTest, AFlappingDeviceStaysOutUntilAnOperatorReturnsIt) {
  for (int i = 0; i < 3; ++i) {
    Down(1);
    Up(1);
    loop_.AdvanceBy(10s);
  }
  loop_.AdvanceBy(24h);
  EXPECT_FALSE(Usable(1));
  EXPECT_EQ(Gate(1), HealthState::kDegraded);
  EXPECT_EQ(links_->Clears(1), "an operator: rasctl undrain (its links were flapping)");
  // It outlives a restart.
  Boot();
  EXPECT_FALSE(Usable(1));
  EXPECT_EQ(Gate(1), HealthState::kDegraded);
  Up(1);
  loop_.AdvanceBy(24h);
  EXPECT_FALSE(Usable(1)) << "still held";
  // The operator's undrain: every hold lifted, the link's hold ends.
  ASSERT_TRUE(health_
                  ->DecideAndSave({.device = 1,
                                   .cause = HealthCause::kOperator,
                                   .target = HealthState::kHealthy,
                                   .reason = "cable replaced"})
                  .has_value());
  links_->OnOperatorReturned(1);
  EXPECT_TRUE(Usable(1));
  EXPECT_EQ(Gate(1), HealthState::kHealthy);
  Boot();
  EXPECT_TRUE(Usable(1)) << "nothing held after a restart either";
}

// Links train after a boot: downs and ups within the settle window are
// read, not acted on (no Degraded, no flap counted); what they are when it
// ends decides. Without the window the same reports make it flapping.
TEST_F(LinkHealthTest, LinksTrainingAfterABootAreDecidedWhenTheSettleWindowEnds) {
  links_->SetSettle(300s);
  links_->SettleFrom(loop_.GetClock().Wall() - 20s);  // booted 20 s ago
  ASSERT_TRUE(links_->SettlingUntil().has_value());
  for (int i = 0; i < 5; ++i) {
    Down(1);
    EXPECT_TRUE(Usable(1));
    EXPECT_EQ(Gate(1), HealthState::kHealthy);
    loop_.AdvanceBy(10s);
    Up(1);
    loop_.AdvanceBy(10s);
  }
  Down(0);  // still down when the window ends
  loop_.AdvanceBy(300s);
  EXPECT_FALSE(links_->SettlingUntil().has_value());
  EXPECT_TRUE(Usable(1)) << "up at the end: never out, no flap";
  EXPECT_EQ(Gate(1), HealthState::kHealthy);
  EXPECT_FALSE(Usable(0)) << "down at the end: out as any link down";
  EXPECT_EQ(Gate(0), HealthState::kDegraded);

  // A driver load starts another window; one that has passed changes nothing.
  links_->SettleFrom(loop_.GetClock().Wall() - 400s);
  EXPECT_FALSE(links_->SettlingUntil().has_value());
  links_->SettleFrom(loop_.GetClock().Wall());
  for (int i = 0; i < 3; ++i) {
    Down(1);
    Up(1);
  }
  loop_.AdvanceBy(301s);
  EXPECT_TRUE(Usable(1));

  // The same reports with no window: three downs in an hour are a flap.
  for (int i = 0; i < 3; ++i) {
    Down(1);
    Up(1);
    loop_.AdvanceBy(10s);
  }
  loop_.AdvanceBy(1h);
  EXPECT_FALSE(Usable(1));
}

TEST_F(LinkHealthTest, ALinkDownAcrossARestartIsLiftedWhenItComesBack) {
  Down(0);
  Boot();
  EXPECT_FALSE(Usable(0));
  EXPECT_EQ(Gate(0), HealthState::kDegraded);
  Up(0);
  loop_.AdvanceBy(30s);
  EXPECT_TRUE(Usable(0));
  EXPECT_EQ(Gate(0), HealthState::kHealthy);
}

TEST_F(LinkHealthTest, AStoreThatCannotSaveLeavesTheDecisionsStandingAndSavesThemTogetherLater) {
  store_->SetWriteFault([](std::string_view) -> std::optional<Error> {
    return Error{ErrorCode::kIoError, "disk full"};
  });
  // The port's change as the poller stores it, in the batch of its report.
  ras::RasEvent report{.origin = "infiniband",
                       .severity = ras::Severity::kInfo,
                       .device = 1,
                       .summary = "mlx5_0 port 1 down"};
  report.time = loop_.GetClock().Wall();
  pipeline_->Handle({report}, {}, {Report(1, {"mlx5_0 port 1"})});
  EXPECT_FALSE(Usable(1));
  EXPECT_EQ(Gate(1), HealthState::kDegraded);
  EXPECT_EQ(pipeline_->GetStats().backlog_batches, 1u) << "the batch waits, with its link rows";
  EXPECT_TRUE(Saved().is_null()) << "no link state saved without its hold";
  EXPECT_TRUE(store_->LoadDeviceStates()->empty());

  store_->SetWriteFault(nullptr);
  loop_.AdvanceBy(100ms);  // the pipeline's first retry
  EXPECT_EQ(pipeline_->GetStats().backlog_batches, 0u);
  EXPECT_EQ(*store_->EventRows(), 1u);
  const auto states = store_->LoadDeviceStates();
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ(states->front().state, "degraded");
  const auto saved = Saved();
  ASSERT_TRUE(saved.contains(Uuid(1))) << saved.dump();
  EXPECT_EQ(saved[Uuid(1)]["degraded_by_link"], true);
  EXPECT_EQ(saved[Uuid(1)]["links"], nlohmann::json::array({"mlx5_0 port 1"}));

  Up(1);
  loop_.AdvanceBy(30s);
  EXPECT_EQ(Gate(1), HealthState::kHealthy);
  EXPECT_EQ(health_->UnsavedStates(), 0u);
  EXPECT_FALSE(Saved().contains(Uuid(1))) << "the rejoin saved by the debounce: " << Saved();
}

TEST_F(LinkHealthTest, ADebounceEndingWhileTheStoreFailsIsSavedWithTheBacklog) {
  Down(0);
  Up(0);
  store_->SetWriteFault([](std::string_view) -> std::optional<Error> {
    return Error{ErrorCode::kIoError, "disk full"};
  });
  loop_.AdvanceBy(30s);
  EXPECT_TRUE(Usable(0)) << "the rejoin stands";
  EXPECT_EQ(Gate(0), HealthState::kHealthy);
  EXPECT_EQ(Saved()[Uuid(0)]["degraded_by_link"], true) << "not saved yet";
  store_->SetWriteFault(nullptr);
  loop_.AdvanceBy(11s);  // past the longest retry delay
  EXPECT_FALSE(Saved().contains(Uuid(0))) << Saved();
  EXPECT_EQ(store_->LoadDeviceStates()->front().state, "healthy");
  // A restart finds it in collectives.
  Boot();
  EXPECT_TRUE(Usable(0));
  EXPECT_EQ(Gate(0), HealthState::kHealthy);
}

TEST_F(LinkHealthTest, BatchesWaitingForTheStoreSaveTheLatestLinkState) {
  store_->SetWriteFault([](std::string_view) -> std::optional<Error> {
    return Error{ErrorCode::kIoError, "disk full"};
  });
  Down(1);
  Down(0);
  EXPECT_EQ(pipeline_->GetStats().backlog_batches, 2u);
  store_->SetWriteFault(nullptr);
  loop_.AdvanceBy(11s);
  EXPECT_EQ(pipeline_->GetStats().backlog_batches, 0u);
  const auto saved = Saved();
  EXPECT_TRUE(saved.contains(Uuid(0)) && saved.contains(Uuid(1))) << saved;
  EXPECT_EQ(store_->LoadDeviceStates()->size(), 2u);
}

TEST_F(LinkHealthTest, AReportThatChangesNothingWritesNothing) {
  Up(0);
  Up(1);
  EXPECT_TRUE(Saved().is_null());
  EXPECT_EQ(*store_->EventRows(), 0u);
  Down(1);
  const auto saved = Saved().dump();
  Down(1);
  EXPECT_EQ(Saved().dump(), saved);
  EXPECT_EQ(store_->QueryActions(1, 10)->size(), 1u) << "one link-down, not one per poll";
}

}  // namespace
}  // namespace rasd::daemon
