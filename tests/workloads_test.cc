// Work that runs outside rasd: `rasctl run` against the real rasd, with
// shell programs as the workloads (they read RASD_DEVICES and handle, or
// ignore, SIGTERM), and attaches rasd must refuse.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "rasd/ras/state_store.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

class WorkloadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  }

  // `rasctl run OPTIONS -- sh -c SCRIPT` in the background; its stderr in
  // a file.
  std::unique_ptr<Process> Run(std::vector<std::string> options, const std::string& script,
                               const std::string& files = "run") {
    std::vector<std::string> argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "run"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
    return std::make_unique<Process>(ProcessOptions{.argv = argv,
                                                    .stdout_path = rasd_.Dir() / (files + ".out"),
                                                    .stderr_path = rasd_.Dir() / (files + ".err")});
  }
  bool WaitForFile(const std::filesystem::path& path, const std::string& text,
                   std::chrono::milliseconds timeout = 5s) {
    return WaitUntil([&] { return ReadText(path).find(text) != std::string::npos; }, timeout);
  }
  nlohmann::json Workloads() { return rasd_.RasctlJson({"jobs"})["workloads"]; }

  RasdInstance rasd_;
};

TEST_F(WorkloadsTest, RunGivesTheDevicesAndAnIsolationDrainsTheWorkloadWithItsSignal) {
  const auto marks = rasd_.Dir() / "marks";
  auto run = Run({"--devices", "1", "--name", "server", "--grace", "5s"},
                 "echo \"devices=$RASD_DEVICES name=$RASD_WORKLOAD_NAME\" > " + marks.string() +
                     "; trap 'echo term >> " + marks.string() +
                     "; exit 7' TERM; while :; do sleep 0.02; done");
  ASSERT_TRUE(WaitForFile(marks, "devices=1 name=server")) << ReadText(rasd_.Dir() / "run.err");
  auto listed = Workloads();
  ASSERT_EQ(listed.size(), 1U) << listed.dump();
  EXPECT_EQ(listed[0]["name"], "server");
  EXPECT_EQ(listed[0]["devices"], nlohmann::json({1}));
  EXPECT_EQ(listed[0]["state"], "running");
  EXPECT_EQ(listed[0]["connected"], true);
  EXPECT_EQ(rasd_.RasctlJson({"devices", "1"})["devices"][0]["takes_new_work"], true);
  const auto on_device = rasd_.RasctlJson({"devices", "1"})["devices"][0]["workloads"];
  ASSERT_EQ(on_device.size(), 1U) << on_device.dump();
  EXPECT_EQ(on_device[0]["name"], "server");
  const auto text = rasd_.Rasctl({"devices", "1"});
  EXPECT_NE(text.out.find("workloads outside rasd: server (pid "), std::string::npos) << text.out;

  const auto isolated = std::chrono::steady_clock::now();
  const auto result = rasd_.Rasctl({"isolate", "1", "--reason", "test isolation"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto code = run->Wait(3s);
  const auto took = std::chrono::steady_clock::now() - isolated;
  ASSERT_TRUE(code.has_value()) << "the workload did not end after its device was isolated";
  EXPECT_EQ(*code, 7) << "rasctl run exits with the workload's status";
  EXPECT_EQ(rasd_.RasctlJson({"devices", "1"})["devices"][0]["takes_new_work"], false);
  EXPECT_LT(took, 2s);
  EXPECT_NE(ReadText(marks).find("term"), std::string::npos) << "the drain signal reached it";
  const std::string said = ReadText(rasd_.Dir() / "run.err");
  EXPECT_NE(said.find("device 1 is isolated (test isolation): rasd sent the drain signal"),
            std::string::npos)
      << said;
  // Forgotten once it exited.
  (void)WaitUntil([&] { return Workloads().empty(); }, 2s);
  EXPECT_TRUE(Workloads().empty()) << Workloads().dump();
}

// The kernel's SIGBUS for a memory error names a process: when it is an
// attached workload, its event says which (the kernel kills it; rasd only
// follows its exit). Another process's record names none.
TEST_F(WorkloadsTest, AMemoryErrorsSigbusToAWorkloadNamesTheWorkload) {
  const auto marks = rasd_.Dir() / "marks";
  auto run = Run({"--devices", "2", "--name", "victim"},
                 "echo up > " + marks.string() + "; while :; do sleep 0.02; done");
  ASSERT_TRUE(WaitForFile(marks, "up")) << ReadText(rasd_.Dir() / "run.err");
  const auto listed = Workloads();
  ASSERT_EQ(listed.size(), 1U) << listed.dump();
  const std::int64_t pid = listed[0]["pid"];
  const std::int64_t id = listed[0]["id"];
  rasd_.AppendKmsg(fmt::format(
      "3,1,1000,-;Memory failure: 0x3710b3: Sending SIGBUS to sh:{} due to hardware memory "
      "corruption\n3,2,1001,-;Memory failure: 0x3710b4: Sending SIGBUS to other:{} due to "
      "hardware memory corruption\n",
      pid, pid + 100000));
  nlohmann::json events;
  ASSERT_TRUE(WaitUntil(
      [&] {
        events = rasd_.RasctlJson({"events", "--limit", "10"})["events"];
        return events.size() >= 2;
      },
      5s))
      << events.dump(2) << rasd_.Stderr();
  std::map<std::string, std::string> summary_of;
  for (const auto& event : events) {
    const std::string summary = event["summary"];
    summary_of[summary.find("0x3710b3") != std::string::npos ? "victim" : "other"] = summary;
  }
  EXPECT_NE(summary_of["victim"].find(fmt::format("[workload 'victim' (id {}, device(s) 2)]", id)),
            std::string::npos)
      << events.dump(2);
  EXPECT_EQ(summary_of["other"].find("[workload"), std::string::npos) << events.dump(2);
}

TEST_F(WorkloadsTest, AWorkloadThatIgnoresTheSignalIsKilledAtItsGrace) {
  const auto marks = rasd_.Dir() / "marks";
  auto run = Run({"--devices", "2", "--grace", "400ms"},
                 "trap '' TERM; echo up > " + marks.string() + "; while :; do sleep 0.02; done");
  ASSERT_TRUE(WaitForFile(marks, "up")) << ReadText(rasd_.Dir() / "run.err");
  const auto drained = std::chrono::steady_clock::now();
  ASSERT_EQ(rasd_.Rasctl({"drain", "2", "--deadline", "1s"}).exit_code, 0);
  const auto code = run->Wait(5s);
  const auto took = std::chrono::steady_clock::now() - drained;
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 128 + SIGKILL);
  EXPECT_GE(took, 350ms) << "killed before its grace";
  EXPECT_LT(took, 2s);
  EXPECT_NE(ReadText(rasd_.Dir() / "run.err").find("SIGKILL in 400 ms"), std::string::npos)
      << ReadText(rasd_.Dir() / "run.err");
}

TEST_F(WorkloadsTest, OnlyTheWorkloadsOnTheDeviceAreDrained) {
  const auto marks = rasd_.Dir() / "marks";
  auto on_zero = Run({"--devices", "0", "--name", "zero"},
                     "trap 'echo zero-term >> " + marks.string() +
                         "; exit 0' TERM; echo zero-up >> " + marks.string() +
                         "; while :; do sleep 0.02; done");
  ASSERT_TRUE(WaitForFile(marks, "zero-up"));
  auto on_three = std::make_unique<Process>(ProcessOptions{
      .argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "run", "--devices", "3",
               "--name", "three", "--", "/bin/sh", "-c",
               "trap 'echo three-term >> " + marks.string() + "; exit 0' TERM; echo three-up >> " +
                   marks.string() + "; while :; do sleep 0.02; done"}});
  ASSERT_TRUE(WaitForFile(marks, "three-up"));
  ASSERT_EQ(rasd_.Rasctl({"isolate", "3"}).exit_code, 0);
  EXPECT_EQ(on_three->Wait(3s), 0);
  // The isolation's signals went out before `isolate` answered: rasd's own
  // record says whether zero was told to leave.
  const auto listed = Workloads();
  const auto zero = std::find_if(listed.begin(), listed.end(),
                                 [](const nlohmann::json& one) { return one["name"] == "zero"; });
  ASSERT_NE(zero, listed.end()) << listed.dump();
  EXPECT_EQ((*zero)["state"], "running") << listed.dump();
  EXPECT_TRUE(on_zero->Running()) << "a workload on another device was touched";
  EXPECT_EQ(ReadText(marks).find("zero-term"), std::string::npos);
  on_zero->Signal(SIGTERM);  // forwarded by rasctl run
  EXPECT_EQ(on_zero->Wait(3s), 0);
  EXPECT_NE(ReadText(marks).find("zero-term"), std::string::npos);
}

TEST_F(WorkloadsTest, RunRefusesADeviceOutOfServiceAndStartsNothing) {
  ASSERT_EQ(rasd_.Rasctl({"isolate", "1"}).exit_code, 0);
  const auto marks = rasd_.Dir() / "marks";
  auto run = Run({"--devices", "1"}, "echo started > " + marks.string());
  const auto code = run->Wait(5s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_FALSE(std::filesystem::exists(marks)) << "the command ran on an isolated device";
  EXPECT_NE(ReadText(rasd_.Dir() / "run.err").find("device 1 is isolated: it takes no new work"),
            std::string::npos)
      << ReadText(rasd_.Dir() / "run.err");
}

// One request on a connection made as `uid` (SO_PEERCRED is taken at
// connect time): the reply.
nlohmann::json AttachAs(const std::filesystem::path& socket, uid_t uid, const nlohmann::json& args) {
  EXPECT_EQ(::seteuid(uid), 0);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, socket.c_str());
  const int connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  EXPECT_EQ(::seteuid(0), 0);
  EXPECT_EQ(connected, 0) << std::strerror(errno);
  const std::string line = nlohmann::json{{"command", "attach"}, {"args", args}}.dump() + "\n";
  EXPECT_EQ(::send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  std::string reply;
  char buffer[4096];
  while (reply.find('\n') == std::string::npos) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 5000) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return nlohmann::json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
}

TEST_F(WorkloadsTest, HostileAttachesAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: connects as nobody (uid 65534)";
  const auto refused = [&](uid_t uid, const nlohmann::json& args, const std::string& code,
                           const std::string& says) {
    const auto reply = AttachAs(rasd_.Socket(), uid, args);
    EXPECT_EQ(reply.value("ok", true), false) << reply.dump();
    EXPECT_EQ(reply["error"].value("code", ""), code) << reply.dump();
    EXPECT_NE(reply["error"].value("message", "").find(says), std::string::npos) << reply.dump();
  };
  // Another user's process (a root one), asked by nobody.
  Process roots({.argv = {"/bin/sleep", "30"}});
  refused(65534, {{"pid", roots.Pid()}, {"devices", {0}}}, "permission_denied",
          "belongs to uid 0");
  roots.Signal(SIGKILL);
  // Init and rasd itself, even asked by root: a drain would signal them.
  refused(0, {{"pid", 1}, {"devices", {0}}}, "invalid_argument", "is init");
  refused(0, {{"pid", rasd_.Proc().Pid()}, {"devices", {0}}}, "invalid_argument",
          "rasd itself");
  // A name that would forge a log line or drive the terminal.
  refused(0, {{"devices", {0}}, {"name", "ev\n2026-12-02 critical [policy] FAKE"}},
          "invalid_argument", "control character");
  refused(0, {{"devices", {0}}, {"name", "x\u001b[2J"}}, "invalid_argument",
          "control character");
  // A device out of range, one that does not exist, no devices at all.
  refused(0, {{"pid", ::getpid()}, {"devices", {9999999}}}, "invalid_argument", "devices");
  refused(0, {{"pid", ::getpid()}, {"devices", {7}}}, "not_found", "no device 7");
  refused(0, {{"pid", ::getpid()}}, "invalid_argument", "needs devices");
  // A process that has exited but keeps its pid until it is reaped, and
  // a stale pid (one that is reaped).
  pid_t reaped = 0;
  {
    Process gone({.argv = {"/bin/true"}});
    ASSERT_EQ(gone.Wait(5s), 0);
    refused(0, {{"pid", gone.Pid()}, {"devices", {0}}}, "not_found", "it has exited");
    reaped = gone.Pid();
  }
  refused(0, {{"pid", reaped}, {"devices", {0}}}, "not_found", "no process");
  refused(0, {{"devices", {0}}, {"drain_signal", "NOPE"}}, "invalid_argument", "not a signal");
  refused(0, {{"devices", {0}}, {"grace_ms", -1}}, "invalid_argument", "grace_ms");
  EXPECT_TRUE(Workloads().empty());
  // rasd is still up.
  EXPECT_EQ(rasd_.Rasctl({"ping"}).exit_code, 0);
}

// What a new operator types wrong is refused before anything runs, saying
// what is wanted; a drain signal may be given by number.
TEST_F(WorkloadsTest, RunsMistakesAreClearAndANumericSignalWorks) {
  auto run_now = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "run");
    return rasd_.Rasctl(args);
  };
  auto missing = run_now({"--devices", "1", "--", "/nonexistent/cmd"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("cannot start /nonexistent/cmd: No such file or directory"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(missing.err.find("on device(s)"), std::string::npos) << "nothing was attached";
  auto typo = run_now({"--", "no_such_command_xyz"});
  EXPECT_EQ(typo.exit_code, 127);
  EXPECT_NE(typo.err.find("not found in PATH"), std::string::npos) << typo.err;
  if (::geteuid() == 0) {
    // A PATH entry the user cannot search (root's, kept by su): still "not
    // found", and which entry it could not look in.
    TempDir dir;
    const auto closed = dir / "closed";
    std::filesystem::create_directories(closed);
    ::chmod(closed.c_str(), 0700);
    const auto hidden = RunToCompletion(
        {.argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "run", "--", "no_such_xyz"},
         .set_env = {{"PATH", closed.string() + ":/usr/bin:/bin"}},
         .uid = 65534,
         .gid = 65534});
    EXPECT_EQ(hidden.exit_code, 127);
    EXPECT_NE(hidden.err.find("not found in PATH (" + closed.string() +
                              " cannot be searched: Permission denied)"),
              std::string::npos)
        << hidden.err;
  }
  auto no_dashes = run_now({"--devices", "1", "env"});
  EXPECT_EQ(no_dashes.exit_code, 2);
  EXPECT_NE(no_dashes.err.find("the command goes after --"), std::string::npos) << no_dashes.err;
  auto long_grace = run_now({"--grace", "2h", "--", "true"});
  EXPECT_EQ(long_grace.exit_code, 2);
  EXPECT_NE(long_grace.err.find("at most 1h"), std::string::npos) << long_grace.err;
  // A bare number could be seconds or rasd's milliseconds: a unit is asked for.
  auto bare_grace = run_now({"--grace", "500", "--", "true"});
  EXPECT_EQ(bare_grace.exit_code, 2);
  EXPECT_NE(bare_grace.err.find("give a unit"), std::string::npos) << bare_grace.err;
  auto kill = run_now({"--drain-signal", "KILL", "--", "true"});
  EXPECT_EQ(kill.exit_code, 1);
  EXPECT_NE(kill.err.find("SIGKILL cannot be handled by the workload"), std::string::npos)
      << kill.err;
  EXPECT_EQ(kill.err.find("attach: attach:"), std::string::npos) << kill.err;
  EXPECT_TRUE(Workloads().empty());

  const auto marks = rasd_.Dir() / "numeric-marks";
  auto numeric = Run({"--devices", "0", "--drain-signal", "10"},
                     "trap 'echo usr1 >> " + marks.string() + "; exit 3' USR1; echo up > " +
                         marks.string() + "; while :; do sleep 0.02; done",
                     "numeric");
  ASSERT_TRUE(WaitForFile(marks, "up")) << ReadText(rasd_.Dir() / "numeric.err");
  ASSERT_EQ(Workloads()[0]["drain_signal"], "SIGUSR1");
  ASSERT_EQ(rasd_.Rasctl({"drain", "0"}).exit_code, 0);
  EXPECT_TRUE(WaitForFile(marks, "usr1"));
  EXPECT_EQ(numeric->Wait(5s), 3);
  const auto status = rasd_.Rasctl({"status"});
  EXPECT_NE(status.out.find("workloads"), std::string::npos) << status.out;
}

// Attachments outlive rasd: a restarted rasd follows the same process
// again (the same pid with the same start time) and drains it when its
// device leaves service; a stored process that is gone is forgotten.
TEST_F(WorkloadsTest, ARestartedRasdFollowsTheWorkloadsAttachedBefore) {
  const auto marks = rasd_.Dir() / "restart-marks";
  auto run = Run({"--devices", "2", "--name", "survivor", "--grace", "5s"},
                 "trap 'echo term >> " + marks.string() +
                     "; exit 5' TERM; echo up > " + marks.string() +
                     "; while :; do sleep 0.02; done",
                 "survivor");
  ASSERT_TRUE(WaitForFile(marks, "up"));
  auto shortlived = Run({"--devices", "3", "--name", "gone"}, "sleep 60", "gone");
  ASSERT_TRUE(WaitUntil([&] { return Workloads().size() == 2; }, 5s));
  pid_t gone_pid = 0;
  for (const auto& workload : Workloads())
    if (workload["name"] == "gone") gone_pid = workload["pid"].get<pid_t>();
  ASSERT_GT(gone_pid, 0);
  ASSERT_TRUE(rasd_.Stop().has_value());
  EXPECT_TRUE(WaitForFile(rasd_.Dir() / "survivor.err", "no longer watched"))
      << ReadText(rasd_.Dir() / "survivor.err");
  // One of the two ends while rasd is away.
  ASSERT_EQ(::kill(gone_pid, SIGKILL), 0);
  ASSERT_TRUE(shortlived->Wait(5s).has_value());
  std::string why;
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  const auto listed = Workloads();
  ASSERT_EQ(listed.size(), 1U) << listed.dump() << rasd_.Stderr();
  EXPECT_EQ(listed[0]["name"], "survivor");
  EXPECT_EQ(listed[0]["devices"], nlohmann::json({2}));
  EXPECT_EQ(listed[0]["connected"], false);
  EXPECT_NE(rasd_.Stderr().find("followed again after the restart"), std::string::npos);

  ASSERT_EQ(rasd_.Rasctl({"isolate", "2", "--reason", "after restart"}).exit_code, 0);
  ASSERT_TRUE(WaitForFile(marks, "term")) << "the re-adopted workload got no drain signal";
  const auto code = run->Wait(5s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 5);
  EXPECT_TRUE(WaitUntil([&] { return Workloads().empty(); }, 5s));
  // Forgotten for good once it exited: another restart finds nothing.
  ASSERT_TRUE(rasd_.Stop().has_value());
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  EXPECT_TRUE(Workloads().empty());
}

// A workload dies with the rasctl that ran it: killed by force, rasctl
// cannot pass anything on, and the workload must not run on unwatched by
// any parent. rasd then forgets it as it does any workload that ended.
TEST_F(WorkloadsTest, AWorkloadEndsWhenTheRasctlThatRanItIsKilled) {
  auto run = Run({"--devices", "2", "--name", "orphan"}, "while :; do sleep 0.05; done");
  std::int64_t pid = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto workloads = Workloads();
        if (workloads.size() != 1) return false;
        pid = workloads[0]["pid"].get<std::int64_t>();
        return true;
      },
      5s));
  const auto workload = static_cast<pid_t>(pid);
  ASSERT_TRUE(Alive(workload));
  run->Signal(SIGKILL);
  ASSERT_TRUE(run->Wait(5s).has_value());
  EXPECT_TRUE(WaitUntil([&] { return !Alive(workload); }, 5s)) << "the workload outlived its rasctl";
  EXPECT_TRUE(WaitUntil([&] { return Workloads().empty(); }, 5s)) << Workloads().dump();
}

// rasd killed during a drain: the restarted rasd keeps the deadline the
// drain began with (a crash loop granted a fresh grace each time).
TEST_F(WorkloadsTest, ARestartDuringADrainKeepsItsDeadline) {
  auto run = Run({"--devices", "3", "--name", "stubborn", "--grace", "4s"},
                 "trap '' TERM; while :; do sleep 0.02; done", "stubborn");
  ASSERT_TRUE(WaitUntil([&] { return Workloads().size() == 1; }, 5s));
  const auto isolated = std::chrono::steady_clock::now();
  ASSERT_EQ(rasd_.Rasctl({"isolate", "3", "--reason", "drain then crash"}).exit_code, 0);
  std::this_thread::sleep_for(2s);
  rasd_.Proc().Signal(SIGKILL);
  (void)rasd_.Proc().Wait(5s);
  std::string why;
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  const auto code = run->Wait(8s);
  const auto took = std::chrono::steady_clock::now() - isolated;
  ASSERT_TRUE(code.has_value()) << rasd_.Stderr();
  EXPECT_EQ(*code, 128 + SIGKILL);
  EXPECT_GE(took, 3900ms);
  EXPECT_LT(took, 5500ms) << "killed at the first drain's deadline (4 s), not 2 s + a new 4 s";
  EXPECT_NE(rasd_.Stderr().find("the rest of its grace from before the restart"),
            std::string::npos)
      << rasd_.Stderr();
}

// A damaged row in the state database (a field of the wrong type, a
// drain signal no attach would take, text that is not JSON): the restarted
// rasd starts, says which record it dropped and why, and never signals the
// process it names.
TEST_F(WorkloadsTest, ADamagedSavedWorkloadIsDroppedWithItsReasonAndNeverSignalled) {
  const auto marks = rasd_.Dir() / "damaged-marks";
  auto run = Run({"--devices", "1", "--name", "victim", "--grace", "1s"},
                 "trap 'echo signalled >> " + marks.string() +
                     "' TERM INT HUP USR1 USR2; echo up > " + marks.string() +
                     "; while :; do sleep 0.02; done",
                 "victim");
  ASSERT_TRUE(WaitForFile(marks, "up"));
  ASSERT_TRUE(WaitUntil([&] { return Workloads().size() == 1; }, 5s));
  ASSERT_TRUE(rasd_.Stop().has_value());
  ras::WorkloadRecord saved;
  {
    auto store = ras::StateStore::Open(rasd_.StateDir());
    ASSERT_TRUE(store.has_value()) << store.error().message;
    auto records = (*store)->LoadWorkloads();
    ASSERT_TRUE(records.has_value() && records->size() == 1U);
    saved = records->front();
  }
  const auto spec = nlohmann::json::parse(saved.spec);
  auto with = [&spec](const char* key, nlohmann::json value) {
    auto damaged = spec;
    damaged[key] = std::move(value);
    return damaged.dump();
  };
  const std::pair<std::string, std::string> damages[] = {
      {with("name", 5), "bad argument 'name'"},
      {with("drain_signal", SIGKILL), "cannot be handled by the workload"},
      {with("grace_ms", -1), "bad argument 'grace_ms'"},
      {with("device_uuids", "GPU-1"), "it names no device UUIDs"},
      {"{\"name\": \"victim\", ", "unreadable"},
  };
  for (const auto& [damaged, reason] : damages) {
    {
      auto store = ras::StateStore::Open(rasd_.StateDir());
      ASSERT_TRUE(store.has_value()) << store.error().message;
      ASSERT_TRUE((*store)->SaveWorkload({saved.pid, saved.start_time, damaged}).has_value());
    }
    std::string why;
    ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
    EXPECT_TRUE(Workloads().empty()) << damaged;
    EXPECT_NE(rasd_.Stderr().find("saved record is unreadable"), std::string::npos)
        << damaged << "\n" << rasd_.Stderr();
    EXPECT_NE(rasd_.Stderr().find(reason), std::string::npos) << damaged << "\n"
                                                              << rasd_.Stderr();
    // Device 1 out of service: a workload adopted on it would be drained at
    // once (isolated on the first start, and so on the later ones).
    if (&damaged == &damages[0].first) {
      ASSERT_EQ(rasd_.Rasctl({"isolate", "1", "--reason", "damaged row"}).exit_code, 0);
    }
    EXPECT_EQ(rasd_.RasctlJson({"devices", "1"})["devices"][0]["state"], "isolated");
    ASSERT_TRUE(rasd_.Stop().has_value());
  }
  EXPECT_EQ(ReadText(marks), "up\n") << "a process named only by a damaged row was signalled";
  EXPECT_FALSE(run->Wait(0ms).has_value());
  ::kill(static_cast<pid_t>(saved.pid), SIGKILL);
  EXPECT_TRUE(run->Wait(5s).has_value());
}

// An uncorrectable error that names the process that met it (an Xid 94
// line's pid=) kills exactly that workload: another on the same device runs
// on, and a pid rasd does not follow is never signalled.
TEST_F(WorkloadsTest, AnXidThatNamesAProcessKillsExactlyThatWorkload) {
  const std::string loop = "while :; do sleep 0.05; done";
  auto first = Run({"--devices", "1", "--name", "first"}, loop, "first");
  auto second = Run({"--devices", "1", "--name", "second"}, loop, "second");
  std::map<std::string, std::int64_t> pids;
  ASSERT_TRUE(WaitUntil(
      [&] {
        pids.clear();
        for (const auto& workload : Workloads())
          pids[workload["name"].get<std::string>()] = workload["pid"].get<std::int64_t>();
        return pids.size() == 2;
      },
      5s));
  rasd_.AppendKmsg(fmt::format("3,601,9000000,-;NVRM: Xid (PCI:ffff:c2:00): 94, pid={}, "
                               "name=sh, Contained: SM (0x1). RST: No, D-RST: No\n",
                               pids["first"]));
  const auto code = first->Wait(5s);
  ASSERT_TRUE(code.has_value()) << "the named workload still runs; " << rasd_.Stderr();
  EXPECT_EQ(*code, 128 + SIGKILL);
  EXPECT_TRUE(WaitForFile(rasd_.Dir() / "first.err", "met an uncorrectable error on device 1"))
      << ReadText(rasd_.Dir() / "first.err");
  const auto left = Workloads();
  ASSERT_EQ(left.size(), 1U) << left.dump();
  EXPECT_EQ(left[0]["name"], "second");
  EXPECT_EQ(left[0]["state"], "running");
  const auto actions = rasd_.RasctlJson({"actions", "--device", "1"})["actions"];
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions[0]["action"], "kill-consumer");
  EXPECT_EQ(actions[0]["result"], "ok");
  EXPECT_NE(actions[0]["detail"].get<std::string>().find(
                fmt::format("workload 'first' (pid {}) killed", pids["first"])),
            std::string::npos)
      << actions.dump();
  EXPECT_EQ(rasd_.RasctlJson({"devices", "1"})["devices"][0]["state"], "healthy")
      << "a contained error: the device serves on";

  // A process rasd does not follow (this test itself) is named: nothing is
  // signalled, and the action says why.
  rasd_.AppendKmsg(fmt::format("3,602,9100000,-;NVRM: Xid (PCI:ffff:c2:00): 94, pid={}, "
                               "name=gtest, Contained: SM (0x1). RST: No, D-RST: No\n",
                               ::getpid()));
  ASSERT_TRUE(WaitUntil(
      [&] { return rasd_.RasctlJson({"actions", "--device", "1"})["actions"].size() >= 2; }, 5s));
  const auto skipped = rasd_.RasctlJson({"actions", "--device", "1"})["actions"][0];
  EXPECT_EQ(skipped["result"], "skipped") << skipped.dump();
  EXPECT_NE(skipped["detail"].get<std::string>().find("is not a workload attached to rasd"),
            std::string::npos)
      << skipped.dump();
  EXPECT_FALSE(second->Wait(200ms).has_value()) << "the other workload on device 1 runs on";
  const int port = rasd_.RasctlJson({"status"})["metrics"]["port"].get<int>();
  const std::string metrics = Http(port, "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_workload_signals_total{reason=\"consumer_kill\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("rasd_workload_signals_total{reason=\"grace_kill\"} 0"),
            std::string::npos);
  EXPECT_NE(metrics.find("rasd_workloads{state=\"running\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("rasd_workload_attaches_total{result=\"ok\"} 2"), std::string::npos);
  second->Signal(SIGTERM);
  EXPECT_TRUE(second->Wait(5s).has_value());
}

}  // namespace
}  // namespace rasd::testing
