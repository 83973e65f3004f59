// StoreCheckpointer on a real SQLite store and a real thread: the log is
// copied back while the owner goes on committing, and once the owner copies
// the little written since, its next commit starts the log over.

#include "store_checkpointer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::vector<ras::RasEvent> Events(int count, int first) {
  std::vector<ras::RasEvent> events;
  for (int i = 0; i < count; ++i) {
    ras::RasEvent event;
    event.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000 + i));
    event.source = "kmsg";
    event.origin = "edac";
    event.severity = ras::Severity::kCe;
    event.summary = "EDAC MC0: 1 CE on DIMM " + std::to_string(first + i) + std::string(200, 'x');
    events.push_back(std::move(event));
  }
  return events;
}

TEST(StoreCheckpointerTest, CopiesTheLogWhileTheOwnerCommitsAndTheOwnerStartsItOver) {
  const fs::path dir = testing::FreshTestDir("store-checkpointer");
  {
    auto store = ras::StateStore::Open(dir / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    auto connection = (*store)->OpenCheckpointer();
    ASSERT_TRUE(connection.has_value()) << connection.error().ToString();
    StoreCheckpointer checkpointer(std::move(*connection));

    for (int batch = 0; batch < 20; ++batch)
      ASSERT_TRUE((*store)->Commit({.events = Events(200, batch * 200)}).has_value());
    const std::size_t grown = (*store)->WalPages();
    ASSERT_GT(grown, 100u);

    checkpointer.Request();
    // The owner writes on meanwhile; nothing waits for the other.
    for (int batch = 20; batch < 25; ++batch)
      ASSERT_TRUE((*store)->Commit({.events = Events(200, batch * 200)}).has_value());
    ASSERT_TRUE(rasd::testing::Eventually([&] { return checkpointer.Finished() >= 1; }, 10s));
    const auto copied = checkpointer.LastCopied();
    ASSERT_TRUE(copied.has_value()) << "the thread's checkpoint failed";
    // A passive checkpoint copies no further than the oldest snapshot a
    // commit of the owner reads at that moment: some of the log, not
    // always all of what was there when asked.
    EXPECT_GT(*copied, 0u) << "the thread copied while the owner committed";
    // With the owner quiet, the thread copies the whole log.
    checkpointer.Request();
    ASSERT_TRUE(rasd::testing::Eventually([&] { return checkpointer.Finished() >= 2; }, 10s));
    ASSERT_TRUE(checkpointer.LastCopied().has_value()) << "the thread's checkpoint failed";
    EXPECT_GE(*checkpointer.LastCopied(), grown) << "the log as it was when asked, and more";
    EXPECT_GE((*store)->WalPages(), grown) << "the owner's count waits for its own checkpoint";

    ASSERT_TRUE((*store)->Checkpoint().has_value()) << "what was written since";
    EXPECT_EQ((*store)->WalPages(), 0u);
    ASSERT_TRUE((*store)->Commit({.events = Events(1, 5000)}).has_value());
    EXPECT_LT((*store)->WalPages(), 10u) << "the next commit started the log over";
    auto rows = (*store)->EventRows();
    ASSERT_TRUE(rows.has_value());
    EXPECT_EQ(*rows, 5001u);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rasd::daemon
