// Workloads on a SimulatedEventLoop with a process table of pipes: a drain
// message and signal when a device leaves service, SIGKILL at the grace
// and not before, the kill called off when the devices return, exactly the
// consumer killed, who may attach what, and a restarted rasd keeping the
// grace that was running.

#include "workloads.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <vector>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using runtime::HealthState;

// Processes as pipes: a workload's pidfd is a copy of the read end, which
// becomes readable (end of file) when the test "exits" the process by
// closing the write end. A signal is recorded against the pipe it names.
class PipeProcessTable final : public ProcessTable {
 public:
  ~PipeProcessTable() override {
    for (auto& [pid, process] : processes_) {
      ::close(process.read_end);
      if (process.write_end >= 0) ::close(process.write_end);
    }
  }

  void Spawn(pid_t pid, uid_t uid, unsigned long long start_time = 1000) {
    if (auto old = processes_.find(pid); old != processes_.end()) {
      ::close(old->second.read_end);
      if (old->second.write_end >= 0) ::close(old->second.write_end);
    }
    int ends[2];
    ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
    processes_[pid] = {
        .uid = uid, .start_time = start_time, .read_end = ends[0], .write_end = ends[1]};
  }
  void Exit(pid_t pid) {
    auto& process = processes_.at(pid);
    ::close(process.write_end);
    process.write_end = -1;
    process.exited = true;
  }

  Result<common::UniqueFd> Open(pid_t pid) const override {
    auto found = processes_.find(pid);
    if (found == processes_.end() || found->second.exited)
      return Fail(ErrorCode::kNotFound, "no such process");
    return common::UniqueFd(::fcntl(found->second.read_end, F_DUPFD_CLOEXEC, 0));
  }
  Result<uid_t> OwnerOf(pid_t pid) const override {
    auto found = processes_.find(pid);
    if (found == processes_.end()) return Fail(ErrorCode::kNotFound, "no such process");
    return found->second.uid;
  }
  Result<unsigned long long> StartTimeOf(pid_t pid) const override {
    auto found = processes_.find(pid);
    if (found == processes_.end()) return Fail(ErrorCode::kNotFound, "no such process");
    return found->second.start_time;
  }
  Status Signal(const common::UniqueFd& pidfd, int signal) const override {
    struct stat named {};
    if (::fstat(pidfd.Get(), &named) != 0) return Fail(ErrnoError("fstat", errno));
    for (const auto& [pid, process] : processes_) {
      struct stat own {};
      if (::fstat(process.read_end, &own) == 0 && own.st_ino == named.st_ino) {
        signals_.push_back({pid, signal});
        return {};
      }
    }
    return Fail(ErrorCode::kNotFound, "the pidfd names no process");
  }

  // (pid, signal) in the order sent.
  const std::vector<std::pair<pid_t, int>>& Signals() const { return signals_; }
  std::vector<int> SignalsTo(pid_t pid) const {
    std::vector<int> sent;
    for (const auto& [to, signal] : signals_)
      if (to == pid) sent.push_back(signal);
    return sent;
  }

 private:
  struct Process {
    uid_t uid = 0;
    unsigned long long start_time = 0;
    int read_end = -1;
    int write_end = -1;
    bool exited = false;
  };
  std::map<pid_t, Process> processes_;
  mutable std::vector<std::pair<pid_t, int>> signals_;
};

class WorkloadsTest : public ::testing::Test {
 protected:
  static constexpr uid_t kUser = 1000;

  void SetUp() override {
    dir_ = testing::FreshTestDir("workloads");
    auto store = ras::StateStore::Open(dir_ / "state", loop_.SharedClock());
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime();
    ASSERT_NE(runtime_, nullptr);
    Start();
  }
  void TearDown() override {
    connections_.clear();
    workloads_.reset();
    loop_.RunUntilIdle();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // A fresh registry on the same store: what a restarted rasd has.
  void Start(Workloads::Options options = {.default_grace = 5000ms}) {
    connections_.clear();  // the old connections died with the old rasd
    workloads_.reset();
    loop_.RunUntilIdle();
    workloads_ = std::make_unique<Workloads>(
        loop_, *runtime_, processes_, store_.get(), options,
        [](int device) { return "device " + std::to_string(device) + " failed"; });
  }

  Result<Subscribed> Attach(pid_t pid, std::vector<int> devices, uid_t peer_uid = kUser,
                            bool admin = false,
                            std::optional<std::chrono::milliseconds> grace = std::nullopt,
                            int drain_signal = SIGTERM) {
    auto attached = workloads_->Attach({.pid = pid,
                                        .name = "job-" + std::to_string(pid),
                                        .devices = std::move(devices),
                                        .drain_signal = drain_signal,
                                        .grace = grace},
                                       {.pid = 1234, .uid = peer_uid}, admin,
                                       [this, pid](const nlohmann::json& message) {
                                         messages_[pid].push_back(message);
                                         return true;
                                       });
    // The connection stays open while the test runs: its token is kept.
    if (attached) connections_.push_back(*attached);
    return attached;
  }

  // The device's gate moved and its change announced, as DeviceHealth does.
  void Change(int device, HealthState from, HealthState to) {
    (*runtime_->GetDevice(device))->SetHealth(to);
    workloads_->OnDeviceStateChanged({.device = device, .from = from, .to = to});
  }

  std::vector<std::string> Events(pid_t pid) {
    std::vector<std::string> events;
    for (const auto& message : messages_[pid]) events.push_back(message.value("event", ""));
    return events;
  }
  std::string StateOf(pid_t pid) {
    for (const auto& workload : workloads_->Report())
      if (workload["pid"] == pid) return workload["state"];
    return "gone";
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  PipeProcessTable processes_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<Workloads> workloads_;
  std::map<pid_t, std::vector<nlohmann::json>> messages_;
  std::vector<Subscribed> connections_;  // open attach connections
};

TEST_F(WorkloadsTest, ADrainingDeviceSignalsItsWorkloadAndKillsItAtItsGraceNotBefore) {
  processes_.Spawn(4242, kUser);
  processes_.Spawn(4343, kUser);
  auto on_zero = Attach(4242, {0}, kUser, false, 3000ms);
  ASSERT_TRUE(on_zero.has_value()) << on_zero.error().message;
  auto on_one = Attach(4343, {1});
  ASSERT_TRUE(on_one.has_value()) << on_one.error().message;

  Change(0, HealthState::kHealthy, HealthState::kDraining);
  EXPECT_EQ(processes_.SignalsTo(4242), std::vector<int>{SIGTERM});
  ASSERT_EQ(Events(4242), std::vector<std::string>{"drain"});
  EXPECT_EQ(messages_[4242][0]["reason"], "device 0 failed");
  EXPECT_EQ(messages_[4242][0]["grace_ms"], 3000);
  EXPECT_EQ(StateOf(4242), "draining");
  EXPECT_TRUE(processes_.SignalsTo(4343).empty()) << "its device is in service";

  loop_.AdvanceBy(2999ms);
  EXPECT_EQ(processes_.SignalsTo(4242), std::vector<int>{SIGTERM}) << "not killed before its grace";
  loop_.AdvanceBy(1ms);
  EXPECT_EQ(processes_.SignalsTo(4242), (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_EQ(Events(4242), (std::vector<std::string>{"drain", "killed"}));
  EXPECT_EQ(StateOf(4242), "killed");
  const auto counts = workloads_->PublishedCounts();
  EXPECT_EQ(counts.signals.at("drain"), 1u);
  EXPECT_EQ(counts.signals.at("grace_kill"), 1u);
  EXPECT_EQ(counts.by_state.at("killed"), 1u);
  EXPECT_EQ(counts.by_state.at("running"), 1u);
}

TEST_F(WorkloadsTest, DevicesBackBeforeTheGraceEndsCallOffTheKill) {
  processes_.Spawn(4242, kUser);
  ASSERT_TRUE(Attach(4242, {0, 1}).has_value());
  Change(1, HealthState::kHealthy, HealthState::kIsolated);
  EXPECT_EQ(StateOf(4242), "draining");
  // An isolation of the other device while it drains: told, not signalled
  // again.
  Change(0, HealthState::kHealthy, HealthState::kDraining);
  EXPECT_EQ(processes_.SignalsTo(4242), std::vector<int>{SIGTERM});

  loop_.AdvanceBy(1000ms);
  Change(1, HealthState::kIsolated, HealthState::kHealthy);
  EXPECT_EQ(StateOf(4242), "draining") << "device 0 is still out of service";
  Change(0, HealthState::kDraining, HealthState::kHealthy);
  EXPECT_EQ(StateOf(4242), "running");
  loop_.AdvanceBy(10s);
  EXPECT_EQ(processes_.SignalsTo(4242), std::vector<int>{SIGTERM}) << "the kill was called off";
  EXPECT_EQ(Events(4242), (std::vector<std::string>{"drain", "drain", "returned", "returned"}));
}

TEST_F(WorkloadsTest, AttachRefusesOtherUsersProcessesDevicesOutOfServiceAndUnusableSignals) {
  processes_.Spawn(4242, kUser);
  auto other_user = Attach(4242, {0}, kUser + 1);
  ASSERT_FALSE(other_user.has_value());
  EXPECT_EQ(other_user.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(other_user.error().message.find("belongs to uid 1000, not to uid 1001"),
            std::string::npos)
      << other_user.error().message;

  auto missing = Attach(5555, {0});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto no_device = Attach(4242, {7});
  ASSERT_FALSE(no_device.has_value());
  EXPECT_EQ(no_device.error().code, ErrorCode::kNotFound);
  auto sigkill = Attach(4242, {0}, kUser, false, std::nullopt, SIGKILL);
  ASSERT_FALSE(sigkill.has_value());
  EXPECT_EQ(sigkill.error().code, ErrorCode::kInvalidArgument);

  (*runtime_->GetDevice(1))->SetHealth(HealthState::kIsolated);
  auto isolated = Attach(4242, {0, 1});
  ASSERT_FALSE(isolated.has_value());
  EXPECT_EQ(isolated.error().code, ErrorCode::kDeviceIsolated);

  auto by_admin = Attach(4242, {0}, kUser + 1, /*admin=*/true);
  ASSERT_TRUE(by_admin.has_value()) << by_admin.error().message;
  auto twice = Attach(4242, {0});
  ASSERT_FALSE(twice.has_value());
  EXPECT_EQ(twice.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(workloads_->Count(), 1u);
  EXPECT_EQ(workloads_->PublishedCounts().attaches.at("refused"), 6u);
  EXPECT_EQ(workloads_->PublishedCounts().attaches.at("ok"), 1u);
}

TEST_F(WorkloadsTest, AProcessThatExitsIsForgottenAndNothingIsSignalledLater) {
  processes_.Spawn(4242, kUser);
  ASSERT_TRUE(Attach(4242, {0}).has_value());
  ASSERT_EQ(store_->LoadWorkloads()->size(), 1u);
  processes_.Exit(4242);
  loop_.RunUntilIdle();
  EXPECT_EQ(workloads_->Count(), 0u);
  EXPECT_TRUE(store_->LoadWorkloads()->empty()) << "its saved row goes with it";
  Change(0, HealthState::kHealthy, HealthState::kDraining);
  loop_.AdvanceBy(10s);
  EXPECT_TRUE(processes_.Signals().empty());
}

TEST_F(WorkloadsTest, KillConsumerKillsOnlyTheProcessThatMetTheErrorOnThatDevice) {
  processes_.Spawn(4242, kUser);
  processes_.Spawn(4343, kUser);
  ASSERT_TRUE(Attach(4242, {0}).has_value());
  ASSERT_TRUE(Attach(4343, {0, 1}).has_value());

  auto wrong_device = workloads_->KillConsumer(4242, 1, "Xid 48");
  ASSERT_FALSE(wrong_device.has_value());
  EXPECT_EQ(wrong_device.error().code, ErrorCode::kNotFound);
  auto not_followed = workloads_->KillConsumer(9999, 0, "Xid 48");
  ASSERT_FALSE(not_followed.has_value());
  EXPECT_EQ(not_followed.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(processes_.Signals().empty());

  auto killed = workloads_->KillConsumer(4343, 1, "Xid 48");
  ASSERT_TRUE(killed.has_value()) << killed.error().message;
  EXPECT_EQ(processes_.Signals(), (std::vector<std::pair<pid_t, int>>{{4343, SIGKILL}}));
  EXPECT_EQ(Events(4343), std::vector<std::string>{"killed"});
  EXPECT_EQ(messages_[4343][0]["reason"], "Xid 48");
  EXPECT_EQ(StateOf(4343), "killed");
  EXPECT_EQ(StateOf(4242), "running");

  Start({.kill_consumer = false});
  processes_.Spawn(4444, kUser);
  ASSERT_TRUE(Attach(4444, {0}).has_value());
  auto off = workloads_->KillConsumer(4444, 0, "Xid 48");
  ASSERT_FALSE(off.has_value());
  EXPECT_EQ(off.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(processes_.SignalsTo(4444).empty());
}

TEST_F(WorkloadsTest, ARestartedRegistryKeepsTheRestOfAGraceThatWasRunning) {
  processes_.Spawn(4242, kUser);
  processes_.Spawn(4343, kUser, /*start_time=*/2000);
  ASSERT_TRUE(Attach(4242, {0}, kUser, false, 10s).has_value());
  ASSERT_TRUE(Attach(4343, {1}).has_value());
  Change(0, HealthState::kHealthy, HealthState::kDraining);
  loop_.AdvanceBy(3s);

  // The daemon restarts; meanwhile 4343 exited and its pid went to a new
  // process (another start time): that one is not rasd's to follow.
  processes_.Exit(4343);
  processes_.Spawn(4343, kUser, /*start_time=*/9000);
  Start();
  EXPECT_EQ(workloads_->Readopt(), 1u);
  EXPECT_EQ(StateOf(4242), "draining") << "its device is still out of service";
  EXPECT_EQ(StateOf(4343), "gone");

  loop_.AdvanceBy(6900ms);
  EXPECT_EQ(processes_.SignalsTo(4242), (std::vector<int>{SIGTERM, SIGTERM}))
      << "signalled again after the restart, not killed: 3.1 s of its 10 s are left";
  loop_.AdvanceBy(200ms);
  EXPECT_EQ(processes_.SignalsTo(4242), (std::vector<int>{SIGTERM, SIGTERM, SIGKILL}));
  EXPECT_TRUE(processes_.SignalsTo(4343).empty());
}

}  // namespace
}  // namespace rasd::daemon
