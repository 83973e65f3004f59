// DeviceRecovery on a SimulatedEventLoop, a simulator runtime and a real
// SQLite store: a suggestion stays with its device until a recovery counts,
// recoveries escalate the next suggestion, the history outlives a restart,
// a reboot that was suggested is counted once in the next boot, a save the
// disk refuses is retried, and a damaged row starts the device afresh
// without stopping anything.

#include "device_recovery.h"

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
using namespace std::chrono_literals;
using ras::RecoveryAction;

class DeviceRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("recovery");
    runtime_ = testing::SimRuntime();
    ASSERT_NE(runtime_, nullptr);
    Boot("boot-a");
  }
  void TearDown() override {
    recovery_.reset();
    store_.reset();
    runtime_.reset();
    fs::remove_all(dir_);
  }

  // A fresh rasd on the same state directory, in boot `boot_id`.
  void Boot(const std::string& boot_id) {
    recovery_.reset();
    store_.reset();
    auto store = ras::StateStore::Open(dir_ / "state", loop_.SharedClock());
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    recovery_ = std::make_unique<DeviceRecovery>(loop_, *runtime_, store_.get(), boot_id);
    // The site's rows (the first match wins) decide everything here: what
    // the test asserts does not hang on the built-in vendor tables.
    recovery_->SetTable(
        ras::RecoveryTable::WithOverrides({{.origin = "nvidia_xid",
                                            .vendor_code = 79,
                                            .action = RecoveryAction::kRebootNode,
                                            .source = "test"},
                                           {.severity = ras::Severity::kUce,
                                            .action = RecoveryAction::kResetDevice,
                                            .escalate_after = 2,
                                            .escalate_to = RecoveryAction::kHardwareInspection,
                                            .source = "test"}}));
    recovery_->Load();
  }

  static ras::RasEvent Uce(int device) {
    ras::RasEvent event;
    event.device = device;
    event.severity = ras::Severity::kUce;
    event.origin = "sim";
    return event;
  }
  static ras::RasEvent Xid79(int device) {
    ras::RasEvent event = Uce(device);
    event.origin = "nvidia_xid";
    event.vendor_code = 79;
    return event;
  }

  void Sql(const std::string& sql) { ExecStateSql(dir_ / "state", sql); }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<DeviceRecovery> recovery_;
};

TEST_F(DeviceRecoveryTest, ASuggestionStaysUntilARecoveryAndRecoveriesEscalateTheNext) {
  EXPECT_EQ(recovery_->OnEvent(Uce(0), /*sticks=*/true).action, RecoveryAction::kResetDevice);
  EXPECT_EQ(recovery_->For(0).action, RecoveryAction::kResetDevice);
  EXPECT_EQ(recovery_->For(1).action, RecoveryAction::kNone) << "the other device has none";
  // A fault the policy does not act on suggests without keeping anything.
  EXPECT_EQ(recovery_->OnEvent(Uce(1), /*sticks=*/false).action, RecoveryAction::kResetDevice);
  EXPECT_EQ(recovery_->For(1).action, RecoveryAction::kNone);

  recovery_->OnRecovered(0, ReturnedBy::kAutoRecover);
  EXPECT_EQ(recovery_->For(0).action, RecoveryAction::kNone);
  EXPECT_EQ(recovery_->For(0).recoveries, 1u);
  // A return with no fault stuck since the last one is not a recovery.
  recovery_->OnRecovered(0, ReturnedBy::kUndrain);
  EXPECT_EQ(recovery_->For(0).recoveries, 1u);

  loop_.AdvanceBy(1h);
  recovery_->OnEvent(Uce(0), true);
  recovery_->OnRecovered(0, ReturnedBy::kUndrain);
  EXPECT_EQ(recovery_->For(0).recoveries_24h, 2u);
  const auto third = recovery_->OnEvent(Uce(0), true);
  EXPECT_EQ(third.action, RecoveryAction::kHardwareInspection) << third.why;
  EXPECT_TRUE(third.escalated);

  // A day later the two recoveries are out of the window: no escalation.
  recovery_->OnRecovered(0, ReturnedBy::kUndrain);
  loop_.AdvanceBy(25h);
  EXPECT_EQ(recovery_->For(0).recoveries_24h, 0u);
  EXPECT_EQ(recovery_->For(0).recoveries, 3u);
  EXPECT_EQ(recovery_->OnEvent(Uce(0), true).action, RecoveryAction::kResetDevice);
}

TEST_F(DeviceRecoveryTest, TheHistoryOutlivesARestartAndASuggestedRebootCountsOnceInTheNextBoot) {
  recovery_->OnEvent(Uce(0), true);
  recovery_->OnRecovered(0, ReturnedBy::kAutoRecover);
  recovery_->OnEvent(Xid79(1), true);
  EXPECT_EQ(recovery_->For(1).action, RecoveryAction::kRebootNode);

  Boot("boot-a");  // a restart in the same boot: nothing was rebooted
  EXPECT_EQ(recovery_->For(0).recoveries, 1u);
  EXPECT_EQ(recovery_->For(1).action, RecoveryAction::kRebootNode);
  EXPECT_EQ(recovery_->For(1).recoveries, 0u);

  Boot("boot-b");  // the reboot
  EXPECT_EQ(recovery_->For(1).action, RecoveryAction::kNone);
  EXPECT_EQ(recovery_->For(1).recoveries, 1u);
  // The undrain after the reboot is the same recovery, not a second one.
  recovery_->OnRecovered(1, ReturnedBy::kUndrain);
  EXPECT_EQ(recovery_->For(1).recoveries, 1u);
  Boot("boot-c");
  EXPECT_EQ(recovery_->For(1).recoveries, 1u) << "counted once, not again in every later boot";
  EXPECT_EQ(recovery_->For(0).recoveries, 1u);
}

TEST_F(DeviceRecoveryTest, ABootIdRasdCouldNotReadIsNoEvidenceOfAReboot) {
  recovery_->OnEvent(Xid79(0), true);
  Boot("unknown");
  EXPECT_EQ(recovery_->For(0).action, RecoveryAction::kRebootNode);
  EXPECT_EQ(recovery_->For(0).recoveries, 0u);
}

TEST_F(DeviceRecoveryTest, ASaveTheDiskRefusesIsRetriedEverySecondUntilItHolds) {
  bool disk_full = true;
  store_->SetWriteFault([&](std::string_view) -> std::optional<Error> {
    if (!disk_full) return std::nullopt;
    return Error{ErrorCode::kIoError, "database or disk is full"};
  });
  recovery_->OnEvent(Uce(0), true);
  EXPECT_EQ(recovery_->For(0).action, RecoveryAction::kResetDevice) << "kept in memory meanwhile";
  loop_.AdvanceBy(3s);
  disk_full = false;
  loop_.AdvanceBy(1s);
  store_->SetWriteFault(nullptr);

  Boot("boot-a");
  EXPECT_EQ(recovery_->For(0).action, RecoveryAction::kResetDevice)
      << "the retry saved it once the disk took writes again";
}

TEST_F(DeviceRecoveryTest, ADamagedRowStartsThatDeviceAfreshAndLeavesTheOthers) {
  recovery_->OnEvent(Uce(0), true);
  recovery_->OnRecovered(0, ReturnedBy::kUndrain);
  recovery_->OnEvent(Uce(1), true);
  recovery_->OnRecovered(1, ReturnedBy::kUndrain);
  recovery_.reset();
  const std::string uuid0 = (*runtime_->GetDevice(0))->Properties().uuid;
  for (const std::string& damage :
       {std::string("not json"), std::string(R"({"action": 7, "recoveries": []})"),
        std::string(R"({"action": "none", "recoveries": [{"time": "yesterday"}]})"),
        std::string(R"({"action": "none"})"), std::string("[1, 2]")}) {
    Sql("UPDATE device_recovery SET spec = '" + damage + "' WHERE device_uuid = '" + uuid0 + "'");
    Boot("boot-a");
    EXPECT_EQ(recovery_->For(0).recoveries, 0u) << damage;
    EXPECT_EQ(recovery_->For(1).recoveries, 1u) << damage;
  }
}

}  // namespace
}  // namespace rasd::daemon
