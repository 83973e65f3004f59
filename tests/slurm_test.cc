// rasd tells a real Slurm: a one-node cluster (munged, slurmctld, slurmd
// started by the test on loopback, everything in a temp dir); a fatal host
// error drains the node with rasd's reason, and an operator's undrain that
// leaves no device isolated resumes it.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "slurm_cluster.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

// `rasctl check --format nhc` as Slurm's HealthCheckProgram, with the
// cluster's SLURM_CONF.
CommandResult Nhc(const RasdInstance& rasd, const SlurmCluster& slurm) {
  return RunToCompletion(
      {.argv = {RASCTL_BINARY, "check", "--format", "nhc", "--node", "localhost"},
       .set_env = {{"RASD_SOCKET", rasd.Socket().string()}, {"SLURM_CONF", slurm.Conf()}}},
      30s);
}

TEST(SlurmTest, AFatalHostErrorDrainsTheNodeAndAnUndrainResumesIt) {
  std::string why, missing;
  SlurmCluster slurm(&why, &missing);
  ASSERT_TRUE(missing.empty()) << missing;
  if (::geteuid() != 0) GTEST_SKIP() << "the one-node cluster runs its daemons as root";
  ASSERT_TRUE(why.empty()) << "the one-node Slurm did not start: " << why;

  RasdInstance rasd;
  rasd.WriteConfig(
      "scheduler:\n  kind: slurm\n  node: localhost\ninject:\n  allow_sources: true\n");
  ASSERT_TRUE(rasd.Start({}, {{"SLURM_CONF", slurm.Conf()}}, &why)) << why;
  // An isolated accelerator is named in the reason.
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "2"}).exit_code, 0);
  ASSERT_EQ(rasd.Rasctl({"inject", "kmsg",
                         "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error "
                         "Source: 0\n{1}[Hardware Error]: event severity: fatal"})
                .exit_code,
            0);
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "drained"; }, 15s)) << slurm.State() << "\n"
                                                                          << rasd.Stderr();
  const std::string reason = slurm.Reason();
  EXPECT_EQ(reason.rfind("rasd: ", 0), 0u) << reason;
  EXPECT_NE(reason.find("isolated accelerators 2"), std::string::npos) << reason;
  // The health check leaves the drain to rasd's own link, which ranks it:
  // a second drain would give the node a second reason time.
  const auto nhc = Nhc(rasd, slurm);
  EXPECT_NE((nhc.out + nhc.err).find("rasd drains node localhost itself"), std::string::npos)
      << nhc.out << nhc.err;
  EXPECT_EQ(slurm.Reason(), reason) << "not drained again";

  // The same fault again: no second scontrol call.
  ASSERT_EQ(rasd.Rasctl({"inject", "kmsg",
                         "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error "
                         "Source: 0\n{1}[Hardware Error]: event severity: fatal"})
                .exit_code,
            0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto status = nlohmann::json::parse(rasd.Rasctl({"--json", "status"}).out);
        return status["scheduler"]["calls"].value("skipped", 0) >= 1;
      },
      5s));
  auto status = nlohmann::json::parse(rasd.Rasctl({"--json", "status"}).out);
  EXPECT_EQ(status["scheduler"]["calls"]["ok"], 1);
  EXPECT_EQ(status["scheduler"]["drained"], true);

  // Repaired: the device returns, none is left isolated, the node resumes.
  ASSERT_EQ(rasd.Rasctl({"undrain", "2"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "idle"; }, 15s)) << slurm.State();
  status = nlohmann::json::parse(rasd.Rasctl({"--json", "status"}).out);
  EXPECT_EQ(status["scheduler"]["calls"]["ok"], 2);
  EXPECT_EQ(status["scheduler"]["drained"], false);
  const std::string metrics = Http(status["metrics"]["port"].get<int>(), "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_scheduler_actions_total{result=\"ok\"} 2\n"), std::string::npos)
      << metrics.substr(0, 300);
}

TEST(SlurmTest, CheckAsAHealthCheckProgramDrainsOnAProblemAndResumesOnlyItsOwnDrains) {
  std::string why, missing;
  SlurmCluster slurm(&why, &missing);
  ASSERT_TRUE(missing.empty()) << missing;
  if (::geteuid() != 0) GTEST_SKIP() << "the one-node cluster runs its daemons as root";
  ASSERT_TRUE(why.empty()) << "the one-node Slurm did not start: " << why;
  RasdInstance rasd;  // no scheduler of its own: the health check tells Slurm
  rasd.WriteConfig("policy:\n  ce_device_threshold: 2\n");
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;

  auto healthy = Nhc(rasd, slurm);
  EXPECT_EQ(healthy.exit_code, 0) << healthy.out << healthy.err;
  EXPECT_EQ(healthy.out, "");
  EXPECT_EQ(slurm.State(), "idle");
  // A degraded device still takes work: no drain.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(rasd.Rasctl({"inject", "xid", "92", "--device", "0"}).exit_code, 0);
  }
  ASSERT_TRUE(WaitUntil([&] { return rasd.Rasctl({"check"}).out.starts_with("degraded"); }, 5s));
  auto degraded = Nhc(rasd, slurm);
  EXPECT_EQ(degraded.exit_code, 0) << degraded.out << degraded.err;
  EXPECT_EQ(slurm.State(), "idle");

  ASSERT_EQ(rasd.Rasctl({"isolate", "1", "--reason", "Xid 79"}).exit_code, 0);
  auto problem = Nhc(rasd, slurm);
  EXPECT_EQ(problem.exit_code, 1);
  EXPECT_TRUE(problem.out.starts_with("ERROR:  rasd:  Health check failed:  device 1 isolated: Xid 79\n"))
      << problem.out;
  EXPECT_EQ(slurm.State(), "drained");
  EXPECT_EQ(slurm.Reason(), "rasd: device 1 isolated: Xid 79");

  // Repaired: the next run resumes the node rasd's check drained.
  ASSERT_EQ(rasd.Rasctl({"undrain", "1"}).exit_code, 0);
  auto repaired = Nhc(rasd, slurm);
  EXPECT_EQ(repaired.exit_code, 0) << repaired.out << repaired.err;
  EXPECT_NE(repaired.out.find("resumed"), std::string::npos) << repaired.out;
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "idle"; }, 15s)) << slurm.State();

  // An administrator's drain is never lifted by the check, healthy or not.
  ASSERT_EQ(slurm.Update("localhost", {"State=DRAIN", "Reason=bios update"}), 0);
  auto admin = Nhc(rasd, slurm);
  EXPECT_EQ(admin.exit_code, 0);
  EXPECT_NE(admin.out.find("out of service for someone else (drained, reason 'bios update'): "
                           "not resumed"),
            std::string::npos)
      << admin.out;
  ASSERT_EQ(rasd.Rasctl({"isolate", "2"}).exit_code, 0);
  EXPECT_EQ(Nhc(rasd, slurm).exit_code, 1);
  EXPECT_EQ(slurm.State(), "drained");
  EXPECT_EQ(slurm.Reason(), "bios update");  // not overwritten
  ASSERT_EQ(slurm.Update("localhost", {"State=RESUME"}), 0);
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "idle"; }, 15s)) << slurm.State();
  // Nor a node set DOWN by someone: draining it would replace its reason,
  // and a later healthy run would resume it.
  ASSERT_EQ(slurm.Update("localhost", {"State=DOWN", "Reason=admin: hw swap"}), 0);
  // What the check reads is sinfo's view: it must show the DOWN first.
  ASSERT_TRUE(WaitUntil([&] { return slurm.State().starts_with("down"); }, 15s)) << slurm.State();
  EXPECT_EQ(Nhc(rasd, slurm).exit_code, 1);
  EXPECT_EQ(slurm.Reason(), "admin: hw swap");
  ASSERT_EQ(rasd.Rasctl({"undrain", "2"}).exit_code, 0);
  EXPECT_EQ(Nhc(rasd, slurm).exit_code, 0);
  EXPECT_TRUE(slurm.State().starts_with("down")) << slurm.State();
  EXPECT_EQ(slurm.Reason(), "admin: hw swap");
  ASSERT_EQ(slurm.Update("localhost", {"State=RESUME"}), 0);
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "idle"; }, 15s)) << slurm.State();

  // A rasd that does not answer is no proof of health: the node is drained.
  ASSERT_TRUE(rasd.Stop().has_value());
  auto unknown = Nhc(rasd, slurm);
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(unknown.out.starts_with("ERROR:  rasd:  Health check failed:  unknown: rasd does not answer"))
      << unknown.out;
  EXPECT_EQ(slurm.State(), "drained");
  EXPECT_TRUE(slurm.Reason().starts_with("rasd: unknown: rasd does not answer")) << slurm.Reason();
}

TEST(SlurmTest, TheBlastRadiusGuardHoldsADrainWhileHalfTheClusterIsDrainedByRasd) {
  std::string why, missing;
  SlurmCluster slurm(&why, &missing, {.down_nodes = {"gpu1", "gpu2", "gpu3"}});
  ASSERT_TRUE(missing.empty()) << missing;
  if (::geteuid() != 0) GTEST_SKIP() << "the one-node cluster runs its daemons as root";
  ASSERT_TRUE(why.empty()) << "the Slurm cluster did not start: " << why;
  ASSERT_EQ(slurm.Update("gpu1", {"State=DRAIN", "Reason=rasd: device 0 isolated"}), 0);
  ASSERT_EQ(slurm.Update("gpu2", {"State=DRAIN", "Reason=rasd: fatal host error"}), 0);
  // An administrator's drain is not rasd's blast radius.
  ASSERT_EQ(slurm.Update("gpu3", {"State=DRAIN", "Reason=bios update", "Comment=PSU swapped"}), 0);
  ASSERT_EQ(slurm.Comment("gpu3"), "PSU swapped");

  RasdInstance rasd;
  rasd.WriteConfig(
      "scheduler:\n  kind: slurm\n  node: localhost\n  max_drained_fraction: 0.5\n"
      "inject:\n  allow_sources: true\n");
  ASSERT_TRUE(rasd.Start({}, {{"SLURM_CONF", slurm.Conf()}}, &why)) << why;
  const std::string fatal =
      "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0\n"
      "{1}[Hardware Error]: event severity: fatal";
  ASSERT_EQ(rasd.Rasctl({"inject", "kmsg", fatal}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return rasd.RasctlJson({"status"})["scheduler"]["guarded"].is_string(); },
                        15s))
      << rasd.Stderr();
  auto status = rasd.RasctlJson({"status"});
  const std::string guarded = status["scheduler"]["guarded"];
  EXPECT_NE(guarded.find("2 of 4 node(s) drained by rasd"), std::string::npos) << guarded;
  EXPECT_EQ(slurm.State(), "idle");  // held back
  EXPECT_NE(rasd.Stderr().find("the blast-radius guard holds"), std::string::npos);
  // `rasctl check` still tells the truth about the node.
  EXPECT_EQ(rasd.Rasctl({"check"}).exit_code, 1);
  std::string metrics = Http(status["metrics"]["port"].get<int>(), "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_scheduler_actions_total{result=\"guarded\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("rasd_scheduler_drain_guarded 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("rasd_scheduler_node_drained 0\n"), std::string::npos);

  // gpu2 is an administrator's now: 1 of 4, under the limit. The next
  // request (a second fault) goes ahead without waiting for the recheck.
  ASSERT_EQ(slurm.Update("gpu2", {"State=DRAIN", "Reason=DIMM replaced, under test"}), 0);
  ASSERT_EQ(rasd.Rasctl({"inject", "kmsg", fatal}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "drained"; }, 15s))
      << slurm.State() << rasd.Stderr();
  EXPECT_TRUE(slurm.Reason().starts_with("rasd: ")) << slurm.Reason();
  // The drain shows in Slurm before rasd has withdrawn its claim and taken
  // the outcome in: rasd's own view follows.
  ASSERT_TRUE(WaitUntil(
      [&] {
        status = rasd.RasctlJson({"status"});
        return status["scheduler"]["guarded"].is_null();
      },
      15s))
      << status.dump();
  EXPECT_EQ(slurm.Comment(), "") << "the claim withdrawn after the drain";
  metrics = Http(status["metrics"]["port"].get<int>(), "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_scheduler_drain_guarded 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("rasd_scheduler_node_drained 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("rasd_scheduler_actions_total{result=\"guarded\"} 1\n"), std::string::npos);
}

// rasd's own link never drains over, nor resumes, a node someone else took
// out of service; a node name Slurm does not list drains nothing.
TEST(SlurmTest, RasdLeavesANodeSomeoneElseHoldsAndANameSlurmDoesNotListAlone) {
  std::string why, missing;
  SlurmCluster slurm(&why, &missing, {.down_nodes = {"gpu1"}});
  ASSERT_TRUE(missing.empty()) << missing;
  if (::geteuid() != 0) GTEST_SKIP() << "the one-node cluster runs its daemons as root";
  ASSERT_TRUE(why.empty()) << "the Slurm cluster did not start: " << why;
  const std::string fatal =
      "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0\n"
      "{1}[Hardware Error]: event severity: fatal";
  {
    RasdInstance rasd;
    rasd.WriteConfig(
        "scheduler:\n  kind: slurm\n  node: localhost\ninject:\n  allow_sources: true\n");
    ASSERT_TRUE(rasd.Start({}, {{"SLURM_CONF", slurm.Conf()}}, &why)) << why;
    // An administrator's drain first: rasd's fatal error does not replace it.
    ASSERT_EQ(slurm.Update("localhost", {"State=DRAIN", "Reason=bios update"}), 0);
    ASSERT_EQ(rasd.Rasctl({"inject", "kmsg", fatal}).exit_code, 0);
    ASSERT_TRUE(WaitUntil(
        [&] { return rasd.RasctlJson({"status"})["scheduler"]["calls"]["skipped"] == 1; }, 15s))
        << rasd.Stderr();
    EXPECT_EQ(slurm.Reason(), "bios update");
    EXPECT_NE(rasd.Stderr().find("out of service for someone else"), std::string::npos);
    // Nor does an undrain resume it.
    ASSERT_EQ(rasd.Rasctl({"undrain", "0"}).exit_code, 0);
    ASSERT_TRUE(WaitUntil(
        [&] { return rasd.RasctlJson({"status"})["scheduler"]["calls"]["skipped"] == 2; }, 15s))
        << rasd.Stderr();
    EXPECT_EQ(slurm.State(), "drained");
    EXPECT_EQ(slurm.Reason(), "bios update");

    // rasd drains; an administrator takes the node over; the undrain leaves it.
    ASSERT_EQ(slurm.Update("localhost", {"State=RESUME"}), 0);
    ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "idle"; }, 15s)) << slurm.State();
    ASSERT_EQ(rasd.Rasctl({"inject", "kmsg", fatal}).exit_code, 0);
    ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "drained"; }, 15s)) << rasd.Stderr();
    EXPECT_TRUE(slurm.Reason().starts_with("rasd: ")) << slurm.Reason();
    ASSERT_EQ(slurm.Update("localhost", {"State=DRAIN", "Reason=admin: investigating"}), 0);
    ASSERT_EQ(rasd.Rasctl({"undrain", "0"}).exit_code, 0);
    ASSERT_TRUE(WaitUntil(
        [&] { return rasd.RasctlJson({"status"})["scheduler"]["calls"]["skipped"] == 3; }, 15s))
        << rasd.Stderr();
    EXPECT_EQ(slurm.State(), "drained");
    EXPECT_EQ(slurm.Reason(), "admin: investigating");
    ASSERT_EQ(slurm.Update("localhost", {"State=RESUME"}), 0);
    ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "idle"; }, 15s)) << slurm.State();
  }
  // `ALL` is Slurm's word for every node: it is no node's name.
  RasdInstance rasd;
  rasd.WriteConfig("scheduler:\n  kind: slurm\n  node: ALL\ninject:\n  allow_sources: true\n");
  ASSERT_TRUE(rasd.Start({}, {{"SLURM_CONF", slurm.Conf()}}, &why)) << why;
  ASSERT_EQ(rasd.Rasctl({"inject", "kmsg", fatal}).exit_code, 0);
  ASSERT_TRUE(WaitUntil(
      [&] { return rasd.RasctlJson({"status"})["scheduler"]["calls"]["failed"] >= 1; }, 15s))
      << rasd.Stderr();
  EXPECT_NE(rasd.Stderr().find("Slurm lists no node 'ALL'"), std::string::npos);
  EXPECT_EQ(slurm.State("localhost"), "idle");
  EXPECT_FALSE(slurm.State("gpu1").starts_with("drain")) << slurm.State("gpu1");
  EXPECT_EQ(rasd.RasctlJson({"status"})["scheduler"]["drained"], false);
}

}  // namespace
}  // namespace rasd::testing
