// RasPipeline against a real SQLite store that fails on demand (a trigger
// that refuses writes, as a full disk would), on a SimulatedEventLoop: what
// cannot be stored waits in memory, in order, and is stored once the store
// takes writes again; the source's cursor never passes unstored events; an
// operator's state change that cannot be saved says so and is retried.

#include "ras_pipeline.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class RasPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("pipeline");
    fs::create_directories(dir_ / "host");
    host_ = std::make_unique<common::HostEnv>(dir_ / "host", loop_.SharedClock());
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime();
    ASSERT_NE(runtime_, nullptr);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    node_fault_ = std::make_unique<NodeFault>(*store_, loop_.GetClock());
    actuator_ = std::make_unique<Actuator>(*host_, *store_, *runtime_, *health_, *node_fault_,
                                           Actuator::Options{});
    pipeline_ = std::make_unique<RasPipeline>(loop_, *runtime_, policy_, *actuator_, *health_,
                                              *store_, RasPipeline::Options{});
    ASSERT_EQ(sqlite3_open((dir_ / "state" / ras::StateStore::kDatabaseFile).c_str(), &saboteur_),
              SQLITE_OK);
    sqlite3_busy_timeout(saboteur_, 2000);
  }
  void TearDown() override {
    sqlite3_close(saboteur_);
    pipeline_.reset();
    actuator_.reset();
    health_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // Writes to `table` (new rows and changed ones) fail as on a full disk
  // until Heal().
  void FillDisk(const std::string& table) {
    for (const char* write : {"INSERT", "UPDATE"}) {
      const std::string sql = fmt::format(
          "CREATE TRIGGER full_{0}_{1} BEFORE {1} ON {0} "
          "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
          table, write);
      ASSERT_EQ(sqlite3_exec(saboteur_, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
          << sqlite3_errmsg(saboteur_);
    }
  }
  void Heal(const std::string& table) {
    for (const char* write : {"INSERT", "UPDATE"}) {
      const std::string sql = fmt::format("DROP TRIGGER full_{}_{};", table, write);
      ASSERT_EQ(sqlite3_exec(saboteur_, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    }
  }

  static std::vector<ras::RasEvent> HostErrors(int count) {
    std::vector<ras::RasEvent> events;
    for (int i = 0; i < count; ++i) {
      ras::RasEvent event;
      event.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000 + i));
      event.source = "kmsg";
      event.origin = "edac";
      event.severity = ras::Severity::kCe;
      event.mc = 0;
      event.summary = "EDAC MC0: 1 CE on DIMM " + std::to_string(i);
      events.push_back(std::move(event));
    }
    return events;
  }

  std::uint64_t StoredErrors() {
    auto counts = store_->CountEventsBySeverity();
    EXPECT_TRUE(counts.has_value());
    return counts ? (*counts)[ras::Severity::kCe] : 0;
  }
  std::uint64_t StoredPageErrors() {
    auto pages = store_->LoadPageErrors({});
    EXPECT_TRUE(pages.has_value());
    std::uint64_t errors = 0;
    if (pages)
      for (const auto& page : *pages) errors += page.errors;
    return errors;
  }
  std::string StoredCursor() {
    auto cursor = store_->LoadCursor("kmsg");
    return cursor && *cursor ? (*cursor)->position : "";
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<common::HostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  ras::PolicyEngine policy_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<NodeFault> node_fault_;  // before actuator_: it outlives it
  std::unique_ptr<Actuator> actuator_;
  std::unique_ptr<RasPipeline> pipeline_;
  sqlite3* saboteur_ = nullptr;
};

TEST_F(RasPipelineTest, WhatCannotBeStoredWaitsInOrderAndIsStoredWhenTheDiskHasRoom) {
  pipeline_->Handle(HostErrors(3), {{"kmsg", "boot", "10"}});
  EXPECT_EQ(StoredErrors(), 3u);
  EXPECT_EQ(StoredCursor(), "10");

  FillDisk("events");
  pipeline_->Handle(HostErrors(5), {{"kmsg", "boot", "20"}});
  pipeline_->Handle(HostErrors(7), {{"kmsg", "boot", "30"}});
  EXPECT_FALSE(pipeline_->GetStats().store_ok);
  EXPECT_EQ(pipeline_->GetStats().backlog_events, 12u);
  EXPECT_EQ(StoredCursor(), "10") << "the cursor waits behind the events it follows";
  loop_.AdvanceBy(30s);  // retries, with a backoff, all failing
  const auto failures = pipeline_->GetStats().store_failures;
  EXPECT_GE(failures, 4u);
  EXPECT_LE(failures, 12u) << "backed off, not spinning";
  EXPECT_EQ(StoredErrors(), 3u);

  Heal("events");
  loop_.AdvanceBy(10s);
  EXPECT_TRUE(pipeline_->GetStats().store_ok);
  EXPECT_EQ(pipeline_->GetStats().backlog_events, 0u);
  EXPECT_EQ(StoredErrors(), 15u) << "every queued error stored once";
  EXPECT_EQ(StoredCursor(), "30");
  EXPECT_EQ(loop_.ArmedTimers(), 1u) << "only the hourly retention: no retry left armed";
}

TEST_F(RasPipelineTest, AStormOverManyPagesIsOneEventAndAPageThatActsGetsItsOwn) {
  actuator_->SetOptions({.host_page_offline = true});
  // One DIMM's CE over 400 pages, in one minute; page 0x7000 has 50 of
  // them, the policy's page threshold.
  std::vector<ras::RasEvent> storm = HostErrors(450);
  for (std::size_t i = 0; i < storm.size(); ++i) {
    storm[i].time = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000));
    storm[i].dimm = "DIMM_A1";
    const std::uint64_t page = i < 50 ? 0x7000 : 0x100000 + i * 0x1000;
    storm[i].address = ras::Address::Of(page + 0x40);
  }
  pipeline_->Handle(storm, {{"kmsg", "boot", "450"}});
  auto events = store_->QueryEvents({});
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), 2u) << "the DIMM's event, and the page that acted";
  const ras::RasEvent& rest = events->front().event;
  EXPECT_EQ(rest.count, 400u);
  EXPECT_EQ(rest.pages.size() + rest.pages_not_listed, 400u);
  const ras::RasEvent& acted = events->back().event;
  EXPECT_EQ(acted.count, 50u);
  ASSERT_TRUE(acted.address.has_value());
  EXPECT_EQ(acted.address->value, 0x7000u);
  EXPECT_TRUE(acted.pages.empty());

  auto actions = store_->QueryActions(std::nullopt, 10);
  ASSERT_TRUE(actions.has_value());
  bool offlined = false;
  for (const auto& action : *actions) {
    if (action.action != "soft-offline-page") continue;
    offlined = true;
    EXPECT_EQ(action.event_id, events->back().id) << "the page's row, not the DIMM's";
    EXPECT_EQ(action.address, 0x7000u);
  }
  EXPECT_TRUE(offlined);
  auto pages = store_->LoadPageErrors({});
  ASSERT_TRUE(pages.has_value());
  EXPECT_EQ(pages->size(), 401u) << "one row per page";

  // With offlining off the action does nothing: its row is the minute's
  // disabled one, and the page stays in the DIMM's event.
  actuator_->SetOptions({.host_page_offline = false});
  for (auto& event : storm) event.time += std::chrono::minutes(5);
  pipeline_->Handle(storm, {{"kmsg", "boot", "900"}});
  events = store_->QueryEvents({});
  ASSERT_EQ(events->size(), 3u) << "one more: the DIMM's, pages and all";
  EXPECT_EQ(events->back().event.count, 450u);
}

TEST_F(RasPipelineTest, AComponentsStormIsOneRowPerMinuteAcrossBatchesUnlessTheStoreFails) {
  auto storm = [](int records, std::uint64_t first_page) {
    std::vector<ras::RasEvent> events = HostErrors(records);
    for (std::size_t i = 0; i < events.size(); ++i) {
      events[i].time = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000)) +
                       std::chrono::milliseconds(i);
      events[i].dimm = "DIMM_A1";
      events[i].address = ras::Address::Of(first_page + (i % 40) * 0x1000);
    }
    return events;
  };
  pipeline_->Handle(storm(200, 0x100000), {{"kmsg", "boot", "200"}});
  pipeline_->Handle(storm(200, 0x120000), {{"kmsg", "boot", "400"}});
  auto events = store_->QueryEvents({});
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), 1u) << "the second batch grew the first's row";
  EXPECT_EQ(events->front().event.count, 400u);
  EXPECT_EQ(events->front().event.pages.size() + events->front().event.pages_not_listed, 72u)
      << "40 pages each, 8 of them shared";
  EXPECT_EQ(StoredErrors(), 400u);

  // A batch the store refuses waits and is stored as a row of its own;
  // the counts stay exact.
  FillDisk("events");
  pipeline_->Handle(storm(100, 0x100000), {{"kmsg", "boot", "500"}});
  Heal("events");
  loop_.AdvanceBy(1s);
  EXPECT_EQ(pipeline_->GetStats().backlog_events, 0u);
  pipeline_->Handle(storm(100, 0x100000), {{"kmsg", "boot", "600"}});
  events = store_->QueryEvents({});
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ(events->front().event.count, 400u);
  EXPECT_EQ(events->back().event.count, 200u) << "the backlog's row, grown by the next batch";
  EXPECT_EQ(StoredErrors(), 600u);
  EXPECT_EQ(StoredCursor(), "600");
}

// An Xid repeated on one GPU below any storm rate (a line a batch, 800
// of them over four minutes): one stored row per GPU, code and 60 s
// window, with the exact count; the window's first acts (device 1
// isolated once), its repeats are recorded with it.
TEST_F(RasPipelineTest, ARepeatedXidIsOneRowPerWindowWithItsExactCount) {
  const auto start = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000));
  for (int i = 0; i < 800; ++i) {
    ras::RasEvent event;
    event.time = start + std::chrono::milliseconds(i * 300);  // 240 s in all
    event.source = "kmsg";
    event.origin = "nvidia_xid";
    event.severity = ras::Severity::kUce;
    event.vendor_code = 95;
    event.device = 1;
    event.summary = "Xid 95 on device 1";
    pipeline_->Handle({event}, {{"kmsg", "boot", std::to_string(i + 1)}});
    loop_.AdvanceBy(10ms);
  }
  auto events = store_->QueryEvents({});
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), 4u) << "four 60 s windows";
  std::uint64_t counted = 0;
  for (const auto& stored : *events) counted += stored.event.count;
  EXPECT_EQ(counted, 800u);
  EXPECT_EQ(events->front().event.count, 200u);
  auto actions = store_->QueryActions(1, 10000);
  ASSERT_TRUE(actions.has_value());
  int isolations = 0;
  for (const auto& action : *actions) isolations += action.action == "isolate-device" ? 1 : 0;
  EXPECT_EQ(isolations, 4) << "one per window; the device was isolated by the first";
  EXPECT_EQ(StoredCursor(), "800");

  // Without the storm row, every line is a row and every one acts.
  pipeline_->SetFaultRules(ras::MergeFaultRules({{.name = "xid-storm", .enabled = false}}));
  ras::RasEvent later;
  later.time = start + std::chrono::minutes(10);
  later.source = "kmsg";
  later.origin = "nvidia_xid";
  later.severity = ras::Severity::kUce;
  later.vendor_code = 95;
  later.device = 1;
  pipeline_->Handle({later});
  later.time += std::chrono::seconds(1);
  pipeline_->Handle({later});
  events = store_->QueryEvents({});
  ASSERT_TRUE(events.has_value());
  EXPECT_EQ(events->size(), 6u);
}

// Under a storm a page struck in every batch is written to page_errors
// once a second, not once per batch: the batches between go with a later
// one's transaction, or with the timer when the storm ends, or when the
// pipeline stops. A batch the store refuses keeps its pages for the retry.
TEST_F(RasPipelineTest, AStormsPageErrorsAreSavedOnceASecondAndNoneIsLost) {
  auto storm = [](int records) {
    std::vector<ras::RasEvent> events = HostErrors(records);
    for (std::size_t i = 0; i < events.size(); ++i) {
      events[i].dimm = "DIMM_B2";
      events[i].address = ras::Address::Of(0x200000 + (i % 40) * 0x1000);
    }
    return events;
  };
  loop_.AdvanceBy(5s);
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "200"}});
  EXPECT_EQ(StoredPageErrors(), 200u) << "the storm's first batch: nothing saved for a second";
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "400"}});
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "600"}});
  EXPECT_EQ(StoredPageErrors(), 200u) << "within the second: waiting";
  EXPECT_EQ(StoredErrors(), 600u) << "the events themselves are stored with each batch";
  loop_.AdvanceBy(1s);
  EXPECT_EQ(StoredPageErrors(), 600u) << "the storm ended: the timer saved the rest";

  loop_.AdvanceBy(500ms);
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "800"}});
  FillDisk("page_errors");
  loop_.AdvanceBy(600ms);
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "1000"}});
  EXPECT_GT(pipeline_->GetStats().backlog_events, 0u) << "the batch that carried them waits";
  EXPECT_EQ(StoredPageErrors(), 600u);
  Heal("page_errors");
  loop_.AdvanceBy(1s);
  EXPECT_EQ(pipeline_->GetStats().backlog_events, 0u);
  EXPECT_EQ(StoredPageErrors(), 1000u);
  EXPECT_EQ(StoredCursor(), "1000");

  loop_.AdvanceBy(1s);
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "1200"}});
  pipeline_->Handle(storm(200), {{"kmsg", "boot", "1400"}});
  EXPECT_EQ(StoredPageErrors(), 1200u);
  pipeline_.reset();
  EXPECT_EQ(StoredPageErrors(), 1400u) << "saved as the pipeline stops";
}

// Once its second is up, a storm's pages go kPagesPerBatch with each batch
// until the second's are saved, not all with one: thousands of upserts in
// one batch held the loop, and every request behind it. What the later
// batches add waits for the next second.
TEST_F(RasPipelineTest, AStormsManyPagesAreSavedASliceABatch) {
  constexpr std::size_t kPages = 2 * RasPipeline::kPagesPerBatch + 100;
  auto storm = [](std::size_t pages) {
    std::vector<ras::RasEvent> events = HostErrors(static_cast<int>(pages));
    for (std::size_t i = 0; i < events.size(); ++i) {
      events[i].dimm = "DIMM_B2";
      events[i].address = ras::Address::Of(0x40000000 + i * 0x1000);
    }
    return events;
  };
  auto stored_pages = [this] {
    auto pages = store_->LoadPageErrors({});
    EXPECT_TRUE(pages.has_value());
    return pages ? pages->size() : 0;
  };
  loop_.AdvanceBy(5s);
  pipeline_->Handle(storm(kPages), {{"kmsg", "boot", "1"}});
  EXPECT_EQ(stored_pages(), RasPipeline::kPagesPerBatch) << "the first slice";
  pipeline_->Handle(storm(10), {{"kmsg", "boot", "2"}});
  EXPECT_EQ(stored_pages(), 2 * RasPipeline::kPagesPerBatch) << "the next with the next batch";
  pipeline_->Handle(storm(10), {{"kmsg", "boot", "3"}});
  EXPECT_EQ(stored_pages(), kPages) << "the rest";
  EXPECT_EQ(StoredPageErrors(), kPages) << "the later batches' errors wait for their second";
  pipeline_->Handle(storm(10), {{"kmsg", "boot", "4"}});
  EXPECT_EQ(StoredPageErrors(), kPages);
  EXPECT_EQ(StoredErrors(), kPages + 30) << "the events themselves are stored with each batch";
  loop_.AdvanceBy(1s);
  EXPECT_EQ(StoredPageErrors(), kPages + 30) << "the storm ended: the timer saved the rest";
}

TEST_F(RasPipelineTest, RetentionDeletesOldEventsAtStartAndEveryHour) {
  ras::RasEvent old_event = HostErrors(1)[0];
  old_event.time = loop_.GetClock().Wall() - std::chrono::hours(24 * 3);
  ASSERT_TRUE(store_->RecordEvent(old_event).has_value());
  pipeline_ = std::make_unique<RasPipeline>(loop_, *runtime_, policy_, *actuator_, *health_,
                                            *store_, RasPipeline::Options{.retention_days = 2});
  EXPECT_EQ(pipeline_->GetStats().pruned, 1u) << "deleted at start";
  EXPECT_EQ(pipeline_->GetStats().ToJson()["pruned"], 1u);
  pipeline_->Handle(HostErrors(1), {});
  loop_.AdvanceBy(std::chrono::hours(24 * 2) + std::chrono::hours(1));
  EXPECT_EQ(pipeline_->GetStats().pruned, 2u) << "the next one, by the hourly run once it aged";
}

TEST_F(RasPipelineTest, TheBacklogIsBoundedWithExactCounts) {
  FillDisk("events");
  const int batches = 4;
  const int per_batch = static_cast<int>(RasPipeline::kMaxBacklogEvents / 2);
  for (int i = 0; i < batches; ++i) {
    auto events = HostErrors(per_batch);
    for (auto& event : events) event.summary = "EDAC MC0: 1 CE on DIMM 1";  // a storm of one kind
    pipeline_->Handle(std::move(events), {{"kmsg", "boot", std::to_string(i)}});
  }
  EXPECT_LE(pipeline_->GetStats().backlog_events, RasPipeline::kMaxBacklogEvents);
  EXPECT_EQ(pipeline_->GetStats().dropped_events, 0u) << "coalescing made room";
  Heal("events");
  loop_.AdvanceBy(10s);
  EXPECT_EQ(StoredErrors(), static_cast<std::uint64_t>(batches) * per_batch)
      << "coalesced, the counts stay exact";
  EXPECT_EQ(StoredCursor(), "3");
}

TEST_F(RasPipelineTest, AnOperatorsStateThatCannotBeSavedSaysSoAndIsRetried) {
  FillDisk("device_states");
  auto isolated = health_->DecideAndSave({.device = 1,
                                          .cause = HealthCause::kOperator,
                                          .target = runtime::HealthState::kIsolated,
                                          .reason = "bad fan"});
  ASSERT_FALSE(isolated.has_value());
  EXPECT_EQ(isolated.error().code, ErrorCode::kIoError);
  EXPECT_NE(isolated.error().message.find("could not be saved"), std::string::npos);
  EXPECT_EQ((*runtime_->GetDevice(1))->Health(), runtime::HealthState::kIsolated)
      << "the gate is closed all the same";
  EXPECT_EQ(health_->UnsavedStates(), 1u);
  loop_.AdvanceBy(5s);
  EXPECT_EQ(health_->UnsavedStates(), 1u);
  Heal("device_states");
  loop_.AdvanceBy(20s);
  EXPECT_EQ(health_->UnsavedStates(), 0u);
  auto states = store_->LoadDeviceStates();
  ASSERT_TRUE(states.has_value());
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ((*states)[0].state, "isolated");
  EXPECT_EQ((*states)[0].reason, "bad fan");
  const auto actions = store_->QueryActions(1, 10);
  ASSERT_TRUE(actions.has_value());
  ASSERT_EQ(actions->size(), 1u) << "the action row waited with its state";
  EXPECT_EQ((*actions)[0].action, "isolate-device");
  EXPECT_EQ((*actions)[0].rule, "operator");
}

TEST_F(RasPipelineTest, AStateWaitingInTheBacklogNeverOverwritesANewerOne) {
  // A batch that isolates device 1 cannot be stored: its rows wait.
  store_->SetWriteFault([](std::string_view what) -> std::optional<Error> {
    if (what == "batch") return Error{ErrorCode::kIoError, "disk full"};
    return std::nullopt;
  });
  ras::RasEvent fatal;
  fatal.time = loop_.GetClock().Wall();
  fatal.source = "driver";
  fatal.origin = "sim";
  fatal.severity = ras::Severity::kFatal;
  fatal.device = 1;
  fatal.summary = "device fell off the bus";
  pipeline_->Handle({fatal}, {});
  ASSERT_EQ((*runtime_->GetDevice(1))->Health(), runtime::HealthState::kIsolated);
  // The disk recovers, and an operator's undrain is saved at once.
  store_->SetWriteFault(nullptr);
  ASSERT_TRUE(health_
                  ->DecideAndSave({.device = 1,
                                   .cause = HealthCause::kOperator,
                                   .target = runtime::HealthState::kHealthy,
                                   .reason = "replaced"})
                  .has_value());
  loop_.AdvanceBy(20s);  // the backlog is stored
  auto counts = store_->CountEventsBySeverity();
  ASSERT_TRUE(counts.has_value());
  EXPECT_EQ((*counts)[ras::Severity::kFatal], 1u) << "the event waited and was stored";
  auto states = store_->LoadDeviceStates();
  ASSERT_TRUE(states.has_value());
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ((*states)[0].state, "healthy") << "the older isolated row did not come back";
  EXPECT_EQ((*states)[0].reason, "replaced");
}

}  // namespace
}  // namespace rasd::daemon
