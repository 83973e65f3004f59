// rasctl against a real rasd: output forms and exit codes.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "rasd/ras/state_store.h"
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

// `rasctl watch` and `events --follow` read rasd's push stream: a device's
// change and a stored event arrive without polling (each is printed well
// within the old poll's second), filters apply, and both end with exit 3
// when rasd goes away.
TEST_F(RasctlTest, WatchAndFollowPrintWhatRasdPushes) {
  const auto watch_out = rasd_.Dir() / "watch.out", follow_out = rasd_.Dir() / "follow.out";
  rasd_.AppendKmsg("4,701,8000000,-;NVRM: Xid (PCI:ffff:c4:00): 13, pid=1, Graphics Exception\n");
  ASSERT_TRUE(WaitUntil([&] { return !rasd_.RasctlJson({"events"})["events"].empty(); }, 5s));
  Process watch({.argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "watch"},
                 .stdout_path = watch_out});
  Process follow({.argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "events",
                           "--follow", "--severity", "FATAL"},
                  .stdout_path = follow_out});
  auto wait_for = [](const std::filesystem::path& path, const std::string& text) {
    return WaitUntil([&] { return ReadText(path).find(text) != std::string::npos; }, 3s);
  };
  ASSERT_TRUE(
      WaitUntil([&] { return rasd_.RasctlJson({"status"})["control"]["watchers"] == 2; }, 5s))
      << "both subscribed";
  EXPECT_EQ(ReadText(watch_out), "") << "watch prints only what happens next";

  const auto isolated = std::chrono::steady_clock::now();
  ASSERT_EQ(rasd_.Rasctl({"isolate", "2", "--reason", "watch test"}).exit_code, 0);
  ASSERT_TRUE(wait_for(watch_out, "device 2: healthy -> isolated (watch test)"))
      << ReadText(watch_out);
  EXPECT_LT(std::chrono::steady_clock::now() - isolated, 900ms) << "pushed, not polled";

  rasd_.AppendKmsg("4,702,9000000,-;NVRM: Xid (PCI:ffff:c2:00): 48, pid=1, DBE\n"
                   "4,703,9000001,-;NVRM: Xid (PCI:ffff:c4:00): 79, pid=1, GPU has fallen off "
                   "the bus.\n");
  ASSERT_TRUE(wait_for(follow_out, "FATAL")) << ReadText(follow_out);
  ASSERT_TRUE(wait_for(watch_out, "device 3: healthy -> ")) << ReadText(watch_out);
  ASSERT_TRUE(wait_for(watch_out, "code=79")) << ReadText(watch_out);
  EXPECT_NE(ReadText(watch_out).find("code=48"), std::string::npos) << ReadText(watch_out);
  const std::string followed = ReadText(follow_out);
  EXPECT_NE(followed.find("code=79"), std::string::npos) << followed;
  EXPECT_EQ(followed.find("code=48"), std::string::npos) << "--severity FATAL: " << followed;
  EXPECT_EQ(followed.find("code=13"), std::string::npos) << "not FATAL: " << followed;

  ASSERT_TRUE(rasd_.Stop().has_value());
  EXPECT_EQ(watch.Wait(5s), 3);
  EXPECT_EQ(follow.Wait(5s), 3);
}

// A storm's events are a row per component and minute that grows with
// every batch: `events --follow` prints the row when it is stored and again
// with its count as it grows (at most once a second), marked as updated.
TEST_F(RasctlTest, FollowPrintsAStormsRowAgainAsItGrows) {
  const auto follow_out = rasd_.Dir() / "follow.out";
  Process follow(
      {.argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "--json", "events", "--follow"},
       .stdout_path = follow_out});
  ASSERT_TRUE(
      WaitUntil([&] { return rasd_.RasctlJson({"status"})["control"]["watchers"] == 1; }, 5s));
  std::uint64_t sequence = 800;
  auto storm = [&](int records) {
    std::string text;
    for (int i = 0; i < records; ++i, ++sequence)
      text += fmt::format(
          "3,{},{},-;EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0 slot:0 "
          "page:0x{:x} offset:0x40 grain:32)\n",
          sequence, 50'000'000 + sequence, 0x1000 + i % 7);
    rasd_.AppendKmsg(text);
  };
  storm(200);
  auto counts = [&] {
    std::vector<std::pair<bool, std::uint64_t>> seen;  // updated, count
    std::istringstream lines(ReadText(follow_out));
    for (std::string line; std::getline(lines, line);) {
      const auto event = nlohmann::json::parse(line, nullptr, false);
      if (event.is_discarded() || event.value("origin", "") != "edac") continue;
      seen.emplace_back(event.value("updated", false), event.value("count", std::uint64_t{0}));
    }
    return seen;
  };
  ASSERT_TRUE(WaitUntil([&] { return !counts().empty(); }, 5s)) << ReadText(follow_out);
  storm(300);
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto seen = counts();
        return !seen.empty() && seen.back().first && seen.back().second >= 500;
      },
      5s))
      << ReadText(follow_out);
  const auto seen = counts();
  EXPECT_FALSE(seen.front().first) << "first printed as a new row";
  EXPECT_LT(seen.front().second, 500u);
  EXPECT_LE(seen.size(), 6u) << "updates are at most once a second, not once a batch";
  ASSERT_TRUE(rasd_.Stop().has_value());
  EXPECT_EQ(follow.Wait(5s), 3);
}

TEST_F(RasctlTest, StatusIsHumanReadableByDefault) {
  const auto result = rasd_.Rasctl({"status"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.rfind("rasd ", 0), 0u) << result.out;
  EXPECT_NE(result.out.find("devices     4 sim: 4 healthy, 0 degraded, 0 draining, 0 isolated"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("state dir   " + rasd_.StateDir().string() + " (schema " +
                            std::to_string(ras::StateStore::LatestSchemaVersion()) + ")"),
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

namespace rasd::testing {
namespace {

// `rasctl scan` is offline: no daemon, the real binary on real records.
TEST(RasctlScanTest, JsonListsEveryRecordWithTheCorpusFields) {
  TempDir dir;
  WriteText(dir / "kern.log",
            "Dec  2 11:38:47 worker4 kernel: [  219.471050] NVRM: Xid (PCI:0000:07:00): 64, "
            "pid='<unknown>', "
            "name=<unknown>, Dynamic Page Retirement: Blacklisting failed.  Page should have been "
            "blacklisted on "
            "boot(0x00000000007fffa8).\n"
            "[    0.1] Linux version 6.1.0 (not a RAS line)\n"
            "[   52.477734] pcieport 0000:00:03.0: AER: Correctable error message received from "
            "0000:00:03.0\n"
            "[   52.477741] pcieport 0000:00:03.0: PCIe Bus Error: severity=Correctable, type=Data "
            "Link Layer, "
            "(Transmitter ID)\n"
            "[11189.970968] EDAC MC3: 1 UE memory read error on CPU_SrcID#1_MC#1_Chan#2_DIMM#0 "
            "(channel:2 slot:0 "
            "page:0xb757589 offset:0x140 grain:32 -  OVERFLOW err_code:0101:0092 socket:1 imc:1 "
            "rank:0)\n");
  const auto result =
      RunToCompletion({.argv = {RASCTL_BINARY, "--json", "scan", (dir / "kern.log").string()}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<nlohmann::json> records;
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u) << result.out;
  EXPECT_EQ(records[0]["origin"], "nvidia_xid");
  EXPECT_EQ(records[0]["severity"], "UCE");
  EXPECT_EQ(records[0]["xid"], 64);
  EXPECT_EQ(records[0]["pci_bdf"], "0000:07:00");
  EXPECT_EQ(records[0]["address"], "0x00000000007fffa8");
  EXPECT_EQ(records[1]["origin"], "aer");
  EXPECT_EQ(records[1]["pci_bdf"], "0000:00:03.0");
  EXPECT_EQ(records[1]["severity"], "CE");
  EXPECT_TRUE(records[1]["xid"].is_null());
  EXPECT_EQ(records[2]["origin"], "edac");
  EXPECT_EQ(records[2]["mc"], 3);
  EXPECT_EQ(records[2]["address"], "0xb757589140");
}

TEST(RasctlScanTest, TextOutputHasATableAndASummaryAndReadsStdin) {
  TempDir dir;
  WriteText(dir / "in.log",
            "[ 1.0] Memory failure: 0xe16677: already hardware poisoned\n"
            "[ 2.0] mce: Using 22 MCE banks\n");
  ProcessOptions options{
      .argv = {"/bin/sh", "-c",
               "'" RASCTL_BINARY "' scan < '" + (dir / "in.log").string() + "'"}};
  const auto result = RunToCompletion(options);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("UCE    memory_failure  addr=0xe16677"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("INFO   mce"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("2 record(s)"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  memory_failure  UCE    1"), std::string::npos) << result.out;
}

TEST(RasctlScanTest, UnreadableFileExitsOneAndHostileInputIsHarmless) {
  TempDir dir;
  const std::string missing_path = (dir / "missing.log").string();
  const auto missing = RunToCompletion({.argv = {RASCTL_BINARY, "scan", missing_path}});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(
      missing.err.find(fmt::format("cannot read {}: No such file or directory", missing_path)),
      std::string::npos)
      << missing.err;
  std::string garbage(1 << 20, '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i)
    garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
  WriteText(dir / "garbage.bin", garbage);
  const auto scanned =
      RunToCompletion({.argv = {RASCTL_BINARY, "--json", "scan", (dir / "garbage.bin").string()}});
  EXPECT_EQ(scanned.exit_code, 0) << scanned.err;
}

TEST(RasctlScanTest, ADirectoryOrAFileWithoutPermissionIsAnErrorThatSaysWhy) {
  TempDir dir;
  const auto directory = RunToCompletion({.argv = {RASCTL_BINARY, "scan", dir.Path().string()}});
  EXPECT_EQ(directory.exit_code, 1);
  EXPECT_NE(directory.err.find(fmt::format("cannot read {}: Is a directory", dir.Path().string())),
            std::string::npos)
      << directory.err;
  EXPECT_EQ(directory.out, "");

  const std::string secret = (dir / "secret.log").string();
  WriteText(secret, "[ 1.0] EDAC MC0: 1 CE memory read error on DIMM\n");
  ASSERT_EQ(::chmod(secret.c_str(), 0), 0);
  ProcessOptions options{.argv = {RASCTL_BINARY, "scan", secret}};
  if (::geteuid() == 0) {  // root reads any file: run as nobody
    ASSERT_EQ(::chmod(dir.Path().c_str(), 0755), 0);
    options.uid = 65534;
    options.gid = 65534;
  }
  const auto denied = RunToCompletion(options);
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find(fmt::format("cannot read {}: Permission denied", secret)),
            std::string::npos)
      << denied.err;
}

TEST(RasctlScanTest, TextHasATimeColumnAndSaysHowManyLinesItRead) {
  TempDir dir;
  WriteText(dir / "kern.log",
            "[ 1234.567890] EDAC MC0: 1 CE memory read error on DIMM_A1 (page:0x1 offset:0x2)\n"
            "Jun  9 16:21:24 node1 kernel: Memory failure: 0xe16677: already hardware poisoned\n"
            "6,1201,5000123,-;NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off the bus.\n"
            "Memory failure: 0x1234: recovery action for dirty LRU page: Recovered\n"
            "an ordinary line\n");
  const auto text = RunToCompletion({.argv = {RASCTL_BINARY, "scan", (dir / "kern.log").string()}});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.rfind("TIME            CLASS  ORIGIN", 0), 0u) << text.out;
  EXPECT_NE(text.out.find("\n1234.567890     CE     edac"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\nJun  9 16:21:24 UCE    memory_failure"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("\n5.000123        "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\n-               "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\n5 lines read\n"), std::string::npos) << text.out;

  // --json: stdout holds only records, one JSON object a line; the count
  // of lines read goes to stderr.
  const auto json =
      RunToCompletion({.argv = {RASCTL_BINARY, "--json", "scan", (dir / "kern.log").string()}});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  std::istringstream lines(json.out);
  int records = 0;
  for (std::string line; std::getline(lines, line); ++records)
    EXPECT_TRUE(nlohmann::json::parse(line).is_object()) << line;
  EXPECT_EQ(records, 4) << json.out;
  EXPECT_NE(json.err.find("5 lines read, 4 record(s)"), std::string::npos) << json.err;
}

TEST(RasctlScanTest, AFileScannedInParallelGivesWhatOneThreadGives) {
  TempDir dir;
  std::string log;
  for (int i = 0; i < 60'000; ++i) {
    log += fmt::format("[{:>6}.{:06}] usb 1-1: new high-speed USB device number {}\n", i / 100,
                       i % 1000 * 997, i);
    if (i % 7 == 0) {
      log += fmt::format(
          "[{:>6}.000001] mce: [Hardware Error]: CPU {}: Machine Check: 0 Bank 5: "
          "be00000000800400\n[{:>6}.000002] mce: [Hardware Error]: TSC 0 ADDR {:x} MISC 0\n",
          i / 100, i % 64, i / 100, 0x1000 * i);
    }
  }
  WriteText(dir / "big.log", log);
  auto scan = [&](const char* threads) {
    return RunToCompletion({.argv = {RASCTL_BINARY, "--json", "scan", "--threads", threads,
                                     (dir / "big.log").string()}});
  };
  const auto one = scan("1");
  const auto four = scan("4");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(four.exit_code, 0) << four.err;
  EXPECT_GT(std::count(one.out.begin(), one.out.end(), '\n'), 8'000);
  EXPECT_EQ(four.out, one.out);
  EXPECT_EQ(four.err, one.err);
}

}  // namespace
}  // namespace rasd::testing

namespace rasd::testing {
namespace {

CommandResult Bare(std::vector<std::string> args) {
  ProcessOptions options;
  options.argv = {RASCTL_BINARY};
  for (auto& arg : args) options.argv.push_back(std::move(arg));
  return RunToCompletion(options);
}

// Global options before or after the command, for every command that reads
// the daemon: the same answer either way.
TEST_F(RasctlTest, GlobalOptionsWorkBeforeAndAfterEveryCommand) {
  const std::string socket = rasd_.Socket().string();
  const std::vector<std::vector<std::string>> commands = {
      {"status"}, {"ping"}, {"events"}, {"events", "--limit", "5"}, {"summary"}, {"devices"},
      {"devices", "0"}, {"actions"}, {"jobs"}, {"retired"}};
  for (const auto& command : commands) {
    std::vector<std::string> before = {"--socket", socket, "--json", "--timeout", "5"};
    before.insert(before.end(), command.begin(), command.end());
    std::vector<std::string> after = command;
    for (const char* word : {"--json", "--socket", socket.c_str(), "--timeout", "5"})
      after.push_back(word);
    const auto first = Bare(before), second = Bare(after);
    const std::string what = command[0] + (command.size() > 1 ? " " + command[1] : "");
    EXPECT_EQ(first.exit_code, 0) << what << ": " << first.err;
    EXPECT_EQ(second.exit_code, 0) << what << ": " << second.err;
    EXPECT_FALSE(nlohmann::json::parse(second.out, nullptr, false).is_discarded())
        << what << " with --json after it: " << second.out;
  }
}

// What a person typing gets back: the exact texts, and exit 2.
TEST(RasctlUsageTest, BadValuesUnknownCommandsAndTyposSayWhatIsWanted) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string err;  // contained in stderr
  };
  const Case cases[] = {
      {{"--timeout", "0", "ping"}, 2,
       "--timeout: a number of seconds above 0 (at most 86400) is wanted, not '0'"},
      {{"ping", "--timeout", "abc"}, 2,
       "--timeout: a number of seconds above 0 (at most 86400) is wanted, not 'abc'"},
      {{"devices", "abc"}, 2, "a device index (0, 1, ...) is wanted, not 'abc'"},
      {{"drain", "x"}, 2, "a device index (0, 1, ...) is wanted, not 'x'"},
      {{"events", "--limit", "0"}, 2, "--limit: a whole number from 1 to 10000 is wanted, not '0'"},
      {{"stat"}, 2, "rasctl: unknown command 'stat'; did you mean status or scan?"},
      {{"evnts"}, 2, "rasctl: unknown command 'evnts'; did you mean events?"},
      {{"--json", "frobnicate"}, 2, "rasctl: unknown command 'frobnicate'\n"},
  };
  for (const auto& c : cases) {
    const auto result = Bare(c.args);
    std::string joined;
    for (const auto& arg : c.args) joined += arg + " ";
    EXPECT_EQ(result.exit_code, c.exit_code) << joined << result.err;
    EXPECT_NE(result.err.find(c.err), std::string::npos) << joined << "\n" << result.err;
  }
  // Help and version, however asked for.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"help"}, {"--help"}, {}}) {
    const auto result = Bare(args);
    EXPECT_NE(result.out.find("Usage: rasctl [OPTIONS] SUBCOMMAND"), std::string::npos)
        << (args.empty() ? "(bare)" : args[0]) << result.out;
    EXPECT_NE(result.out.find("undrain"), std::string::npos) << "the commands are listed";
    EXPECT_EQ(result.exit_code, args.empty() ? 2 : 0);
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"version"}, {"--version"}, {"-v"}}) {
    const auto result = Bare(args);
    EXPECT_EQ(result.exit_code, 0) << args[0];
    EXPECT_EQ(result.out.rfind("rasctl ", 0), 0U) << args[0] << ": " << result.out;
  }
  // A command's help lists the defaults.
  EXPECT_NE(Bare({"events", "--help"}).out.find("--limit INT:N=100"), std::string::npos);
  EXPECT_NE(Bare({"drain", "--help"}).out.find("=30s"), std::string::npos);
}

}  // namespace
}  // namespace rasd::testing
