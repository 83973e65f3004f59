#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace rasd::daemon {

struct ProgramResult {
  std::string result;  // ok | failed | timeout
  std::string detail;  // "exit 0", "exit 3", "signal 9", "killed after N ms", why it did not run
  std::string output;  // the first kProgramOutputLimit bytes of stdout and stderr
};

constexpr std::size_t kProgramOutputLimit = 4096;

// Runs argv (argv[0] an absolute path; no shell, no PATH search) with
// exactly `env`, stdin from /dev/null, stdout and stderr collected, in a
// session of its own that is killed at `timeout`. Signals the daemon
// blocks are unblocked in the child. Blocks the calling thread.
ProgramResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         std::chrono::milliseconds timeout);

}  // namespace rasd::daemon
