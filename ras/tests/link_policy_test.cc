// LinkPolicy's rules with time passed in: down, the up debounce, flapping,
// the restart rule. Nothing here sleeps; a test's clock is a number.

#include "rasd/ras/link_policy.h"

#include <gtest/gtest.h>

namespace rasd::ras {
namespace {

using namespace std::chrono_literals;
using What = LinkPolicy::Decision::What;

class LinkPolicyTest : public ::testing::Test {
 protected:
  std::vector<LinkPolicy::Decision> Down(int device, std::vector<std::string> links) {
    return policy_.Observe("RDMA", {{device, std::move(links)}}, {}, now_);
  }
  std::vector<LinkPolicy::Decision> Up(int device) { return Down(device, {}); }
  std::vector<LinkPolicy::Decision> After(std::chrono::nanoseconds step) {
    now_ += step;
    return policy_.Advance(now_);
  }

  LinkPolicy policy_{{.up_debounce = 30s, .flap_limit = 3, .flap_window = 3600s}};
  std::chrono::nanoseconds now_{1h};
};

TEST_F(LinkPolicyTest, ALinkDownTakesTheDeviceOutAndAsksForDegraded) {
  const auto decisions = Down(1, {"mlx5_0 port 1"});
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].device, 1);
  EXPECT_EQ(decisions[0].what, What::kWentDown);
  EXPECT_FALSE(decisions[0].links_usable);
  EXPECT_EQ(decisions[0].reason,
            "RDMA link down (mlx5_0 port 1): out of collectives until it stays up 30 s");
  EXPECT_TRUE(policy_.Holds(1));
  EXPECT_TRUE(Down(1, {"mlx5_0 port 1"}).empty()) << "the same reading again decides nothing";
  EXPECT_FALSE(policy_.Holds(0));
}

TEST_F(LinkPolicyTest, TheDeviceRejoinsOnlyOnceItsLinksStayedUpForTheDebounce) {
  Down(1, {"mlx5_0 port 1"});
  EXPECT_TRUE(Up(1).empty()) << "up starts the debounce; nothing is decided yet";
  ASSERT_TRUE(policy_.NextDeadline().has_value());
  EXPECT_EQ(*policy_.NextDeadline(), now_ + 30s);
  EXPECT_EQ(policy_.Clears(1), "by itself: its links are up, it rejoins once they stayed up 30 s");
  EXPECT_TRUE(After(29s).empty());
  const auto rejoined = After(1s);
  ASSERT_EQ(rejoined.size(), 1u);
  EXPECT_EQ(rejoined[0].what, What::kRejoined);
  EXPECT_TRUE(rejoined[0].links_usable);
  EXPECT_EQ(rejoined[0].reason, "links up for 30 s");
  EXPECT_FALSE(policy_.Holds(1));
  EXPECT_FALSE(policy_.NextDeadline().has_value());
  EXPECT_FALSE(policy_.Clears(1).has_value());
}

TEST_F(LinkPolicyTest, ALinkDownDuringTheDebounceCancelsIt) {
  Down(1, {"mlx5_0 port 1"});
  Up(1);
  now_ += 20s;
  EXPECT_EQ(Down(1, {"mlx5_0 port 1"}).size(), 1u);
  EXPECT_FALSE(policy_.NextDeadline().has_value());
  EXPECT_TRUE(After(1h).empty()) << "still down: no rejoin";
  Up(1);
  EXPECT_TRUE(After(29s).empty()) << "a fresh debounce from the last up";
  EXPECT_EQ(After(1s).size(), 1u);
}

TEST_F(LinkPolicyTest, TheDebounceKeepsTheValueItWasArmedWith) {
  Down(1, {"mlx5_0 port 1"});
  Up(1);
  policy_.SetOptions({.up_debounce = 5s, .flap_limit = 3, .flap_window = 3600s});
  EXPECT_TRUE(After(5s).empty());
  const auto rejoined = After(25s);
  ASSERT_EQ(rejoined.size(), 1u);
  EXPECT_EQ(rejoined[0].reason, "links up for 30 s");
}

TEST_F(LinkPolicyTest, EverySourceMustBeUpAndTheReasonNamesTheLinksDownNow) {
  Down(2, {"mlx5_1 port 1"});
  auto changed = policy_.Observe("NVLink", {{2, {"NVLink 3"}}}, {}, now_);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].what, What::kLinksChanged);
  EXPECT_EQ(changed[0].reason,
            "NVLink link down (NVLink 3); RDMA link down (mlx5_1 port 1): out of collectives "
            "until it stays up 30 s");
  EXPECT_EQ(Up(2).size(), 1u) << "RDMA up, NVLink still down: only the reason changes";
  EXPECT_FALSE(policy_.NextDeadline().has_value());
  EXPECT_TRUE(policy_.Observe("NVLink", {{2, {}}}, {}, now_).empty());
  EXPECT_EQ(After(30s).size(), 1u);
  const auto down = policy_.DownLinks();
  EXPECT_EQ(down.at({2, "RDMA"}), 0u);
  EXPECT_EQ(down.at({2, "NVLink"}), 0u);
}

TEST_F(LinkPolicyTest, DownsWithinTheWindowMakeItFlappingUntilAnOperatorReturnsIt) {
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Down(1, {"mlx5_0 port 1"})[0].what, What::kWentDown);
    Up(1);
    now_ += 10s;
  }
  const auto third = Down(1, {"mlx5_0 port 1"});
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].what, What::kFlapping);
  EXPECT_NE(third[0].reason.find("flapping (3 downs within 3600 s)"), std::string::npos);
  Up(1);
  EXPECT_FALSE(policy_.NextDeadline().has_value()) << "a flapping device does not rejoin by itself";
  EXPECT_TRUE(After(24h).empty());
  EXPECT_EQ(policy_.Clears(1), "an operator: rasctl undrain (its links were flapping)");
  EXPECT_TRUE(policy_.OperatorReturned(1)) << "its links are up: usable again";
  EXPECT_FALSE(policy_.Holds(1));
  EXPECT_FALSE(policy_.Clears(1).has_value());
}

TEST_F(LinkPolicyTest, DownsOutsideTheWindowAreForgotten) {
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Down(1, {"mlx5_0 port 1"})[0].what, What::kWentDown) << i;
    Up(1);
    After(2h);  // rejoins, and the down ages out of the window
  }
}

TEST_F(LinkPolicyTest, AfterARestartTheDeviceStaysOutUntilItsLinksProveThemselves) {
  EXPECT_TRUE(policy_.Restore(1, {.held = false, .degraded = true, .links = {"NVLink 2"}}, true));
  EXPECT_TRUE(policy_.Holds(1));
  // NVML cannot tell the inactive NVLink 2 down from absent: it counts as
  // down for this device, which was out for it.
  const auto first = policy_.Observe("NVLink", {{1, {}}}, {{1, {"NVLink 2"}}}, now_);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].what, What::kLinksChanged) << "its hold now names the link";
  EXPECT_FALSE(first[0].links_usable);
  EXPECT_NE(first[0].reason.find("NVLink 2"), std::string::npos);
  EXPECT_FALSE(policy_.NextDeadline().has_value());
  // Another device's unconfirmed link is not down.
  const auto other = policy_.Observe("NVLink", {{0, {}}}, {{0, {"NVLink 2"}}}, now_);
  EXPECT_TRUE(other.empty());
  EXPECT_FALSE(policy_.Holds(0));
  // Once the link reports active, the debounce starts.
  policy_.Observe("NVLink", {{1, {}}}, {}, now_);
  EXPECT_EQ(After(30s).size(), 1u);
  EXPECT_FALSE(policy_.Holds(1));
}

TEST_F(LinkPolicyTest, AHeldDeviceStaysHeldAcrossARestart) {
  EXPECT_TRUE(policy_.Restore(3, {.held = true, .degraded = true, .links = {}}, false));
  Up(3);
  EXPECT_TRUE(After(24h).empty());
  EXPECT_EQ(policy_.ToSave().at(3).held, true);
  EXPECT_TRUE(policy_.OperatorReturned(3)) << "its links are up";
  EXPECT_TRUE(policy_.ToSave().empty()) << "nothing left to keep";
}

TEST_F(LinkPolicyTest, ARestoredDeviceThatWasNotOutIsLeftAlone) {
  EXPECT_FALSE(policy_.Restore(0, {}, false));
  EXPECT_TRUE(Up(0).empty());
  EXPECT_FALSE(policy_.NextDeadline().has_value());
}

}  // namespace
}  // namespace rasd::ras
