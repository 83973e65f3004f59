// SchedulerLink against stand-in sinfo and scontrol programs (scripts in
// the test's directory): sinfo prints the cluster the test wrote, with the
// Comments scontrol set over it; scontrol logs its arguments, keeps a
// Comment it is given (as Slurm does, for the claim before a drain), and
// fails while a file says so.
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
    const std::string dir = dir_.string();
    Script("sinfo", "exec python3 - '" + dir + "' <<'END'\n" + R"(import json, os, sys
d = sys.argv[1]
nodes = json.load(open(os.path.join(d, 'nodes.json')))
for node in nodes['nodes']:
    path = os.path.join(d, 'comment.' + node['name'])
    if os.path.exists(path):
        node['comment'] = open(path).read()
print(json.dumps(nodes))
END
)");
    Script("scontrol", "echo \"$*\" >> '" + dir + "/calls.log'\n" + "test -e '" + dir +
                           "/fail' && exit 1\n" + "test -e '" + dir + "/slow' && sleep 1.2\n" +
                           R"(for a in "$@"; do
  case "$a" in NodeName=*) node="${a#NodeName=}";; Comment=*) comment="${a#Comment=}"; set_comment=1;; esac
done
)" + "test -n \"$set_comment\" && printf %s \"$comment\" > '" +
                           dir + "/comment.'\"$node\"\nexit 0\n");
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
    std::string comment;
  };
  static std::vector<Node> FourIdleNodes() {
    return {{"n1", "idle", {}, ""}, {"n2", "idle", {}, ""}, {"n3", "idle", {}, ""},
            {"n4", "idle", {}, ""}};
  }
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
                      {"comment", node.comment},
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
  // The calls that drain or resume, without the claims' Comments.
  std::vector<std::string> StateCalls() const {
    std::vector<std::string> state;
    for (auto& line : Calls())
      if (line.find(" Comment=") == std::string::npos) state.push_back(line);
    return state;
  }
  std::vector<std::string> ClaimCalls() const {
    std::vector<std::string> claims;
    for (auto& line : Calls())
      if (line.find(" Comment=") != std::string::npos) claims.push_back(line);
    return claims;
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
  Cluster(FourIdleNodes());
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  EXPECT_EQ(Count("guarded"), 1u) << "a held drain is counted once";
  EXPECT_FALSE(link_->Guarded().has_value());
  EXPECT_EQ(StateCalls().size(), 1u);
  // Claimed before, the claim cleared after.
  const auto claims = ClaimCalls();
  ASSERT_EQ(claims.size(), 2u) << ::testing::PrintToString(Calls());
  EXPECT_EQ(claims[0].rfind("update NodeName=n1 Comment=rasd-claim ", 0), 0u) << claims[0];
  EXPECT_EQ(claims[1], "update NodeName=n1 Comment=");
}

// Peers failing at once: two claimed before this node (their claims in
// their Comments when it reads), so with two of four the limit, it holds
// back without draining, and withdraws its claim.
TEST_F(SchedulerLinkTest, EarlierClaimsOfPeersFillTheRoomAndItHoldsBackWithoutADrain) {
  const auto earlier = cluster::ClaimComment(std::chrono::system_clock::now() - 100ms);
  Cluster({{"n1", "idle", {}, ""},
           {"n2", "idle", {}, "", 0, earlier},
           {"n3", "idle", {}, "", 0, earlier},
           {"n4", "idle", {}, ""}});
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("guarded") == 1; }));
  EXPECT_TRUE(StateCalls().empty()) << ::testing::PrintToString(Calls());
  ASSERT_TRUE(link_->Guarded().has_value());
  EXPECT_NE(link_->Guarded()->find("claim is number 3"), std::string::npos) << *link_->Guarded();
  ASSERT_TRUE(Eventually([&] { return ClaimCalls().size() >= 2; }));
  EXPECT_EQ(ClaimCalls()[1], "update NodeName=n1 Comment=") << "the claim is withdrawn";
  EXPECT_TRUE(link_->Drained()) << "the drain is still wanted";

  // The peers' claims end (they drained elsewhere, or gave up): at the next
  // look it claims again and drains.
  Cluster(FourIdleNodes());
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  EXPECT_EQ(StateCalls(), std::vector<std::string>{
                              "update NodeName=n1 State=DRAIN Reason=rasd: device 1 isolated"});
}

// A busy slurmctld makes the claim's write slow: the node ranks its own
// claim later for it, but still drains when there is room (a slow
// controller must not stop every drain).
TEST_F(SchedulerLinkTest, ASlowClaimWriteStillDrainsWhenThereIsRoom) {
  Cluster(FourIdleNodes());
  std::ofstream(dir_ / "slow") << "";
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }, 20s))
      << ::testing::PrintToString(Calls());
  EXPECT_EQ(Count("failed"), 0u);
  EXPECT_EQ(StateCalls(), std::vector<std::string>{
                              "update NodeName=n1 State=DRAIN Reason=rasd: device 1 isolated"});
}

// An undrain asked while the drain is being claimed: the claim is
// withdrawn and nothing is drained.
TEST_F(SchedulerLinkTest, AResumeWhileClaimingWithdrawsTheClaimAndDrainsNothing) {
  Cluster(FourIdleNodes());
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return ClaimCalls().size() == 1; }));
  link_->Resume();
  ASSERT_TRUE(Eventually([&] { return ClaimCalls().size() == 2; }));
  EXPECT_EQ(ClaimCalls()[1], "update NodeName=n1 Comment=");
  EXPECT_TRUE(StateCalls().empty()) << ::testing::PrintToString(Calls());
  EXPECT_FALSE(link_->Drained());
}

// A node whose Comment is an operator's note cannot claim: it counts every
// peer's claim as taken room, and with two of four claimed, holds back.
TEST_F(SchedulerLinkTest, ANodeThatCannotClaimCountsEveryPeersClaim) {
  const auto claim = cluster::ClaimComment(std::chrono::system_clock::now(), "peer");
  Cluster({{"n1", "idle", {}, "", 0, "rack 4: PSU swapped"},
           {"n2", "idle", {}, "", 0, claim},
           {"n3", "idle", {}, "", 0, claim},
           {"n4", "idle", {}, ""}});
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("guarded") == 1; }));
  EXPECT_TRUE(Calls().empty()) << ::testing::PrintToString(Calls());
  EXPECT_NE(link_->Guarded()->find("cannot claim"), std::string::npos) << *link_->Guarded();
}

// rasd stopping while it waits on its claim withdraws the claim and drains
// nothing: a claim left behind would hold its peers back for its lifetime.
TEST_F(SchedulerLinkTest, StoppingWhileClaimingWithdrawsTheClaim) {
  Cluster(FourIdleNodes());
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return ClaimCalls().size() == 1; }));
  link_.reset();
  EXPECT_EQ(ClaimCalls(),
            (std::vector<std::string>{ClaimCalls()[0], "update NodeName=n1 Comment="}));
  EXPECT_TRUE(StateCalls().empty()) << ::testing::PrintToString(Calls());
}

// An operator's note in the Comment is not written over: the node drains
// without a claim (its drain still ranked after it).
TEST_F(SchedulerLinkTest, ACommentOfSomeoneElsesIsNotClaimedOver) {
  Cluster({{"n1", "idle", {}, "", 0, "rack 4: PSU swapped 2026-11-30"},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""},
           {"n4", "idle", {}, ""}});
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  EXPECT_TRUE(ClaimCalls().empty()) << ::testing::PrintToString(Calls());
  EXPECT_TRUE(link_->DrainedByRasd());
}

// rasd killed between its drain and clearing its claim leaves the claim
// behind: once it is past its lifetime, the next look clears it.
TEST_F(SchedulerLinkTest, AStaleClaimOfItsOwnIsCleared) {
  const auto stale =
      cluster::ClaimComment(std::chrono::system_clock::now() - cluster::kClaimLifetime - 5s);
  Cluster({{"n1", "idle", {"DRAIN"}, "rasd: device 1 isolated", 60, stale},
           {"n2", "idle", {}, ""},
           {"n3", "idle", {}, ""}});
  Start();
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("skipped") == 1; }))
      << ::testing::PrintToString(Calls());
  EXPECT_EQ(Calls(), std::vector<std::string>{"update NodeName=n1 Comment="});
  EXPECT_TRUE(link_->DrainedByRasd());
}

// Drains the claims did not order (a peer's clock far off, a peer that
// drained without a claim) land before this one's: ranked after its drain,
// this one is past the limit (the others' drains are older) and undoes it.
TEST_F(SchedulerLinkTest, ADrainRankedPastTheLimitIsUndoneAndTheNodeGuarded) {
  Cluster(FourIdleNodes());
  Start(0.5);
  link_->Drain("device 1 isolated");
  ASSERT_TRUE(Eventually([&] { return Count("ok") == 1; }));
  // Before the ranking's read (drain_settle later): two older rasd drains.
  Cluster({{"n1", "idle", {"DRAIN"}, "rasd: device 1 isolated"},
           {"n2", "idle", {"DRAIN"}, "rasd: device 0 isolated", 10},
           {"n3", "idle", {"DRAIN"}, "rasd: device 3 isolated", 10},
           {"n4", "idle", {}, ""}});
  ASSERT_TRUE(Eventually([&] { return Count("guarded") == 1; }));
  EXPECT_EQ(StateCalls(), (std::vector<std::string>{
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
  Cluster(FourIdleNodes());
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
