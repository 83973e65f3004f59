// The whole Daemon on a SimulatedEventLoop: the watchdog's cadence on
// simulated time, a kernel-log backlog taken in slices with the control
// socket served between them, and the control socket answering while a
// self-test runs. The control socket and the kmsg file are real.

#include "daemon.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/common/unique_fd.h"
#include "rasd/ras/state_store.h"
#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

common::UniqueFd UnixSocket(int type) {
  return common::UniqueFd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
}

sockaddr_un Address(const fs::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  return address;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("daemon");
    fs::create_directories(dir_ / "host/dev");
    fs::create_directories(dir_ / "host/proc/sys/kernel/random");
    std::ofstream(dir_ / "host/proc/sys/kernel/random/boot_id") << "test-boot\n";
    std::ofstream(dir_ / "host/dev/kmsg").flush();
  }
  void TearDown() override {
    daemon_.reset();
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    ::unsetenv("NOTIFY_SOCKET");
    fs::remove_all(dir_);
  }

  Config TestConfig() {
    Config config;
    config.host.root = dir_ / "host";
    config.daemon.state_dir = dir_ / "state";
    config.control.socket = dir_ / "rasd.sock";
    config.control.admin_group = "";
    config.metrics.listen = "";
    config.ras.tracefs = false;
    config.ras.nvml = false;
    config.simulator.devices = 2;
    config.simulator.memory_mib = 64;
    return config;
  }

  void Start(Config config) {
    Daemon::StartOptions options{.loop = &loop_};
    options.self_test.step_timeout = 500ms;
    auto started = Daemon::Start(std::move(options), std::move(config));
    ASSERT_TRUE(started.has_value()) << started.error().message;
    daemon_ = std::move(*started);
  }

  common::UniqueFd Connect() {
    auto fd = UnixSocket(SOCK_STREAM);
    const auto address = Address(dir_ / "rasd.sock");
    EXPECT_EQ(::connect(fd.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    return fd;
  }

  void Send(const common::UniqueFd& client, const json& request) {
    const std::string line = request.dump() + "\n";
    ASSERT_EQ(::send(client.Get(), line.data(), line.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(line.size()));
  }

  // The next reply line if one has arrived, without waiting.
  std::optional<json> TryReceive(const common::UniqueFd& client, std::string& buffer) {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(client.Get(), chunk, sizeof chunk, MSG_DONTWAIT);
      if (n <= 0) break;
      buffer.append(chunk, static_cast<std::size_t>(n));
    }
    const auto newline = buffer.find('\n');
    if (newline == std::string::npos) return std::nullopt;
    json reply = json::parse(buffer.substr(0, newline));
    buffer.erase(0, newline + 1);
    return reply;
  }

  // Runs the loop (no simulated time passes) until a reply arrives.
  json Receive(const common::UniqueFd& client, std::string& buffer) {
    std::optional<json> reply;
    const bool answered = rasd::testing::Eventually(
        [&] {
          reply = TryReceive(client, buffer);
          if (!reply) loop_.RunUntilIdle();
          return reply.has_value();
        },
        20s);
    if (answered) return *reply;
    ADD_FAILURE() << "no reply";
    return json();
  }

  json Ask(const json& request) {
    auto client = Connect();
    std::string buffer;
    Send(client, request);
    return Receive(client, buffer);
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, TheWatchdogIsPettedEveryHalfIntervalOfSimulatedTime) {
  auto listener = UnixSocket(SOCK_DGRAM);
  const auto address = Address(dir_ / "notify.sock");
  ASSERT_EQ(::bind(listener.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ::setenv("NOTIFY_SOCKET", (dir_ / "notify.sock").c_str(), 1);
  ::setenv("WATCHDOG_USEC", "2000000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  Start(TestConfig());
  auto pets = [&] {
    int count = 0;
    char message[256];
    for (;;) {
      const ssize_t n = ::recv(listener.Get(), message, sizeof message - 1, MSG_DONTWAIT);
      if (n <= 0) return count;
      if (std::string(message, static_cast<std::size_t>(n)).find("WATCHDOG=1") != std::string::npos)
        ++count;
    }
  };
  loop_.RunUntilIdle();
  EXPECT_EQ(pets(), 0);
  loop_.AdvanceBy(999ms);
  EXPECT_EQ(pets(), 0);
  loop_.AdvanceBy(1ms);
  EXPECT_EQ(pets(), 1);
  loop_.AdvanceBy(9s);
  EXPECT_EQ(pets(), 9) << "one every WATCHDOG_USEC / 2";
}

TEST_F(DaemonTest, AKmsgBacklogIsTakenInSlicesWithTheControlSocketServedBetween) {
  constexpr int kRecords = 3 * RasIngest::kKmsgSlice + 100;
  {
    std::ofstream kmsg(dir_ / "host/dev/kmsg");
    for (int i = 1; i <= kRecords; ++i) {
      kmsg << fmt::format(
          "4,{},{},-;EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#0_DIMM#0 "
          "(channel:0 slot:0 page:0x{:x} offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x0090 "
          "socket:0 imc:0 rank:0 bg:0 ba:0 row:0x0 col:0x0)\n",
          i, 1000 + i, 0x1000 + i % 16);
    }
  }
  Start(TestConfig());
  // Start read the first slice; the rest waits behind the loop.
  auto client = Connect();
  std::string buffer;
  Send(client, {{"command", "status"}});
  std::optional<json> reply;
  int rounds = 0;
  while (!reply && rounds < 10) {
    loop_.RunOnce();
    ++rounds;
    reply = TryReceive(client, buffer);
  }
  ASSERT_TRUE(reply.has_value());
  const auto read_when_answered = (*reply)["result"]["ras"]["kmsg_records"].get<std::uint64_t>();
  EXPECT_LT(read_when_answered, static_cast<std::uint64_t>(kRecords))
      << "the status request was answered before the whole backlog was read";
  // One slice a round: the round that accepted the connection, then the
  // one that served the request.
  EXPECT_LE(read_when_answered, 3 * RasIngest::kKmsgSlice);

  loop_.RunUntilIdle();
  const json status = Ask({{"command", "status"}})["result"];
  EXPECT_EQ(status["ras"]["kmsg_records"], kRecords);
  EXPECT_EQ(status["ras"]["events_ingested"], kRecords);
  EXPECT_EQ(status["events"]["total"], kRecords) << "every error counted once, coalesced or not";
  // Repeated "soft-offline disabled" decisions share a row with their count.
  const json actions = Ask({{"command", "actions"}, {"args", {{"limit", 10000}}}})["result"];
  std::uint64_t disabled_rows = 0, disabled_decisions = 0;
  for (const auto& action : actions["actions"]) {
    if (action["result"] != "disabled") continue;
    ++disabled_rows;
    disabled_decisions += action["count"].get<std::uint64_t>();
  }
  EXPECT_GT(disabled_decisions, 0u);
  EXPECT_LE(disabled_rows, 16u) << "at most one row per page and minute";
}

// A record already in the kernel log at start is decided like any later
// one: the recovery advisor, wired after the sources were made, sees it.
TEST_F(DaemonTest, ARecordFoundAtStartReachesTheRecoveryAdvisor) {
  std::ofstream(dir_ / "host/dev/kmsg")
      << "4,1,1000,-;NVRM: Xid (PCI:ffff:c1:00): 79, pid='<unknown>', name=<unknown>, GPU has "
         "fallen off the bus.\n";
  Start(TestConfig());
  loop_.RunUntilIdle();
  const json devices = Ask({{"command", "devices"}})["result"]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]["state"], "isolated") << devices[0].dump();
  // The catalog's row for Xid 79.
  EXPECT_EQ(devices[0]["suggested_action"], "reboot-node") << devices[0].dump();
  EXPECT_EQ(devices[1]["suggested_action"], "none");
}

TEST_F(DaemonTest, TheControlSocketAnswersWhileASelfTestRuns) {
  Start(TestConfig());
  EXPECT_EQ(Ask({{"command", "isolate"}, {"args", {{"device", 1}}}})["ok"], true);
  // A hung device: the self-test's first step waits out its timeout.
  EXPECT_EQ(Ask({{"command", "inject"}, {"args", {{"kind", "hang"}, {"device", 1}}}})["ok"], true);
  auto undrain_client = Connect();
  std::string undrain_buffer;
  Send(undrain_client, {{"command", "undrain"}, {"args", {{"device", 1}}}});
  loop_.RunUntilIdle();
  const auto started = std::chrono::steady_clock::now();
  const json ping = Ask({{"command", "ping"}});
  EXPECT_EQ(ping["result"]["pong"], true);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 200ms) << "not behind the self-test";
  EXPECT_FALSE(TryReceive(undrain_client, undrain_buffer).has_value());
  const json devices = Ask({{"command", "devices"}, {"args", {{"device", 1}}}})["result"];
  EXPECT_EQ(devices["devices"][0]["self_test_running"], true);
  const json second = Ask({{"command", "undrain"}, {"args", {{"device", 1}}}});
  EXPECT_EQ(second["ok"], false);
  EXPECT_NE(second["error"]["message"].get<std::string>().find("self-test already"),
            std::string::npos);

  const json refused = Receive(undrain_client, undrain_buffer);
  EXPECT_EQ(refused["ok"], false);
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("stays isolated"),
            std::string::npos)
      << refused.dump();
}

TEST_F(DaemonTest, ABackupIsCopiedInSlicesWithTheControlSocketServedBetween) {
  {
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
    ras::RasEvent event{.source = "kmsg", .origin = "edac", .summary = std::string(1000, 'x')};
    ASSERT_TRUE((*store)->RecordEvents(std::vector<ras::RasEvent>(8000, event)).has_value());
  }
  Start(TestConfig());
  const fs::path copy = dir_ / "copy.db";
  auto backup_client = Connect();
  std::string backup_buffer;
  Send(backup_client, {{"command", "backup"}, {"args", {{"file", copy.string()}}}});
  // While it copies: another request is answered, a second backup refused.
  auto other_client = Connect();
  std::string other_buffer;
  Send(other_client, {{"command", "backup"}, {"args", {{"file", (dir_ / "other.db").string()}}}});
  std::optional<json> refused;
  for (int round = 0; round < 10 && !refused; ++round) {
    loop_.RunOnce();
    refused = TryReceive(other_client, other_buffer);
  }
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ((*refused)["error"]["code"], "unavailable") << refused->dump();
  EXPECT_FALSE(TryReceive(backup_client, backup_buffer).has_value()) << "still copying";
  EXPECT_FALSE(fs::exists(copy)) << "no half file under the final name";

  const json done = Receive(backup_client, backup_buffer);
  ASSERT_EQ(done["ok"], true) << done.dump();
  EXPECT_EQ(done["result"]["file"], copy.string());
  EXPECT_GT(done["result"]["pages"].get<int>(), 4 * ControlApi::kBackupPagesPerSlice);
  EXPECT_EQ(done["result"]["bytes"].get<std::uintmax_t>(), fs::file_size(copy));
  EXPECT_FALSE(fs::exists(dir_ / "other.db"));
}

TEST_F(DaemonTest, ADamagedDatabaseIsKeptAsideAndEveryDeviceIsFencedUntilChecked) {
  {
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value());
  }
  std::filesystem::resize_file(dir_ / "state" / ras::StateStore::kDatabaseFile, 0);
  Start(TestConfig());
  const json status = Ask({{"command", "status"}})["result"];
  ASSERT_FALSE(status["database"]["damaged_at_start"].is_null()) << status["database"].dump();
  EXPECT_NE(status["database"]["damaged_at_start"]["problem"].get<std::string>().find("empty"),
            std::string::npos);
  const fs::path kept = status["database"]["damaged_at_start"]["kept_as"].get<std::string>();
  EXPECT_TRUE(fs::exists(kept)) << "the damaged file is kept for examination";
  const json devices = Ask({{"command", "devices"}})["result"]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  for (const auto& device : devices) {
    EXPECT_EQ(device["state"], "isolated");
    EXPECT_NE(device["reason"].get<std::string>().find("state database was damaged"),
              std::string::npos);
  }
  // Checked by an operator: the self-test returns it.
  const json undrained = Ask({{"command", "undrain"}, {"args", {{"device", 0}}}});
  EXPECT_EQ(undrained["ok"], true) << undrained.dump();
}

// The saved states (or retired pages) of a database that opened cannot be
// read: rasd cannot tell what was isolated or poisoned, so every device is
// isolated until an operator checks it, and the file stays where it is.
// While the pages stay unread an undrain is refused; once they can be read
// they are retired again and the undrain goes through.
TEST_F(DaemonTest, UnreadableSavedStatesOrPagesFenceEveryDeviceAndLeaveTheDatabaseInPlace) {
  for (const auto& [unreadable, problem] : std::vector<std::pair<std::string, std::string>>{
           {"device states", "cannot read the saved device states"},
           {"retired pages", "cannot read the retired pages"}}) {
    SCOPED_TRACE(unreadable);
    daemon_.reset();
    fs::remove_all(dir_ / "state");
    {
      auto store = ras::StateStore::Open(dir_ / "state");
      ASSERT_TRUE(store.has_value());
      // A page of the simulator's device 0: its UUIDs are fixed, and its
      // memory starts at 1 << 40.
      ASSERT_TRUE((*store)
                      ->SaveRetiredPage({"SIM-5a5d0000-0000-0000-0000-000000000000",
                                         (std::uint64_t{1} << 40) + 0x200000, "UCNA",
                                         std::chrono::system_clock::now()})
                      .has_value());
    }
    auto failing = std::make_shared<bool>(true);
    Daemon::StartOptions options{.loop = &loop_};
    options.self_test.step_timeout = 500ms;
    options.prepare_store = [unreadable = unreadable, failing](ras::StateStore& store) {
      store.SetReadFault([unreadable, failing](std::string_view what) -> std::optional<Error> {
        if (what != unreadable || !*failing) return std::nullopt;
        return Error{ErrorCode::kIoError, "disk I/O error"};
      });
    };
    auto started = Daemon::Start(std::move(options), TestConfig());
    ASSERT_TRUE(started.has_value()) << started.error().message;
    daemon_ = std::move(*started);

    const json database = Ask({{"command", "status"}})["result"]["database"];
    EXPECT_TRUE(database["damaged_at_start"].is_null()) << database.dump();
    ASSERT_TRUE(database["unreadable_at_start"].is_string()) << database.dump();
    EXPECT_EQ(database["unreadable_at_start"], problem + ": disk I/O error");
    EXPECT_TRUE(fs::exists(dir_ / "state" / ras::StateStore::kDatabaseFile));
    for (const auto& entry : fs::directory_iterator(dir_ / "state"))
      EXPECT_EQ(entry.path().filename().string().find("damaged"), std::string::npos)
          << "nothing is set aside: " << entry.path();
    const json devices = Ask({{"command", "devices"}})["result"]["devices"];
    ASSERT_EQ(devices.size(), 2u);
    for (const auto& device : devices) {
      EXPECT_EQ(device["state"], "isolated");
      EXPECT_NE(device["reason"].get<std::string>().find(problem), std::string::npos)
          << device.dump();
    }
    json undrained = Ask({{"command", "undrain"}, {"args", {{"device", 0}}}});
    if (unreadable == "retired pages") {
      EXPECT_EQ(undrained["ok"], false) << undrained.dump();
      EXPECT_NE(undrained.dump().find("cannot read the retired pages"), std::string::npos)
          << undrained.dump();
      *failing = false;  // the disk answers again
      undrained = Ask({{"command", "undrain"}, {"args", {{"device", 0}}}});
    }
    EXPECT_EQ(undrained["ok"], true) << undrained.dump();
    const json zero =
        Ask({{"command", "devices"}, {"args", {{"device", 0}}}})["result"]["devices"][0];
    EXPECT_EQ(zero["state"], "healthy");
    EXPECT_EQ(zero["pool"]["retired_pages"], 1) << "the poisoned page is out of the pool";
  }
}

}  // namespace
}  // namespace rasd::daemon
