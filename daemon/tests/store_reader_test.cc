// StoreReader on a real SQLite store and a real thread: answers come back on
// the loop, a read never waits for (or holds) the owner's commits, and the
// reads that may wait are bounded.

#include "store_reader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <optional>

#include "rasd/common/simulated_event_loop.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

class StoreReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("store-reader");
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    auto connection = store_->OpenReader();
    ASSERT_TRUE(connection.has_value()) << connection.error().ToString();
    reader_ = std::make_unique<StoreReader>(loop_, std::move(*connection));
  }
  void TearDown() override {
    reader_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  void StoreEvents(int count) {
    std::vector<ras::RasEvent> events;
    for (int i = 0; i < count; ++i) {
      events.push_back({.time = std::chrono::system_clock::time_point(std::chrono::seconds(i + 1)),
                        .source = "kmsg",
                        .origin = "edac",
                        .severity = ras::Severity::kCe});
    }
    ASSERT_TRUE(store_->RecordEvents(events).has_value());
  }
  // Runs the loop until `answer` is set (the reader thread posts it).
  void RunUntil(const std::optional<Result<json>>& answer) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!answer && std::chrono::steady_clock::now() < deadline) {
      if (loop_.RunOnce() == 0) std::this_thread::sleep_for(1ms);
    }
  }
  static StoreReader::Query CountEvents() {
    return [](ras::StateStore& store) -> Result<json> {
      auto events = store.QueryEvents({.limit = 10000});
      if (!events) return Fail(events.error());
      return json{{"events", events->size()}};
    };
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<StoreReader> reader_;
};

TEST_F(StoreReaderTest, AnswersComeBackOnTheLoopWithWhatWasCommitted) {
  StoreEvents(3);
  std::optional<Result<json>> answer;
  const auto loop_thread = std::this_thread::get_id();
  std::thread::id answered_on;
  reader_->Read(CountEvents(), [&](Result<json> reply) {
    answered_on = std::this_thread::get_id();
    answer = std::move(reply);
  });
  EXPECT_FALSE(answer.has_value()) << "not before the loop runs";
  RunUntil(answer);
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->has_value()) << answer->error().ToString();
  EXPECT_EQ((**answer)["events"], 3);
  EXPECT_EQ(answered_on, loop_thread);

  // The reader's connection cannot write.
  std::optional<Result<json>> write;
  reader_->Read(
      [](ras::StateStore& store) -> Result<json> {
        auto saved = store.SaveCursor({"kmsg", "boot", "1"});
        if (!saved) return Fail(saved.error());
        return json::object();
      },
      [&](Result<json> reply) { write = std::move(reply); });
  RunUntil(write);
  ASSERT_TRUE(write.has_value());
  EXPECT_FALSE(write->has_value()) << "a read-only connection";
}

TEST_F(StoreReaderTest, TheOwnerCommitsWhileAReadRunsAndTheNextReadSeesIt) {
  StoreEvents(5);
  std::promise<void> reading, release;
  auto released = release.get_future().share();
  std::optional<Result<json>> answer;
  // A read that holds its transaction open until told: the owner commits
  // meanwhile, and the read sees the state as of its start.
  reader_->Read(
      [&reading, released](ras::StateStore& store) -> Result<json> {
        auto before = store.QueryEvents({.limit = 10000});
        reading.set_value();
        released.wait();
        if (!before) return Fail(before.error());
        return json{{"events", before->size()}};
      },
      [&](Result<json> reply) { answer = std::move(reply); });
  reading.get_future().wait();
  const auto start = std::chrono::steady_clock::now();
  StoreEvents(5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "the commit did not wait for the read";
  release.set_value();
  RunUntil(answer);
  ASSERT_TRUE(answer.has_value() && answer->has_value());
  EXPECT_EQ((**answer)["events"], 5);

  std::optional<Result<json>> after;
  reader_->Read(CountEvents(), [&](Result<json> reply) { after = std::move(reply); });
  RunUntil(after);
  ASSERT_TRUE(after.has_value() && after->has_value());
  EXPECT_EQ((**after)["events"], 10) << "the next read sees the commit";
}

TEST_F(StoreReaderTest, ReadsBeyondTheBoundAreRefusedAtOnce) {
  std::promise<void> running, release;
  auto released = release.get_future().share();
  int answered = 0;
  reader_->Read(
      [&running, released](ras::StateStore&) -> Result<json> {
        running.set_value();
        released.wait();
        return json::object();
      },
      [&](Result<json>) { ++answered; });
  running.get_future().wait();  // the first read runs: the rest wait
  for (std::size_t i = 0; i < StoreReader::kMaxWaiting; ++i)
    reader_->Read(CountEvents(), [&](Result<json> reply) {
      EXPECT_TRUE(reply.has_value());
      ++answered;
    });
  std::optional<Result<json>> refused;
  reader_->Read(CountEvents(), [&](Result<json> reply) { refused = std::move(reply); });
  ASSERT_TRUE(refused.has_value()) << "refused at once, not queued";
  ASSERT_FALSE(refused->has_value());
  EXPECT_EQ(refused->error().code, ErrorCode::kUnavailable);
  release.set_value();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (answered < static_cast<int>(StoreReader::kMaxWaiting) + 1 &&
         std::chrono::steady_clock::now() < deadline) {
    if (loop_.RunOnce() == 0) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(answered, static_cast<int>(StoreReader::kMaxWaiting) + 1);
}

}  // namespace
}  // namespace rasd::daemon
