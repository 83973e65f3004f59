// The real rasd binary: start-up, sd_notify, signals, reload, state
// directory and socket handling, socket activation, --check-config.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "rasd/ras/state_store.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

nlohmann::json StatusJson(RasdInstance& rasd) {
  const auto result = rasd.Rasctl({"--json", "status"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  auto parsed = nlohmann::json::parse(result.out, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << result.out;
  return parsed;
}

TEST(DaemonLifecycleTest, StartsWithNoConfigAnswersAndStopsCleanlyOnSigterm) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_TRUE(std::filesystem::exists(rasd.Socket()));
  EXPECT_TRUE(std::filesystem::exists(rasd.StateDir() / "rasd.db"));

  const auto ping = rasd.Rasctl({"ping"});
  EXPECT_EQ(ping.exit_code, 0) << ping.err;
  EXPECT_EQ(ping.out, "pong\n");

  const auto started = std::chrono::steady_clock::now();
  rasd.Proc().Signal(SIGTERM);
  const auto code = rasd.Proc().Wait(2s);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_TRUE(code.has_value()) << "rasd did not exit within 2 s of SIGTERM";
  EXPECT_EQ(*code, 0) << rasd.Stderr();
  EXPECT_LT(took, 2s);
  EXPECT_TRUE(rasd.Notify().WaitFor("STOPPING=1", 1s));
  EXPECT_FALSE(std::filesystem::exists(rasd.Socket())) << "socket left behind after a clean stop";
}

TEST(DaemonLifecycleTest, SigintStopsCleanlyToo) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  rasd.Proc().Signal(SIGINT);
  EXPECT_EQ(rasd.Proc().Wait(2s), 0) << rasd.Stderr();
}

TEST(DaemonLifecycleTest, SendsReadyStatusAndWatchdogOnARealNotifySocket) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {{"WATCHDOG_USEC", "200000"}}, &why)) << why;
  EXPECT_TRUE(rasd.Notify().WaitFor("STATUS=serving 4 sim device(s)", 2s));
  // At half of 200 ms, two pings arrive well within a second.
  ASSERT_TRUE(rasd.Notify().WaitFor("WATCHDOG=1", 1s));
  const auto first_count =
      std::count_if(rasd.Notify().Messages().begin(), rasd.Notify().Messages().end(),
                    [](const std::string& m) { return m.find("WATCHDOG=1") != std::string::npos; });
  std::size_t pings = static_cast<std::size_t>(first_count);
  const auto deadline = std::chrono::steady_clock::now() + 1s;
  while (pings < 3 && std::chrono::steady_clock::now() < deadline) {
    auto message = rasd.Notify().Receive(500ms);
    if (message && message->find("WATCHDOG=1") != std::string::npos) ++pings;
  }
  EXPECT_GE(pings, 3u) << "watchdog pings should come every ~100 ms";
  const auto status = StatusJson(rasd);
  EXPECT_EQ(status["watchdog_usec"], 200000);
  EXPECT_EQ(rasd.Stop(), 0);
}

TEST(DaemonLifecycleTest, AHostWithoutAcceleratorsSaysSoInsteadOfZeroDevices) {
  RasdInstance rasd;
  // What `driver: auto` finds on a host without GPUs or NPUs: no library.
  rasd.WriteConfig(fmt::format(
      "runtime:\n  driver: auto\n  cuda_library: {0}/no-libcuda.so\n"
      "  ascend_library: {0}/no-libascendcl.so\n  dcmi_library: {0}/no-libdcmi.so\n",
      rasd.Dir().Path().string()));
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_TRUE(rasd.Notify().WaitFor("STATUS=serving no devices (host errors only)", 2s));
  EXPECT_NE(rasd.Stderr().find("started: no devices (host errors only)"), std::string::npos)
      << rasd.Stderr();
  EXPECT_EQ(rasd.Stop(), 0);
}

TEST(DaemonLifecycleTest, AFlagGivenTwiceTakesTheLastAsMakeDaemonRelies) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({"--metrics-listen", "off", "--tracefs-instance", "rasd-dev",
                          "--metrics-listen", "127.0.0.1:0"},
                         {}, &why))
      << why;
  const auto status = StatusJson(rasd);
  EXPECT_EQ(status["metrics"]["listen"], "127.0.0.1:0");
  EXPECT_TRUE(status["metrics"]["port"].is_number()) << status["metrics"].dump();
  EXPECT_EQ(rasd.Stop(), 0);
}

TEST(DaemonLifecycleTest, SighupWithABrokenConfigKeepsTheOldOne) {
  RasdInstance rasd;
  rasd.WriteConfig("daemon:\n  log_level: info\ncontrol:\n  admin_group: \"4242\"\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto status = StatusJson(rasd);
  ASSERT_EQ(status["config"]["generation"], 1);
  EXPECT_EQ(status["config"]["admin_group"], "4242");

  rasd.WriteConfig("daemon:\n  log_level: debug\ncontrol:\n  admin_group: [oops\n");
  rasd.Proc().Signal(SIGHUP);
  ASSERT_TRUE(WaitUntil([&] { return StatusJson(rasd)["config"]["last_reload"].is_object(); }, 5s));
  status = StatusJson(rasd);
  EXPECT_EQ(status["config"]["generation"], 1) << "a broken config must not be applied";
  EXPECT_EQ(status["config"]["log_level"], "info");
  EXPECT_EQ(status["config"]["admin_group"], "4242");
  EXPECT_EQ(status["config"]["last_reload"]["ok"], false);
  ASSERT_FALSE(status["config"]["last_reload"]["errors"].empty());
  const std::string first_error = status["config"]["last_reload"]["errors"][0];
  EXPECT_EQ(first_error.rfind(rasd.ConfigPath().string() + ":", 0), 0u) << first_error;
  EXPECT_NE(rasd.Stderr().find(rasd.ConfigPath().string() + ":"), std::string::npos)
      << "the problem must be logged with FILE:LINE:COL\n"
      << rasd.Stderr();
  EXPECT_TRUE(rasd.Proc().Running());

  // The human status says the reload was rejected.
  const auto text = rasd.Rasctl({"status"});
  EXPECT_NE(text.out.find("REJECTED"), std::string::npos) << text.out;

  // A fixed file is taken on the next SIGHUP.
  rasd.WriteConfig("daemon:\n  log_level: debug\ncontrol:\n  admin_group: \"4343\"\n");
  rasd.Proc().Signal(SIGHUP);
  ASSERT_TRUE(WaitUntil([&] { return StatusJson(rasd)["config"]["generation"] == 2; }, 5s));
  status = StatusJson(rasd);
  EXPECT_EQ(status["config"]["log_level"], "debug");
  EXPECT_EQ(status["config"]["admin_group"], "4343");
  EXPECT_EQ(status["config"]["last_reload"]["ok"], true);
  EXPECT_EQ(rasd.Stop(), 0);
}

TEST(DaemonLifecycleTest, ReloadReportsKeysThatNeedARestartAndKeepsThemRunning) {
  RasdInstance rasd;
  rasd.WriteConfig("simulator:\n  devices: 2\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  rasd.WriteConfig("simulator:\n  devices: 6\n");
  const auto reload = rasd.Rasctl({"reload"});
  EXPECT_EQ(reload.exit_code, 0) << reload.err;
  EXPECT_NE(reload.out.find("simulator.devices changed: takes effect when rasd restarts"),
            std::string::npos)
      << reload.out;
  EXPECT_EQ(StatusJson(rasd)["devices"]["count"], 2);
  EXPECT_EQ(rasd.Stop(), 0);
}

TEST(DaemonLifecycleTest, UnusableStateDirectoryIsAClearStartupError) {
  TempDir dir;
  WriteText(dir / "state", "a file, not a directory");
  const auto result =
      RunToCompletion({.argv = {RASD_BINARY, "--state-dir", (dir / "state").string(), "--socket",
                                (dir / "rasd.sock").string()}},
                      10s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("cannot start: cannot use state directory"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find((dir / "state").string() + " exists but is not a directory"),
            std::string::npos)
      << result.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "rasd.sock"));
}

TEST(DaemonLifecycleTest, SecondDaemonOnTheSameStateDirectoryIsRefused) {
  RasdInstance first;
  std::string why;
  ASSERT_TRUE(first.Start({}, {}, &why)) << why;
  TempDir other;
  const auto second =
      RunToCompletion({.argv = {RASD_BINARY, "--state-dir", first.StateDir().string(), "--socket",
                                (other / "rasd.sock").string()}},
                      10s);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("in use by another rasd"), std::string::npos) << second.err;
  EXPECT_EQ(first.Rasctl({"ping"}).exit_code, 0) << "the first daemon must be unaffected";
}

TEST(DaemonLifecycleTest, SocketOfALiveDaemonIsNotStolen) {
  RasdInstance first;
  std::string why;
  ASSERT_TRUE(first.Start({}, {}, &why)) << why;
  TempDir other;
  const auto second =
      RunToCompletion({.argv = {RASD_BINARY, "--state-dir", (other / "state").string(), "--socket",
                                first.Socket().string()}},
                      10s);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("another rasd is running"), std::string::npos) << second.err;
  EXPECT_EQ(first.Rasctl({"ping"}).exit_code, 0);
}

TEST(DaemonLifecycleTest, StaleSocketFromACrashIsReplaced) {
  RasdInstance rasd;
  {
    // A socket file nobody listens on, as a SIGKILLed daemon leaves behind.
    common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, rasd.Socket().c_str());
    ASSERT_EQ(::bind(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_EQ(rasd.Rasctl({"ping"}).exit_code, 0);
}

TEST(DaemonLifecycleTest, NonSocketFileAtTheSocketPathIsNotReplaced) {
  TempDir dir;
  WriteText(dir / "rasd.sock", "precious");
  const auto result =
      RunToCompletion({.argv = {RASD_BINARY, "--state-dir", (dir / "state").string(), "--socket",
                                (dir / "rasd.sock").string()}},
                      10s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("is not a socket"), std::string::npos) << result.err;
  EXPECT_EQ(ReadText(dir / "rasd.sock"), "precious");
}

TEST(DaemonLifecycleTest, MissingHostRootIsAClearStartupError) {
  TempDir dir;
  const auto result = RunToCompletion(
      {.argv = {RASD_BINARY, "--state-dir", (dir / "state").string(), "--socket",
                (dir / "rasd.sock").string(), "--host-root", (dir / "nope").string()}},
      10s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("host root " + (dir / "nope").string() + " is not a directory"),
            std::string::npos)
      << result.err;
}

TEST(DaemonLifecycleTest, UsesTheSocketSystemdPasses) {
  TempDir dir;
  const auto path = dir / "activated.sock";
  common::UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, path.c_str());
  ASSERT_EQ(::bind(listener.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener.Get(), 16), 0);

  NotifyListener notify(dir / "notify.sock");
  Process rasd({.argv = {RASD_BINARY, "--state-dir", (dir / "state").string(), "--socket",
                         (dir / "unused.sock").string()},
                .set_env = {{"NOTIFY_SOCKET", notify.Path().string()}},
                .stderr_path = dir / "stderr",
                .pass_listen_fd = listener.Get()});
  ASSERT_TRUE(notify.WaitFor("READY=1", 10s)) << ReadText(dir / "stderr");
  listener.Reset();  // only the daemon holds it now

  const auto status =
      RunToCompletion({.argv = {RASCTL_BINARY, "--socket", path.string(), "--json", "status"}});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const auto json = nlohmann::json::parse(status.out);
  EXPECT_EQ(json["socket"]["activated"], true);
  EXPECT_FALSE(std::filesystem::exists(dir / "unused.sock"));
  rasd.Signal(SIGTERM);
  EXPECT_EQ(rasd.Wait(2s), 0);
  EXPECT_TRUE(std::filesystem::exists(path))
      << "systemd owns an activated socket; rasd must not unlink it";
}

TEST(DaemonLifecycleTest, BadConfigAtStartExitsTwoWithEveryProblem) {
  TempDir dir;
  WriteText(dir / "bad.yaml", "control:\n  max_clients: lots\nsimulator:\n  devicez: 3\n");
  const auto result = RunToCompletion(
      {.argv = {RASD_BINARY, "--config", (dir / "bad.yaml").string(), "--state-dir",
                (dir / "state").string(), "--socket", (dir / "rasd.sock").string()}});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find((dir / "bad.yaml").string() +
                            ":2:16: 'control.max_clients' must be an integer"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find((dir / "bad.yaml").string() + ":4:3: unknown key 'simulator.devicez'"),
            std::string::npos)
      << result.err;
}

TEST(DaemonLifecycleTest, CheckConfigExitsZeroOrTwo) {
  const auto good = RunToCompletion(
      {.argv = {RASD_BINARY, "--check-config", RASD_SOURCE_DIR "/packaging/rasd.yaml"}});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("rasd.yaml: ok"), std::string::npos);

  TempDir dir;
  WriteText(dir / "broken.yaml", "host:\n  root: [unterminated\n");
  const auto broken =
      RunToCompletion({.argv = {RASD_BINARY, "--check-config", (dir / "broken.yaml").string()}});
  EXPECT_EQ(broken.exit_code, 2);
  EXPECT_EQ(broken.err.rfind((dir / "broken.yaml").string() + ":", 0), 0u) << broken.err;

  const auto missing =
      RunToCompletion({.argv = {RASD_BINARY, "--check-config", (dir / "missing.yaml").string()}});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("cannot read config file"), std::string::npos);
}

TEST(DaemonLifecycleTest, PrintConfigSchemaPrintsTheConfigTable) {
  const auto result = RunToCompletion({.argv = {RASD_BINARY, "--print-config-schema"}});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.rfind("| key | type | default | on reload | meaning |\n", 0), 0u)
      << result.out;
  EXPECT_NE(result.out.find("| `simulator.devices` | integer 1..64 | `4` | restart |"),
            std::string::npos)
      << result.out;
}

TEST(DaemonLifecycleTest, BadCommandLineExitsTwo) {
  EXPECT_EQ(RunToCompletion({.argv = {RASD_BINARY, "--no-such-flag"}}).exit_code, 2);
  EXPECT_EQ(RunToCompletion({.argv = {RASD_BINARY, "--metrics-listen", "nowhere"}}).exit_code, 2);
  EXPECT_EQ(RunToCompletion({.argv = {RASD_BINARY, "--log-level", "loud"}}).exit_code, 2);
  const auto version = RunToCompletion({.argv = {RASD_BINARY, "--version"}});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("rasd ", 0), 0u) << version.out;
}

TEST(DaemonLifecycleTest, StateSurvivesARestart) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_EQ(rasd.Stop(), 0);
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const auto status = StatusJson(rasd);
  EXPECT_EQ(status["database"]["schema_version"], ras::StateStore::LatestSchemaVersion());
  EXPECT_EQ(status["state_dir"], rasd.StateDir().string());
}

}  // namespace
}  // namespace rasd::testing
