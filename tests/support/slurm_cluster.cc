#include "slurm_cluster.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

namespace rasd::testing {

using namespace std::chrono_literals;

SlurmCluster::SlurmCluster(std::string* why, std::string* missing, SlurmClusterOptions options) {
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
  int address = 2;
  for (const auto& node : options.down_nodes) {
    extra_lines += fmt::format(
        "NodeName={} NodeAddr=127.0.0.{} CPUs=2 RealMemory=2000 State=DOWN\n", node, address++);
    extra_names += "," + node;
  }
  for (const auto& node : options.idle_nodes) {
    extra_lines += fmt::format(
        "NodeName={} NodeAddr=127.0.0.{} CPUs=2 RealMemory=2000 State=IDLE\n", node, address++);
    extra_names += "," + node;
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
SlurmdTimeout=0
{}NodeName=localhost CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost{} Default=YES MaxTime=INFINITE State=UP
)",
                        controller_port, node_port, d.string(), d.string(), d.string(), d.string(),
                        d.string(), d.string(), d.string(), extra_lines, extra_names));
  conf_ = (d / "slurm.conf").string();
  slurmctld_ = Daemon({"/usr/sbin/slurmctld", "-D", "-c", "-i"}, "slurmctld");
  slurmd_ = Daemon({"/usr/sbin/slurmd", "-D", "-N", "localhost"}, "slurmd");
  if (!WaitUntil([&] { return State() == "idle"; }, 15s)) {
    *why = "the node never became idle: " + State() + "\n" + ReadText(d / "log/slurmctld.log");
    return;
  }
}

std::string SlurmCluster::State(const std::string& node) { return Sinfo("%T", node); }

std::string SlurmCluster::Reason(const std::string& node) { return Sinfo("%E", node); }

std::string SlurmCluster::Comment(const std::string& node) {
  const auto result = RunToCompletion(
      {.argv = {"/usr/bin/scontrol", "show", "node", node}, .set_env = {{"SLURM_CONF", conf_}}},
      10s);
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("Comment=");
    if (at == std::string::npos) continue;
    std::string comment = line.substr(at + 8);
    while (!comment.empty() && comment.back() == ' ') comment.pop_back();
    return comment == "(null)" ? "" : comment;
  }
  return "";
}

std::map<std::string, std::string> SlurmCluster::Reasons() {
  const auto result = RunToCompletion(
      {.argv = {"/usr/bin/sinfo", "-h", "-N", "-o", "%N|%E"}, .set_env = {{"SLURM_CONF", conf_}}},
      10s);
  std::map<std::string, std::string> reasons;
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    const auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    std::string reason = line.substr(bar + 1);
    while (!reason.empty() && reason.back() == ' ') reason.pop_back();
    reasons[line.substr(0, bar)] = reason == "none" ? "" : reason;
  }
  return reasons;
}

int SlurmCluster::Update(const std::string& node, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/scontrol", "update", "NodeName=" + node};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(std::move(argv));
}

// The daemons run in the foreground as the test's children: they end with
// the cluster (slurmd first, munged last), also when the test dies; a
// daemon that detached itself would outlive both.
std::unique_ptr<Process> SlurmCluster::Daemon(std::vector<std::string> argv,
                                              const std::string& name) {
  return std::make_unique<Process>(
      ProcessOptions{.argv = std::move(argv),
                     .set_env = {{"SLURM_CONF", conf_}},
                     .stdout_path = dir_.Path() / "log" / (name + ".stdout"),
                     .stderr_path = dir_.Path() / "log" / (name + ".stderr")});
}

int SlurmCluster::Run(std::vector<std::string> argv) {
  std::map<std::string, std::string> env;
  if (!conf_.empty()) env["SLURM_CONF"] = conf_;
  return RunToCompletion({.argv = std::move(argv), .set_env = env}, 30s).exit_code;
}

std::string SlurmCluster::Sinfo(const char* format, const std::string& node) {
  auto result = RunToCompletion({.argv = {"/usr/bin/sinfo", "-h", "-N", "-n", node, "-o", format},
                                 .set_env = {{"SLURM_CONF", conf_}}},
                                10s);
  std::string out = result.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace rasd::testing
