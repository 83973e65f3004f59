// A fleet on one machine: eight real rasd processes, each Slurm's node of
// its own, and one real slurmctld. Every node gets the same fatal host
// error at once (a roll-out gone wrong, a forged record on every node's
// log): however the drains interleave, rasd never leaves more than
// scheduler.max_drained_fraction of the cluster drained, at any moment.
// Peers that read the cluster together all see room; each claims its drain
// in its node's Comment and drains only where the claims ordered before its
// own leave room under the limit.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "slurm_cluster.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

constexpr int kNodes = 8;
constexpr int kTrials = 5;
constexpr std::size_t kLimit = 4;  // half of 8, rounded down

std::string NodeName(int i) { return i == 0 ? "localhost" : fmt::format("n{}", i); }

TEST(FleetTest, EveryNodeFailingAtOnceDrainsNoMoreThanTheGuardAllows) {
  std::vector<std::string> idle;
  for (int i = 1; i < kNodes; ++i) idle.push_back(NodeName(i));
  std::string why, missing;
  SlurmCluster slurm(&why, &missing, {.idle_nodes = idle});
  ASSERT_TRUE(missing.empty()) << missing;
  if (::geteuid() != 0) GTEST_SKIP() << "the Slurm cluster runs its daemons as root";
  ASSERT_TRUE(why.empty()) << "the Slurm cluster did not start: " << why;

  constexpr std::string_view kFatal =
      "3,{},{},-;{{1}}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: "
      "0\n3,{},{},-;{{1}}[Hardware Error]: event severity: fatal\n";
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<std::unique_ptr<RasdInstance>> fleet;
    for (int i = 0; i < kNodes; ++i) {
      auto rasd = std::make_unique<RasdInstance>();
      rasd->WriteConfig(
          fmt::format("scheduler:\n  kind: slurm\n  node: {}\n  max_drained_fraction: 0.5\n"
                      "liveness:\n  period_ms: 0\n",
                      NodeName(i)));
      ASSERT_TRUE(rasd->Start({}, {{"SLURM_CONF", slurm.Conf()}}, &why)) << why;
      fleet.push_back(std::move(rasd));
    }
    // The same record into every node's kernel log, one right after another,
    // stamped now on the kernel's clock (a record from before rasd started
    // in this boot would only be stored).
    const long long at_us = KernelMicrosNow();
    const std::string records =
        fmt::format(fmt::runtime(kFatal), 900 + trial * 2, at_us, 901 + trial * 2, at_us);
    for (auto& rasd : fleet) rasd->AppendKmsg(records);

    // Every node settles: drained (its drain ranked and kept) or guarded.
    // Each rasd has read the record before any is looked at: none is drained
    // and none guarded until then. Slurm is polled meanwhile: the claims
    // keep the drains within the limit at every moment, not only once
    // settled.
    std::size_t peak = 0;
    auto settled = [&] {
      std::size_t now_drained = 0;
      for (const auto& [node, reason] : slurm.Reasons())
        now_drained += reason.starts_with("rasd: ") ? 1 : 0;
      peak = std::max(peak, now_drained);
      for (auto& rasd : fleet) {
        if (!SchedulerSettled(rasd->RasctlJson({"status"}))) return false;
      }
      return true;
    };
    ASSERT_TRUE(WaitUntil(settled, 30s)) << "trial " << trial << "\n" << fleet[0]->Stderr();
    std::size_t drained = 0, kept = 0;
    for (int i = 0; i < kNodes; ++i) {
      const bool in_slurm = slurm.Reason(NodeName(i)).starts_with("rasd: ");
      drained += in_slurm ? 1 : 0;
      const bool said = fleet[i]->RasctlJson({"status"})["scheduler"]["drained"] == true;
      kept += said ? 1 : 0;
      EXPECT_EQ(in_slurm, said) << NodeName(i) << " in trial " << trial;
    }
    EXPECT_LE(drained, kLimit) << "trial " << trial;
    EXPECT_LE(peak, kLimit) << "trial " << trial << ": the most drained at one moment";
    EXPECT_GE(drained, 1u) << "trial " << trial << ": the guard lets the first drains go";
    EXPECT_EQ(drained, kept);
    // The guarded nodes keep their own devices out of service: `check`
    // says the node has a problem, whether Slurm drained it or not.
    for (auto& rasd : fleet) EXPECT_EQ(rasd->Rasctl({"check"}).exit_code, 1);

    for (auto& rasd : fleet) EXPECT_TRUE(rasd->Stop().has_value());
    for (int i = 0; i < kNodes; ++i) {
      if (slurm.Reason(NodeName(i)).starts_with("rasd: ")) {
        EXPECT_EQ(slurm.Update(NodeName(i), {"State=RESUME"}), 0);
      }
    }
  }
}

}  // namespace
}  // namespace rasd::testing
