#include "rasd/cluster/slurm.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace rasd::cluster {
namespace {

using std::chrono::seconds;
using std::chrono::system_clock;

std::string ReadTestData(const std::string& name) {
  std::ifstream in(std::string(RASD_CLUSTER_TESTDATA) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

SlurmNode Node(std::string name, bool drain, std::string reason,
               std::optional<system_clock::time_point> at = std::nullopt) {
  return SlurmNode{.name = std::move(name),
                   .state = "idle",
                   .drain = drain,
                   .reason = std::move(reason),
                   .reason_changed_at = at};
}

// Real output of Slurm 22.05.8's `sinfo --json`: localhost and gpu1 drained
// with rasd's reason, gpu2 drained by an administrator, gpu3 down without
// a drain.
TEST(SinfoJsonTest, ReadsSlurm2205) {
  auto nodes = ParseSinfoJson(ReadTestData("sinfo-22.05.json"));
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 4u);
  std::map<std::string, SlurmNode> by_name;
  for (const auto& node : *nodes) by_name[node.name] = node;
  EXPECT_TRUE(by_name["gpu1"].drain);
  EXPECT_EQ(by_name["gpu1"].state, "down");
  EXPECT_EQ(by_name["gpu1"].reason, "rasd: device 1 isolated | x");
  ASSERT_TRUE(by_name["gpu1"].reason_changed_at.has_value());
  EXPECT_GT(by_name["gpu1"].reason_changed_at->time_since_epoch(), seconds(1'700'000'000));
  EXPECT_TRUE(DrainedByRasd(by_name["gpu1"]));
  EXPECT_TRUE(by_name["gpu2"].drain);
  EXPECT_FALSE(DrainedByRasd(by_name["gpu2"]));  // an administrator's
  EXPECT_FALSE(by_name["gpu3"].drain);
  EXPECT_FALSE(by_name["gpu3"].reason_changed_at.has_value());  // 0: never set
  EXPECT_EQ(by_name["localhost"].state, "idle");
  EXPECT_TRUE(DrainedByRasd(by_name["localhost"]));
}

// Later releases (data_parser v0.0.40 and on) list the state as flags and
// numbers as objects; a node listed twice is one node.
TEST(SinfoJsonTest, ReadsTheLaterShapeAndListsANodeOnce) {
  const std::string text = R"({"nodes": [
    {"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "rasd: x",
     "reason_changed_at": {"set": true, "infinite": false, "number": 1800000000}},
    {"name": "n2", "state": ["MIXED"], "reason": "",
     "reason_changed_at": {"set": false, "infinite": false, "number": 0}},
    {"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "rasd: x"}
  ], "errors": []})";
  auto nodes = ParseSinfoJson(text);
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].state, "idle");
  EXPECT_TRUE((*nodes)[0].drain);
  ASSERT_TRUE((*nodes)[0].reason_changed_at.has_value());
  EXPECT_EQ((*nodes)[0].reason_changed_at->time_since_epoch(), seconds(1'800'000'000));
  EXPECT_EQ((*nodes)[1].state, "mixed");
  EXPECT_FALSE((*nodes)[1].drain);
  EXPECT_FALSE((*nodes)[1].reason_changed_at.has_value());
}

TEST(SinfoJsonTest, AControllerThatDoesNotAnswerIsAnErrorWithSlurmsWords) {
  auto nodes = ParseSinfoJson(
      R"({"errors": [{"error": "Unable to contact slurm controller", "errno": -1}]})");
  ASSERT_FALSE(nodes);
  EXPECT_EQ(nodes.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(nodes.error().message.find("Unable to contact slurm controller"), std::string::npos);
  // As 22.05 prints it: an empty node list beside the error (and exit 0).
  auto empty = ParseSinfoJson(R"({"errors": [{"error": "Unspecified error", "errno": -1}],
                                  "nodes": []})");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("Unspecified error"), std::string::npos);
  EXPECT_FALSE(ParseSinfoJson("sinfo: error: something\n{"));
  const std::string deep = R"({"nodes": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto too_deep = ParseSinfoJson(deep);
  ASSERT_FALSE(too_deep);
  EXPECT_NE(too_deep.error().message.find("nested deeper than 32"), std::string::npos);
  EXPECT_FALSE(ParseSinfoJson(""));
  EXPECT_FALSE(ParseSinfoJson("[1,2]"));
}

TEST(SlurmNodeTest, AnyReasonNotRasdsHoldsTheNodeForOthers) {
  EXPECT_TRUE(HeldByOthers(Node("a", true, "bios update")));
  EXPECT_TRUE(HeldByOthers(SlurmNode{.name = "b", .state = "down", .reason = "Not responding"}));
  EXPECT_TRUE(HeldByOthers(SlurmNode{.name = "c", .state = "down", .reason = "admin: hw swap"}));
  EXPECT_FALSE(HeldByOthers(Node("d", true, "rasd: device 1 isolated")));
  EXPECT_FALSE(HeldByOthers(Node("e", false, "")));
  const std::vector<SlurmNode> nodes = {Node("x", false, ""), Node("y", false, "")};
  ASSERT_NE(FindNode(nodes, "y"), nullptr);
  EXPECT_EQ(FindNode(nodes, "y")->name, "y");
  EXPECT_EQ(FindNode(nodes, "ALL"), nullptr);
}

TEST(DrainSpreadTest, EachNodeHasItsOwnShareTheSameOnEveryCallAndNoneWithoutASpread) {
  using std::chrono::milliseconds;
  EXPECT_EQ(DrainSpreadDelay("gpu7", milliseconds(0)), milliseconds(0));
  EXPECT_EQ(DrainSpreadDelay("gpu7", milliseconds(4000)),
            DrainSpreadDelay("gpu7", milliseconds(4000)));
  // 32 nodes named as a cluster names them: within the spread, apart from
  // each other, and over most of it.
  std::set<std::int64_t> shares;
  for (int i = 0; i < 32; ++i) {
    const auto share = DrainSpreadDelay("gpu" + std::to_string(i), milliseconds(4000)).count();
    EXPECT_GE(share, 0);
    EXPECT_LT(share, 4000);
    shares.insert(share);
  }
  EXPECT_GE(shares.size(), 30u);
  EXPECT_GT(*shares.rbegin() - *shares.begin(), 3000);
}

TEST(DrainReasonTest, PrefixedOneLineAndShort) {
  EXPECT_EQ(DrainReason("device 2 isolated"), "rasd: device 2 isolated");
  EXPECT_EQ(DrainReason("a\nb\tc"), "rasd: a b c");
  EXPECT_EQ(DrainReason(std::string(500, 'x')).size(), 200u);
}

TEST(DrainGuardTest, RefusesOnceTheFractionDrainedByRasdIsReached) {
  const auto now = system_clock::now();
  std::vector<SlurmNode> nodes = {Node("self", false, ""), Node("a", true, "rasd: x"),
                                  Node("b", true, "admin: bios update"), Node("c", false, "")};
  // 1 of 4 drained by rasd (the administrator's drain does not count).
  auto verdict = CheckDrainGuard(nodes, "self", 0.5, seconds(0), now);
  EXPECT_TRUE(verdict.allowed) << verdict.why;
  EXPECT_EQ(verdict.drained_by_rasd, 1u);
  EXPECT_EQ(verdict.nodes, 4u);
  nodes[3] = Node("c", true, "rasd: y");  // 2 of 4: at the limit
  verdict = CheckDrainGuard(nodes, "self", 0.5, seconds(0), now);
  EXPECT_FALSE(verdict.allowed);
  EXPECT_EQ(verdict.drained_by_rasd, 2u);
  EXPECT_NE(verdict.why.find("2 of 4 node(s) drained by rasd"), std::string::npos) << verdict.why;
  EXPECT_NE(verdict.why.find("limit is 50%"), std::string::npos) << verdict.why;
  // The node itself never counts against itself.
  nodes[0] = Node("self", true, "rasd: z");
  EXPECT_EQ(CheckDrainGuard(nodes, "self", 0.75, seconds(0), now).drained_by_rasd, 2u);
  EXPECT_TRUE(CheckDrainGuard(nodes, "self", 0.75, seconds(0), now).allowed);
}

TEST(DrainGuardTest, AOneNodeClusterDrainsItsNode) {
  EXPECT_TRUE(CheckDrainGuard({Node("self", false, "")}, "self", 0.01, seconds(300),
                              system_clock::now())
                  .allowed);
  EXPECT_TRUE(CheckDrainGuard({}, "self", 0.5, seconds(300), system_clock::now()).allowed);
}

TEST(DrainGuardTest, TheWindowLeavesOutOldDrainsButNotUntimedOnes) {
  const auto now = system_clock::now();
  const std::vector<SlurmNode> nodes = {
      Node("self", false, ""), Node("old", true, "rasd: x", now - seconds(3600)),
      Node("new", true, "rasd: y", now - seconds(10)), Node("untimed", true, "rasd: z")};
  auto verdict = CheckDrainGuard(nodes, "self", 0.5, seconds(300), now);
  EXPECT_EQ(verdict.drained_by_rasd, 2u);  // new and untimed
  EXPECT_FALSE(verdict.allowed);
  EXPECT_NE(verdict.why.find("within the last 300 s"), std::string::npos) << verdict.why;
  EXPECT_EQ(CheckDrainGuard(nodes, "self", 0.5, seconds(0), now).drained_by_rasd, 3u);
}

TEST(DrainGuardTest, TheLimitIsTheFractionRoundedDownAndAtLeastOne) {
  EXPECT_EQ(DrainLimit(8, 0.5), 4u);
  EXPECT_EQ(DrainLimit(3, 0.5), 1u) << "2 of 3 would be past half";
  EXPECT_EQ(DrainLimit(1, 0.5), 1u);
  EXPECT_EQ(DrainLimit(0, 0.5), 1u);
  EXPECT_EQ(DrainLimit(10, 0.01), 1u);
  EXPECT_EQ(DrainLimit(32, 0.5), 16u);
  // 1 of 3 drained: a second would be 67%, past 50%.
  const auto now = system_clock::now();
  EXPECT_FALSE(
      CheckDrainGuard({Node("self", false, ""), Node("a", true, "rasd: x"), Node("b", false, "")},
                      "self", 0.5, seconds(0), now)
          .allowed);
}

// Eight peers drained in the same second: each, reading the cluster after,
// puts the drains in the same order and the first four stay, whatever the
// order the nodes are listed in and whichever undid theirs already.
TEST(DrainRankTest, PeersThatDrainedAtOnceAgreeWhoStays) {
  const auto now = system_clock::now();
  const auto second = system_clock::time_point(
      std::chrono::duration_cast<seconds>((now - seconds(1)).time_since_epoch()));
  std::vector<SlurmNode> nodes;
  for (const char* name : {"n7", "n2", "n5", "n0", "n3", "n6", "n1", "n4"})
    nodes.push_back(Node(name, true, "rasd: fatal host error", second));
  std::set<std::string> kept;
  for (const auto& node : nodes) {
    const DrainRank rank = RankOwnDrain(nodes, node.name, 0.5, seconds(300), now);
    EXPECT_EQ(rank.drains, 8u);
    EXPECT_EQ(rank.limit, 4u);
    if (rank.keep) kept.insert(node.name);
    EXPECT_NE(rank.why.find(rank.keep ? "it stays" : "undone"), std::string::npos) << rank.why;
  }
  EXPECT_EQ(kept, (std::set<std::string>{"n0", "n1", "n2", "n3"}));
  // n5 and n7 undid theirs before n4 and n6 read: those still undo.
  std::vector<SlurmNode> later;
  for (const auto& node : nodes)
    if (node.name != "n5" && node.name != "n7") later.push_back(node);
  EXPECT_FALSE(RankOwnDrain(later, "n4", 0.5, seconds(300), now).keep);
  EXPECT_FALSE(RankOwnDrain(later, "n6", 0.5, seconds(300), now).keep);
  // An earlier second goes first, an untimed drain after every timed one
  // (one that shows up later never moves a drain already kept).
  nodes[0].reason_changed_at = second - seconds(5);  // n7
  nodes[1].reason_changed_at.reset();                // n2
  EXPECT_EQ(RankOwnDrain(nodes, "n7", 0.5, seconds(300), now).rank, 0u);
  EXPECT_EQ(RankOwnDrain(nodes, "n2", 0.5, seconds(300), now).rank, 7u);
  EXPECT_TRUE(RankOwnDrain(nodes, "n3", 0.5, seconds(300), now).keep);
  EXPECT_FALSE(RankOwnDrain(nodes, "n4", 0.5, seconds(300), now).keep);
}

// The window ends at this node's drain as Slurm timed it: a node whose
// clock is an hour ahead still counts the peer that drained before it.
TEST(DrainRankTest, TheWindowIsOnSlurmsClock) {
  const auto slurm_now = system_clock::now();
  const std::vector<SlurmNode> nodes = {Node("peer", true, "rasd: x", slurm_now - seconds(10)),
                                        Node("self", true, "rasd: y", slurm_now),
                                        Node("c", false, ""), Node("d", false, "")};
  const auto rank =
      RankOwnDrain(nodes, "self", 0.25, seconds(300), slurm_now + std::chrono::hours(1));
  EXPECT_EQ(rank.drains, 2u);
  EXPECT_FALSE(rank.keep) << rank.why;
}

TEST(DrainRankTest, OldDrainsAndOthersReasonsDoNotCountAndANodeNotDrainedKeepsNothingToUndo) {
  const auto now = system_clock::now();
  const std::vector<SlurmNode> nodes = {Node("self", true, "rasd: x", now - seconds(1)),
                                        Node("old", true, "rasd: y", now - seconds(3600)),
                                        Node("admin", true, "bios update", now - seconds(2)),
                                        Node("idle", false, "")};
  const DrainRank rank = RankOwnDrain(nodes, "self", 0.25, seconds(300), now);
  EXPECT_TRUE(rank.keep) << rank.why;
  EXPECT_EQ(rank.drains, 1u);
  EXPECT_EQ(rank.limit, 1u);
  EXPECT_TRUE(RankOwnDrain(nodes, "idle", 0.25, seconds(300), now).keep);
  EXPECT_NE(RankOwnDrain(nodes, "idle", 0.25, seconds(300), now).why.find("not drained by rasd"),
            std::string::npos);
  EXPECT_FALSE(RankOwnDrain(nodes, "self", 0.25, seconds(0), now).keep)
      << "with no window the old drain counts, and came first";
}

using Kind = NodeActionDecision::Kind;

SlurmNode Claiming(std::string name, system_clock::time_point at) {
  SlurmNode node = Node(std::move(name), false, "");
  node.comment = ClaimComment(at);
  return node;
}

TEST(DrainClaimTest, AClaimReadsBackAndAnythingElseIsNoClaim) {
  const auto at = system_clock::time_point(std::chrono::milliseconds(1765000000123));
  EXPECT_EQ(ClaimComment(at), "rasd-claim 1765000000123");
  EXPECT_EQ(ParseClaim(ClaimComment(at)), at);
  EXPECT_EQ(ClaimComment(at, "4242-00ab"), "rasd-claim 1765000000123 4242-00ab");
  EXPECT_EQ(ParseClaim(ClaimComment(at, "4242-00ab")), at);
  EXPECT_EQ(ClaimComment(at, "a b;c"), "rasd-claim 1765000000123 abc")
      << "a tag keeps its safe part";
  EXPECT_NE(OwnClaimTag(), "");
  EXPECT_EQ(ParseClaim(ClaimComment(at, OwnClaimTag())), at);
  for (const char* other : {"", "rack 4, PSU swapped", "rasd-claim", "rasd-claim ",
                            "rasd-claim 12x", "rasd-claim -5", "rasd-claim 1234567890123456789",
                            "rasd-claim 123 ", "rasd-claim 123 a b", "rasd-claim 123 a;b"}) {
    EXPECT_FALSE(ParseClaim(other).has_value()) << other;
  }
}

// Thirty-two nodes claim in the same instant (some in the same
// millisecond): every node reads the same claims, and exactly the first
// sixteen, by time and then name, drain, whatever order sinfo lists them in.
TEST(DrainClaimTest, PeersClaimingAtOnceAgreeWhoDrainsAndNoMoreThanTheLimit) {
  const auto now = system_clock::now();
  std::vector<SlurmNode> nodes;
  for (int i = 31; i >= 0; --i) {
    nodes.push_back(Claiming(fmt::format("n{:02}", i), now - std::chrono::milliseconds(i % 4)));
  }
  std::set<std::string> draining;
  for (const auto& node : nodes) {
    const ClaimRank rank = RankOwnClaim(nodes, node.name, node.comment, 0.5, seconds(300), now);
    EXPECT_TRUE(rank.own_claim_seen);
    EXPECT_EQ(rank.claims, 32u);
    EXPECT_EQ(rank.limit, 16u);
    if (rank.allowed) draining.insert(node.name);
    EXPECT_NE(rank.why.find(rank.allowed ? "it drains" : "it holds back"), std::string::npos)
        << rank.why;
  }
  EXPECT_EQ(draining.size(), 16u);
  // The claims 3 ms old come first, n03 before n07.
  EXPECT_TRUE(draining.contains("n03") && draining.contains("n31"));
  EXPECT_FALSE(draining.contains("n00"));
}

// Drains standing take room before any claim; a drained node's leftover
// claim is not counted twice; a stale claim (its node died while claiming)
// and a claim from a node held by someone else count for nobody.
TEST(DrainClaimTest, DrainsStandingComeFirstAndStaleOrHeldClaimsDoNotCount) {
  const auto now = system_clock::now();
  SlurmNode drained = Node("drained", true, "rasd: x", now - seconds(5));
  drained.comment = ClaimComment(now - seconds(3));
  SlurmNode admin = Node("admin", true, "bios update", now - seconds(2));
  admin.comment = ClaimComment(now - seconds(1));
  const std::vector<SlurmNode> nodes = {drained,
                                        admin,
                                        Claiming("stale", now - kClaimLifetime - seconds(1)),
                                        Claiming("early", now - std::chrono::milliseconds(500)),
                                        Claiming("self", now - std::chrono::milliseconds(200)),
                                        Node("idle", false, ""),
                                        Node("idle2", false, ""),
                                        Node("idle3", false, "")};
  // 8 nodes, limit 4: one drain standing, one earlier claim: room for self.
  const std::string own = nodes[4].comment;
  ClaimRank rank = RankOwnClaim(nodes, "self", own, 0.5, seconds(300), now);
  EXPECT_TRUE(rank.allowed) << rank.why;
  EXPECT_EQ(rank.drained_by_rasd, 1u);
  EXPECT_EQ(rank.claims, 2u);
  EXPECT_EQ(rank.rank, 1u);
  // At 25% (limit 2): the drain and the earlier claim fill it.
  rank = RankOwnClaim(nodes, "self", own, 0.25, seconds(300), now);
  EXPECT_FALSE(rank.allowed) << rank.why;
  EXPECT_TRUE(RankOwnClaim(nodes, "early", nodes[3].comment, 0.25, seconds(300), now).allowed);
  // A node whose claim Slurm does not show may not drain.
  rank = RankOwnClaim(nodes, "idle", ClaimComment(now), 0.5, seconds(300), now);
  EXPECT_FALSE(rank.own_claim_seen);
  EXPECT_FALSE(rank.allowed);
  // A claim on the node other than the one this process wrote (another
  // process's, on the same node) is not its own.
  rank = RankOwnClaim(nodes, "self", ClaimComment(now, "other-process"), 0.5, seconds(300), now);
  EXPECT_FALSE(rank.own_claim_seen) << rank.why;
  // A slow write is ranked by its writer at its return: "early", whose
  // write returned only now, goes behind self's claim and holds back.
  rank = RankOwnClaim(nodes, "early", nodes[3].comment, 0.25, seconds(300), now, now);
  EXPECT_EQ(rank.rank, 1u) << rank.why;
  EXPECT_FALSE(rank.allowed);
  // A node that cannot claim counts every other node's drain and claim.
  EXPECT_EQ(DrainsAndClaimsOfOthers(nodes, "idle", seconds(300), now), 3u);
  EXPECT_EQ(DrainsAndClaimsOfOthers(nodes, "self", seconds(300), now), 2u);
}

TEST(NodeActionTest, ADrainGoesOnlyToANodeNobodyHoldsAndOnlyAsTheGuardAllows) {
  const auto now = system_clock::now();
  std::vector<SlurmNode> nodes = {Node("self", false, ""), Node("a", true, "rasd: x"),
                                  Node("b", false, ""), Node("c", false, "")};
  EXPECT_EQ(DecideNodeAction(nodes, "self", true, 0.5, seconds(0), now).kind, Kind::kDrain);
  nodes[2] = Node("b", true, "rasd: y");
  const auto guarded = DecideNodeAction(nodes, "self", true, 0.5, seconds(0), now);
  EXPECT_EQ(guarded.kind, Kind::kGuarded);
  ASSERT_TRUE(guarded.guard.has_value());
  EXPECT_EQ(guarded.detail, guarded.guard->why);
  EXPECT_EQ(DecideNodeAction(nodes, "self", true, 1.0, seconds(0), now).kind, Kind::kDrain)
      << "a fraction of 1 is no guard";

  nodes[0] = Node("self", true, "admin: bios update");
  const auto held = DecideNodeAction(nodes, "self", true, 0.5, seconds(0), now);
  EXPECT_EQ(held.kind, Kind::kHeldByOthers);
  EXPECT_EQ(held.detail,
            "node self is out of service for someone else (drained, reason 'admin: bios update'): "
            "left as it is");
  nodes[0] = Node("self", true, "rasd: device 1 isolated");
  const auto already = DecideNodeAction(nodes, "self", true, 0.5, seconds(0), now);
  EXPECT_EQ(already.kind, Kind::kAlreadyDrained);
  EXPECT_FALSE(already.guard.has_value()) << "no guard is asked for a node drained already";
  EXPECT_EQ(DecideNodeAction(nodes, "nobody", true, 0.5, seconds(0), now).kind, Kind::kUnknownNode);
}

TEST(NodeActionTest, OnlyANodeRasdDrainedIsResumed) {
  const auto now = system_clock::now();
  std::vector<SlurmNode> nodes = {Node("self", true, "rasd: device 1 isolated")};
  EXPECT_EQ(DecideNodeAction(nodes, "self", false, 0.5, seconds(0), now).kind, Kind::kResume);
  nodes[0] = Node("self", true, "admin: bios update");
  const auto held = DecideNodeAction(nodes, "self", false, 0.5, seconds(0), now);
  EXPECT_EQ(held.kind, Kind::kHeldByOthers);
  EXPECT_NE(held.detail.find("not resumed"), std::string::npos);
  nodes[0] = Node("self", false, "");
  EXPECT_EQ(DecideNodeAction(nodes, "self", false, 0.5, seconds(0), now).kind, Kind::kNothing);
}

}  // namespace
}  // namespace rasd::cluster
