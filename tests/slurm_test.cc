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
  SlurmCluster(std::string* why, std::string* missing) {
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
    if (Run({"/usr/sbin/mungekey", "-c", "-k", (d / "munge/munge.key").string()}) != 0 ||
        Run({"/usr/sbin/munged", "--socket=" + (d / "munge/munge.sock").string(),
             "--key-file=" + (d / "munge/munge.key").string(),
             "--pid-file=" + (d / "munge/munged.pid").string(),
             "--log-file=" + (d / "log/munged.log").string(),
             "--seed-file=" + (d / "munge/munged.seed").string()}) != 0) {
      *why = "munged did not start: " + ReadText(d / "log/munged.log");
      return;
    }
    const int controller_port = FreePort(), node_port = FreePort();
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
ReturnToService=2
NodeName=localhost CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
)",
                          controller_port, node_port, d.string(), d.string(), d.string(),
                          d.string(), d.string(), d.string(), d.string()));
    conf_ = (d / "slurm.conf").string();
    if (Run({"/usr/sbin/slurmctld", "-c", "-i"}) != 0 ||
        Run({"/usr/sbin/slurmd", "-N", "localhost"}) != 0) {
      *why = "slurmctld or slurmd did not start: " + ReadText(d / "log/slurmctld.log");
      return;
    }
    if (!WaitUntil([&] { return State() == "idle"; }, 15s)) {
      *why = "the node never became idle: " + State() + "\n" + ReadText(d / "log/slurmctld.log");
      return;
    }
  }

  ~SlurmCluster() {
    for (const char* pid_file : {"slurmd.pid", "slurmctld.pid", "munge/munged.pid"}) {
      const std::string text = ReadText(dir_ / pid_file);
      if (const int pid = std::atoi(text.c_str()); pid > 0) ::kill(pid, SIGTERM);
    }
    std::this_thread::sleep_for(200ms);
  }

  const std::string& Conf() const { return conf_; }

  // "idle", "drained", ... and the reason, from sinfo.
  std::string State() { return Sinfo("%T"); }
  std::string Reason() { return Sinfo("%E"); }

 private:
  int Run(std::vector<std::string> argv) {
    std::map<std::string, std::string> env;
    if (!conf_.empty()) env["SLURM_CONF"] = conf_;
    return RunToCompletion({.argv = std::move(argv), .set_env = env}, 30s).exit_code;
  }
  std::string Sinfo(const char* format) {
    auto result = RunToCompletion(
        {.argv = {"/usr/bin/sinfo", "-h", "-N", "-o", format}, .set_env = {{"SLURM_CONF", conf_}}},
        10s);
    std::string out = result.out;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

  TempDir dir_;
  std::string conf_;
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

}  // namespace
}  // namespace rasd::testing
