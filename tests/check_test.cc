// `rasctl check` against the real rasd: healthy, degraded, isolated, a node
// fault, and stopped; the text, npd and --json forms. (The nhc form, which
// talks to Slurm, is in slurm_test.cc.)

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "rasd/common/unique_fd.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rasd_.WriteConfig(
        "policy:\n  ce_device_threshold: 2\ninject:\n  allow_sources: true\n");
    std::string why;
    ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  }
  CommandResult Npd() { return rasd_.Rasctl({"check", "--format", "npd"}); }

  RasdInstance rasd_;
};

TEST_F(CheckTest, HealthyIsOkInEveryForm) {
  auto npd = Npd();
  EXPECT_EQ(npd.exit_code, 0);
  EXPECT_EQ(npd.out, "rasd: OK: 4 device(s) healthy\n");
  auto text = rasd_.Rasctl({"check"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_EQ(text.out, "ok: 4 device(s) healthy\n");
  auto json = rasd_.Rasctl({"check", "--json"});
  EXPECT_EQ(json.exit_code, 0);
  const auto document = nlohmann::json::parse(json.out);
  EXPECT_EQ(document["health"], "ok");
  EXPECT_EQ(document["rasd"]["devices"]["count"], 4);
  EXPECT_TRUE(document["rasd"]["findings"].empty());
}

TEST_F(CheckTest, ADegradedDeviceIsOkAndNamed) {
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(rasd_.Rasctl({"inject", "xid", "92", "--device", "1"}).exit_code, 0);
  }
  ASSERT_TRUE(WaitUntil([&] { return Npd().out.find("degraded") != std::string::npos; }, 5s))
      << Npd().out << rasd_.Stderr();
  auto npd = Npd();
  EXPECT_EQ(npd.exit_code, 0);
  EXPECT_TRUE(npd.out.starts_with("rasd: OK, device 1 degraded: ")) << npd.out;
  EXPECT_EQ(nlohmann::json::parse(rasd_.Rasctl({"check", "--json"}).out)["health"], "degraded");
}

TEST_F(CheckTest, AnIsolatedDeviceIsAProblemOnOneLineOfAtMost80Characters) {
  ASSERT_EQ(rasd_.Rasctl({"isolate", "2", "--reason",
                          "Xid 79: GPU has fallen off the bus; the board needs a reseat and a "
                          "look at its power cables before it goes back"})
                .exit_code,
            0);
  ASSERT_EQ(rasd_.Rasctl({"drain", "0", "--reason", "maintenance"}).exit_code, 0);
  auto npd = Npd();
  EXPECT_EQ(npd.exit_code, 1);
  ASSERT_EQ(npd.out.back(), '\n');
  const std::string line = npd.out.substr(0, npd.out.size() - 1);
  EXPECT_EQ(line.find('\n'), std::string::npos) << npd.out;
  EXPECT_LE(line.size(), 80u) << line;
  EXPECT_TRUE(line.starts_with("rasd: device 0 draining: maintenance")) << line;
  EXPECT_TRUE(line.ends_with("(+1 more)")) << line;
  auto text = rasd_.Rasctl({"check"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.out.find("device 2 isolated: Xid 79: GPU has fallen off the bus; the board needs "
                          "a reseat and a look at its power cables before it goes back"),
            std::string::npos)
      << text.out;  // the text form keeps every finding whole
}

TEST_F(CheckTest, ANodeFaultIsAProblemUntilAnOperatorUndrains) {
  ASSERT_EQ(rasd_.Rasctl({"inject", "kmsg",
                          "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error "
                          "Source: 0\n{1}[Hardware Error]: event severity: fatal"})
                .exit_code,
            0);
  ASSERT_TRUE(WaitUntil([&] { return Npd().exit_code == 1; }, 5s)) << Npd().out << rasd_.Stderr();
  EXPECT_TRUE(Npd().out.starts_with("rasd: node fault: ")) << Npd().out;
  // It outlives rasd: a kill -9 and a restart still report it.
  rasd_.Proc().Signal(SIGKILL);
  ASSERT_TRUE(rasd_.Proc().Wait(5s).has_value());
  std::string why;
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  EXPECT_EQ(Npd().exit_code, 1) << Npd().out;
  EXPECT_TRUE(Npd().out.starts_with("rasd: node fault: ")) << Npd().out;
  // An operator's undrain that leaves no device isolated ends it, for good.
  ASSERT_EQ(rasd_.Rasctl({"undrain", "0"}).exit_code, 0);
  EXPECT_EQ(Npd().exit_code, 0) << Npd().out;
  ASSERT_TRUE(rasd_.Stop().has_value());
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  EXPECT_EQ(Npd().exit_code, 0) << Npd().out;
}

TEST_F(CheckTest, AStoppedRasdIsUnknownNeverHealthy) {
  ASSERT_TRUE(rasd_.Stop().has_value());
  auto npd = Npd();
  EXPECT_EQ(npd.exit_code, 2);
  EXPECT_TRUE(npd.out.starts_with("rasd: unknown: rasd does not answer")) << npd.out;
  EXPECT_LE(FirstLine(npd.out).size(), 80u);
  auto json = rasd_.Rasctl({"check", "--json"});
  EXPECT_EQ(json.exit_code, 2);
  EXPECT_EQ(nlohmann::json::parse(json.out)["health"], "unknown");
  EXPECT_EQ(rasd_.Rasctl({"check"}).exit_code, 2);
}

// The packaged node-problem-detector plugin config, run as NPD would run
// it (its path swapped for the built rasctl): the rule's command answers
// within the config's output length and NPD's exit-code meanings.
TEST_F(CheckTest, ThePackagedNodeProblemDetectorConfigRunsTheCheck) {
  const auto config = nlohmann::json::parse(
      ReadText(std::filesystem::path(RASD_SOURCE_DIR) /
               "packaging/node-problem-detector/rasd-plugin.json"));
  ASSERT_EQ(config["plugin"], "custom");
  const std::size_t limit = config["pluginConfig"]["max_output_length"].get<std::size_t>();
  ASSERT_EQ(config["rules"].size(), 1u);
  const auto& rule = config["rules"][0];
  EXPECT_EQ(rule["condition"], config["conditions"][0]["type"]);
  EXPECT_EQ(rule["path"], "/usr/bin/rasctl");
  std::vector<std::string> argv = {RASCTL_BINARY};
  for (const auto& arg : rule["args"]) argv.push_back(arg.get<std::string>());
  auto run = [&] {
    return RunToCompletion(
        {.argv = argv, .set_env = {{"RASD_SOCKET", rasd_.Socket().string()}}}, 20s);
  };
  auto ok = run();
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  ASSERT_EQ(rasd_.Rasctl({"isolate", "3", "--reason", std::string(200, 'r')}).exit_code, 0);
  auto problem = run();
  EXPECT_EQ(problem.exit_code, 1);
  EXPECT_LE(FirstLine(problem.out).size(), limit) << problem.out;
}

// A backend the config names that is not here leaves its devices unwatched:
// a problem, not "OK: 0 device(s)" (helper's find).
TEST(CheckBackendTest, ANamedBackendThatIsMissingIsAProblem) {
  RasdInstance rasd;
  rasd.WriteConfig("runtime:\n  driver: [sim, cuda]\n  cuda_library: /nonexistent/libcuda.so.1\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto npd = rasd.Rasctl({"check", "--format", "npd"});
  EXPECT_EQ(npd.exit_code, 1) << npd.out;
  EXPECT_TRUE(npd.out.starts_with("rasd: backend missing: cuda: ")) << npd.out;
}

// A rasd that is wedged (alive, never accepting) fills its listen queue;
// a check must still answer unknown within its timeout, not hang in
// connect() (helper's find).
TEST(CheckQueueTest, ASocketWhoseQueueIsFullIsUnknownWithinTheTimeout) {
  TempDir dir;
  const auto path = dir.Path() / "wedged.sock";
  common::UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(listener.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener.Get(), 1), 0);
  std::vector<common::UniqueFd> queued;
  for (int i = 0; i < 16; ++i) {
    common::UniqueFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (::connect(client.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) break;
    queued.push_back(std::move(client));
  }
  const auto started = std::chrono::steady_clock::now();
  auto npd = RunToCompletion({.argv = {RASCTL_BINARY, "--timeout", "1", "--socket", path.string(),
                                       "check", "--format", "npd"}},
                             20s);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(npd.exit_code, 2) << npd.out << npd.err;
  EXPECT_NE(npd.out.find("rasd: unknown: rasd does not answer"), std::string::npos) << npd.out;
  EXPECT_LT(took, 5s);
}

TEST_F(CheckTest, AWrongFormatIsAUsageError) {
  auto wrong = rasd_.Rasctl({"check", "--format", "nagios"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("nagios"), std::string::npos) << wrong.err;
}

}  // namespace
}  // namespace rasd::testing
