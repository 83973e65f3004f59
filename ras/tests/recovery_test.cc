#include "rasd/ras/recovery.h"

#include <gtest/gtest.h>

#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {
namespace {

using std::chrono::hours;
using Clock = std::chrono::system_clock;

RasEvent Xid(int code, Severity severity = Severity::kInfo) {
  RasEvent event;
  event.origin = "nvidia_xid";
  event.vendor_code = code;
  event.severity = severity;
  event.device = 1;
  return event;
}

RasEvent Ascend(std::uint32_t code, Severity severity = Severity::kUce) {
  RasEvent event;
  event.origin = "ascend";
  event.vendor_code = static_cast<int>(static_cast<std::int32_t>(code));
  event.severity = severity;
  event.device = 0;
  return event;
}

RasEvent Class(Severity severity, bool device, bool address) {
  RasEvent event;
  event.origin = device ? "sim" : "ghes";
  event.severity = severity;
  if (device) event.device = 2;
  if (address) event.address = Address{.value = 0x1000, .printed = "0x1000"};
  return event;
}

struct Row {
  const char* name;
  RasEvent event;
  RecoveryAction expected;
};

class RecoveryTableTest : public ::testing::TestWithParam<Row> {};

// Each vendor code and class gets the action its source gives.
TEST_P(RecoveryTableTest, SuggestsTheTablesAction) {
  const auto& row = GetParam();
  const auto suggestion = RecoveryTable::Default().Suggest(row.event, {}, Clock::now());
  EXPECT_EQ(suggestion.action, row.expected)
      << row.name << ": " << RecoveryActionName(suggestion.action) << " (" << suggestion.why << ")";
  EXPECT_FALSE(suggestion.escalated);
  EXPECT_FALSE(suggestion.why.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Rows, RecoveryTableTest,
    ::testing::Values(
        Row{"xid13_app", Xid(13), RecoveryAction::kRestartApp},
        Row{"xid31_mmu", Xid(31), RecoveryAction::kRestartApp},
        Row{"xid43_ignore", Xid(43), RecoveryAction::kNone},
        Row{"xid48_dbe", Xid(48, Severity::kUce), RecoveryAction::kResetDevice},
        Row{"xid63_remap_pending", Xid(63, Severity::kCe), RecoveryAction::kNone},
        Row{"xid64_remap_failure", Xid(64, Severity::kUce), RecoveryAction::kResetDevice},
        Row{"xid79_off_the_bus", Xid(79, Severity::kFatal), RecoveryAction::kRebootNode},
        Row{"xid92_sbe_rate", Xid(92, Severity::kCe), RecoveryAction::kNone},
        Row{"xid94_contained", Xid(94, Severity::kSrar), RecoveryAction::kRestartApp},
        Row{"xid95_uncontained", Xid(95, Severity::kUce), RecoveryAction::kResetDevice},
        Row{"xid119_gsp", Xid(119, Severity::kFatal), RecoveryAction::kResetDevice},
        Row{"xid123_unused", Xid(123), RecoveryAction::kContactVendor},
        // An Xid the table does not list falls back on its class.
        Row{"xid999_fatal", Xid(999, Severity::kFatal), RecoveryAction::kResetDevice},
        Row{"ascend_507053", Ascend(507053, Severity::kSrar), RecoveryAction::kRestartApp},
        Row{"ascend_507054", Ascend(507054), RecoveryAction::kResetDevice},
        Row{"ascend_80E01801", Ascend(0x80E01801u), RecoveryAction::kRestartApp},
        Row{"ascend_80E18005", Ascend(0x80E18005u), RecoveryAction::kResetDevice},
        Row{"ascend_80E3A201", Ascend(0x80E3A201u), RecoveryAction::kHardwareInspection},
        Row{"ascend_81078603_link", Ascend(0x81078603u, Severity::kInfo), RecoveryAction::kNone},
        Row{"ce_device", Class(Severity::kCe, true, false), RecoveryAction::kNone},
        Row{"srar_device_memory", Class(Severity::kSrar, true, true), RecoveryAction::kRestartApp},
        Row{"uce_device", Class(Severity::kUce, true, false), RecoveryAction::kResetDevice},
        Row{"fatal_device", Class(Severity::kFatal, true, false), RecoveryAction::kResetDevice},
        Row{"uce_host_memory", Class(Severity::kUce, false, true), RecoveryAction::kHardwareInspection},
        Row{"fatal_host", Class(Severity::kFatal, false, false), RecoveryAction::kRebootNode},
        Row{"info_host", Class(Severity::kInfo, false, false), RecoveryAction::kNone}),
    [](const ::testing::TestParamInfo<Row>& row) { return std::string(row.param.name); });

TEST(RecoveryEscalationTest, TwoRecoveriesWithinTheWindowTakeTheNextRung) {
  const auto now = Clock::now();
  const auto& table = RecoveryTable::Default();
  const RasEvent off_the_bus = Xid(79, Severity::kFatal);
  EXPECT_EQ(table.Suggest(off_the_bus, {now - hours(1)}, now).action, RecoveryAction::kRebootNode);
  const auto escalated = table.Suggest(off_the_bus, {now - hours(5), now - hours(1)}, now);
  EXPECT_EQ(escalated.action, RecoveryAction::kHardwareInspection);
  EXPECT_TRUE(escalated.escalated);
  EXPECT_NE(escalated.why.find("2 recoveries of this device in 24 h"), std::string::npos)
      << escalated.why;
  // Recoveries older than the window do not count.
  EXPECT_EQ(table.Suggest(off_the_bus, {now - hours(30), now - hours(1)}, now).action,
            RecoveryAction::kRebootNode);
  // Without escalate_to: the next rung (a GSP error: reset, then reboot).
  EXPECT_EQ(table.Suggest(Xid(119, Severity::kFatal), {now - hours(2), now - hours(1)}, now).action,
            RecoveryAction::kRebootNode);
  // A row that never escalates.
  EXPECT_EQ(table.Suggest(Xid(94, Severity::kSrar), {now, now, now, now}, now).action,
            RecoveryAction::kRestartApp);
}

TEST(RecoveryTableTest2, ASitesRowGoesFirst) {
  auto table = RecoveryTable::WithOverrides(
      {RecoveryRow{.origin = "nvidia_xid", .vendor_code = 79, .action = RecoveryAction::kContactVendor,
                   .source = "site"}});
  EXPECT_EQ(table.Suggest(Xid(79, Severity::kFatal), {}, Clock::now()).action,
            RecoveryAction::kContactVendor);
  EXPECT_EQ(table.Suggest(Xid(48, Severity::kUce), {}, Clock::now()).action,
            RecoveryAction::kResetDevice);
}

TEST(RecoveryActionTest, NamesRoundTripInLadderOrder) {
  for (int i = 0; i < kRecoveryActionCount; ++i) {
    const auto action = static_cast<RecoveryAction>(i);
    EXPECT_EQ(ParseRecoveryAction(RecoveryActionName(action)), action);
  }
  EXPECT_FALSE(ParseRecoveryAction("reboot"));
  EXPECT_LT(RecoveryAction::kResetDevice, RecoveryAction::kRebootNode);
  EXPECT_TRUE(SticksToDevice(RecoveryAction::kResetDevice));
  EXPECT_FALSE(SticksToDevice(RecoveryAction::kRestartApp));
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

// Xid 154 carries the driver's own recovery action: the kernel line is
// decoded into it (as NVML numbers it) and the table follows it.
RasEvent Xid154(std::string_view line) {
  auto records = ScanKernelLog(line);
  EXPECT_EQ(records.size(), 1u) << line;
  if (records.empty()) return {};
  return EventFromRecord(records.front(), "kmsg", Clock::now());
}

TEST(RecoveryXid154Test, TheDriversRecoveryActionIsFollowed) {
  const auto& table = RecoveryTable::Default();
  struct Case {
    const char* line;
    int action;
    RecoveryAction expected;
  };
  const Case cases[] = {
      {"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
       "(GPU Reset Required)",
       1, RecoveryAction::kResetDevice},
      {"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
       "(Node Reboot Required)",
       2, RecoveryAction::kRebootNode},
      {"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
       "Required) to 0x0 (None)",
       0, RecoveryAction::kNone},
      {"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x3 "
       "(Drain P2P)",
       3, RecoveryAction::kRestartApp},
      // Words only, as an older format might print them.
      {"NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from None to Drain and "
       "Reset",
       4, RecoveryAction::kResetDevice},
  };
  for (const Case& c : cases) {
    const RasEvent event = Xid154(c.line);
    ASSERT_EQ(event.vendor_code, 154) << c.line;
    ASSERT_EQ(event.vendor_action, c.action) << c.line;
    const auto suggestion = table.Suggest(event, {}, Clock::now());
    EXPECT_EQ(suggestion.action, c.expected) << c.line;
    EXPECT_NE(suggestion.why.find("Xid 154"), std::string::npos) << suggestion.why;
  }
}

TEST(RecoveryXid154Test, AnUnknownActionFallsBackToTheRowAndASiteRowWins) {
  RasEvent event = Xid154(
      "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x9 "
      "(Something New)");
  ASSERT_EQ(event.vendor_action, 9);
  const auto& table = RecoveryTable::Default();
  const auto fallback = table.Suggest(event, {}, Clock::now());
  EXPECT_EQ(fallback.action, table.Match(event).action);
  EXPECT_EQ(fallback.why.find("GPU_RECOVERY_ACTION"), std::string::npos) << fallback.why;

  event.vendor_action = 1;
  auto site = RecoveryTable::WithOverrides({RecoveryRow{.origin = "nvidia_xid",
                                                        .vendor_code = 154,
                                                        .action = RecoveryAction::kContactVendor,
                                                        .source = "site"}});
  EXPECT_EQ(site.Suggest(event, {}, Clock::now()).action, RecoveryAction::kContactVendor);
  // No action in the line: the row.
  const RasEvent bare = Xid154("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed");
  EXPECT_FALSE(bare.vendor_action.has_value());
}

}  // namespace
}  // namespace rasd::ras
