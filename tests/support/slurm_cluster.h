#pragma once

// A real Slurm for the integration tests: munged, slurmctld and one
// slurmd (node "localhost"), started by the test on loopback, everything
// in a temp dir, ended with the object (slurmd first, munged last).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_support.h"

namespace rasd::testing {

struct SlurmClusterOptions {
  // More nodes in the config with no slurmd behind them, DOWN: the rest of
  // a cluster, for the blast-radius guard.
  std::vector<std::string> down_nodes;
  // Nodes with no slurmd that slurmctld keeps IDLE (SlurmdTimeout=0): a
  // fleet's nodes on one machine, each named by a rasd of its own.
  std::vector<std::string> idle_nodes;
};

class SlurmCluster {
 public:
  // Empty `why` when the cluster runs; `missing` names a tool that
  // scripts/bootstrap should have installed.
  SlurmCluster(std::string* why, std::string* missing, SlurmClusterOptions options = {});

  const std::string& Conf() const { return conf_; }

  // "idle", "drained", ... and the reason, from sinfo.
  std::string State(const std::string& node = "localhost");
  std::string Reason(const std::string& node = "localhost");
  // The node's Comment (empty where none), from scontrol show node.
  std::string Comment(const std::string& node = "localhost");
  // Every node's reason, in one sinfo call (empty where none).
  std::map<std::string, std::string> Reasons();
  // scontrol update NodeName=NODE ARGS...: 0 when it took.
  int Update(const std::string& node, std::vector<std::string> args);

 private:
  std::unique_ptr<Process> Daemon(std::vector<std::string> argv, const std::string& name);
  int Run(std::vector<std::string> argv);
  std::string Sinfo(const char* format, const std::string& node);

  TempDir dir_;
  std::string conf_;
  std::unique_ptr<Process> munged_;
  std::unique_ptr<Process> slurmctld_;
  std::unique_ptr<Process> slurmd_;
};

}  // namespace rasd::testing
