// The RDMA poller reads each NIC off the loop: a NIC whose firmware does
// not answer a sysfs read holds its own reader, never the loop and never the
// other NICs; past the read deadline its ports count as down, with the file
// and how long; once the read returns it is polled again.

#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "ras_ingest.h"
#include "rasd/common/simulated_event_loop.h"
#include "sim_link_tree.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A fixture host whose reads under one prefix block until Release(), as a
// read answered by a firmware that does not answer. Thread-safe.
class BlockingHostEnv final : public common::HostEnv {
 public:
  using HostEnv::HostEnv;

  void Block(std::string prefix) {
    std::lock_guard lock(mutex_);
    prefix_ = std::move(prefix);
  }
  void Release() {
    std::lock_guard lock(mutex_);
    prefix_.clear();
    changed_.notify_all();
  }
  int Blocked() const {
    std::lock_guard lock(mutex_);
    return inside_;
  }
  // Waits (real time, bounded) until no read is held here.
  bool WaitEmpty() const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 5s, [&] { return inside_ == 0; });
  }

  Result<std::string> ReadFile(std::string_view host_path, std::size_t max_bytes) const override {
    {
      std::unique_lock lock(mutex_);
      if (!prefix_.empty() && host_path.substr(0, prefix_.size()) == prefix_) {
        ++inside_;
        changed_.notify_all();
        changed_.wait(lock, [&] { return prefix_.empty(); });
        --inside_;
        changed_.notify_all();
      }
    }
    return HostEnv::ReadFile(host_path, max_bytes);
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::string prefix_;      // guarded by mutex_
  mutable int inside_ = 0;  // guarded by mutex_
};

class RdmaReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("rdma-reads");
    fs::create_directories(dir_ / "host/proc/sys/kernel/random");
    std::ofstream(dir_ / "host/proc/sys/kernel/random/boot_id")
        << "11111111-2222-3333-4444-555555555555\n";
    host_ = std::make_unique<BlockingHostEnv>(dir_ / "host", loop_.SharedClock());
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime({.devices = 2});
    ASSERT_NE(runtime_, nullptr);
    std::vector<drivers::DeviceProperties> devices;
    for (const auto& device : runtime_->Devices()) devices.push_back(device->Properties());
    auto tree = SimLinkTree::Create(*host_, devices);
    ASSERT_TRUE(tree.has_value()) << tree.error().ToString();
    tree_ = std::move(*tree);
    options_ = testing::NoRasSources();
    options_.infiniband_poll = 1s;
  }
  void TearDown() override {
    host_->Release();
    ingest_.reset();
    EXPECT_TRUE(host_->WaitEmpty());
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  void StartIngest() {
    ingest_ = std::make_unique<RasIngest>(loop_, *host_, *store_, *runtime_, options_,
                                          [this](SourceBatch batch) {
                                            for (auto& event : batch.events)
                                              events_.push_back(std::move(event));
                                            for (auto& report : batch.links)
                                              links_.push_back(std::move(report));
                                          });
    ingest_->SetReadDeadline(3s);
    auto started = ingest_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().ToString();
  }
  // Runs the loop's posted work until `done` holds (the readers are real
  // threads); the simulated clock does not move.
  bool RunUntil(const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      loop_.RunOnce();
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
  std::string State() const { return ingest_->GetStats().sources.at("infiniband").reason; }
  std::vector<std::string> InFlight() const { return ingest_->RdmaReadsInFlight(); }
  static std::vector<std::string> Only(std::string name) { return {std::move(name)}; }
  static std::vector<std::string> DownOf(const ras::LinkReport& report, int device) {
    auto found = report.down.find(device);
    return found == report.down.end() ? std::vector<std::string>{} : found->second;
  }

  common::SimulatedEventLoop loop_;
  fs::path dir_;
  std::unique_ptr<BlockingHostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<SimLinkTree> tree_;
  Config::Ras options_;
  std::unique_ptr<RasIngest> ingest_;
  std::vector<ras::RasEvent> events_;
  std::vector<ras::LinkReport> links_;
};

TEST_F(RdmaReadsTest, ANicThatDoesNotAnswerHoldsItsOwnReaderAndPastTheDeadlineItsPortsAreDown) {
  StartIngest();
  ASSERT_TRUE(RunUntil([&] { return links_.size() == 1; })) << "the baseline round";
  EXPECT_TRUE(DownOf(links_[0], 0).empty());
  EXPECT_TRUE(DownOf(links_[0], 1).empty());

  // Device 1's NIC stops answering; device 0's goes down.
  host_->Block("/sys/class/infiniband/rasdsim_1/ports/1/");
  ASSERT_TRUE(tree_->SetPortUp(0, false).has_value());
  loop_.AdvanceBy(1s);
  // rasdsim_0's read done, rasdsim_1's held (the simulated clock must not
  // move while a read that answers is still on its thread).
  ASSERT_TRUE(RunUntil([&] { return host_->Blocked() == 1 && InFlight() == Only("rasdsim_1"); }));
  // The loop runs on; the round waits for the NIC, up to the deadline.
  for (int i = 0; i < 20; ++i) loop_.RunOnce();
  EXPECT_EQ(links_.size(), 1u) << "the round waits for rasdsim_1";
  loop_.AdvanceBy(1s);
  EXPECT_EQ(links_.size(), 1u) << "1 s of 3";

  loop_.AdvanceBy(2s);
  ASSERT_EQ(links_.size(), 2u) << "past the deadline the round closes without rasdsim_1";
  ASSERT_EQ(DownOf(links_[1], 0).size(), 1u);
  EXPECT_EQ(DownOf(links_[1], 0)[0], "rasdsim_0 port 1") << "the NIC that answered";
  ASSERT_EQ(DownOf(links_[1], 1).size(), 1u);
  EXPECT_NE(DownOf(links_[1], 1)[0].find("rasdsim_1 port 1 (not answering: reading ports/1/"),
            std::string::npos)
      << DownOf(links_[1], 1)[0];
  EXPECT_NE(State().find("rasdsim_1 not answering"), std::string::npos) << State();
  bool gone = false, down0 = false;
  for (const auto& event : events_) {
    gone |= event.summary.find("gone") != std::string::npos;
    down0 |= event.summary.find("link down: rasdsim_0 port 1") != std::string::npos;
  }
  EXPECT_FALSE(gone) << "a NIC that does not answer is not a NIC gone";
  EXPECT_TRUE(down0);

  // Rounds go on without waiting for it: rasdsim_0 comes back up.
  ASSERT_TRUE(tree_->SetPortUp(0, true).has_value());
  loop_.AdvanceBy(1s);
  ASSERT_TRUE(RunUntil([&] { return links_.size() == 3; }));
  EXPECT_TRUE(DownOf(links_[2], 0).empty());
  EXPECT_EQ(DownOf(links_[2], 1).size(), 1u) << "still not answering";
  EXPECT_EQ(host_->Blocked(), 1) << "one reader held, not one per poll";

  // The read returns: rasdsim_1 is read again and its port is up.
  host_->Release();
  ASSERT_TRUE(RunUntil([&] { return host_->Blocked() == 0 && InFlight().empty(); }));
  loop_.AdvanceBy(1s);
  ASSERT_TRUE(RunUntil([&] { return links_.size() == 4 && DownOf(links_.back(), 1).empty(); }))
      << (links_.empty() ? "" : fmt::format("{}", fmt::join(DownOf(links_.back(), 1), "; ")));
  EXPECT_EQ(State().find("not answering"), std::string::npos) << State();
}

// A stop does not wait for a read that does not return.
TEST_F(RdmaReadsTest, AStopLeavesAReadThatDoesNotReturnBehind) {
  StartIngest();
  ASSERT_TRUE(RunUntil([&] { return links_.size() == 1; }));
  host_->Block("/sys/class/infiniband/rasdsim_0/ports/1/");
  loop_.AdvanceBy(1s);
  ASSERT_TRUE(RunUntil([&] { return host_->Blocked() == 1 && InFlight() == Only("rasdsim_0"); }));
  const auto begin = std::chrono::steady_clock::now();
  ingest_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s);
  const std::size_t delivered = links_.size();
  host_->Release();
  EXPECT_TRUE(host_->WaitEmpty());
  for (int i = 0; i < 20; ++i) loop_.RunOnce();
  EXPECT_EQ(links_.size(), delivered) << "nothing from the reader left behind";
}

}  // namespace
}  // namespace rasd::daemon
