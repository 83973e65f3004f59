// rasctl against a real rasd: output forms and exit codes.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace rasd::testing {
namespace {

class RasctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  }
  RasdInstance rasd_;
};

TEST_F(RasctlTest, StatusIsHumanReadableByDefault) {
  const auto result = rasd_.Rasctl({"status"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.rfind("rasd ", 0), 0u) << result.out;
  EXPECT_NE(result.out.find("devices     4 sim: 4 healthy, 0 degraded, 0 draining, 0 isolated"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("state dir   " + rasd_.StateDir().string() + " (schema 1)"),
            std::string::npos)
      << result.out;
  EXPECT_NE(
      result.out.find("events      0 total: FATAL 0, UCE 0, SRAR 0, SRAO 0, UCNA 0, CE 0, INFO 0"),
      std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("built-in defaults"), std::string::npos) << result.out;
}

TEST_F(RasctlTest, JsonPrintsTheDaemonsResult) {
  const auto result = rasd_.Rasctl({"--json", "status"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["devices"]["count"], 4);
  EXPECT_EQ(json["socket"]["path"], rasd_.Socket().string());
  EXPECT_EQ(json["pid"], rasd_.Proc().Pid());
}

TEST_F(RasctlTest, RasdSocketEnvironmentVariableIsTheDefaultSocket) {
  const auto result = RunToCompletion(
      {.argv = {RASCTL_BINARY, "ping"}, .set_env = {{"RASD_SOCKET", rasd_.Socket().string()}}});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "pong\n");
}

TEST_F(RasctlTest, CannotConnectExitsThreeAndNamesTheSocket) {
  const auto missing = rasd_.Dir() / "nobody-here.sock";
  const auto result =
      RunToCompletion({.argv = {RASCTL_BINARY, "--socket", missing.string(), "status"}});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_NE(result.err.find("cannot connect to rasd at " + missing.string()), std::string::npos)
      << result.err;
}

TEST_F(RasctlTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunToCompletion({.argv = {RASCTL_BINARY}}).exit_code, 2);
  EXPECT_EQ(RunToCompletion({.argv = {RASCTL_BINARY, "frobnicate"}}).exit_code, 2);
  EXPECT_EQ(RunToCompletion({.argv = {RASCTL_BINARY, "--timeout", "-1", "status"}}).exit_code, 2);
  EXPECT_EQ(RunToCompletion({.argv = {RASCTL_BINARY, "--help"}}).exit_code, 0);
}

TEST_F(RasctlTest, DaemonErrorExitsOne) {
  // No config file was given, so reload re-reads the built-in defaults: fine.
  EXPECT_EQ(rasd_.Rasctl({"reload"}).exit_code, 0);
  // With a broken file, the daemon refuses the reload: exit 1 with its message.
  RasdInstance with_file;
  with_file.WriteConfig("simulator:\n  devices: 2\n");
  std::string why;
  ASSERT_TRUE(with_file.Start({}, {}, &why)) << why;
  with_file.WriteConfig("simulator:\n  devices: many\n");
  const auto result = with_file.Rasctl({"reload"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("configuration rejected"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find(":2:12: 'simulator.devices' must be an integer"), std::string::npos)
      << result.err;
  const auto json = with_file.Rasctl({"--json", "reload"});
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_EQ(nlohmann::json::parse(json.out)["error"]["code"], "invalid_argument") << json.out;
}

}  // namespace
}  // namespace rasd::testing
