#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rasd::common {

// How a program ended: callers branch on this, never on the detail text.
enum class ProgramOutcome : std::uint8_t {
  kOk,       // exit status 0
  kFailed,   // another exit status, a signal, or it could not be run
  kTimeout,  // still running at the timeout: its session was killed
};
// "ok", "failed", "timeout": for logs and counters.
const char* ProgramOutcomeName(ProgramOutcome outcome);

struct ProgramResult {
  ProgramOutcome outcome = ProgramOutcome::kFailed;
  std::string detail;  // "exit 0", "exit 3", "signal 9", "killed after N ms", why it did not run
  // Standard output, and standard error too unless it was asked apart, cut
  // at the output limit.
  std::string output;
  std::string errors;  // standard error, when asked apart (same limit)
};

constexpr std::size_t kProgramOutputLimit = 4096;

struct ProgramOptions {
  std::chrono::milliseconds timeout{10000};
  std::size_t output_limit = kProgramOutputLimit;
  // A program whose output is parsed (sinfo --json) keeps its warnings out
  // of it.
  bool separate_errors = false;
};

// Runs argv (argv[0] an absolute path; no shell, no PATH search) with
// exactly `env`, stdin from /dev/null, stdout and stderr collected, in a
// session of its own that is killed at the timeout. Signals the caller
// blocks are unblocked in the child. Blocks the calling thread.
ProgramResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const ProgramOptions& options);

inline ProgramResult RunProgram(const std::vector<std::string>& argv,
                                const std::vector<std::string>& env,
                                std::chrono::milliseconds timeout) {
  return RunProgram(argv, env, ProgramOptions{.timeout = timeout});
}

}  // namespace rasd::common
