// The policy engine: every row of docs/architecture.md's taxonomy table, leaky-bucket
// edges on a simulated clock, escalation, and reloads that keep counters.

#include "rasd/ras/policy.h"

#include <gtest/gtest.h>

#include <chrono>

namespace rasd::ras {
namespace {

using namespace std::chrono_literals;
using A = ActionKind;

RasEvent Event(Severity severity, std::optional<int> device, std::optional<std::string> address,
               std::string origin = "sim") {
  RasEvent event;
  event.origin = std::move(origin);
  event.severity = severity;
  event.device = device;
  if (address) event.address = ParsePrintedAddress(*address);
  return event;
}

std::vector<A> Kinds(const std::vector<Action>& actions) {
  std::vector<A> kinds;
  for (const auto& action : actions) kinds.push_back(action.kind);
  return kinds;
}

struct Row {
  const char* name;
  RasEvent event;
  std::vector<A> expected;
};

void PrintTo(const Row& row, std::ostream* out) { *out << row.name; }

class DefaultPolicyTest : public ::testing::TestWithParam<Row> {};

TEST_P(DefaultPolicyTest, EachRowOfTheTaxonomyTableActsAsDesigned) {
  // Thresholds of one: the row's action, not its counting, is under test.
  PolicyConfig config;
  config.ce_page.count = 1;
  config.ce_device.count = 1;
  PolicyEngine engine(config);
  EXPECT_EQ(Kinds(engine.Decide(GetParam().event, 0ns)), GetParam().expected);
}

RasEvent HostEdac(Severity severity) {
  auto event = Event(severity, std::nullopt, "0x12345000", "edac");
  event.mc = 0;
  return event;
}

RasEvent NicEvent(std::string origin) {
  auto event = Event(Severity::kFatal, std::nullopt, std::nullopt, std::move(origin));
  event.pci_bdf = "0000:03:00.0";
  return event;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, DefaultPolicyTest,
    ::testing::Values(
        Row{"CE_host_memory", HostEdac(Severity::kCe), {A::kSoftOfflinePage}},
        Row{"CE_device_memory", Event(Severity::kCe, 1, "0x1000"), {A::kRetirePage}},
        Row{"CE_device", Event(Severity::kCe, 1, std::nullopt), {A::kDegradeDevice}},
        Row{"UCNA_host_memory", HostEdac(Severity::kUcna), {A::kSoftOfflinePage}},
        Row{"UCNA_device_memory",
            Event(Severity::kUcna, 1, "0x2000"),
            {A::kRetirePage, A::kMarkAtRisk}},
        Row{"SRAO_host_memory", HostEdac(Severity::kSrao), {A::kHardOfflinePage}},
        Row{"SRAO_device_memory",
            Event(Severity::kSrao, 1, "0x2000"),
            {A::kRetirePage, A::kMarkAtRisk}},
        Row{"SRAR_host_memory", HostEdac(Severity::kSrar), {A::kRecord}},
        Row{"SRAR_device_memory",
            Event(Severity::kSrar, 2, "0x3000"),
            {A::kKillConsumer, A::kRetirePage}},
        Row{"SRAR_device_no_address", Event(Severity::kSrar, 2, std::nullopt), {A::kKillConsumer}},
        Row{"UCE_host_memory", HostEdac(Severity::kUce), {A::kRecord}},
        Row{"UCE_cxl_host_memory",
            Event(Severity::kUce, std::nullopt, "0x8ffff1000", "cxl"),
            {A::kHardOfflinePage}},
        Row{"UCE_cxl_no_host_address",
            Event(Severity::kUce, std::nullopt, std::nullopt, "cxl"),
            {A::kRecord}},
        Row{"UCE_device",
            Event(Severity::kUce, 0, std::nullopt),
            {A::kDrainDevice, A::kIsolateDevice}},
        Row{"UCE_device_memory",
            Event(Severity::kUce, 0, "0x4000"),
            {A::kDrainDevice, A::kIsolateDevice}},
        Row{"FATAL_host",
            Event(Severity::kFatal, std::nullopt, std::nullopt, "ghes"),
            {A::kDrainNode}},
        Row{"FATAL_device",
            Event(Severity::kFatal, 3, std::nullopt),
            {A::kDrainDevice, A::kIsolateDevice}},
        // A NIC's fatal health is its accelerators' link fault (the daemon's
        // NIC health), not a node drain; an AER fatal on a PCI function
        // still drains.
        Row{"FATAL_mlx5_nic", NicEvent("mlx5"), {A::kRecord}},
        Row{"FATAL_devlink_nic", NicEvent("devlink"), {A::kRecord}},
        Row{"FATAL_aer_pci_device", NicEvent("aer"), {A::kDrainNode}},
        // An NVSwitch's fatal SXid is the NVIDIA GPUs' link fault, with or
        // without a switch address; an accelerator rasd does not run that
        // its driver calls unusable is recorded, and one it runs (a device)
        // is isolated.
        Row{"FATAL_nvswitch", NicEvent("nvswitch"), {A::kRecord}},
        Row{"FATAL_nvswitch_unnamed",
            Event(Severity::kFatal, std::nullopt, std::nullopt, "nvswitch"),
            {A::kRecord}},
        Row{"FATAL_amdgpu_not_run_by_rasd", NicEvent("amdgpu"), {A::kRecord}},
        Row{"FATAL_gaudi_not_run_by_rasd", NicEvent("habanalabs"), {A::kRecord}},
        Row{"FATAL_gaudi_run_by_rasd",
            Event(Severity::kFatal, 2, std::nullopt, "habanalabs"),
            {A::kDrainDevice, A::kIsolateDevice}},
        // An NPU's failure that names no device rasd can place (a CANN
        // line's device number is the process's own) is recorded, not a
        // node drain; one that names a runtime device isolates it.
        Row{"FATAL_ascend_unplaced",
            Event(Severity::kFatal, std::nullopt, std::nullopt, "ascend"),
            {A::kRecord}},
        Row{"FATAL_ascend_device",
            Event(Severity::kFatal, 1, std::nullopt, "ascend"),
            {A::kDrainDevice, A::kIsolateDevice}},
        Row{"INFO_device", Event(Severity::kInfo, 3, std::nullopt), {A::kRecord}},
        Row{"INFO_host", HostEdac(Severity::kInfo), {A::kRecord}}),
    [](const auto& row) { return std::string(row.param.name); });

TEST(WindowCounterTest, TripsAtTheLimitWithinTheWindowAndNotWhenSpreadOut) {
  WindowCounter bucket(50, 24h);
  for (int i = 0; i < 49; ++i) EXPECT_FALSE(bucket.Add(1, std::chrono::minutes(i)));
  EXPECT_TRUE(bucket.Add(1, 49min)) << "the 50th within a day";
  EXPECT_FALSE(bucket.Add(1, 50min)) << "emptied after it overflowed";

  WindowCounter spread(50, 24h);
  // 50 events evenly over 48 hours: never more than 26 in one day.
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(spread.Add(1, std::chrono::nanoseconds(48h) * i / 50)) << i;
  }
  WindowCounter burst(50, 24h);
  EXPECT_TRUE(burst.Add(50, 0ns)) << "one event that stands for 50 errors";
  WindowCounter edge(10, 10s);
  EXPECT_FALSE(edge.Add(9, 0s));
  EXPECT_EQ(edge.Count(9s), 9u);
  EXPECT_EQ(edge.Count(10s), 0u) << "the window is half-open: exactly W later is outside";
  EXPECT_FALSE(edge.Add(1, 10s)) << "the nine have left the window";
  EXPECT_TRUE(edge.Add(9, 19s)) << "1 + 9 within ten seconds";
}

TEST(PolicyEngineTest, CeOnOnePageRetiresItAtTheThresholdPerPage) {
  PolicyEngine engine;  // 50 in 24 h
  for (int i = 0; i < 49; ++i) {
    // The same page at different offsets, and another page alongside.
    EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, i % 2 ? "0x5000" : "0x5ff8"),
                                  std::chrono::seconds(i))),
              std::vector<A>{A::kRecord});
    EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, "0x9000"), std::chrono::seconds(i))),
              std::vector<A>{A::kRecord});
  }
  const auto actions = engine.Decide(Event(Severity::kCe, 0, "0x5010"), 60s);
  ASSERT_EQ(Kinds(actions), std::vector<A>{A::kRetirePage});
  EXPECT_EQ(actions[0].device, 0);
  EXPECT_EQ(actions[0].address, 0x5010u);
  EXPECT_EQ(actions[0].rule, "ce-device-memory");
  EXPECT_NE(actions[0].reason.find("50 or more"), std::string::npos) << actions[0].reason;
  // The same page on another device is another bucket.
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 1, "0x5000"), 61s)),
            std::vector<A>{A::kRecord});
}

TEST(PolicyEngineTest, ACoalescedEventCountsEachOfItsPagesOnItsOwn) {
  PolicyConfig config;
  config.degrade_after_retirements = 2;
  PolicyEngine engine(config);  // 50 CE on a page in 24 h
  RasEvent storm = Event(Severity::kCe, 0, "0x5040");
  storm.pages = {{0x5000, 30}, {0x9000, 49}, {0xa000, 1}};
  storm.count = 80;
  // 80 errors on the event, none of its pages at 50: recorded.
  const auto below = engine.Decide(storm, 1s);
  ASSERT_EQ(Kinds(below), std::vector<A>{A::kRecord});
  EXPECT_NE(below[0].reason.find("3 of 3 page(s)"), std::string::npos) << below[0].reason;

  storm.pages = {{0x5000, 20}, {0x9000, 1}, {0xb000, 2}};
  storm.count = 23;
  const auto reached = engine.Decide(storm, 2s);
  // The two pages at 50 each retire with their own address; the second
  // retirement on the device degrades it; one record stands for 0xb000.
  ASSERT_EQ(Kinds(reached),
            (std::vector<A>{A::kRecord, A::kRetirePage, A::kRetirePage, A::kDegradeDevice}));
  EXPECT_FALSE(reached[0].address.has_value());
  EXPECT_NE(reached[0].reason.find("1 of 3 page(s)"), std::string::npos) << reached[0].reason;
  EXPECT_EQ(reached[1].address, 0x5000u);
  EXPECT_EQ(reached[2].address, 0x9000u);
  EXPECT_NE(reached[2].reason.find("on page 0x9000"), std::string::npos) << reached[2].reason;
  // The counters are the same as for one event per page.
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, "0xb100"), 3s)),
            std::vector<A>{A::kRecord});
}

TEST(PolicyEngineTest, APagesCounterStartsFromTheErrorsStoredBeforeTheStart) {
  PolicyEngine engine;  // 50 CE on a page in 24 h
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::hours(500'000));
  // 149 errors: acted on twice already, 49 towards the third time.
  engine.SetPageHistory({{.scope = "dev0", .page = 0x5000, .errors = 149, .last = t0},
                         {.scope = "dev0", .page = 0x9000, .errors = 49, .last = t0 - 25h},
                         {.scope = "dev1", .page = 0x5000, .errors = 10, .last = t0}});
  auto at = [&](const char* address, int device, std::chrono::system_clock::time_point when) {
    RasEvent event = Event(Severity::kCe, device, address);
    event.time = when;
    return event;
  };
  const auto now = 100h;  // the monotonic clock, unrelated to wall time
  EXPECT_EQ(Kinds(engine.Decide(at("0x5040", 0, t0 + 1h), now)), std::vector<A>{A::kRetirePage})
      << "49 before and this one";
  EXPECT_EQ(Kinds(engine.Decide(at("0x9040", 0, t0 + 1h), now)), std::vector<A>{A::kRecord})
      << "its 49 are older than the window by the time of this one";
  EXPECT_EQ(Kinds(engine.Decide(at("0x5040", 1, t0 + 1h), now)), std::vector<A>{A::kRecord})
      << "another device's page";
}

TEST(PolicyEngineTest, RetirementsEscalateToDegradedThenIsolated) {
  PolicyConfig config;
  config.degrade_after_retirements = 2;
  config.isolate_after_retirements = 3;
  config.escalation_window = 1h;
  PolicyEngine engine(config);
  auto ucna = [](const char* address) { return Event(Severity::kUcna, 4, address); };
  EXPECT_EQ(Kinds(engine.Decide(ucna("0x1000"), 0s)),
            (std::vector<A>{A::kRetirePage, A::kMarkAtRisk}));
  EXPECT_EQ(Kinds(engine.Decide(ucna("0x2000"), 1s)),
            (std::vector<A>{A::kRetirePage, A::kMarkAtRisk, A::kDegradeDevice}));
  const auto third = engine.Decide(ucna("0x3000"), 2s);
  EXPECT_EQ(Kinds(third),
            (std::vector<A>{A::kRetirePage, A::kMarkAtRisk, A::kDrainDevice, A::kIsolateDevice}));
  EXPECT_EQ(third.back().rule, "escalation");
  // Past the window the count starts over.
  EXPECT_EQ(Kinds(engine.Decide(ucna("0x4000"), 3h)),
            (std::vector<A>{A::kRetirePage, A::kMarkAtRisk}));
}

TEST(PolicyEngineTest, PreviousBootEventsAreOnlyRecorded) {
  PolicyEngine engine;
  auto event = Event(Severity::kFatal, 0, std::nullopt, "bert");
  event.historical = true;
  const auto actions = engine.Decide(event, 0s);
  EXPECT_EQ(Kinds(actions), std::vector<A>{A::kRecord});
  EXPECT_EQ(actions[0].rule, "previous-boot");
}

// A record from before rasd's first start in this boot keeps only the
// actions whose state still holds (StillActsBeforeStart), plus a record
// naming the rest.
TEST(PolicyEngineTest, RecordsFromBeforeTheFirstStartActOnlyWhereTheStateStillHolds) {
  PolicyEngine engine;
  auto old = [](RasEvent event) {
    event.before_start = true;
    return event;
  };
  auto taken = [](const std::vector<Action>& actions) {
    std::vector<A> kinds;
    for (const auto& action : actions)
      if (!action.withheld) kinds.push_back(action.kind);
    return kinds;
  };
  auto withheld = [](const std::vector<Action>& actions) {
    std::vector<A> kinds;
    for (const auto& action : actions)
      if (action.withheld) kinds.push_back(action.kind);
    return kinds;
  };
  // A device that fell off the bus is still gone.
  auto fallen = engine.Decide(old(Event(Severity::kFatal, 0, std::nullopt, "nvidia_xid")), 0s);
  EXPECT_EQ(taken(fallen), (std::vector<A>{A::kDrainDevice, A::kIsolateDevice}));
  EXPECT_TRUE(withheld(fallen).empty());
  // A poisoned device page is still bad; its owner then is not news now.
  auto page = engine.Decide(old(Event(Severity::kSrao, 1, "0x2000")), 0s);
  EXPECT_EQ(taken(page), (std::vector<A>{A::kRetirePage}));
  EXPECT_EQ(withheld(page), (std::vector<A>{A::kMarkAtRisk}));
  EXPECT_NE(page[1].reason.find("logged before rasd started"), std::string::npos)
      << page[1].reason;
  // The consumer of then is not killed now; its page still goes.
  auto consumed = engine.Decide(old(Event(Severity::kSrar, 1, "0x3000")), 0s);
  EXPECT_EQ(taken(consumed), (std::vector<A>{A::kRetirePage}));
  EXPECT_EQ(withheld(consumed), (std::vector<A>{A::kKillConsumer}));
  // A host FATAL does not drain the node now.
  auto host = engine.Decide(old(Event(Severity::kFatal, std::nullopt, std::nullopt, "mce")), 0s);
  EXPECT_TRUE(taken(host).empty());
  EXPECT_EQ(withheld(host), (std::vector<A>{A::kDrainNode}));
  // A device UCE is recorded, not isolated.
  auto uce = engine.Decide(old(Event(Severity::kUce, 1, std::nullopt, "nvidia_xid")), 0s);
  EXPECT_TRUE(taken(uce).empty());
  EXPECT_EQ(withheld(uce), (std::vector<A>{A::kDrainDevice, A::kIsolateDevice}));
  // Host memory pages still go offline.
  auto host_page = engine.Decide(old(Event(Severity::kSrao, std::nullopt, "0x4000", "ghes")), 0s);
  EXPECT_EQ(taken(host_page), (std::vector<A>{A::kHardOfflinePage}));
  // The same records logged while rasd runs act in full.
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kFatal, std::nullopt, std::nullopt, "mce"), 0s)),
            (std::vector<A>{A::kDrainNode}));
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kSrar, 1, "0x3000"), 0s)),
            (std::vector<A>{A::kKillConsumer, A::kRetirePage}));
  // The verdicts themselves, for every action kind.
  auto fatal_device = Event(Severity::kFatal, 0, std::nullopt);
  for (A kind : {A::kRecord, A::kRetirePage, A::kSoftOfflinePage, A::kHardOfflinePage,
                 A::kDrainDevice, A::kIsolateDevice}) {
    EXPECT_EQ(StillActsBeforeStart(kind, fatal_device), BeforeStartVerdict::kStillActs)
        << ActionKindName(kind);
  }
  for (A kind : {A::kDegradeDevice, A::kMarkAtRisk, A::kKillConsumer, A::kDrainNode,
                 A::kRunHook}) {
    EXPECT_EQ(StillActsBeforeStart(kind, fatal_device), BeforeStartVerdict::kRecordOnly)
        << ActionKindName(kind);
  }
}

TEST(PolicyEngineTest, SiteRulesComeFirstAndMatchOnEveryField) {
  PolicyConfig config;
  PolicyRule hook;
  hook.name = "xid-48-hook";
  hook.origin = "nvidia_xid";
  hook.vendor_code = 48;
  hook.actions = {A::kRunHook, A::kIsolateDevice};
  hook.hook = {"/usr/local/bin/page-oncall", "--gpu"};
  config.rules.push_back(hook);
  PolicyEngine engine(config);
  auto xid = Event(Severity::kUce, 1, std::nullopt, "nvidia_xid");
  xid.vendor_code = 48;
  const auto actions = engine.Decide(xid, 0s);
  ASSERT_EQ(Kinds(actions), (std::vector<A>{A::kRunHook, A::kIsolateDevice}));
  EXPECT_EQ(actions[0].hook, hook.hook);
  xid.vendor_code = 95;  // not the site rule's code: the built-in UCE row
  EXPECT_EQ(Kinds(engine.Decide(xid, 0s)), (std::vector<A>{A::kDrainDevice, A::kIsolateDevice}));
}

TEST(PolicyEngineTest, ReconfiguringKeepsCountersOfUnchangedRules) {
  PolicyConfig config;
  config.ce_page.count = 3;
  PolicyEngine engine(config);
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, "0x1000"), 0s)),
            std::vector<A>{A::kRecord});
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, "0x1000"), 1s)),
            std::vector<A>{A::kRecord});
  engine.Reconfigure(config);  // a SIGHUP with the same thresholds
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, "0x1000"), 2s)),
            std::vector<A>{A::kRetirePage})
      << "the two before the reload still count";
  config.ce_page.count = 2;
  engine.Decide(Event(Severity::kCe, 0, "0x2000"), 3s);
  engine.Reconfigure(config);  // a new threshold: its counters start again
  EXPECT_EQ(Kinds(engine.Decide(Event(Severity::kCe, 0, "0x2000"), 4s)),
            std::vector<A>{A::kRecord});
}

TEST(PolicyNamesTest, RoundTrip) {
  for (A kind : {A::kRecord, A::kRetirePage, A::kMarkAtRisk, A::kKillConsumer, A::kDegradeDevice,
                 A::kDrainDevice, A::kIsolateDevice, A::kDrainNode, A::kSoftOfflinePage,
                 A::kHardOfflinePage, A::kRunHook}) {
    EXPECT_EQ(ParseActionKind(ActionKindName(kind)), kind);
  }
  EXPECT_EQ(ParseActionKind("reboot"), std::nullopt);
  EXPECT_EQ(ParseComponentKind("device-memory"), ComponentKind::kDeviceMemory);
  EXPECT_EQ(ComponentOf(Event(Severity::kCe, std::nullopt, std::nullopt, "mce")),
            ComponentKind::kCpu);
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

// A rule's boot grace: a link that flaps while the node comes up is
// recorded, not acted on; the same event later acts.
TEST(PolicyBootGraceTest, EventsWithinTheGraceAfterBootAreRecordedOnly) {
  PolicyConfig config;
  PolicyRule rule;
  rule.name = "link-flap";
  rule.origin = "sim";
  rule.severity = Severity::kUce;
  rule.boot_grace = std::chrono::seconds(300);
  rule.actions = {ActionKind::kDegradeDevice};
  config.rules.push_back(rule);
  PolicyEngine engine(config);
  const auto boot = std::chrono::system_clock::now() - std::chrono::hours(1);
  RasEvent event;
  event.origin = "sim";
  event.severity = Severity::kUce;
  event.device = 1;
  // Without a boot time nothing is withheld.
  event.time = boot + std::chrono::seconds(10);
  ASSERT_EQ(engine.Decide(event, std::chrono::seconds(1)).front().kind, ActionKind::kDegradeDevice);
  engine.SetBootTime(boot);
  auto early = engine.Decide(event, std::chrono::seconds(2));
  ASSERT_EQ(early.size(), 1u);
  EXPECT_EQ(early.front().kind, ActionKind::kDegradeDevice);
  EXPECT_TRUE(early.front().withheld) << "decided, not taken";
  EXPECT_EQ(early.front().rule, "link-flap");
  EXPECT_EQ(early.front().withheld_why, "10 s after boot, within the rule's boot grace of 300 s");
  event.time = boot + std::chrono::seconds(301);
  auto later = engine.Decide(event, std::chrono::seconds(3));
  EXPECT_EQ(later.front().kind, ActionKind::kDegradeDevice);
  EXPECT_FALSE(later.front().withheld);
}

}  // namespace
}  // namespace rasd::ras
