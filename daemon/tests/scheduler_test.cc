// SchedulerLink against stand-in sinfo and scontrol programs (shell
// scripts in the test's directory): sinfo prints the cluster the test
// wrote, scontrol logs its arguments (and fails while a file says so).
// What the worker decided is read from its counts, which it raises after
// deciding: a "nothing was called" is asserted after that fence, not after
// a sleep.

#include "scheduler.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using rasd::testing::Eventually;

class SchedulerLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("scheduler");
    fs::create_directories(dir_);
    Script("sinfo", "cat '" + (dir_ / "nodes.json").string() + "'\n");
    Script("scontrol", "echo \"$*\" >> '" + (dir_ / "calls.log").string() + "'\n" + "test -e '" +
                           (dir_ / "fail").string() + "' && exit 1\nexit 0\n");
    Cluster({{"n1", "idle", {}, ""}, {"n2", "idle", {}, ""}, {"n3", "idle", {}, ""}});
  }
  void TearDown() override {
    link_.reset();
    fs::remove_all(dir_);
  }

  void Script(const std::string& name, const std::string& body) {
    const auto path = dir_ / name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
  }
  struct Node {
    std::string name, state;
    std::vector<std::string> flags;
    std::string reason;
    std::int64_t reason_age_s = 0;  // how long before now Slurm recorded the reason
  };
  // What sinfo --json shows from now on, as Slurm 22.05 prints it.
  void Cluster(const std::vector<Node>& nodes) {
    nlohmann::json list = nlohmann::json::array();
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    for (const auto& node : nodes) {
      list.push_back({{"name", node.name},
                      {"state", node.state},
                      {"state_flags", node.flags},
                      {"reason", node.reason},
                      {"reason_changed_at", node.reason.empty() ? 0 : now - node.reason_age_s}});
    }
    const auto temporary = dir_ / "nodes.json.new";
    std::ofstream(temporary) << nlohmann::json{{"nodes", list}}.dump();
    fs::rename(temporary, dir_ / "nodes.json");  // sinfo never reads half of it
  }
  void Start(double max_drained_fraction = 1.0,
             std::chrono::milliseconds drain_spread = std::chrono::milliseconds(0)) {
    link_ = std::make_unique<SchedulerLink>(
        SchedulerLink::Options{.node = "n1",
                               .scontrol = (dir_ / "scontrol").string(),
                               .sinfo = (dir_ / "sinfo").string(),
                               .timeout = 5000ms,
                               .max_drained_fraction = max_drained_fraction,
                               .guard_recheck = 50ms,
                               .drain_settle = 1000ms,
                               .drain_spread = drain_spread});
  }
  std::vector<std::string> Calls() const {
    std::ifstream in(dir_ / "calls.log");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  std::uint64_t Count(const std::string& result) const { return link_->Counts().at(result); }

  fs::path dir_;
  std::unique_ptr<SchedulerLink> link_;
};

TEST_F(SchedulerLinkTest, ADrainIsOneCallWithRasdsReasonAndAResumeUndoesIt) {
  Start();
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; })) << ::testing::PrintToString(Calls());
  EXPECT_EQ(Calls(), std::vector<std::string>{
                         "update NodeName=n1 State=DRAIN Reason=rasd: device 1 isolated"});
  EXPECT_TRUE(link_->Drained());
  EXPECT_TRUE(link_->DrainedByRasd());

  link_->Drain("device 2 isolated");  // already drained: no second call
  EXPECT_EQ(Count("skipped"), 1u);
  EXPECT_EQ(Calls().size(), 1u);

  Cluster({{"n1", "idle", {"DRAIN"}, "rasd: device 1 isolated"},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""}});
  link_->Resume();
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 2; }));
  EXPECT_EQ(Calls().back(), "update NodeName=n1 State=RESUME");
  EXPECT_FALSE(link_->Drained());
}

TEST_F(SchedulerLinkTest, AnAdministratorsDrainIsNeitherDrainedOverNorResumed) {
  Cluster({{"n1", "idle", {"DRAIN"}, "bad fan, ticket 4411"},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""}});
  Start();
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("skipped") == 1; }));
  EXPECT_TRUE(Calls().empty()) << "the administrator's reason stays";
  EXPECT_FALSE(link_->DrainedByRasd());
}

TEST_F(SchedulerLinkTest, TheGuardHoldsADrainWhileTooManyNodesAreDrainedByRasdThenLetsItGo) {
  Cluster({{"n1", "idle", {}, ""},
           {"n2", "idle", {"DRAIN"}, "rasd: device 0 isolated"},
           {"n3", "idle", {"DRAIN"}, "rasd: device 3 isolated"},
           {"n4", "idle", {}, ""}});
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("guarded") == 1; }));
  ASSERT_TRUE(link_->Guarded().has_value());
  EXPECT_NE(link_->Guarded()->find("2"), std::string::npos) << *link_->Guarded();
  EXPECT_TRUE(Calls().empty());
  EXPECT_TRUE(link_->Drained()) << "the drain is still wanted";

  // The others come back: the held drain goes ahead at the next look.
  Cluster({{"n1", "idle", {}, ""},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""},
           {"n4", "idle", {}, ""}});
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  EXPECT_EQ(Count("guarded"), 1u) << "a held drain is counted once";
  EXPECT_FALSE(link_->Guarded().has_value());
  EXPECT_EQ(Calls().size(), 1u);
}

// Peers that read the cluster at once all drain; ranked after its drain,
// this one is past the limit (the others' drains are older) and undoes it.
TEST_F(SchedulerLinkTest, ADrainRankedPastTheLimitIsUndoneAndTheNodeGuarded) {
  Cluster({{"n1", "idle", {}, ""},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""},
           {"n4", "idle", {}, ""}});
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  // Before the ranking's read (drain_settle later): two older rasd drains.
  Cluster({{"n1", "idle", {"DRAIN"}, "rasd: device 1 isolated"},
           {"n2", "idle", {"DRAIN"}, "rasd: device 0 isolated", 10},
           {"n3", "idle", {"DRAIN"}, "rasd: device 3 isolated", 10},
           {"n4", "idle", {}, ""}});
  ASSERT_TRUE(Eventually([&] { return Count("guarded") == 1; }));
  EXPECT_EQ(Calls(), (std::vector<std::string>{
                         "update NodeName=n1 State=DRAIN Reason=rasd: device 1 isolated",
                         "update NodeName=n1 State=RESUME"}));
  EXPECT_TRUE(link_->Guarded().has_value());
  EXPECT_FALSE(link_->DrainedByRasd());
  EXPECT_TRUE(link_->Drained()) << "the drain is still wanted";
}

// Peers failing at once: the drains that land while this node waits its
// share of the spread are in its first read, so it holds back without
// draining (no drain and undo).
TEST_F(SchedulerLinkTest, PeersDrainsThatLandDuringItsSpreadHoldItBackWithoutADrain) {
  Cluster({{"n1", "idle", {}, ""},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""},
           {"n4", "idle", {}, ""}});
  // A spread in which n1's own share is at least half a second.
  std::chrono::milliseconds spread{1000};
  while (cluster::DrainSpreadDelay("n1", spread) < 500ms) spread += 500ms;
  Start(0.5, spread);
  link_->Drain("device 1 isolated");
  Cluster({{"n1", "idle", {}, ""},
           {"n2", "idle", {"DRAIN"}, "rasd: device 0 isolated"},
           {"n3", "idle", {"DRAIN"}, "rasd: device 3 isolated"},
           {"n4", "idle", {}, ""}});
  ASSERT_TRUE(Eventually([&] { return Count("guarded") == 1; }, spread + 5s));
  EXPECT_TRUE(Calls().empty()) << ::testing::PrintToString(Calls());
  EXPECT_EQ(Count("ok"), 0u);
}

TEST_F(SchedulerLinkTest, AFailingScontrolIsRetriedUntilItWorks) {
  std::ofstream(dir_ / "fail") << "";
  Start();
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("failed") >= 2; })) << "retried with a backoff";
  EXPECT_EQ(Count("ok"), 0u);
  fs::remove(dir_ / "fail");
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  EXPECT_TRUE(link_->DrainedByRasd());
}

TEST_F(SchedulerLinkTest, ANodeSlurmDoesNotListIsAFailedCallNotADrainOfSomethingElse) {
  Cluster({{"n2", "idle", {}, ""}, {"n3", "idle", {}, ""}});
  Start();
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("failed") >= 1; }));
  EXPECT_TRUE(Calls().empty());
}

}  // namespace
}  // namespace rasd::daemon
