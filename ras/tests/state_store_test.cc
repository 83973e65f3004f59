#include "rasd/ras/state_store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "rasd/common/unix_nanos.h"

namespace rasd::ras {
namespace {

using namespace std::chrono_literals;

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rasd-store-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs SQL against the database file with a separate connection, as an
  // operator with the sqlite3 shell would.
  void ExecRaw(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "state" / StateStore::kDatabaseFile).c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
  }

  // The first column of the first row of `sql`, read with a separate
  // connection.
  std::int64_t QueryRaw(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open((dir_ / "state" / StateStore::kDatabaseFile).c_str(), &db), SQLITE_OK);
    sqlite3_stmt* statement = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    std::int64_t value = -1;
    if (sqlite3_step(statement) == SQLITE_ROW) value = sqlite3_column_int64(statement, 0);
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return value;
  }

  std::filesystem::path dir_;
};

// On a minute boundary, so that +59 s is the same minute and +60 s the next.
const auto kMinute = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000));

ActionRecord Decision(std::string result, std::chrono::system_clock::time_point time,
                      std::optional<int> device = 1) {
  return {.time = time,
          .action = "isolate-device",
          .device = device,
          .rule = "fatal-device",
          .reason = "FATAL sim",
          .result = std::move(result),
          .detail = "actions are disabled"};
}

// A batch of every kind, actions linked to its events by index.
StoreBatch MixedBatch(std::chrono::system_clock::time_point t0) {
  StoreBatch batch;
  for (int i = 0; i < 3; ++i) {
    batch.events.push_back({.time = t0 + std::chrono::seconds(i),
                            .source = "kmsg",
                            .origin = "nvidia_xid",
                            .severity = Severity::kFatal,
                            .device = i,
                            .summary = "Xid 79 #" + std::to_string(i)});
  }
  batch.actions.push_back({.record = Decision("ok", t0, 2), .event_index = 2});
  batch.actions.push_back({.record = Decision("failed", t0, 0), .event_index = 0});
  batch.actions.push_back({.record = {.time = t0,
                                      .action = "drain-device",
                                      .device = 1,
                                      .rule = "operator",
                                      .reason = "maintenance",
                                      .result = "ok"}});
  batch.states.push_back({"SIM-2", "Isolated", "Xid 79", t0});
  batch.pages.push_back({"SIM-2", 0x5000, "UCNA", t0});
  batch.cursors.push_back({"kmsg", "boot-a", "42"});
  return batch;
}

TEST_F(StateStoreTest, CreatesTheDirectoryAndMigratesToTheLatestSchema) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  EXPECT_EQ((*store)->SchemaVersion(), StateStore::LatestSchemaVersion());
  EXPECT_GE(StateStore::LatestSchemaVersion(), 1);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_ / "state/rasd.db"));
}

TEST_F(StateStoreTest, WorkloadsSurviveReopenAndAreReplacedAndDeletedByPidAndStartTime) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().message;
    ASSERT_TRUE((*store)->SaveWorkload({4242, 1000, R"({"name":"a"})"}).has_value());
    ASSERT_TRUE((*store)->SaveWorkload({4242, 2000, R"({"name":"b"})"}).has_value());
    ASSERT_TRUE((*store)->SaveWorkload({4242, 1000, R"({"name":"a2"})"}).has_value());
  }
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto loaded = (*store)->LoadWorkloads();
  ASSERT_TRUE(loaded.has_value());
  ASSERT_EQ(loaded->size(), 2U) << "one row per pid and start time";
  std::map<std::uint64_t, std::string> by_start;
  for (const auto& workload : *loaded) by_start[workload.start_time] = workload.spec;
  EXPECT_EQ(by_start[1000], R"({"name":"a2"})");
  EXPECT_EQ(by_start[2000], R"({"name":"b"})");
  ASSERT_TRUE((*store)->DeleteWorkload(4242, 1000).has_value());
  loaded = (*store)->LoadWorkloads();
  ASSERT_EQ(loaded->size(), 1U);
  EXPECT_EQ(loaded->front().start_time, 2000U);
}

TEST_F(StateStoreTest, DeviceRecoveryRowsSurviveReopenOnePerUuid) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().message;
    ASSERT_TRUE((*store)->SaveDeviceRecovery({"GPU-a", R"({"action":"reboot-node"})"}).has_value());
    ASSERT_TRUE((*store)->SaveDeviceRecovery({"GPU-b", R"({"action":"none"})"}).has_value());
    ASSERT_TRUE(
        (*store)->SaveDeviceRecovery({"GPU-a", R"({"action":"hardware-inspection"})"}).has_value());
  }
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto loaded = (*store)->LoadDeviceRecoveries();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  ASSERT_EQ(loaded->size(), 2U);
  EXPECT_EQ(loaded->at(0).device_uuid, "GPU-a");
  EXPECT_EQ(loaded->at(0).spec, R"({"action":"hardware-inspection"})");
  EXPECT_EQ(loaded->at(1).device_uuid, "GPU-b");
}

TEST_F(StateStoreTest, UsesWriteAheadLogging) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "state/rasd.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode;", -1, &statement, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)), "wal");
  sqlite3_finalize(statement);
  sqlite3_close(db);
}

TEST_F(StateStoreTest, EventsSurviveReopenAndAreCountedBySeverity) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
    RasEvent event{.time = std::chrono::system_clock::now(),
                   .origin = "edac",
                   .severity = Severity::kCe,
                   .summary = "1 CE on mc0",
                   .raw = "EDAC MC0: 1 CE"};
    ASSERT_TRUE((*store)->RecordEvent(event).has_value());
    ASSERT_TRUE((*store)->RecordEvent(event).has_value());
    event.severity = Severity::kFatal;
    event.device = 3;
    event.address = Address::Of(0xfffffffffffff000);
    ASSERT_TRUE((*store)->RecordEvent(event).has_value());
  }
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto counts = (*store)->CountEventsBySeverity();
  ASSERT_TRUE(counts.has_value()) << counts.error().ToString();
  EXPECT_EQ(counts->size(), kAllSeverities.size());
  EXPECT_EQ(counts->at(Severity::kCe), 2u);  // two events of count 1
  EXPECT_EQ(counts->at(Severity::kFatal), 1u);
  EXPECT_EQ(counts->at(Severity::kSrar), 0u);
}

// The counts `status` shows are kept in memory: they must equal what a full
// scan of the table sums, whatever wrote or deleted the rows.
TEST_F(StateStoreTest, CountsBySeverityFollowCommitsPrunesFailuresAndReopen) {
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  // The stored events' errors and the rolled-up ones'.
  auto scanned = [&](const char* severity) {
    return QueryRaw(std::string("SELECT (SELECT COALESCE(SUM(count), 0) FROM events WHERE "
                                "severity = '") +
                    severity + "') + (SELECT COALESCE(SUM(errors), 0) FROM event_rollups WHERE " +
                    "severity = '" + severity + "');");
  };
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
    StoreBatch batch;
    for (int i = 0; i < 10; ++i) {
      batch.events.push_back({.time = t0 + std::chrono::hours(i),
                              .origin = "edac",
                              .severity = i % 2 == 0 ? Severity::kCe : Severity::kUce,
                              .count = static_cast<std::uint64_t>(i + 1)});  // coalesced rows
    }
    ASSERT_TRUE((*store)->Commit(batch).has_value());
    ASSERT_TRUE((*store)->RecordEvent({.time = t0, .severity = Severity::kFatal}).has_value());
    const std::vector<RasEvent> more = {{.time = t0 + 20h, .severity = Severity::kCe, .count = 7}};
    ASSERT_TRUE((*store)->RecordEvents(more).has_value());
    auto counts = (*store)->CountEventsBySeverity();
    ASSERT_TRUE(counts.has_value());
    EXPECT_EQ(counts->at(Severity::kCe), 1u + 3 + 5 + 7 + 9 + 7);
    EXPECT_EQ(counts->at(Severity::kUce), 2u + 4 + 6 + 8 + 10);
    EXPECT_EQ(counts->at(Severity::kFatal), 1u);
    EXPECT_EQ(counts->at(Severity::kCe), static_cast<std::uint64_t>(scanned("CE")));

    // A batch that fails at its last row counts nothing.
    ExecRaw(R"sql(
      CREATE TRIGGER refuse_cursor_insert BEFORE INSERT ON source_cursors
        BEGIN SELECT RAISE(ABORT, 'injected cursor failure'); END;
    )sql");
    StoreBatch failing;
    failing.events.push_back({.time = t0, .severity = Severity::kCe, .count = 1000});
    failing.cursors.push_back({"kmsg", "boot-a", "1"});
    ASSERT_FALSE((*store)->Commit(failing).has_value());
    EXPECT_EQ((*store)->CountEventsBySeverity()->at(Severity::kCe), 32u);

    // Pruning by age (t0..t0+2h: the FATAL row, CE 1 and 3, UCE 2), then
    // by count (the oldest beyond 4 rows): rolled up, still counted.
    ASSERT_EQ(*(*store)->Prune(t0 + 3h, 1'000'000), 4u);
    counts = (*store)->CountEventsBySeverity();
    EXPECT_EQ(counts->at(Severity::kFatal), 1u);
    EXPECT_EQ(counts->at(Severity::kCe), 32u);
    EXPECT_EQ(counts->at(Severity::kUce), 30u);
    ASSERT_EQ(*(*store)->Prune(t0, 4), 4u);
    EXPECT_EQ(QueryRaw("SELECT COUNT(*) FROM events;"), 4);
    counts = (*store)->CountEventsBySeverity();
    EXPECT_EQ(counts->at(Severity::kCe), 32u);
    EXPECT_EQ(counts->at(Severity::kUce), 30u);
    for (const char* severity : {"CE", "UCE", "FATAL"}) {
      EXPECT_EQ(counts->at(*ParseSeverity(severity)), static_cast<std::uint64_t>(scanned(severity)))
          << severity;
    }
  }
  // Rows another writer added while no store was open, and a severity from
  // a newer rasd, which is not ours to count.
  ExecRaw(
      "INSERT INTO events(time_ns, origin, severity, summary, raw, count) VALUES "
      "(0, 'edac', 'CE', '', '', 100), (0, 'edac', 'NEWCLASS', '', '', 5);");
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto counts = (*store)->CountEventsBySeverity();
  ASSERT_TRUE(counts.has_value());
  EXPECT_EQ(counts->size(), kAllSeverities.size());
  EXPECT_EQ(counts->at(Severity::kCe), 132u) << "taken again from the events and roll-ups";
  EXPECT_EQ(counts->at(Severity::kUce), 30u);
  EXPECT_EQ(counts->at(Severity::kInfo), 0u);
  // Pruning both rows rolls them up: still counted.
  ASSERT_EQ(*(*store)->Prune(std::chrono::system_clock::time_point(std::chrono::nanoseconds(1)),
                             1'000'000),
            2u);
  counts = (*store)->CountEventsBySeverity();
  EXPECT_EQ(counts->at(Severity::kCe), 132u);
  EXPECT_EQ(counts->at(Severity::kUce), 30u);
  EXPECT_EQ(counts->at(Severity::kCe), static_cast<std::uint64_t>(scanned("CE")));
}

// The writing connection answers a summary from memory once it has read
// the totals; its commits (rows, rows grown, a batch that failed and was
// rolled back) keep that copy equal to what the table says.
TEST_F(StateStoreTest, TheSummaryInMemoryFollowsCommitsAndMatchesTheTable) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto from_table = [&] {
    auto reader = (*store)->OpenReader();  // a connection of its own reads the table
    EXPECT_TRUE(reader.has_value());
    auto rows = (*reader)->Summarize();
    EXPECT_TRUE(rows.has_value());
    return rows ? *rows : std::vector<EventSummaryRow>{};
  };
  auto same = [](const std::vector<EventSummaryRow>& a, const std::vector<EventSummaryRow>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i].origin != b[i].origin || a[i].severity != b[i].severity ||
          a[i].events != b[i].events || a[i].errors != b[i].errors || a[i].last != b[i].last)
        return false;
    }
    return true;
  };
  ASSERT_TRUE((*store)->Summarize().has_value());  // read once: from here on, memory
  const auto t0 = kMinute;
  std::mt19937 random(7);
  const char* origins[] = {"nvidia_xid", "edac", "aer", "mce"};
  std::int64_t grown_row = 0;
  for (int round = 0; round < 6; ++round) {
    StoreBatch batch;
    for (int i = 0; i < 20; ++i) {
      batch.events.push_back({.time = t0 + std::chrono::seconds(round * 20 + i),
                              .source = "kmsg",
                              .origin = origins[random() % 4],
                              .severity = static_cast<Severity>(random() % 4),
                              .count = 1 + random() % 5,
                              .summary = "e" + std::to_string(i)});
    }
    if (grown_row != 0) {
      batch.grows.resize(batch.events.size());
      batch.grows[3] = EventGrowth{.id = grown_row, .count = 9, .last = t0 + std::chrono::hours(1)};
    }
    if (round == 4) {
      // A batch that fails after its totals were written is rolled back:
      // the copy is unchanged.
      batch.events.back().address = Address::Of(0x7000);
      sqlite3* other = nullptr;
      ASSERT_EQ(sqlite3_open((dir_ / "state" / StateStore::kDatabaseFile).c_str(), &other),
                SQLITE_OK);
      ASSERT_EQ(sqlite3_exec(other,
                             "CREATE TRIGGER full BEFORE INSERT ON page_errors "
                             "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;",
                             nullptr, nullptr, nullptr),
                SQLITE_OK);
      EXPECT_FALSE((*store)->Commit(batch).has_value());
      ASSERT_EQ(sqlite3_exec(other, "DROP TRIGGER full;", nullptr, nullptr, nullptr), SQLITE_OK);
      sqlite3_close(other);
    } else {
      auto stored = (*store)->Commit(batch);
      ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
      grown_row = stored->event_ids.front();
    }
    auto in_memory = (*store)->Summarize();
    ASSERT_TRUE(in_memory.has_value());
    EXPECT_TRUE(same(*in_memory, from_table())) << "round " << round;
    EXPECT_GE(in_memory->size(), 4u);
  }
}

TEST_F(StateStoreTest, BatchesQueriesSummariesAndCursors) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  std::vector<RasEvent> batch;
  for (int i = 0; i < 10; ++i) {
    RasEvent event{.time = t0 + std::chrono::seconds(i),
                   .source = "kmsg",
                   .origin = i < 7 ? "edac" : "nvidia_xid",
                   .severity = i < 7 ? Severity::kCe : Severity::kFatal,
                   .summary = "e" + std::to_string(i)};
    if (i >= 7) {
      event.device = 2;
      event.vendor_code = 79;
      event.pci_bdf = "0000:07:00";
    } else {
      event.mc = 1;
      event.count = 3;
      event.address = Address{0x1000, "0x0000_1000"};
    }
    batch.push_back(event);
  }
  ASSERT_TRUE((*store)->RecordEvents(batch).has_value());

  auto all = (*store)->QueryEvents({});
  ASSERT_TRUE(all.has_value()) << all.error().ToString();
  ASSERT_EQ(all->size(), 10u);
  EXPECT_EQ(all->front().event.summary, "e0") << "oldest first";
  EXPECT_EQ(all->front().event.mc, 1);
  EXPECT_EQ(all->front().event.count, 3u);
  ASSERT_TRUE(all->front().event.address);
  EXPECT_EQ(all->front().event.address->value, 0x1000u) << "the value, stored as a number";
  EXPECT_EQ(all->front().event.address->printed, "0x0000_1000") << "and the text as printed";
  EXPECT_EQ(all->front().event.source, "kmsg");
  EXPECT_EQ(all->back().event.vendor_code, 79);
  EXPECT_EQ(all->back().event.pci_bdf, "0000:07:00");
  EXPECT_EQ(all->back().event.time, t0 + std::chrono::seconds(9));

  auto fatal = (*store)->QueryEvents({.severity = Severity::kFatal});
  ASSERT_EQ(fatal->size(), 3u);
  auto on_device = (*store)->QueryEvents({.device = 2, .limit = 2});
  ASSERT_EQ(on_device->size(), 2u);
  EXPECT_EQ(on_device->back().event.summary, "e9") << "the newest within the limit";
  auto recent = (*store)->QueryEvents({.since = t0 + std::chrono::seconds(8)});
  ASSERT_EQ(recent->size(), 2u);
  auto after = (*store)->QueryEvents({.after_id = all->at(8).id});
  ASSERT_EQ(after->size(), 1u);

  auto summary = (*store)->Summarize();
  ASSERT_TRUE(summary.has_value());
  ASSERT_EQ(summary->size(), 2u);
  EXPECT_EQ(summary->at(0).origin, "edac");
  EXPECT_EQ(summary->at(0).events, 7u);
  EXPECT_EQ(summary->at(0).errors, 21u);
  EXPECT_EQ(summary->at(1).origin, "nvidia_xid");
  EXPECT_EQ(summary->at(1).severity, Severity::kFatal);

  EXPECT_FALSE((*store)->LoadCursor("kmsg")->has_value());
  ASSERT_TRUE((*store)->SaveCursor({"kmsg", "boot-a", "41"}).has_value());
  ASSERT_TRUE((*store)->SaveCursor({"kmsg", "boot-a", "42"}).has_value());
  auto cursor = (*store)->LoadCursor("kmsg");
  ASSERT_TRUE(cursor.has_value() && cursor->has_value());
  EXPECT_EQ((*cursor)->boot_id, "boot-a");
  EXPECT_EQ((*cursor)->position, "42");
}

TEST_F(StateStoreTest, ACoalescedEventKeepsItsDimmAndPagesAndEachPageItsErrors) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  RasEvent storm{.time = t0, .source = "kmsg", .origin = "edac", .severity = Severity::kCe};
  storm.mc = 1;
  storm.dimm = "DIMM_A1";
  storm.address = Address::Of(0x100040);
  for (std::uint64_t i = 0; i < kMaxStoredPages + 10; ++i)
    storm.pages.push_back({0x100000 + i * 0x1000, i + 1});
  storm.count = 0;
  for (const auto& page : storm.pages) storm.count += page.errors;
  RasEvent single{.time = t0 + 1s, .source = "kmsg", .origin = "edac", .severity = Severity::kCe};
  single.mc = 1;
  single.address = Address::Of(0x100ff8);  // the first page again
  single.count = 5;
  ASSERT_TRUE((*store)->RecordEvents(std::vector<RasEvent>{storm, single}).has_value());

  auto stored = (*store)->QueryEvents({});
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  ASSERT_EQ(stored->size(), 2u);
  const RasEvent& back = stored->front().event;
  EXPECT_EQ(back.dimm, "DIMM_A1");
  EXPECT_EQ(back.count, storm.count);
  ASSERT_EQ(back.pages.size(), kMaxStoredPages) << "the first pages are listed";
  EXPECT_EQ(back.pages.front(), storm.pages.front());
  EXPECT_EQ(back.pages.back(), storm.pages[kMaxStoredPages - 1]);
  EXPECT_EQ(back.pages_not_listed, 10u) << "and the rest counted";
  EXPECT_FALSE(stored->back().event.dimm.has_value());
  EXPECT_TRUE(stored->back().event.pages.empty());

  // One row per page, whatever the events: the first page has both.
  auto pages = (*store)->LoadPageErrors(t0);
  ASSERT_TRUE(pages.has_value()) << pages.error().ToString();
  ASSERT_EQ(pages->size(), kMaxStoredPages + 10);
  std::uint64_t errors = 0;
  for (const auto& page : *pages) {
    EXPECT_EQ(page.scope, "mc1");
    errors += page.errors;
    if (page.page == 0x100000) {
      EXPECT_EQ(page.errors, 6u);
      EXPECT_EQ(page.first, t0);
      EXPECT_EQ(page.last, t0 + 1s);
    }
  }
  EXPECT_EQ(errors, storm.count + 5);
  EXPECT_EQ((*store)->LoadPageErrors(t0 + 2s)->size(), 0u) << "none erred since";
}

TEST_F(StateStoreTest, ARowThatGrowsCountsItsErrorsOnceAndAGoneRowIsWrittenAnew) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  RasEvent first{.time = t0, .source = "kmsg", .origin = "edac", .severity = Severity::kCe};
  first.mc = 0;
  first.address = Address::Of(0x1000);
  first.count = 3;
  auto ids = (*store)->RecordEvents(std::vector<RasEvent>{first});
  ASSERT_TRUE(ids.has_value());

  StoreBatch batch;
  RasEvent more = first;
  more.time = t0 + 5s;
  more.address = Address::Of(0x2000);
  more.count = 4;
  batch.events = {more, more};
  batch.grows = {
      EventGrowth{
          .id = ids->front(), .count = 7, .pages = {{0x1000, 3}, {0x2000, 4}}, .last = t0 + 5s},
      EventGrowth{.id = 999'999, .count = 4, .last = t0 + 5s}};  // no such row
  auto stored = (*store)->Commit(batch);
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  EXPECT_EQ(stored->event_ids.front(), ids->front());
  EXPECT_NE(stored->event_ids.back(), 999'999) << "a row of its own";

  auto events = (*store)->QueryEvents({});
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ(events->front().event.count, 7u);
  EXPECT_EQ(events->front().event.time, t0) << "the first error's time";
  EXPECT_EQ(events->front().last, t0 + 5s);
  EXPECT_EQ(events->front().event.pages, (std::vector<PageErrors>{{0x1000, 3}, {0x2000, 4}}));
  EXPECT_FALSE(events->back().last.has_value());
  auto summary = (*store)->Summarize();
  ASSERT_EQ(summary->size(), 1u);
  EXPECT_EQ(summary->front().events, 2u) << "the grown row is one event";
  EXPECT_EQ(summary->front().errors, 11u);
  EXPECT_EQ((*store)->CountEventsBySeverity()->at(Severity::kCe), 11u);
  const auto pages = (*store)->LoadPageErrors(t0);
  std::uint64_t page_errors = 0;
  for (const auto& page : *pages) page_errors += page.errors;
  EXPECT_EQ(page_errors, 11u);
}

TEST_F(StateStoreTest, TheTimesTheStoreStampsAreItsClocks) {
  auto clock = std::make_shared<common::ManualClock>(kMinute);
  auto store = StateStore::Open(dir_ / "state", clock);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  EXPECT_EQ(QueryRaw("SELECT since_ns FROM in_use WHERE id = 1;"), common::UnixNanos(kMinute))
      << "the in-use mark";

  clock->Advance(7s);
  ASSERT_TRUE((*store)->SaveCursor({"kmsg", "boot-a", "41"}).has_value());
  EXPECT_EQ(QueryRaw("SELECT updated_ns FROM source_cursors WHERE source = 'kmsg';"),
            common::UnixNanos(kMinute + 7s));

  clock->Advance(5s);
  StoreBatch batch;
  batch.cursors.push_back({"kmsg", "boot-a", "42"});
  ASSERT_TRUE((*store)->Commit(batch).has_value());
  EXPECT_EQ(QueryRaw("SELECT updated_ns FROM source_cursors WHERE source = 'kmsg';"),
            common::UnixNanos(kMinute + 12s))
      << "a batch's cursors";
}

TEST(CoalesceStormTest, AStormIsMergedPerComponentAndMinuteWithExactCounts) {
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000));
  std::vector<RasEvent> storm;
  for (int i = 0; i < 1000; ++i) {
    RasEvent event{.time = t0 + std::chrono::milliseconds(i * 100),
                   .source = "edac_sysfs",
                   .origin = "edac",
                   .severity = Severity::kCe,
                   .summary = "CE"};
    event.mc = i % 2;
    event.count = 2;
    storm.push_back(event);
  }
  storm.push_back(
      {.time = t0, .origin = "nvidia_xid", .severity = Severity::kFatal, .summary = "Xid 79"});
  const auto merged = CoalesceStorm(storm, 64);
  // 100 s of events: two minutes x two controllers, plus the Xid.
  ASSERT_EQ(merged.size(), 5u);
  std::uint64_t total = 0;
  for (const auto& event : merged) {
    if (event.origin == "edac") total += event.count;
  }
  EXPECT_EQ(total, 2000u) << "counts stay exact";
  EXPECT_NE(merged[0].summary.find("events coalesced"), std::string::npos);
  EXPECT_EQ(merged.back().origin, "nvidia_xid");
  EXPECT_EQ(CoalesceStorm(std::vector<RasEvent>(storm.begin(), storm.begin() + 10), 64).size(), 10u)
      << "no storm, no merging";
}

TEST(CoalesceStormTest, OneDimmsRecordsOverManyPagesAreOneEventWithEachPagesErrors) {
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000));
  std::vector<RasEvent> storm;
  for (int i = 0; i < 4000; ++i) {
    RasEvent event{.time = t0 + std::chrono::milliseconds(i),
                   .source = "kmsg",
                   .origin = "edac",
                   .severity = Severity::kCe,
                   .summary = "CE"};
    event.mc = 0;
    event.dimm = i % 4 == 3 ? "DIMM_B1" : "DIMM_A1";
    event.address = Address::Of(0x10000000 + static_cast<std::uint64_t>(i % 1000) * 0x1000 + 0x40);
    storm.push_back(event);
  }
  RasEvent no_address = storm.front();
  no_address.address.reset();
  storm.push_back(no_address);
  const auto merged = CoalesceStorm(storm, 64);
  ASSERT_EQ(merged.size(), 3u) << "one event per DIMM, and one for the record with no address";
  EXPECT_EQ(merged[0].dimm, "DIMM_A1");
  EXPECT_EQ(merged[0].count, 3000u);
  EXPECT_EQ(merged[0].pages.size(), 750u) << "pages i % 1000 with i % 4 != 3";
  std::uint64_t listed = 0;
  for (const auto& page : merged[0].pages) {
    EXPECT_EQ(page.page & 0xfff, 0u) << "page bases, not addresses";
    listed += page.errors;
  }
  EXPECT_EQ(listed, merged[0].count) << "every error is on a listed page";
  EXPECT_EQ(merged[0].pages.front(), (PageErrors{0x10000000, 4}));
  EXPECT_EQ(merged[1].dimm, "DIMM_B1");
  EXPECT_EQ(merged[1].count, 1000u);
  EXPECT_FALSE(merged[2].address.has_value());
  EXPECT_TRUE(merged[2].pages.empty());

  // A backlog coalesced again keeps each page's errors exact.
  std::vector<RasEvent> again = merged;
  again.insert(again.end(), merged.begin(), merged.end());
  const auto twice = CoalesceStorm(again, 0);
  ASSERT_EQ(twice.size(), 3u);
  EXPECT_EQ(twice[0].count, 6000u);
  ASSERT_EQ(twice[0].pages.size(), 750u);
  EXPECT_EQ(twice[0].pages.front(), (PageErrors{0x10000000, 8}));
}

// CoalesceStorm as it was first written, on an ordered map of copied keys:
// the reference the hashed one must agree with, row for row.
// Its pages: every page the members named, in first-seen order, with their
// errors; none where they named one page.
std::vector<RasEvent> ReferenceCoalesce(std::vector<RasEvent> events) {
  using Key = std::tuple<std::string, std::string, Severity, std::optional<int>, std::optional<int>,
                         std::optional<std::string>, bool, std::optional<std::string>,
                         std::optional<int>, bool, std::int64_t>;
  std::map<Key, std::size_t> index;
  std::vector<RasEvent> merged;
  std::vector<std::uint64_t> members;
  std::vector<std::vector<PageErrors>> pages;
  auto add_page = [](std::vector<PageErrors>& list, std::uint64_t page, std::uint64_t errors) {
    auto it = std::find_if(list.begin(), list.end(),
                           [page](const PageErrors& entry) { return entry.page == page; });
    if (it == list.end()) {
      list.push_back({page, errors});
    } else {
      it->errors += errors;
    }
  };
  for (auto& event : events) {
    const auto minute =
        std::chrono::duration_cast<std::chrono::minutes>(event.time.time_since_epoch()).count();
    Key key{event.source,
            event.origin,
            event.severity,
            event.device,
            event.mc,
            event.pci_bdf,
            event.address.has_value(),
            event.dimm,
            event.vendor_code,
            event.historical,
            minute};
    auto [it, inserted] = index.try_emplace(std::move(key), merged.size());
    if (inserted) {
      pages.emplace_back();
      if (event.address) add_page(pages.back(), PageOf(event.address->value), event.count);
      merged.push_back(std::move(event));
      members.push_back(1);
    } else {
      if (event.address) add_page(pages[it->second], PageOf(event.address->value), event.count);
      merged[it->second].count += event.count;
      members[it->second] += 1;
    }
  }
  for (std::size_t i = 0; i < merged.size(); ++i) {
    if (pages[i].size() > 1) merged[i].pages = pages[i];
    // fmt, not "[" + std::string: GCC 12 warns (-Wrestrict) on the latter
    // inlined at -O2, a known false positive.
    if (members[i] > 1)
      merged[i].summary = fmt::format("[{} events coalesced] {}", members[i], merged[i].summary);
  }
  return merged;
}

TEST(CoalesceStormTest, AgreesWithTheReferenceOnEveryField) {
  std::mt19937 random(11);
  auto pick = [&random](int n) { return static_cast<int>(random() % static_cast<unsigned>(n)); };
  for (int round = 0; round < 20; ++round) {
    std::vector<RasEvent> storm;
    for (int i = 0; i < 3000; ++i) {
      RasEvent event;
      // Around the epoch too: minutes are truncated towards it, not floored.
      event.time = std::chrono::system_clock::time_point(std::chrono::seconds(pick(400) - 200));
      event.source = pick(2) == 0 ? "kmsg" : "edac_sysfs";
      event.origin = pick(3) == 0 ? "mce" : "edac";
      event.severity = pick(4) == 0 ? Severity::kUce : Severity::kCe;
      if (pick(2) == 0) event.device = pick(3) - 1;
      if (pick(2) == 0) event.mc = pick(2);
      // A few pages, and addresses within one page.
      if (pick(3) != 0)
        event.address = Address::Of(static_cast<std::uint64_t>(pick(4)) * 0x1000 +
                                    static_cast<std::uint64_t>(pick(3)) * 0x40);
      if (pick(3) == 0) event.dimm = pick(2) == 0 ? "DIMM_A1" : "DIMM_B1";
      if (pick(4) == 0) event.pci_bdf = pick(2) == 0 ? "" : "0000:07:00.0";
      if (pick(5) == 0) event.vendor_code = pick(2) == 0 ? 0 : 79;
      event.historical = pick(8) == 0;
      event.count = static_cast<std::uint64_t>(pick(3) + 1);
      event.summary = "event " + std::to_string(i);
      event.raw = "raw " + std::to_string(i);
      storm.push_back(std::move(event));
    }
    const auto merged = CoalesceStorm(storm, 64);
    const auto expected = ReferenceCoalesce(storm);
    ASSERT_EQ(merged.size(), expected.size());
    for (std::size_t i = 0; i < merged.size(); ++i) {
      EXPECT_EQ(merged[i].time, expected[i].time) << i;
      EXPECT_EQ(merged[i].source, expected[i].source) << i;
      EXPECT_EQ(merged[i].origin, expected[i].origin) << i;
      EXPECT_EQ(merged[i].severity, expected[i].severity) << i;
      EXPECT_EQ(merged[i].device, expected[i].device) << i;
      EXPECT_EQ(merged[i].mc, expected[i].mc) << i;
      EXPECT_EQ(merged[i].address, expected[i].address) << i;
      EXPECT_EQ(merged[i].dimm, expected[i].dimm) << i;
      EXPECT_EQ(merged[i].pages, expected[i].pages) << i;
      EXPECT_EQ(merged[i].pci_bdf, expected[i].pci_bdf) << i;
      EXPECT_EQ(merged[i].vendor_code, expected[i].vendor_code) << i;
      EXPECT_EQ(merged[i].historical, expected[i].historical) << i;
      EXPECT_EQ(merged[i].count, expected[i].count) << i;
      EXPECT_EQ(merged[i].summary, expected[i].summary) << i;
      EXPECT_EQ(merged[i].raw, expected[i].raw) << i;
    }
  }
}

TEST_F(StateStoreTest, PruningKeepsTheNewestWithinAgeAndCount) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  std::vector<RasEvent> events;
  for (int i = 0; i < 100; ++i) {
    events.push_back({.time = t0 + std::chrono::hours(i),
                      .origin = "edac",
                      .severity = Severity::kCe,
                      .summary = std::to_string(i)});
  }
  ASSERT_TRUE((*store)->RecordEvents(events).has_value());
  auto removed = (*store)->Prune(t0 + std::chrono::hours(10), 1'000'000);
  ASSERT_TRUE(removed.has_value()) << removed.error().ToString();
  EXPECT_EQ(*removed, 10u) << "the ten older than the cutoff";
  removed = (*store)->Prune(t0, 50);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(*removed, 40u) << "then the oldest beyond 50 rows";
  EXPECT_EQ(*(*store)->EventRows(), 50u);
  const auto left = (*store)->QueryEvents({});
  EXPECT_EQ(left->front().event.summary, "50");
  EXPECT_EQ(left->back().event.summary, "99");
  EXPECT_EQ(*(*store)->Prune(t0, 50), 0u) << "nothing more to do";
}

TEST_F(StateStoreTest, DeviceStatesRetiredPagesAndActionsSurviveReopen) {
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  std::int64_t event_id = 0;
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
    ASSERT_TRUE((*store)->SaveDeviceState({"SIM-1", "Degraded", "8 retirements", t0}).has_value());
    ASSERT_TRUE((*store)->SaveDeviceState({"SIM-1", "Isolated", "Xid 79", t0 + 1s}).has_value());
    ASSERT_TRUE((*store)->SaveDeviceState({"SIM-0", "Healthy", "undrained", t0}).has_value());
    ASSERT_TRUE((*store)->SaveRetiredPage({"SIM-1", 0x5000, "UCNA", t0}).has_value());
    ASSERT_TRUE((*store)->SaveRetiredPage({"SIM-1", 0x5000, "again", t0 + 5s}).has_value());
    ASSERT_TRUE((*store)->SaveRetiredPage({"SIM-2", 0x9000, "CE x50", t0}).has_value());
    const std::vector<RasEvent> events = {
        {.time = t0, .origin = "sim", .severity = Severity::kFatal}};
    auto ids = (*store)->RecordEvents(events);
    ASSERT_TRUE(ids.has_value());
    ASSERT_EQ(ids->size(), 1u);
    event_id = ids->front();
    ASSERT_TRUE((*store)
                    ->RecordAction({.event_id = event_id,
                                    .time = t0,
                                    .action = "isolate-device",
                                    .device = 1,
                                    .rule = "fatal-device",
                                    .reason = "FATAL sim",
                                    .result = "ok"})
                    .has_value());
    ASSERT_TRUE((*store)
                    ->RecordAction({.time = t0 + 1s,
                                    .action = "drain-device",
                                    .device = 2,
                                    .rule = "operator",
                                    .reason = "maintenance",
                                    .result = "ok"})
                    .has_value());
  }
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto states = (*store)->LoadDeviceStates();
  ASSERT_TRUE(states.has_value());
  ASSERT_EQ(states->size(), 2u);
  EXPECT_EQ((*states)[1].device_uuid, "SIM-1");
  EXPECT_EQ((*states)[1].state, "Isolated") << "the latest state wins";
  EXPECT_EQ((*states)[1].reason, "Xid 79");
  EXPECT_EQ((*states)[1].since, t0 + 1s);
  auto pages = (*store)->LoadRetiredPages();
  ASSERT_TRUE(pages.has_value());
  ASSERT_EQ(pages->size(), 2u);
  EXPECT_EQ((*pages)[0].address, 0x5000u);
  EXPECT_EQ((*pages)[0].reason, "UCNA") << "a page retired twice keeps its first record";
  auto actions = (*store)->QueryActions(std::nullopt, 10);
  ASSERT_TRUE(actions.has_value());
  ASSERT_EQ(actions->size(), 2u);
  EXPECT_EQ((*actions)[0].action, "drain-device") << "newest first";
  EXPECT_FALSE((*actions)[0].event_id.has_value());
  EXPECT_EQ((*actions)[1].event_id, event_id);
  EXPECT_EQ((*(*store)->QueryActions(1, 10)).size(), 1u);
  // Pruning the event keeps the action, unlinked.
  ASSERT_TRUE((*store)->Prune(t0 + 1h, 1'000'000).has_value());
  actions = (*store)->QueryActions(1, 10);
  ASSERT_EQ(actions->size(), 1u);
  EXPECT_FALSE((*actions)[0].event_id.has_value());
}

// The summary reads the totals the commits keep; they equal what a scan
// of every stored event and roll-up gives, through inserts, prunes by age
// and by count, and a reopen.
TEST_F(StateStoreTest, TheSummarysTotalsEqualAScanOfTheStoredEventsThroughInsertsAndPrunes) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::hours(480'000));
  auto scanned = [&] {
    // origin|severity|events|errors|last
    std::vector<std::string> rows;
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2((dir_ / "state" / StateStore::kDatabaseFile).c_str(), &db,
                              SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    sqlite3_stmt* query = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT origin, severity, SUM(n), SUM(e), MAX(l) FROM ("
                       "SELECT origin, severity, COUNT(*) AS n, SUM(count) AS e, MAX(time_ns) AS l "
                       "FROM events GROUP BY origin, severity UNION ALL "
                       "SELECT origin, severity, events, errors, last_ns FROM event_rollups) "
                       "GROUP BY origin, severity ORDER BY origin, severity;",
                       -1, &query, nullptr);
    while (sqlite3_step(query) == SQLITE_ROW) {
      rows.push_back(fmt::format("{}|{}|{}|{}|{}",
                                 reinterpret_cast<const char*>(sqlite3_column_text(query, 0)),
                                 reinterpret_cast<const char*>(sqlite3_column_text(query, 1)),
                                 sqlite3_column_int64(query, 2), sqlite3_column_int64(query, 3),
                                 sqlite3_column_int64(query, 4)));
    }
    sqlite3_finalize(query);
    sqlite3_close(db);
    return rows;
  };
  auto summarized = [&] {
    std::vector<std::string> rows;
    const auto summary = (*store)->Summarize();
    EXPECT_TRUE(summary.has_value()) << summary.error().ToString();
    if (!summary) return rows;
    for (const auto& row : *summary) {
      rows.push_back(fmt::format(
          "{}|{}|{}|{}|{}", row.origin, SeverityName(row.severity), row.events, row.errors,
          std::chrono::duration_cast<std::chrono::nanoseconds>(row.last.time_since_epoch())
              .count()));
    }
    return rows;
  };
  const char* origins[] = {"edac", "nvidia_xid", "aer"};
  for (int i = 0; i < 300; ++i) {
    RasEvent event;
    event.time = t0 + std::chrono::seconds(i);
    event.origin = origins[i % 3];
    event.severity = i % 7 == 0 ? Severity::kUce : Severity::kCe;
    event.count = static_cast<std::uint64_t>(1 + i % 5);
    event.summary = event.raw = fmt::format("e{}", i);
    ASSERT_TRUE((*store)->RecordEvent(event).has_value());
  }
  ASSERT_EQ(summarized(), scanned());
  ASSERT_EQ(summarized().size(), 6u);
  ASSERT_TRUE((*store)->Prune(t0 + std::chrono::seconds(100), 1'000'000).has_value());
  EXPECT_EQ(summarized(), scanned()) << "after a prune by age";
  ASSERT_TRUE((*store)->Prune(t0, 10).has_value());
  EXPECT_EQ(summarized(), scanned()) << "after a prune by count";
  const auto counts = *(*store)->CountEventsBySeverity();
  ASSERT_EQ(*(*store)->Prune(t0 + std::chrono::hours(1), 1'000'000), 10u);
  EXPECT_EQ(QueryRaw("SELECT COUNT(*) FROM events;"), 0);
  EXPECT_EQ(summarized(), scanned()) << "every event pruned, every one still counted";
  EXPECT_EQ(summarized().size(), 6u);
  EXPECT_EQ(*(*store)->CountEventsBySeverity(), counts);
  EXPECT_EQ(QueryRaw("SELECT SUM(events) FROM event_rollups;"), 300)
      << "300 events of one day, 3 origins and 2 classes, in 6 rows";
  EXPECT_EQ(QueryRaw("SELECT COUNT(*) FROM event_rollups;"), 6);

  // Reopened from the file: the totals were saved with the events, and
  // the start reads its counts by severity from them.
  for (int i = 0; i < 4; ++i) {
    RasEvent event;
    event.time = t0 + std::chrono::hours(2) + std::chrono::seconds(i);
    event.origin = "mce";
    event.severity = Severity::kFatal;
    event.count = 2;
    event.summary = event.raw = "m";
    ASSERT_TRUE((*store)->RecordEvent(event).has_value());
  }
  store->reset();
  store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  EXPECT_EQ(summarized(), scanned());
  EXPECT_EQ((*store)->CountEventsBySeverity()->at(Severity::kFatal), 8u);
}

TEST_F(StateStoreTest, AVersionOneDatabaseIsMigratedInPlace) {
  std::filesystem::create_directories(dir_ / "state");
  // The schema as the first release created it, with one event in it.
  ExecRaw(R"sql(
    CREATE TABLE schema_version (version INTEGER NOT NULL);
    INSERT INTO schema_version VALUES (1);
    CREATE TABLE events (id INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, origin TEXT NOT NULL,
      severity TEXT NOT NULL, device INTEGER, address INTEGER, summary TEXT NOT NULL, raw TEXT NOT NULL);
    CREATE INDEX events_by_severity ON events(severity);
    CREATE TABLE device_states (device_uuid TEXT PRIMARY KEY, state TEXT NOT NULL, reason TEXT NOT NULL,
      changed_ns INTEGER NOT NULL);
    CREATE TABLE retired_pages (device_uuid TEXT NOT NULL, address INTEGER NOT NULL, reason TEXT NOT NULL,
      retired_ns INTEGER NOT NULL, PRIMARY KEY (device_uuid, address));
    CREATE TABLE source_cursors (source TEXT PRIMARY KEY, boot_id TEXT NOT NULL, position TEXT NOT NULL,
      updated_ns INTEGER NOT NULL);
    INSERT INTO events(time_ns, origin, severity, summary, raw) VALUES (1, 'edac', 'CE', 'old', 'old');
  )sql");
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  EXPECT_EQ((*store)->SchemaVersion(), StateStore::LatestSchemaVersion());
  auto events = (*store)->QueryEvents({});
  ASSERT_TRUE(events.has_value()) << events.error().ToString();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().event.summary, "old");
  EXPECT_EQ(events->front().event.count, 1u) << "new columns take their defaults";
  auto summary = (*store)->Summarize();
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  ASSERT_EQ(summary->size(), 1u) << "the totals are filled from the events there";
  EXPECT_EQ(summary->front().events, 1u);
  EXPECT_EQ((*store)->CountEventsBySeverity()->at(Severity::kCe), 1u);
}

TEST_F(StateStoreTest, CommitWritesEventsActionsStatesPagesAndCursorsTogether) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  const StoreBatch batch = MixedBatch(kMinute);
  auto stored = (*store)->Commit(batch);
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  ASSERT_EQ(stored->event_ids.size(), 3u);
  ASSERT_EQ(stored->action_ids.size(), 3u);
  EXPECT_LT(stored->event_ids[0], stored->event_ids[1]);
  EXPECT_LT(stored->event_ids[1], stored->event_ids[2]);

  const auto events = (*store)->QueryEvents({});
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ(events->at(2).id, stored->event_ids[2]);
  EXPECT_EQ(events->at(2).event.summary, "Xid 79 #2");

  const auto actions = (*store)->QueryActions(std::nullopt, 10);
  ASSERT_TRUE(actions.has_value()) << actions.error().ToString();
  ASSERT_EQ(actions->size(), 3u);  // newest first
  EXPECT_EQ(actions->at(2).id, stored->action_ids[0]);
  EXPECT_EQ(actions->at(2).event_id, stored->event_ids[2]) << "linked by index";
  EXPECT_EQ(actions->at(2).count, 1u);
  EXPECT_EQ(actions->at(1).event_id, stored->event_ids[0]);
  EXPECT_EQ(actions->at(1).result, "failed");
  EXPECT_FALSE(actions->at(0).event_id.has_value()) << "an operator's command has no event";
  EXPECT_EQ(actions->at(0).action, "drain-device");

  const auto states = (*store)->LoadDeviceStates();
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ(states->at(0).state, "Isolated");
  const auto pages = (*store)->LoadRetiredPages();
  ASSERT_EQ(pages->size(), 1u);
  EXPECT_EQ(pages->at(0).address, 0x5000u);
  const auto cursor = (*store)->LoadCursor("kmsg");
  ASSERT_TRUE(cursor.has_value() && cursor->has_value());
  EXPECT_EQ((*cursor)->position, "42");

  auto empty = (*store)->Commit({});
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->event_ids.empty() && empty->action_ids.empty());
}

TEST_F(StateStoreTest, CommitRefusesAnInvalidBatchBeforeWritingAnything) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  StoreBatch out_of_range = MixedBatch(kMinute);
  out_of_range.actions.push_back({.record = Decision("ok", kMinute), .event_index = 3});
  auto stored = (*store)->Commit(out_of_range);
  ASSERT_FALSE(stored.has_value());
  EXPECT_EQ(stored.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(stored.error().message.find("links event 3"), std::string::npos)
      << stored.error().message;

  StoreBatch both_links = MixedBatch(kMinute);
  both_links.actions[0].record.event_id = 1;
  EXPECT_EQ((*store)->Commit(both_links).error().code, ErrorCode::kInvalidArgument);

  StoreBatch no_count = MixedBatch(kMinute);
  no_count.actions[2].record.count = 0;
  EXPECT_EQ((*store)->Commit(no_count).error().code, ErrorCode::kInvalidArgument);
  ActionRecord zero = Decision("disabled", kMinute);
  zero.count = 0;
  EXPECT_EQ((*store)->RecordAction(zero).error().code, ErrorCode::kInvalidArgument);

  EXPECT_EQ(*(*store)->EventRows(), 0u);
  EXPECT_TRUE((*store)->QueryActions(std::nullopt, 10)->empty());
  EXPECT_TRUE((*store)->LoadDeviceStates()->empty());
  EXPECT_TRUE((*store)->LoadRetiredPages()->empty());
  EXPECT_FALSE((*store)->LoadCursor("kmsg")->has_value());
}

TEST_F(StateStoreTest, AFailureAtTheLastRowOfABatchRollsBackAllOfIt) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->SaveCursor({"kmsg", "boot-a", "41"}).has_value());
  // The cursor is written last: failing it leaves every other row of the
  // batch written inside the transaction, to be undone.
  ExecRaw(R"sql(
    CREATE TRIGGER refuse_cursor_update BEFORE UPDATE ON source_cursors
      BEGIN SELECT RAISE(ABORT, 'injected cursor failure'); END;
    CREATE TRIGGER refuse_cursor_insert BEFORE INSERT ON source_cursors
      BEGIN SELECT RAISE(ABORT, 'injected cursor failure'); END;
  )sql");
  auto stored = (*store)->Commit(MixedBatch(kMinute));
  ASSERT_FALSE(stored.has_value());
  EXPECT_EQ(stored.error().code, ErrorCode::kIoError);
  EXPECT_NE(stored.error().message.find("injected cursor failure"), std::string::npos)
      << stored.error().message;

  EXPECT_EQ(*(*store)->EventRows(), 0u);
  EXPECT_TRUE((*store)->QueryActions(std::nullopt, 10)->empty());
  EXPECT_TRUE((*store)->LoadDeviceStates()->empty());
  EXPECT_TRUE((*store)->LoadRetiredPages()->empty());
  EXPECT_EQ((*(*store)->LoadCursor("kmsg"))->position, "41") << "the cursor did not move";
  EXPECT_EQ(QueryRaw("SELECT COUNT(*) FROM events;"), 0) << "nothing reached the file";

  // No transaction was left open: the next batch goes through.
  ExecRaw("DROP TRIGGER refuse_cursor_update; DROP TRIGGER refuse_cursor_insert;");
  stored = (*store)->Commit(MixedBatch(kMinute));
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  EXPECT_EQ(*(*store)->EventRows(), 3u);
  EXPECT_EQ((*(*store)->LoadCursor("kmsg"))->position, "42");
}

TEST_F(StateStoreTest, ANodeValueCommitsWithItsBatchAndRollsBackWithIt) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->SaveNodeValue("link_health", "old").has_value());
  StoreBatch batch = MixedBatch(kMinute);
  batch.node_values.push_back({"link_health", "new"});
  batch.node_values.push_back({"other", "value"});
  // The node value is written last: failing it undoes the batch's events.
  ExecRaw(R"sql(
    CREATE TRIGGER refuse_node_value BEFORE INSERT ON node_state
      WHEN NEW.key = 'other' BEGIN SELECT RAISE(ABORT, 'injected node value failure'); END;
  )sql");
  auto stored = (*store)->Commit(batch);
  ASSERT_FALSE(stored.has_value());
  EXPECT_NE(stored.error().message.find("injected node value failure"), std::string::npos)
      << stored.error().message;
  EXPECT_EQ(*(*store)->EventRows(), 0u);
  EXPECT_EQ(**(*store)->LoadNodeValue("link_health"), "old");

  ExecRaw("DROP TRIGGER refuse_node_value;");
  stored = (*store)->Commit(batch);
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  EXPECT_EQ(*(*store)->EventRows(), 3u);
  EXPECT_EQ(**(*store)->LoadNodeValue("link_health"), "new");
  EXPECT_EQ(**(*store)->LoadNodeValue("other"), "value");

  // A batch of node values alone is written, not skipped as empty.
  ASSERT_TRUE((*store)->Commit({.node_values = {{"link_health", "newer"}}}).has_value());
  EXPECT_EQ(**(*store)->LoadNodeValue("link_health"), "newer");
}

TEST_F(StateStoreTest, AReadOrWriteFaultFailsEveryCallItCoversAndTouchesNothing) {
  auto opened = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(opened.has_value());
  StateStore& store = **opened;
  ASSERT_TRUE(store.Commit(MixedBatch(kMinute)).has_value());
  ASSERT_TRUE(store.SaveNodeValue("node_fault", "{}").has_value());

  std::vector<std::string> reads;
  store.SetReadFault([&](std::string_view what) -> std::optional<Error> {
    reads.emplace_back(what);
    return Error{ErrorCode::kIoError, "disk I/O error reading " + std::string(what)};
  });
  auto expect_read_fault = [](const auto& result, std::string_view what) {
    ASSERT_FALSE(result.has_value()) << what;
    EXPECT_EQ(result.error().code, ErrorCode::kIoError);
    EXPECT_EQ(result.error().message, "disk I/O error reading " + std::string(what));
  };
  expect_read_fault(store.LoadDeviceStates(), "device states");
  expect_read_fault(store.LoadRetiredPages(), "retired pages");
  expect_read_fault(store.LoadWorkloads(), "workloads");
  expect_read_fault(store.LoadDeviceRecoveries(), "device recoveries");
  expect_read_fault(store.LoadNodeValue("node_fault"), "node value");
  expect_read_fault(store.LoadCursor("kmsg"), "cursor");
  expect_read_fault(store.QueryEvents({}), "events");
  expect_read_fault(store.QueryActions(std::nullopt, 10), "actions");
  expect_read_fault(store.Summarize(), "event summary");
  expect_read_fault(store.EventRows(), "event rows");
  expect_read_fault(store.StartBackup(dir_ / "copy.db", false), "backup");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "copy.db"));
  EXPECT_EQ(reads.size(), 11u);
  // Writes are not reads: the batch goes in while reads fail.
  ASSERT_TRUE(store.Commit(MixedBatch(kMinute + std::chrono::hours(1))).has_value());
  EXPECT_EQ(QueryRaw("SELECT COUNT(*) FROM events"), 6);
  // The counts by severity read no file and keep answering.
  EXPECT_EQ(store.CountEventsBySeverity()->at(Severity::kFatal), 6u);

  store.SetReadFault(nullptr);
  store.SetWriteFault([](std::string_view what) -> std::optional<Error> {
    return Error{ErrorCode::kIoError, "no space left writing " + std::string(what)};
  });
  auto expect_write_fault = [](const auto& result, std::string_view what) {
    ASSERT_FALSE(result.has_value()) << what;
    EXPECT_EQ(result.error().message, "no space left writing " + std::string(what));
  };
  expect_write_fault(store.SaveCursor({"kmsg", "boot-b", "99"}), "cursor");
  expect_write_fault(store.Prune(kMinute + std::chrono::hours(2), 0), "prune");
  expect_write_fault(store.Checkpoint(), "checkpoint");
  expect_write_fault(store.Commit(MixedBatch(kMinute + std::chrono::hours(3))), "batch");
  // Nothing was touched: the cursor, the events and their counts are as
  // they were, and every read answers again.
  auto cursor = store.LoadCursor("kmsg");
  ASSERT_TRUE(cursor.has_value() && cursor->has_value());
  EXPECT_EQ((*cursor)->position, "42");
  EXPECT_EQ(*store.EventRows(), 6u);
  EXPECT_EQ(store.CountEventsBySeverity()->at(Severity::kFatal), 6u);
  EXPECT_EQ(store.LoadRetiredPages()->size(), 1u);
}

TEST_F(StateStoreTest, ABatchBlockedByAnotherWriterWritesNothing) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->SaveCursor({"kmsg", "boot-a", "41"}).has_value());
  sqlite3* writer = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "state" / StateStore::kDatabaseFile).c_str(), &writer), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(writer, "BEGIN IMMEDIATE;", nullptr, nullptr, nullptr), SQLITE_OK);
  auto stored = (*store)->Commit(MixedBatch(kMinute));  // waits out the busy timeout
  ASSERT_EQ(sqlite3_exec(writer, "ROLLBACK;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(writer);
  ASSERT_FALSE(stored.has_value());
  EXPECT_EQ(stored.error().code, ErrorCode::kIoError);
  EXPECT_NE(stored.error().message.find("begin batch"), std::string::npos)
      << stored.error().message;
  EXPECT_EQ(*(*store)->EventRows(), 0u);
  EXPECT_TRUE((*store)->QueryActions(std::nullopt, 10)->empty());
  EXPECT_EQ((*(*store)->LoadCursor("kmsg"))->position, "41");
  EXPECT_TRUE((*store)->Commit(MixedBatch(kMinute)).has_value()) << "and works once it is free";
}

TEST_F(StateStoreTest, RepeatedDisabledDecisionsShareOneRowPerMinuteWithExactCounts) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  StoreBatch batch;
  for (int i = 0; i < 1000; ++i) {
    batch.events.push_back(
        {.time = kMinute, .origin = "sim", .severity = Severity::kFatal, .summary = "fatal"});
    batch.actions.push_back(
        {.record = Decision("disabled", kMinute + std::chrono::milliseconds(i * 59)),
         .event_index = static_cast<std::size_t>(i)});
  }
  auto stored = (*store)->Commit(batch);
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  ASSERT_EQ(stored->action_ids.size(), 1000u);
  EXPECT_EQ(
      std::count(stored->action_ids.begin(), stored->action_ids.end(), stored->action_ids.front()),
      1000)
      << "every merged decision reports the row it went into";
  auto actions = (*store)->QueryActions(std::nullopt, 2000);
  ASSERT_EQ(actions->size(), 1u);
  EXPECT_EQ(actions->at(0).count, 1000u);
  EXPECT_EQ(actions->at(0).time, kMinute) << "the row keeps its first decision";
  EXPECT_EQ(actions->at(0).event_id, stored->event_ids.front());

  // Across batches and through RecordAction too, adding the record's count.
  ActionRecord more = Decision("disabled", kMinute + 59s);
  more.count = 5;
  auto id = (*store)->RecordAction(more);
  ASSERT_TRUE(id.has_value()) << id.error().ToString();
  EXPECT_EQ(*id, stored->action_ids.front());
  actions = (*store)->QueryActions(std::nullopt, 2000);
  ASSERT_EQ(actions->size(), 1u);
  EXPECT_EQ(actions->at(0).count, 1005u);
}

TEST_F(StateStoreTest, ADifferentMinuteResultOrDeviceGetsItsOwnRowAndOkIsNeverMerged) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  StoreBatch batch;
  batch.actions.push_back({.record = Decision("disabled", kMinute)});
  batch.actions.push_back({.record = Decision("disabled", kMinute + 60s)});  // next minute
  batch.actions.push_back({.record = Decision("skipped", kMinute)});
  batch.actions.push_back({.record = Decision("skipped", kMinute + 30s)});
  batch.actions.push_back({.record = Decision("disabled", kMinute, 2)});
  batch.actions.push_back({.record = Decision("disabled", kMinute, std::nullopt)});
  batch.actions.push_back({.record = Decision("disabled", kMinute, std::nullopt)});
  ActionRecord other_rule = Decision("disabled", kMinute);
  other_rule.rule = "xid-79";
  batch.actions.push_back({.record = other_rule});
  batch.actions.push_back({.record = Decision("ok", kMinute)});
  batch.actions.push_back({.record = Decision("ok", kMinute)});
  batch.actions.push_back({.record = Decision("failed", kMinute)});
  batch.actions.push_back({.record = Decision("failed", kMinute)});
  auto stored = (*store)->Commit(batch);
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  EXPECT_EQ(stored->action_ids[2], stored->action_ids[3]) << "skipped merges too";
  EXPECT_EQ(stored->action_ids[5], stored->action_ids[6]) << "no device is a device key too";
  EXPECT_NE(stored->action_ids[8], stored->action_ids[9]);
  EXPECT_NE(stored->action_ids[10], stored->action_ids[11]);

  const auto actions = (*store)->QueryActions(std::nullopt, 100);
  ASSERT_TRUE(actions.has_value());
  // Two minutes, skipped, device 2, no device, another rule, 2 ok, 2 failed.
  ASSERT_EQ(actions->size(), 10u);
  std::uint64_t total = 0;
  for (const auto& action : *actions) {
    total += action.count;
    if (action.result == "ok" || action.result == "failed") {
      EXPECT_EQ(action.count, 1u);
    }
  }
  EXPECT_EQ(total, 12u) << "every decision is counted once";
}

TEST_F(StateStoreTest, AVersionThreeDatabaseGainsActionCounts) {
  std::filesystem::create_directories(dir_ / "state");
  // The schema as version 3 left it, with one action in it.
  ExecRaw(R"sql(
    CREATE TABLE schema_version (version INTEGER NOT NULL);
    INSERT INTO schema_version VALUES (3);
    CREATE TABLE events (id INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, origin TEXT NOT NULL,
      severity TEXT NOT NULL, device INTEGER, address INTEGER, summary TEXT NOT NULL, raw TEXT NOT NULL,
      source TEXT NOT NULL DEFAULT '', mc INTEGER, pci_bdf TEXT, address_text TEXT,
      vendor_code INTEGER, count INTEGER NOT NULL DEFAULT 1, historical INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX events_by_severity ON events(severity);
    CREATE INDEX events_by_time ON events(time_ns);
    CREATE INDEX events_by_device ON events(device);
    CREATE TABLE device_states (device_uuid TEXT PRIMARY KEY, state TEXT NOT NULL, reason TEXT NOT NULL,
      changed_ns INTEGER NOT NULL);
    CREATE TABLE retired_pages (device_uuid TEXT NOT NULL, address INTEGER NOT NULL, reason TEXT NOT NULL,
      retired_ns INTEGER NOT NULL, PRIMARY KEY (device_uuid, address));
    CREATE TABLE source_cursors (source TEXT PRIMARY KEY, boot_id TEXT NOT NULL, position TEXT NOT NULL,
      updated_ns INTEGER NOT NULL);
    CREATE TABLE actions (id INTEGER PRIMARY KEY,
      event_id INTEGER REFERENCES events(id) ON DELETE SET NULL, time_ns INTEGER NOT NULL,
      action TEXT NOT NULL, device INTEGER, address TEXT, rule TEXT NOT NULL, reason TEXT NOT NULL,
      result TEXT NOT NULL, detail TEXT NOT NULL);
    CREATE INDEX actions_by_event ON actions(event_id);
    CREATE INDEX actions_by_device ON actions(device);
    INSERT INTO actions(time_ns, action, device, rule, reason, result, detail)
      VALUES (1680000000000000000, 'isolate-device', 1, 'fatal-device', 'old', 'disabled', '');
  )sql");
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  EXPECT_EQ((*store)->SchemaVersion(), 11);
  EXPECT_EQ(StateStore::LatestSchemaVersion(), 11);
  auto actions = (*store)->QueryActions(std::nullopt, 10);
  ASSERT_TRUE(actions.has_value()) << actions.error().ToString();
  ASSERT_EQ(actions->size(), 1u);
  EXPECT_EQ(actions->at(0).reason, "old");
  EXPECT_EQ(actions->at(0).count, 1u) << "an existing row stands for one decision";
  EXPECT_EQ(QueryRaw("SELECT COUNT(*) FROM actions WHERE coalesce_key IS NULL;"), 1);

  ASSERT_TRUE((*store)->RecordAction(Decision("disabled", kMinute)).has_value());
  ASSERT_TRUE((*store)->RecordAction(Decision("disabled", kMinute + 1s)).has_value());
  actions = (*store)->QueryActions(std::nullopt, 10);
  ASSERT_EQ(actions->size(), 2u);
  EXPECT_EQ(actions->at(0).count, 2u);
}

TEST_F(StateStoreTest, AReadPinsNoSnapshotThatWouldBlockTheNextWrite) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->Commit(MixedBatch(kMinute)).has_value());
  // Each stops on a row without stepping to the end. A prepared statement
  // left there holds its read transaction: once another connection writes,
  // the store's own next write fails (SQLITE_BUSY_SNAPSHOT).
  ASSERT_TRUE((*store)->LoadCursor("kmsg")->has_value());
  ASSERT_EQ((*store)->QueryActions(std::nullopt, 1)->size(), 1u);
  ASSERT_EQ((*store)->QueryActions(2, 1)->size(), 1u);
  ASSERT_EQ(*(*store)->EventRows(), 3u);
  ExecRaw("INSERT INTO source_cursors VALUES ('pstore', 'boot-a', 'read', 0);");
  auto stored = (*store)->Commit(MixedBatch(kMinute));
  ASSERT_TRUE(stored.has_value()) << stored.error().ToString();
  EXPECT_EQ(*(*store)->EventRows(), 6u);
  EXPECT_TRUE((*store)->LoadCursor("pstore")->has_value()) << "the other writer's row is seen";
}

TEST_F(StateStoreTest, SecondOpenOfTheSameDirectoryIsRefused) {
  auto first = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(first.has_value());
  auto second = StateStore::Open(dir_ / "state");
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second.error().message.find("in use by another rasd"), std::string::npos);
}

TEST_F(StateStoreTest, AFileWhereTheDirectoryShouldBeIsAClearError) {
  std::ofstream(dir_ / "state") << "not a directory";
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_FALSE(store.has_value());
  EXPECT_NE(store.error().message.find("is not a directory"), std::string::npos)
      << store.error().message;
}

TEST_F(StateStoreTest, GarbageDatabaseIsAClearError) {
  std::filesystem::create_directories(dir_ / "state");
  std::ofstream(dir_ / "state/rasd.db") << std::string(8192, 'G');
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_FALSE(store.has_value());
  EXPECT_NE(store.error().message.find("rasd.db"), std::string::npos) << store.error().message;
  EXPECT_NE(store.error().message.find("not a database"), std::string::npos)
      << store.error().message;
}

TEST_F(StateStoreTest, NewerSchemaIsRefusedAndLeftUntouched) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
  }
  ExecRaw("UPDATE schema_version SET version = 999;");
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_FALSE(store.has_value());
  EXPECT_EQ(store.error().code, ErrorCode::kNotSupported) << "not damaged: newer";
  EXPECT_NE(store.error().message.find("schema version 999"), std::string::npos);
}

TEST_F(StateStoreTest, CheckpointsAreTheOwnersToRun) {
  auto opened = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(opened.has_value());
  auto& store = *opened;
  EXPECT_EQ(store->WalPages(), 0u);
  RasEvent event;
  event.source = "kmsg";
  event.origin = "edac";
  event.summary = "one";
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store->RecordEvent(event).has_value());
  const std::size_t pages = store->WalPages();
  EXPECT_GT(pages, 0u);
  ASSERT_TRUE(store->Checkpoint().has_value());
  EXPECT_EQ(store->WalPages(), 0u);
  ASSERT_TRUE(store->RecordEvent(event).has_value());
  EXPECT_LT(store->WalPages(), pages) << "the log started over after the checkpoint";
}

TEST_F(StateStoreTest, AnEmptyOrScribbledDatabaseIsDamagedAndCanBeSetAside) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
    ASSERT_TRUE((*store)->SaveDeviceState({"GPU-1", "isolated", "bad", {}}).has_value());
  }
  // Page 2 scribbled over, as a bad disk or a stray write would.
  {
    std::fstream file(dir_ / "state/rasd.db", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(4096);
    const std::string junk(4096, '\x5a');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto scribbled = StateStore::Open(dir_ / "state");
  ASSERT_FALSE(scribbled.has_value());
  EXPECT_EQ(scribbled.error().code, ErrorCode::kCorruptData) << scribbled.error().message;

  auto kept = StateStore::SetAsideDamaged(dir_ / "state", "test");
  ASSERT_TRUE(kept.has_value()) << kept.error().message;
  EXPECT_EQ(kept->filename(), "rasd.db.damaged-test");
  EXPECT_TRUE(std::filesystem::exists(*kept));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "state/rasd.db"));
  auto fresh = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(fresh.has_value()) << fresh.error().message;
  fresh->reset();

  std::filesystem::resize_file(dir_ / "state/rasd.db", 0);
  auto empty = StateStore::Open(dir_ / "state");
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kCorruptData);
  EXPECT_NE(empty.error().message.find("empty (0 bytes)"), std::string::npos);
}

// A copy of the state directory's files taken while `store` has them open:
// what a kill -9 (or a power cut after the page cache was written) leaves.
void CopyCrashImage(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::create_directories(to);
  for (const char* name : {"rasd.db", "rasd.db-wal"}) {
    if (std::filesystem::exists(from / name)) std::filesystem::copy_file(from / name, to / name);
  }
}

std::vector<std::string> FileNames(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(StateStoreTest, ACleanCloseLeavesNoLogAndReopensWithoutComplaint) {
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().message;
    ASSERT_TRUE((*store)->SaveDeviceState({"GPU-1", "Isolated", "bad", {}}).has_value());
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "state/rasd.db-wal"));
  EXPECT_EQ(QueryRaw("SELECT running FROM in_use;"), 0);
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  EXPECT_EQ((*store)->LoadDeviceStates()->size(), 1u);
}

TEST_F(StateStoreTest, AnUncleanStopWithItsLogIntactRecoversEveryCommit) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  ASSERT_TRUE((*store)->SaveDeviceState({"GPU-1", "Isolated", "bad", {}}).has_value());
  CopyCrashImage(dir_ / "state", dir_ / "crash");
  auto recovered = StateStore::Open(dir_ / "crash");
  ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
  auto states = (*recovered)->LoadDeviceStates();
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ(states->front().state, "Isolated");
}

TEST_F(StateStoreTest, ALogDeletedOrEmptiedAfterAnUncleanStopIsDamage) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  // Committed to the log, not yet checkpointed: only the log holds it.
  ASSERT_TRUE((*store)->SaveDeviceState({"GPU-1", "Isolated", "bad", {}}).has_value());
  ASSERT_GT((*store)->WalPages(), 0u);

  CopyCrashImage(dir_ / "state", dir_ / "deleted");
  std::filesystem::remove(dir_ / "deleted/rasd.db-wal");
  auto deleted = StateStore::Open(dir_ / "deleted");
  ASSERT_FALSE(deleted.has_value());
  EXPECT_EQ(deleted.error().code, ErrorCode::kCorruptData) << deleted.error().message;
  EXPECT_NE(deleted.error().message.find("not closed cleanly"), std::string::npos)
      << deleted.error().message;
  EXPECT_NE(deleted.error().message.find("write-ahead log is missing or empty"), std::string::npos);
  auto kept = StateStore::SetAsideDamaged(dir_ / "deleted", "test");
  ASSERT_TRUE(kept.has_value()) << kept.error().message;
  EXPECT_TRUE(StateStore::Open(dir_ / "deleted").has_value()) << "a fresh one after that";

  // The database gone, its log left: SQLite would lay the log over a new one.
  CopyCrashImage(dir_ / "state", dir_ / "no-database");
  std::filesystem::remove(dir_ / "no-database/rasd.db");
  auto lost = StateStore::Open(dir_ / "no-database");
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code, ErrorCode::kCorruptData);
  EXPECT_NE(lost.error().message.find("is missing but its write-ahead log is there"),
            std::string::npos)
      << lost.error().message;

  // Emptied, or cut to its header: no complete frame.
  for (const std::uintmax_t size : {0, 32}) {
    const auto image = dir_ / ("cut-" + std::to_string(size));
    CopyCrashImage(dir_ / "state", image);
    std::filesystem::resize_file(image / "rasd.db-wal", size);
    auto cut = StateStore::Open(image);
    ASSERT_FALSE(cut.has_value()) << size;
    EXPECT_EQ(cut.error().code, ErrorCode::kCorruptData) << cut.error().message;
  }
}

TEST_F(StateStoreTest, AGarbageLogIsDamageAndIsSetAsideWithTheDatabase) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().message;
  ASSERT_TRUE((*store)->SaveDeviceState({"GPU-1", "Isolated", "bad", {}}).has_value());
  // Bytes to write at an offset; empty: invert the byte there. The salt is
  // random, so writing any fixed byte into it would leave it unchanged once
  // in 256 runs.
  struct Garble {
    std::string name;
    std::streamoff offset;
    std::string bytes;
    std::string says;
  };
  const std::vector<Garble> garbles = {
      {"magic", 0, std::string(32, '\x5a'), "not a SQLite write-ahead log (magic 0x5a5a5a5a)"},
      {"salt", 16, "", "checksum does not match"},
      {"page-size", 8, std::string("\x00\x00\x03\x00", 4), "page size 768"},
      {"short", -1, "", "shorter than a write-ahead log header"},
  };
  for (const auto& garble : garbles) {
    const auto image = dir_ / garble.name;
    CopyCrashImage(dir_ / "state", image);
    if (garble.offset < 0) {
      std::filesystem::resize_file(image / "rasd.db-wal", 20);
    } else {
      std::fstream file(image / "rasd.db-wal", std::ios::in | std::ios::out | std::ios::binary);
      std::string bytes = garble.bytes;
      if (bytes.empty()) {
        char byte = 0;
        file.seekg(garble.offset);
        ASSERT_TRUE(file.get(byte)) << garble.name;
        bytes.assign(1, static_cast<char>(~byte));
      }
      file.seekp(garble.offset);
      file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      ASSERT_TRUE(file.good()) << garble.name;
    }
    auto opened = StateStore::Open(image);
    ASSERT_FALSE(opened.has_value()) << garble.name;
    EXPECT_EQ(opened.error().code, ErrorCode::kCorruptData) << opened.error().message;
    EXPECT_NE(opened.error().message.find(garble.says), std::string::npos)
        << garble.name << ": " << opened.error().message;
    EXPECT_NE(opened.error().message.find("rasd.db-wal"), std::string::npos);
    auto kept = StateStore::SetAsideDamaged(image, "test");
    ASSERT_TRUE(kept.has_value()) << kept.error().message;
    EXPECT_EQ(FileNames(image), (std::vector<std::string>{"rasd.db.damaged-test",
                                                          "rasd.db.damaged-test-wal", "rasd.lock"}))
        << garble.name;
  }
}

TEST_F(StateStoreTest, BackupWhileWritesContinueCopiesEveryCommitAndOpensAsClean) {
  auto opened = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  auto& store = *opened;
  RasEvent event{.source = "kmsg", .origin = "edac", .severity = Severity::kCe,
                 .summary = std::string(200, 'x')};
  std::vector<RasEvent> events(2000, event);
  ASSERT_TRUE(store->RecordEvents(events).has_value());
  ASSERT_TRUE(store->Checkpoint().has_value());

  std::filesystem::create_directories(dir_ / "out");
  const auto destination = dir_ / "out/copy.db";
  auto backup = store->StartBackup(destination, false);
  ASSERT_TRUE(backup.has_value()) << backup.error().message;
  int steps = 0, written = 0;
  for (;;) {
    auto done = (*backup)->Step(8);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    if (*done) break;
    ++steps;
    EXPECT_FALSE(std::filesystem::exists(destination)) << "no half file under the final name";
    ASSERT_TRUE(store->RecordEvent(event).has_value());
    ++written;
    if (steps == 3) {
      ASSERT_TRUE(store->SaveDeviceState({"GPU-1", "Isolated", "mid-backup", {}}).has_value());
    }
  }
  ASSERT_GT(steps, 3) << "the database is larger than a few steps";
  auto summary = (*backup)->Finish();
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  backup->reset();
  EXPECT_EQ(summary->file, destination);
  EXPECT_GT(summary->pages, 8 * 3);
  EXPECT_EQ(summary->bytes, std::filesystem::file_size(destination));
  EXPECT_EQ(FileNames(dir_ / "out"), std::vector<std::string>{"copy.db"});
  EXPECT_EQ(std::filesystem::status(destination).permissions() & std::filesystem::perms::all,
            std::filesystem::perms(0640));

  // The copy is a state directory's database of its own, closed cleanly.
  std::filesystem::create_directories(dir_ / "restored");
  std::filesystem::copy_file(destination, dir_ / "restored/rasd.db");
  auto restored = StateStore::Open(dir_ / "restored");
  ASSERT_TRUE(restored.has_value()) << restored.error().message;
  EXPECT_EQ(*(*restored)->EventRows(), 2000u + static_cast<std::uint64_t>(written));
  auto states = (*restored)->LoadDeviceStates();
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ(states->front().reason, "mid-backup");

  // All at once, and refusing to replace unless asked.
  auto again = store->Backup(destination);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists) << again.error().message;
  EXPECT_EQ(FileNames(dir_ / "out"), std::vector<std::string>{"copy.db"});
  auto replaced = store->Backup(destination, /*replace=*/true);
  ASSERT_TRUE(replaced.has_value()) << replaced.error().message;
  EXPECT_EQ(replaced->bytes, std::filesystem::file_size(destination));
}

TEST_F(StateStoreTest, ABackupThatCannotBeWrittenSaysWhyAndLeavesNothing) {
  auto opened = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  auto& store = *opened;

  auto relative = store->Backup("copy.db");
  ASSERT_FALSE(relative.has_value());
  EXPECT_EQ(relative.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(relative.error().message.find("not an absolute path"), std::string::npos);

  auto missing = store->Backup(dir_ / "no-such-dir/copy.db");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("cannot create the backup's temporary file in " +
                                         (dir_ / "no-such-dir").string()),
            std::string::npos)
      << missing.error().message;
  EXPECT_NE(missing.error().message.find("No such file or directory"), std::string::npos);

  // A read-only directory (root writes anywhere else: a read-only mount).
  const auto readonly = dir_ / "readonly";
  std::filesystem::create_directories(readonly);
  bool mounted = false;
  if (::geteuid() == 0) {
    ASSERT_EQ(::mount(readonly.c_str(), readonly.c_str(), nullptr, MS_BIND, nullptr), 0);
    mounted = ::mount(nullptr, readonly.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY,
                      nullptr) == 0;
    ASSERT_TRUE(mounted) << std::strerror(errno);
  } else {
    std::filesystem::permissions(readonly, std::filesystem::perms(0555));
  }
  auto refused = store->Backup(readonly / "copy.db");
  const auto left = FileNames(readonly);
  if (mounted) ::umount2(readonly.c_str(), MNT_DETACH);
  std::filesystem::permissions(readonly, std::filesystem::perms(0755));
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("cannot create the backup's temporary file"),
            std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(left.empty());

  // A destination that is a directory: the copy is made, then the rename
  // fails, and the temporary file goes.
  std::filesystem::create_directories(dir_ / "out/taken");
  auto onto_directory = store->Backup(dir_ / "out/taken", /*replace=*/true);
  ASSERT_FALSE(onto_directory.has_value());
  EXPECT_NE(onto_directory.error().message.find("rename"), std::string::npos)
      << onto_directory.error().message;
  EXPECT_EQ(FileNames(dir_ / "out"), std::vector<std::string>{"taken"});

  // Abandoned half way: the temporary file goes with it.
  RasEvent event{.source = "kmsg", .origin = "edac", .summary = std::string(500, 'y')};
  ASSERT_TRUE(store->RecordEvents(std::vector<RasEvent>(500, event)).has_value());
  auto abandoned = store->StartBackup(dir_ / "out/half.db", false);
  ASSERT_TRUE(abandoned.has_value());
  ASSERT_FALSE(*(*abandoned)->Step(1));
  EXPECT_GT(FileNames(dir_ / "out").size(), 1u) << "the temporary file (and its journal)";
  abandoned->reset();
  EXPECT_EQ(FileNames(dir_ / "out"), std::vector<std::string>{"taken"});
}

TEST_F(StateStoreTest, ADatabaseOnAReadOnlyFilesystemIsAnErrorAtOpen) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: remounts the state directory read-only";
  {
    auto store = StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
  }
  const auto state = (dir_ / "state").string();
  ASSERT_EQ(::mount(state.c_str(), state.c_str(), nullptr, MS_BIND, nullptr), 0)
      << std::strerror(errno);
  ASSERT_EQ(::mount(nullptr, state.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  auto store = StateStore::Open(dir_ / "state");
  ::umount2(state.c_str(), MNT_DETACH);
  ASSERT_FALSE(store.has_value());
  EXPECT_TRUE(store.error().code == ErrorCode::kPermissionDenied ||
              store.error().code == ErrorCode::kIoError)
      << store.error().message;
  const std::string& message = store.error().message;
  EXPECT_TRUE(message.find("not writable") != std::string::npos ||
              message.find("readonly") != std::string::npos)
      << message;
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

TEST(StateStoreBeforeStartTest, RecordsFromBeforeTheFirstStartStayMarkedAcrossReopen) {
  char pattern[] = "/tmp/rasd-store-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path dir = pattern;
  RasEvent old_record, live;
  old_record.time = live.time = std::chrono::system_clock::time_point(std::chrono::hours(500'000));
  old_record.origin = live.origin = "nvidia_xid";
  old_record.source = live.source = "kmsg";
  old_record.severity = live.severity = Severity::kFatal;
  old_record.before_start = true;
  {
    auto store = StateStore::Open(dir / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    ASSERT_TRUE((*store)->RecordEvents(std::vector<RasEvent>{old_record, live}).has_value());
  }
  auto store = StateStore::Open(dir / "state");
  ASSERT_TRUE(store.has_value());
  auto events = (*store)->QueryEvents({});
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_TRUE(events->at(0).event.before_start);
  EXPECT_FALSE(events->at(1).event.before_start);
  // A storm never merges an old record into a live one.
  EXPECT_EQ(CoalesceStorm({old_record, live, live}, 0).size(), 2u);
  store->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rasd::ras
