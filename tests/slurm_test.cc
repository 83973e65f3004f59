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

#include "test_support.h"

namespace rasd::testing {
namespace {

class SlurmCluster {
 public:
  // Empty `why` when the cluster runs; `missing` names a tool that
  // scripts/bootstrap should have installed.
  // `extra_nodes`: more nodes in the config, with no slurmd behind them
  // (down): the rest of a cluster, for the blast-radius guard.
  SlurmCluster(std::string* why, std::string* missing, std::vector<std::string> extra_nodes = {}) {
    for (const char* tool : {"/usr/sbin/munged", "/usr/sbin/mungekey", "/usr/sbin/slurmctld",
                             "/usr/sbin/slurmd", "/usr/bin/scontrol", "/usr/bin/sinfo"}) {
      if (::access(tool, X_OK) != 0) {
        *missing = std::string(tool) +
                   " is missing: run scripts/bootstrap (slurmctld, slurmd, munge, slurm-client)";
        return;
      }
    }
    if (::geteuid() != 0) {
      *why = "the one-node cluster runs its daemons as root";
      return;
    }
    const auto d = dir_.Path();
    for (const char* sub : {"state", "spool", "log", "munge"})
      std::filesystem::create_directories(d / sub);
    std::filesystem::permissions(d / "munge", std::filesystem::perms(0755));
    if (Run({"/usr/sbin/mungekey", "-c", "-k", (d / "munge/munge.key").string()}) != 0) {
      *why = "mungekey could not make a key";
      return;
    }
    munged_ =
        Daemon({"/usr/sbin/munged", "--foreground", "--socket=" + (d / "munge/munge.sock").string(),
                "--key-file=" + (d / "munge/munge.key").string(),
                "--pid-file=" + (d / "munge/munged.pid").string(),
                "--log-file=" + (d / "log/munged.log").string(),
                "--seed-file=" + (d / "munge/munged.seed").string()},
               "munged");
    if (!WaitUntil([&] { return std::filesystem::exists(d / "munge/munge.sock"); }, 10s)) {
      *why = "munged did not start: " + ReadText(d / "log/munged.log") +
             ReadText(d / "log/munged.stderr");
      return;
    }
    const int controller_port = FreePort(), node_port = FreePort();
    // The extra nodes come first: with "localhost" alone in the table so far,
    // slurmctld 22.05 takes every other name for it ("Duplicated
    // NodeHostName").
    std::string extra_lines, extra_names;
    for (std::size_t i = 0; i < extra_nodes.size(); ++i) {
      extra_lines += fmt::format("NodeName={} NodeAddr=127.0.0.{} CPUs=2 RealMemory=2000 State=DOWN\n",
                                 extra_nodes[i], i + 2);
      extra_names += "," + extra_nodes[i];
    }
    WriteText(d / "slurm.conf",
              fmt::format(R"(ClusterName=rasdtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={}
SlurmdPort={}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={}/munge/munge.sock
StateSaveLocation={}/state
SlurmdSpoolDir={}/spool
SlurmctldPidFile={}/slurmctld.pid
SlurmdPidFile={}/slurmd.pid
SlurmctldLogFile={}/log/slurmctld.log
SlurmdLogFile={}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=1
{}NodeName=localhost CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost{} Default=YES MaxTime=INFINITE State=UP
)",
                          controller_port, node_port, d.string(), d.string(), d.string(),
                          d.string(), d.string(), d.string(), d.string(), extra_lines,
                          extra_names));
    conf_ = (d / "slurm.conf").string();
    slurmctld_ = Daemon({"/usr/sbin/slurmctld", "-D", "-c", "-i"}, "slurmctld");
    slurmd_ = Daemon({"/usr/sbin/slurmd", "-D", "-N", "localhost"}, "slurmd");
    if (!WaitUntil([&] { return State() == "idle"; }, 15s)) {
      *why = "the node never became idle: " + State() + "\n" + ReadText(d / "log/slurmctld.log");
      return;
    }
  }

  const std::string& Conf() const { return conf_; }

  // "idle", "drained", ... and the reason, from sinfo.
  std::string State(const std::string& node = "localhost") { return Sinfo("%T", node); }
  std::string Reason(const std::string& node = "localhost") { return Sinfo("%E", node); }
  // scontrol update NodeName=NODE ARGS...: 0 when it took.
  int Update(const std::string& node, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/scontrol", "update", "NodeName=" + node};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(std::move(argv));
  }

 private:
  // The daemons run in the foreground as the test's children: they end with
  // the cluster (slurmd first, munged last), also when the test dies; a
  // daemon that detached itself would outlive both.
  std::unique_ptr<Process> Daemon(std::vector<std::string> argv, const std::string& name) {
    return std::make_unique<Process>(
        ProcessOptions{.argv = std::move(argv),
                       .set_env = {{"SLURM_CONF", conf_}},
                       .stdout_path = dir_ / "log" / (name + ".stdout"),
                       .stderr_path = dir_ / "log" / (name + ".stderr")});
  }
  int Run(std::vector<std::string> argv) {
    std::map<std::string, std::string> env;
    if (!conf_.empty()) env["SLURM_CONF"] = conf_;
    return RunToCompletion({.argv = std::move(argv), .set_env = env}, 30s).exit_code;
  }
  std::string Sinfo(const char* format, const std::string& node) {
    auto result = RunToCompletion({.argv = {"/usr/bin/sinfo", "-h", "-N", "-n", node, "-o", format},
                                   .set_env = {{"SLURM_CONF", conf_}}},
                                  10s);
    std::string out = result.out;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

  TempDir dir_;
  std::string conf_;
  std::unique_ptr<Process> munged_;
  std::unique_ptr<Process> slurmctld_;
  std::unique_ptr<Process> slurmd_;
};

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

// `rasctl check --format nhc` as Slurm's HealthCheckProgram, with the
// cluster's SLURM_CONF.
CommandResult Nhc(const RasdInstance& rasd, const SlurmCluster& slurm) {
  return RunToCompletion({.argv = {RASCTL_BINARY, "check", "--format", "nhc", "--node", "localhost"},
                          .set_env = {{"RASD_SOCKET", rasd.Socket().string()},
                                      {"SLURM_CONF", slurm.Conf()}}},
                         30s);
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
  SlurmCluster slurm(&why, &missing, {"gpu1", "gpu2", "gpu3"});
  ASSERT_TRUE(missing.empty()) << missing;
  if (::geteuid() != 0) GTEST_SKIP() << "the one-node cluster runs its daemons as root";
  ASSERT_TRUE(why.empty()) << "the Slurm cluster did not start: " << why;
  ASSERT_EQ(slurm.Update("gpu1", {"State=DRAIN", "Reason=rasd: device 0 isolated"}), 0);
  ASSERT_EQ(slurm.Update("gpu2", {"State=DRAIN", "Reason=rasd: fatal host error"}), 0);
  // An administrator's drain is not rasd's blast radius.
  ASSERT_EQ(slurm.Update("gpu3", {"State=DRAIN", "Reason=bios update"}), 0);

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

  // gpu2 is an administrator's now: 1 of 4, under the limit. The next
  // request (a second fault) goes ahead without waiting for the recheck.
  ASSERT_EQ(slurm.Update("gpu2", {"State=DRAIN", "Reason=DIMM replaced, under test"}), 0);
  ASSERT_EQ(rasd.Rasctl({"inject", "kmsg", fatal}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return slurm.State() == "drained"; }, 15s))
      << slurm.State() << rasd.Stderr();
  EXPECT_TRUE(slurm.Reason().starts_with("rasd: ")) << slurm.Reason();
  status = rasd.RasctlJson({"status"});
  EXPECT_TRUE(status["scheduler"]["guarded"].is_null());
  metrics = Http(status["metrics"]["port"].get<int>(), "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_scheduler_drain_guarded 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("rasd_scheduler_actions_total{result=\"guarded\"} 1\n"), std::string::npos);
}

// rasd's own link never drains over, nor resumes, a node someone else took
// out of service; a node name Slurm does not list drains nothing.
TEST(SlurmTest, RasdLeavesANodeSomeoneElseHoldsAndANameSlurmDoesNotListAlone) {
  std::string why, missing;
  SlurmCluster slurm(&why, &missing, {"gpu1"});
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
