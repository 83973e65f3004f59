#include "rasd/ras/state_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <fstream>

namespace rasd::ras {
namespace {

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

  std::filesystem::path dir_;
};

TEST_F(StateStoreTest, CreatesTheDirectoryAndMigratesToTheLatestSchema) {
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  EXPECT_EQ((*store)->SchemaVersion(), StateStore::LatestSchemaVersion());
  EXPECT_GE(StateStore::LatestSchemaVersion(), 1);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_ / "state/rasd.db"));
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
    event.address = 0xffff'ffff'ffff'f000ULL;  // top bit set: must survive the signed column
    ASSERT_TRUE((*store)->RecordEvent(event).has_value());
  }
  auto store = StateStore::Open(dir_ / "state");
  ASSERT_TRUE(store.has_value());
  auto counts = (*store)->CountEventsBySeverity();
  ASSERT_TRUE(counts.has_value()) << counts.error().ToString();
  EXPECT_EQ(counts->size(), kAllSeverities.size());
  EXPECT_EQ(counts->at(Severity::kCe), 2u);
  EXPECT_EQ(counts->at(Severity::kFatal), 1u);
  EXPECT_EQ(counts->at(Severity::kSrar), 0u);
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
  EXPECT_EQ(store.error().code, ErrorCode::kCorruptData);
  EXPECT_NE(store.error().message.find("schema version 999"), std::string::npos);
}

}  // namespace
}  // namespace rasd::ras
