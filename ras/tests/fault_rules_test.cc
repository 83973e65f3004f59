// The fault rules: each built-in row on the events it is for and on the
// ones it must leave alone, by the events' own times; and the policy's
// answer to each judgement.

#include "rasd/ras/fault_rules.h"

#include <gtest/gtest.h>

#include "rasd/ras/policy.h"

namespace rasd::ras {
namespace {

using namespace std::chrono_literals;
using Kind = FaultContext::Kind;

const auto kBoot = std::chrono::system_clock::time_point{} + std::chrono::hours(24 * 20000);

RasEvent Xid(int code, int device, std::chrono::milliseconds at,
             Severity severity = Severity::kInfo) {
  RasEvent event;
  event.origin = "nvidia_xid";
  event.source = "kmsg";
  event.vendor_code = code;
  event.device = device;
  event.severity = severity;
  event.time = kBoot + at;
  return event;
}

Kind Judged(FaultRules& rules, RasEvent event) {
  rules.Judge(event);
  return event.context.kind;
}

TEST(FaultRulesTest, Xid45AfterAnotherXidOfItsGpuIsThatFaultsEcho) {
  FaultRules rules;
  EXPECT_EQ(Judged(rules, Xid(13, 0, 0ms)), Kind::kOwn);
  RasEvent echo = Xid(45, 0, 2s);
  rules.Judge(echo);
  EXPECT_EQ(echo.context.kind, Kind::kEcho);
  EXPECT_EQ(echo.context.rule, "echo-of-another-xid");
  EXPECT_NE(echo.context.why.find("Xid 13"), std::string::npos) << echo.context.why;
}

TEST(FaultRulesTest, Xid45AloneOrOnAnotherGpuOrPastTheWindowIsItsOwn) {
  FaultRules rules;
  EXPECT_EQ(Judged(rules, Xid(45, 0, 0ms)), Kind::kOwn) << "solo";
  EXPECT_EQ(Judged(rules, Xid(13, 1, 100s)), Kind::kOwn);
  EXPECT_EQ(Judged(rules, Xid(45, 0, 101s)), Kind::kOwn) << "the Xid 13 was GPU 1's";
  EXPECT_EQ(Judged(rules, Xid(45, 1, 100s + 31s)), Kind::kOwn) << "31 s after: past 30 s";
}

TEST(FaultRulesTest, WhatFollowsAGpuFallingOffTheBusIsPartOfThatFault) {
  FaultRules rules;
  EXPECT_EQ(Judged(rules, Xid(79, 2, 0ms, Severity::kFatal)), Kind::kOwn);
  RasEvent gsp = Xid(119, 2, 40s, Severity::kFatal);
  rules.Judge(gsp);
  EXPECT_EQ(gsp.context.kind, Kind::kSuperseded);
  EXPECT_EQ(gsp.context.rule, "fallen-off-the-bus");
  EXPECT_EQ(Judged(rules, Xid(119, 3, 41s, Severity::kFatal)), Kind::kOwn) << "another GPU";
  EXPECT_EQ(Judged(rules, Xid(119, 2, 301s, Severity::kFatal)), Kind::kOwn) << "past 300 s";
}

TEST(FaultRulesTest, ARecordLoggedBeforeItsPrimaryIsNotItsEcho) {
  FaultRules rules;
  EXPECT_EQ(Judged(rules, Xid(13, 0, 10s)), Kind::kOwn);
  EXPECT_EQ(Judged(rules, Xid(45, 0, 9s)), Kind::kOwn) << "logged a second before the Xid 13";
}

TEST(FaultRulesTest, AStormIsOneFaultPerGpuCodeAndWindowWhoseRepeatsAreCounted) {
  FaultRules rules;
  RasEvent first = Xid(95, 0, 0ms, Severity::kUce);
  rules.Judge(first);
  EXPECT_EQ(first.context.kind, Kind::kOwn);
  ASSERT_TRUE(first.context.window_start);
  EXPECT_EQ(*first.context.window_start, first.time);
  int repeats = 0;
  for (int i = 1; i < 500; ++i) {
    RasEvent again = Xid(95, 0, std::chrono::milliseconds(i * 100), Severity::kUce);
    rules.Judge(again);
    repeats += again.context.kind == Kind::kRepeat ? 1 : 0;
    EXPECT_EQ(again.context.window_start, first.context.window_start);
  }
  EXPECT_EQ(repeats, 499);
  EXPECT_EQ(Judged(rules, Xid(95, 1, 1s, Severity::kUce)), Kind::kOwn) << "another GPU";
  EXPECT_EQ(Judged(rules, Xid(94, 0, 1s, Severity::kSrar)), Kind::kOwn) << "another code";
  RasEvent next = Xid(95, 0, 60s, Severity::kUce);
  rules.Judge(next);
  EXPECT_EQ(next.context.kind, Kind::kOwn) << "the next window";
  EXPECT_EQ(next.context.window_start, next.time);
}

TEST(FaultRulesTest, AStormWindowIsPerProcessAndMomentAndEndsWhenTheDeviceReturns) {
  FaultRules rules;
  RasEvent first = Xid(95, 0, 0ms, Severity::kUce);
  first.pid = 100;
  EXPECT_EQ(Judged(rules, first), Kind::kOwn);
  RasEvent other_process = first;
  other_process.pid = 200;
  EXPECT_EQ(Judged(rules, other_process), Kind::kOwn);
  EXPECT_EQ(Judged(rules, first), Kind::kRepeat);
  RasEvent other_page = first;
  other_page.address = Address::Of(0x7000);
  EXPECT_EQ(Judged(rules, other_page), Kind::kOwn) << "another page: its address is kept";
  EXPECT_EQ(Judged(rules, other_page), Kind::kRepeat);
  RasEvent reboot = Xid(154, 0, 2s, Severity::kFatal);
  reboot.vendor_action = 1;
  EXPECT_EQ(Judged(rules, reboot), Kind::kOwn);
  reboot.vendor_action = 2;
  EXPECT_EQ(Judged(rules, reboot), Kind::kOwn) << "the driver's verdict changed: news";
  EXPECT_EQ(Judged(rules, reboot), Kind::kRepeat);
  RasEvent before_start = first;
  before_start.before_start = true;
  EXPECT_EQ(Judged(rules, before_start), Kind::kOwn) << "a moment rasd did not see";
  rules.ForgetDevice(0);
  EXPECT_EQ(Judged(rules, first), Kind::kOwn) << "returned to service since";
  // Each contained error ends its own consumer.
  RasEvent contained = Xid(94, 0, 1s, Severity::kSrar);
  EXPECT_EQ(Judged(rules, contained), Kind::kOwn);
  EXPECT_EQ(Judged(rules, contained), Kind::kOwn);
}

TEST(FaultRulesTest, AnEchoInAStormCountsInItsWindowAndStaysAnEcho) {
  FaultRules rules;
  (void)Judged(rules, Xid(13, 0, 0ms));
  RasEvent echo = Xid(45, 0, 1s);
  rules.Judge(echo);
  RasEvent again = Xid(45, 0, 2s);
  rules.Judge(again);
  EXPECT_EQ(again.context.kind, Kind::kEcho);
  EXPECT_EQ(again.context.window_start, echo.context.window_start);
}

TEST(FaultRulesTest, EventsWithoutADeviceOrCodeOrFromAnEarlierBootAreTheirOwn) {
  FaultRules rules;
  (void)Judged(rules, Xid(79, 0, 0ms, Severity::kFatal));
  RasEvent no_device = Xid(119, 0, 1s);
  no_device.device.reset();
  EXPECT_EQ(Judged(rules, no_device), Kind::kOwn);
  RasEvent old = Xid(119, 0, 1s);
  old.historical = true;
  EXPECT_EQ(Judged(rules, old), Kind::kOwn);
  RasEvent by_address = Xid(79, 0, 2s, Severity::kFatal);
  by_address.device.reset();
  by_address.pci_bdf = "0000:d2:00.0";
  (void)Judged(rules, by_address);
  RasEvent follows = Xid(119, 0, 3s);
  follows.device.reset();
  follows.pci_bdf = "0000:d2:00.0";
  EXPECT_EQ(Judged(rules, follows), Kind::kSuperseded) << "keyed by PCI address";
}

TEST(FaultRulesTest, ASiteRowReplacesOrRemovesABuiltInOneByName) {
  FaultRule off{.name = "echo-of-another-xid", .enabled = false};
  FaultRule ascend{
      .name = "ascend-storm", .kind = FaultRuleKind::kStorm, .origin = "ascend", .window = 10s};
  const auto rows = MergeFaultRules({off, ascend});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].name, "fallen-off-the-bus");
  EXPECT_EQ(rows[1].name, "xid-storm");
  EXPECT_EQ(rows[2].name, "links-training");
  EXPECT_EQ(rows[3].name, "ascend-storm");
  FaultRules rules(rows);
  (void)Judged(rules, Xid(13, 0, 0ms));
  EXPECT_EQ(Judged(rules, Xid(45, 0, 1s)), Kind::kOwn) << "the echo row is gone";
}

TEST(FaultRulesTest, AnXidLongAfterItsGpusLastIsSoloWhateverCameBetween) {
  FaultRules rules;
  for (int i = 0; i < 20000; ++i) (void)Judged(rules, Xid(13, i, std::chrono::seconds(i)));
  EXPECT_EQ(Judged(rules, Xid(45, 0, 20001s)), Kind::kOwn);
  EXPECT_EQ(Judged(rules, Xid(45, 19999, 20001s)), Kind::kEcho);
}

TEST(FaultRulesTest, NvlinkXidsWhileLinksTrainAfterBootOrADriverLoadAreSettling) {
  FaultRules rules;
  rules.SetBootTime(kBoot);
  EXPECT_EQ(Judged(rules, Xid(149, 0, 40s, Severity::kFatal)), Kind::kSettling);
  EXPECT_EQ(Judged(rules, Xid(79, 0, 41s, Severity::kFatal)), Kind::kOwn) << "not a link code";
  EXPECT_EQ(Judged(rules, Xid(149, 1, 300s, Severity::kFatal)), Kind::kOwn) << "trained by now";
  RasEvent load;
  load.origin = "nvidia_driver";
  load.time = kBoot + 3600s;
  rules.Judge(load);
  RasEvent training = Xid(145, 1, 3600s + 20s, Severity::kCe);
  rules.Judge(training);
  EXPECT_EQ(training.context.kind, Kind::kSettling);
  EXPECT_NE(training.context.why.find("after the driver was loaded"), std::string::npos)
      << training.context.why;
  EXPECT_EQ(Judged(rules, Xid(149, 1, 3600s - 1s, Severity::kFatal)), Kind::kOwn)
      << "logged before the load";

  EXPECT_EQ(Judged(rules, Xid(45, 1, 3600s + 21s)), Kind::kEcho)
      << "\"Xid 45 ... caused by previous Xid 145\"";

  FaultRules no_boot;
  EXPECT_EQ(Judged(no_boot, Xid(149, 0, 40s, Severity::kFatal)), Kind::kOwn)
      << "a boot time unknown: no window";
}

TEST(FaultRulesTest, ThePolicyWithholdsWhatASettlingLinkXidWouldDo) {
  FaultRules rules;
  rules.SetBootTime(kBoot);
  PolicyEngine policy;
  RasEvent event = Xid(149, 0, 40s, Severity::kFatal);
  rules.Judge(event);
  const auto actions = policy.Decide(event, 0ns);
  ASSERT_EQ(actions.size(), 2u);
  for (const auto& action : actions) {
    EXPECT_TRUE(action.withheld) << action.reason;
    EXPECT_NE(action.withheld_why.find("while links train"), std::string::npos)
        << action.withheld_why;
  }
}

TEST(FaultRulesTest, ThePolicyRecordsAnEchoAndARepeatAndActsOnTheFirst) {
  FaultRules rules;
  PolicyEngine policy;
  auto decide = [&](RasEvent event) {
    rules.Judge(event);
    return policy.Decide(event, 0ns);
  };
  auto first = decide(Xid(79, 1, 0ms, Severity::kFatal));
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].kind, ActionKind::kDrainDevice);
  auto part = decide(Xid(119, 1, 5s, Severity::kFatal));
  ASSERT_EQ(part.size(), 1u);
  EXPECT_EQ(part[0].kind, ActionKind::kRecord);
  EXPECT_EQ(part[0].rule, "fallen-off-the-bus");
  EXPECT_NE(part[0].reason.find("Xid 79"), std::string::npos) << part[0].reason;
  auto repeat = decide(Xid(79, 1, 6s, Severity::kFatal));
  ASSERT_EQ(repeat.size(), 1u);
  EXPECT_EQ(repeat[0].kind, ActionKind::kRecord);
  EXPECT_EQ(repeat[0].rule, "xid-storm");
}

TEST(FaultRulesTest, RepeatsOfACorrectedCodeStillReachItsThreshold) {
  FaultRules rules;
  PolicyConfig config;
  config.ce_device.count = 10;
  PolicyEngine policy(config);
  int degraded = 0;
  for (int i = 0; i < 10; ++i) {
    RasEvent event = Xid(92, 0, std::chrono::seconds(i), Severity::kCe);
    rules.Judge(event);
    for (const auto& action : policy.Decide(event, std::chrono::seconds(i)))
      degraded += action.kind == ActionKind::kDegradeDevice ? 1 : 0;
  }
  EXPECT_EQ(degraded, 1) << "ten corrected errors, ten counted";
}

}  // namespace
}  // namespace rasd::ras
