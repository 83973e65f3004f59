#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rasd/common/result.h"

namespace rasd::ctl {

// `rasctl run [--devices N,M | --count K] [--name NAME] [--drain-signal SIG]
// [--grace DURATION] -- CMD [ARGS...]`: a workload that runs outside rasd
// joins it without a code change.
struct RunOptions {
  std::filesystem::path socket;
  std::chrono::milliseconds timeout{10000};
  std::vector<int> devices;  // empty: `count` devices that take new work
  int count = 0;             // with no devices: 1
  std::string name;          // default: the command's base name
  std::string drain_signal = "TERM";
  std::optional<std::chrono::milliseconds> grace;  // unset: rasd's workloads.grace_ms
  std::vector<std::string> command;
};

// Which devices the workload gets: the named ones, each of which must take
// new work, or `count` of those that do (healthy before degraded, then
// the fewest jobs, then the lowest index). `devices` is the `devices`
// command's list.
Result<std::vector<int>> ChooseDevices(const nlohmann::json& devices, const RunOptions& options);

// common::VisibilityEnvironment over the `devices` command's list.
std::map<std::string, std::string> VisibilityEnvironment(const nlohmann::json& devices,
                                                         const std::vector<int>& chosen);

// Starts the command with that environment, attaches it to rasd (so that
// rasd drains it off a device that leaves service, and kills it past its
// grace), forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to
// it, prints rasd's messages about it on stderr, and returns its exit
// status (128 + the signal that ended it). rasctl's own failures: 1 (rasd
// refused), 3 (rasd unreachable), 127 (the command could not start).
int RunWorkload(const RunOptions& options);

}  // namespace rasd::ctl
