// RunProgram: how a program ended, as a typed outcome, with what it wrote;
// a program past its timeout is killed with everything it started.

#include "rasd/common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "rasd/testing/eventually.h"

namespace rasd::common {
namespace {

using namespace std::chrono_literals;

ProgramResult Shell(const std::string& script, ProgramOptions options = {}) {
  return RunProgram({"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin"}, options);
}

TEST(SubprocessTest, AnExitStatusIsItsOutcomeAndItsOutputIsKept) {
  const auto ok = Shell("echo out; echo err >&2");
  EXPECT_EQ(ok.outcome, ProgramOutcome::kOk);
  EXPECT_EQ(ok.detail, "exit 0");
  EXPECT_EQ(ok.output, "out\nerr\n");
  const auto failed = Shell("exit 3");
  EXPECT_EQ(failed.outcome, ProgramOutcome::kFailed);
  EXPECT_EQ(failed.detail, "exit 3");
  const auto killed = Shell("kill -9 $$");
  EXPECT_EQ(killed.outcome, ProgramOutcome::kFailed);
  EXPECT_EQ(killed.detail, "signal 9");
  EXPECT_STREQ(ProgramOutcomeName(ProgramOutcome::kOk), "ok");
  EXPECT_STREQ(ProgramOutcomeName(ProgramOutcome::kFailed), "failed");
  EXPECT_STREQ(ProgramOutcomeName(ProgramOutcome::kTimeout), "timeout");
}

TEST(SubprocessTest, ErrorsAskedApartStayOutOfTheOutputAndBothAreCutAtTheLimit) {
  const auto apart =
      Shell("echo '{\"x\": 1}'; echo 'warning: slow' >&2", {.separate_errors = true});
  EXPECT_EQ(apart.output, "{\"x\": 1}\n");
  EXPECT_EQ(apart.errors, "warning: slow\n");
  const auto long_output = Shell("yes | head -c 100000", {.output_limit = 1000});
  EXPECT_EQ(long_output.outcome, ProgramOutcome::kOk) << "read to the end, kept up to the limit";
  EXPECT_EQ(long_output.output.size(), 1000U);
}

TEST(SubprocessTest, AProgramThatCannotRunFailsSayingWhy) {
  const auto missing = RunProgram({"/nonexistent/hook"}, {}, 1s);
  EXPECT_EQ(missing.outcome, ProgramOutcome::kFailed);
  // posix_spawn reports the exec failure itself, or the child exits 127.
  EXPECT_TRUE(missing.detail.find("No such file") != std::string::npos ||
              missing.detail == "exit 127")
      << missing.detail;
}

TEST(SubprocessTest, TheEnvironmentIsExactlyTheOneGiven) {
  ::setenv("RASD_SUBPROCESS_TEST_LEAK", "1", 1);
  const auto result = RunProgram({"/usr/bin/env"}, {"ONLY=this"}, 5s);
  ::unsetenv("RASD_SUBPROCESS_TEST_LEAK");
  EXPECT_EQ(result.outcome, ProgramOutcome::kOk);
  EXPECT_EQ(result.output, "ONLY=this\n");
}

// A temporary directory, removed with what is in it.
struct ScratchDir {
  ScratchDir() {
    char pattern[] = "/tmp/rasd-subprocess-XXXXXX";
    if (::mkdtemp(pattern) != nullptr) path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
  std::filesystem::path path;
};

// A hook that hangs, and a child it started in the background that holds
// the output pipe open: both are killed at the timeout (2 s: time for a
// loaded machine to start both before it).
TEST(SubprocessTest, AProgramPastItsTimeoutIsKilledWithWhatItStarted) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path.empty());
  const auto pid_file = dir.path / "child.pid";
  const auto started = std::chrono::steady_clock::now();
  const auto result =
      Shell("sleep 30 & echo $! > " + pid_file.string() + "; sleep 30", {.timeout = 2000ms});
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.outcome, ProgramOutcome::kTimeout);
  EXPECT_EQ(result.detail, "killed after 2000 ms");
  EXPECT_LT(took, 10s);
  std::ifstream file(pid_file);
  pid_t child = 0;
  ASSERT_TRUE(file >> child) << "the background child never started";
  bool gone = false;
  gone = rasd::testing::Eventually(
      [&] {
        // Gone, or a zombie its new parent has not reaped yet.
        std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const auto state = text.rfind(") ");
        return state == std::string::npos || text[state + 2] == 'Z';
      },
      5s, 10ms);
  EXPECT_TRUE(gone) << "the background child outlived the timeout";
}

}  // namespace
}  // namespace rasd::common
