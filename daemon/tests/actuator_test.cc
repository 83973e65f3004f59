// The Actuator against a real simulator runtime and a real SQLite store:
// kill-consumer stops the owner of the poisoned allocation and nobody
// else; retired pages and device states come back after a restart; the
// policy never lowers a device's state; host pages are offlined through
// sysfs only when the config allows it.

#include "actuator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rasd/common/error_host_env.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ActuatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("actuator");
    fs::create_directories(dir_ / "host/sys/devices/system/memory");
    host_ = std::make_unique<common::ErrorHostEnv>(dir_ / "host",
                                                   std::make_shared<common::SystemClock>());
    Boot();
  }
  void TearDown() override {
    actuator_.reset();
    health_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // A fresh daemon's worth of state on the same state directory.
  void Boot(Actuator::Options options = {}) {
    actuator_.reset();
    health_.reset();
    runtime_.reset();
    store_.reset();
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ =
        testing::SimRuntime({.memory_bytes_per_device = 64 << 20, .arena_bytes = 8 << 20}, &sim_);
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    ASSERT_TRUE(health_->Restore().has_value());
    node_fault_ = std::make_unique<NodeFault>(*store_, loop_.GetClock());
    node_fault_->Restore();
    actuator_ =
        std::make_unique<Actuator>(*host_, *store_, *runtime_, *health_, *node_fault_, options);
    health_->SetActionCounter([this](const std::string& action, const std::string& result) {
      actuator_->Count(action, result);
    });
    ASSERT_TRUE(actuator_->Restore().has_value());
  }

  ras::Action Act(ras::ActionKind kind, std::optional<int> device,
                  std::optional<std::string> address) {
    std::optional<std::uint64_t> value;
    if (address) value = ras::ParsePrintedAddress(*address).value().value;
    return {.kind = kind, .device = device, .address = value, .rule = "test", .reason = "test"};
  }

  fs::path dir_;
  std::unique_ptr<common::ErrorHostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<runtime::Runtime> runtime_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<NodeFault> node_fault_;  // before actuator_: it outlives it
  std::unique_ptr<Actuator> actuator_;
  ras::RasEvent event_;
};

TEST_F(ActuatorTest, KillConsumerAbortsTheOwnerOfThePoisonedAllocationAndNobodyElse) {
  auto victim = *runtime_->CreateStream(0, {.owner = "job-victim"});
  auto victim_elsewhere = *runtime_->CreateStream(1, {.owner = "job-victim"});
  auto neighbour = *runtime_->CreateStream(0, {.owner = "job-neighbour"});
  auto pool = *runtime_->Pool(0);
  auto poisoned = *pool->Allocate(1 << 20, *victim);
  auto healthy = *pool->Allocate(1 << 20, *neighbour);
  const std::string address = fmt::format("0x{:x}", poisoned.address + 4096 * 3 + 8);

  const auto record =
      actuator_->Execute(Act(ras::ActionKind::kKillConsumer, 0, address), event_, std::nullopt);
  EXPECT_EQ(record.result, "ok");
  EXPECT_EQ(record.detail,
            "job job-victim stopped: its 2 stream(s) on device(s) 0,1 aborted; no other job's");
  EXPECT_TRUE(victim->Aborted());
  EXPECT_TRUE(victim_elsewhere->Aborted()) << "the job is stopped as a whole";
  EXPECT_FALSE(neighbour->Aborted());
  const drivers::KernelArg fill[] = {drivers::KernelArg::Address(healthy.address),
                                     drivers::KernelArg::Int(16), drivers::KernelArg::Float(1)};
  EXPECT_TRUE(neighbour->Launch("fill", fill).has_value());
  EXPECT_TRUE(neighbour->Synchronize(5s).has_value());

  const auto nobody =
      actuator_->Execute(Act(ras::ActionKind::kKillConsumer, 1, "0x7777"), event_, std::nullopt);
  EXPECT_EQ(nobody.result, "skipped") << "no allocation holds it";
  (void)victim->Synchronize(1s);
  (void)pool->Free(poisoned);
  (void)pool->Free(healthy);
}

TEST_F(ActuatorTest, RetiredPagesAndDeviceStatesComeBackAfterARestart) {
  auto stream = *runtime_->CreateStream(1, {.owner = "job"});
  auto pool = *runtime_->Pool(1);
  auto allocation = *pool->Allocate(1 << 20, *stream);
  const auto address = allocation.address + 5 * 4096 + 100;
  ASSERT_TRUE(stream->Synchronize(5s).has_value());
  ASSERT_TRUE(pool->Free(allocation).has_value());
  stream.reset();
  const std::vector<ras::RasEvent> events = {{.time = std::chrono::system_clock::now(),
                                              .origin = "sim",
                                              .severity = ras::Severity::kUcna}};
  const std::int64_t event_id = store_->RecordEvents(events)->front();
  const auto retired = actuator_->Execute(
      Act(ras::ActionKind::kRetirePage, 1, fmt::format("0x{:x}", address)), event_, event_id);
  EXPECT_EQ(retired.result, "ok") << retired.detail;
  EXPECT_EQ(retired.event_id, event_id);
  EXPECT_EQ(pool->Stats().retired_pages, 1u);
  EXPECT_EQ(
      actuator_->Execute(Act(ras::ActionKind::kDegradeDevice, 1, std::nullopt), event_, event_id)
          .detail,
      "healthy -> degraded");

  Boot();
  auto* restored = *runtime_->Pool(1);
  EXPECT_EQ(restored->Stats().retired_pages, 1u) << "re-applied at start";
  // No arena holds it yet: the page stays out once one does.
  auto again = *runtime_->CreateStream(1, {.owner = "job"});
  std::vector<runtime::Allocation> all;
  for (int i = 0; i < 64; ++i) {
    auto taken = restored->Allocate(1 << 20, *again);
    if (!taken) break;
    EXPECT_FALSE(taken->address <= address && address < taken->address + (1 << 20))
        << "the retired page was handed out again";
    all.push_back(*taken);
  }
  EXPECT_GE(all.size(), 60u);
  EXPECT_TRUE(restored->CheckConsistency().has_value());
  ASSERT_TRUE(again->Synchronize(5s).has_value());
  for (auto& held : all) ASSERT_TRUE(restored->Free(held).has_value());
  EXPECT_EQ((*runtime_->GetDevice(1))->Health(), runtime::HealthState::kDegraded);
  EXPECT_EQ(health_->StatusOf(1).reason, "test");
  EXPECT_EQ(health_->StatusOf(1).cause, HealthCause::kPolicy) << "restored with its cause";
  EXPECT_EQ((*runtime_->Pool(0))->Stats().retired_pages, 0u);
  const auto actions = store_->QueryActions(1, 10);
  ASSERT_TRUE(actions.has_value());
  ASSERT_EQ(actions->size(), 2u) << (actions->empty() ? "" : (*actions)[0].action);
  EXPECT_EQ((*actions)[1].action, "retire-page");
  EXPECT_EQ((*actions)[1].event_id, event_id);
}

TEST_F(ActuatorTest, ThePolicyOnlyMakesADeviceWorseAndAnOperatorMayDoEither) {
  EXPECT_EQ(
      actuator_
          ->Execute(Act(ras::ActionKind::kIsolateDevice, 0, std::nullopt), event_, std::nullopt)
          .detail,
      "healthy -> isolated");
  const auto degrade = actuator_->Execute(Act(ras::ActionKind::kDegradeDevice, 0, std::nullopt),
                                          event_, std::nullopt);
  EXPECT_EQ(degrade.detail, "already isolated");
  EXPECT_EQ((*runtime_->GetDevice(0))->Health(), runtime::HealthState::kIsolated);
  auto undrained = health_->DecideAndSave({.device = 0,
                                           .cause = HealthCause::kOperator,
                                           .target = runtime::HealthState::kHealthy,
                                           .reason = "repaired"});
  ASSERT_TRUE(undrained.has_value());
  EXPECT_EQ(undrained->from, runtime::HealthState::kIsolated);
  EXPECT_EQ(undrained->to, runtime::HealthState::kHealthy);
  EXPECT_EQ((*runtime_->GetDevice(0))->Health(), runtime::HealthState::kHealthy);
  EXPECT_FALSE(health_
                   ->DecideAndSave({.device = 5,
                                    .cause = HealthCause::kOperator,
                                    .target = runtime::HealthState::kIsolated,
                                    .reason = "x"})
                   .has_value());
  const auto counts = actuator_->Counts();
  EXPECT_EQ(counts.at("isolate-device ok"), 1u);
  EXPECT_EQ(counts.at("degrade-device ok"), 1u);
  EXPECT_EQ(counts.at("undrain-device ok"), 1u);
}

TEST_F(ActuatorTest, HostPagesAreOfflinedThroughSysfsOnlyWhenAllowed) {
  const auto soft = dir_ / "host/sys/devices/system/memory/soft_offline_page";
  const auto hard = dir_ / "host/sys/devices/system/memory/hard_offline_page";
  std::ofstream(soft).flush();
  std::ofstream(hard).flush();
  auto off = actuator_->Execute(Act(ras::ActionKind::kSoftOfflinePage, std::nullopt, "0x12345678"),
                                event_, std::nullopt);
  EXPECT_EQ(off.result, "disabled");
  EXPECT_EQ(fs::file_size(soft), 0u);

  Boot({.host_page_offline = true});
  auto done = actuator_->Execute(Act(ras::ActionKind::kSoftOfflinePage, std::nullopt, "0x12345678"),
                                 event_, std::nullopt);
  EXPECT_EQ(done.result, "ok") << done.detail;
  std::ifstream written(soft);
  std::string text;
  std::getline(written, text);
  EXPECT_EQ(text, "0x12345000") << "the page, as the kernel wants it";
  done = actuator_->Execute(Act(ras::ActionKind::kHardOfflinePage, std::nullopt, "0xabc"), event_,
                            std::nullopt);
  EXPECT_EQ(done.result, "ok");
  fs::remove(soft);
  const auto missing = actuator_->Execute(
      Act(ras::ActionKind::kSoftOfflinePage, std::nullopt, "0x1000"), event_, std::nullopt);
  EXPECT_EQ(missing.result, "failed") << "a kernel without the file: a clear failure";
  EXPECT_NE(missing.detail.find("soft_offline_page"), std::string::npos) << missing.detail;
}

TEST_F(ActuatorTest, AHostPageTheKernelRefusesIsAFailedActionWithTheKernelsWords) {
  Boot({.host_page_offline = true});
  std::ofstream(dir_ / "host/sys/devices/system/memory/hard_offline_page").flush();
  host_->FailWrites("/sys/devices/system/memory/",
                    Error{ErrorCode::kIoError, "write hard_offline_page: Device or resource busy"});
  const auto refused = actuator_->Execute(
      Act(ras::ActionKind::kHardOfflinePage, std::nullopt, "0x7000"), event_, std::nullopt);
  EXPECT_EQ(refused.result, "failed");
  EXPECT_NE(refused.detail.find("Device or resource busy"), std::string::npos) << refused.detail;
  EXPECT_EQ(host_->Failures(), 1u);
  EXPECT_EQ(actuator_->Counts().at("hard-offline-page failed"), 1u);
  host_->Heal();
  EXPECT_EQ(actuator_
                ->Execute(Act(ras::ActionKind::kHardOfflinePage, std::nullopt, "0x7000"), event_,
                          std::nullopt)
                .result,
            "ok");
}

TEST_F(ActuatorTest, AnActionWhoseRowsCannotBeStoredHappensAllTheSame) {
  store_->SetWriteFault([](std::string_view) {
    return std::optional<Error>(Error{ErrorCode::kIoError, "disk full"});
  });
  const auto isolated = actuator_->Execute(Act(ras::ActionKind::kIsolateDevice, 1, std::nullopt),
                                           event_, std::nullopt);
  EXPECT_EQ(isolated.result, "ok");
  EXPECT_EQ((*runtime_->GetDevice(1))->Health(), runtime::HealthState::kIsolated);
  EXPECT_EQ(health_->UnsavedStates(), 1u) << "the state waits for the next commit";
  store_->SetWriteFault(nullptr);
  ras::StoreBatch retry;  // as the pipeline's next batch
  health_->TakePending(retry);
  ASSERT_EQ(retry.states.size(), 1u);
  ASSERT_TRUE(store_->Commit(retry).has_value());
  Boot();
  EXPECT_EQ((*runtime_->GetDevice(1))->Health(), runtime::HealthState::kIsolated)
      << "saved by the retry, back after a restart";
}

TEST_F(ActuatorTest, DrainNodeDeclaresTheNodesFaultOnceAndAsksTheDrainerEachTime) {
  ras::RasEvent event;
  event.summary = "MCE: processor context corrupt";
  const auto unscheduled = actuator_->Execute(
      Act(ras::ActionKind::kDrainNode, std::nullopt, std::nullopt), event, std::nullopt);
  EXPECT_EQ(unscheduled.result, "skipped") << "no scheduler to tell";
  ASSERT_TRUE(node_fault_->Current().has_value());
  EXPECT_EQ(node_fault_->Current()->reason, "MCE: processor context corrupt");

  std::vector<std::string> drained;
  actuator_->SetNodeDrainer([&](const std::string& reason) {
    drained.push_back(reason);
    return "asked the scheduler";
  });
  event.summary = "a second fault";
  const auto told = actuator_->Execute(Act(ras::ActionKind::kDrainNode, std::nullopt, std::nullopt),
                                       event, std::nullopt);
  EXPECT_EQ(told.result, "ok");
  EXPECT_EQ(drained, std::vector<std::string>{"a second fault"});
  EXPECT_EQ(node_fault_->Current()->reason, "MCE: processor context corrupt")
      << "the first fault stands";
}

}  // namespace
}  // namespace rasd::daemon
