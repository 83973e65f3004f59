// The state database's integrity with the real rasd and rasctl: an online
// backup while rasd runs, restored into a second rasd; a write-ahead log
// deleted or garbled after a kill -9 makes a degraded start (every device
// isolated, status and log say why), never a silent loss; a damaged saved
// row neither stops rasd nor frees what it held.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "rasd/ras/state_store.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

nlohmann::json Devices(RasdInstance& rasd) {
  const auto result = rasd.Rasctl({"--json", "devices"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out, nullptr, false);
}

nlohmann::json Status(RasdInstance& rasd) {
  const auto result = rasd.Rasctl({"--json", "status"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out, nullptr, false);
}

bool Start(RasdInstance& rasd) {
  std::string why;
  const bool started = rasd.Start({}, {}, &why);
  EXPECT_TRUE(started) << why;
  return started;
}

TEST(StateIntegrityTest, BackupOfTheLiveDatabaseRestoresIntoASecondRasd) {
  RasdInstance rasd;
  ASSERT_TRUE(Start(rasd));
  const auto isolated = rasd.Rasctl({"isolate", "1", "--reason", "before the backup"});
  ASSERT_EQ(isolated.exit_code, 0) << isolated.err;
  TempDir out;
  const auto copy = out / "x.db";

  const auto backup = rasd.Rasctl({"backup", copy.string()});
  ASSERT_EQ(backup.exit_code, 0) << backup.err;
  EXPECT_EQ(backup.out.rfind("backed up to " + copy.string() + ": ", 0), 0u) << backup.out;
  EXPECT_NE(backup.out.find(" bytes, "), std::string::npos) << backup.out;
  EXPECT_TRUE(std::filesystem::exists(copy));

  // Refused over an existing file unless --force; --json has the numbers.
  const auto again = rasd.Rasctl({"backup", copy.string()});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  const auto forced = rasd.RasctlJson({"backup", "--force", copy.string()});
  EXPECT_EQ(forced["file"], copy.string());
  EXPECT_EQ(forced["bytes"].get<std::uint64_t>(), std::filesystem::file_size(copy));
  EXPECT_GT(forced["pages"].get<int>(), 0);

  // A relative path is rasctl's directory, not rasd's.
  const auto relative = RunToCompletion(
      {.argv = {"/bin/sh", "-c",
                "cd '" + out.Path().string() + "' && exec '" RASCTL_BINARY "' --socket '" +
                    rasd.Socket().string() + "' backup relative.db"}});
  EXPECT_EQ(relative.exit_code, 0) << relative.err;
  EXPECT_TRUE(std::filesystem::exists(out / "relative.db")) << relative.out;
  // And rasd itself takes only absolute paths.
  RawClient raw(rasd.Socket());
  ASSERT_TRUE(raw.Send(R"({"command": "backup", "args": {"file": "x.db"}})" "\n"));
  const auto answer = nlohmann::json::parse(raw.ReadLine().value_or("{}"), nullptr, false);
  EXPECT_EQ(answer.value("ok", true), false) << answer.dump();
  EXPECT_NE(answer.dump().find("must be an absolute path"), std::string::npos) << answer.dump();

  if (::geteuid() == 0) {
    constexpr uid_t kNobody = 65534;
    constexpr gid_t kNogroup = 65534;
    const auto refused = rasd.Rasctl({"backup", (out / "nobody.db").string()}, kNobody, kNogroup);
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_NE(refused.err.find("permission_denied"), std::string::npos) << refused.err;
    EXPECT_FALSE(std::filesystem::exists(out / "nobody.db"));
  }

  // A second rasd on a state directory holding only the copy.
  RasdInstance restored;
  std::filesystem::create_directories(restored.StateDir());
  std::filesystem::copy_file(copy, restored.StateDir() / "rasd.db");
  ASSERT_TRUE(Start(restored));
  const auto devices = Devices(restored);
  EXPECT_EQ(devices["devices"][1]["state"], "isolated") << devices.dump();
  EXPECT_EQ(devices["devices"][1]["reason"], "before the backup");
  EXPECT_EQ(devices["devices"][0]["state"], "healthy");
  EXPECT_TRUE(Status(restored)["database"]["damaged_at_start"].is_null())
      << "the copy is a cleanly closed database";
}

// kill -9 right after an isolation, then the log is lost: the restart keeps
// the old files, isolates every device and says why.
void LoseTheLogAfterAKill(const std::function<void(const std::filesystem::path&)>& lose,
                          const std::string& problem) {
  RasdInstance rasd;
  ASSERT_TRUE(Start(rasd));
  ASSERT_EQ(rasd.Rasctl({"isolate", "2", "--reason", "before the crash"}).exit_code, 0);
  rasd.Proc().Signal(SIGKILL);
  ASSERT_TRUE(rasd.Proc().Wait(5s).has_value());
  const auto wal = rasd.StateDir() / "rasd.db-wal";
  ASSERT_TRUE(std::filesystem::exists(wal)) << "a kill -9 leaves the log";
  lose(wal);

  ASSERT_TRUE(Start(rasd));
  const auto damage = Status(rasd)["database"]["damaged_at_start"];
  ASSERT_TRUE(damage.is_object()) << damage.dump();
  EXPECT_NE(damage["problem"].get<std::string>().find(problem), std::string::npos)
      << damage.dump();
  EXPECT_TRUE(std::filesystem::exists(damage["kept_as"].get<std::string>())) << damage.dump();
  EXPECT_NE(rasd.Stderr().find(problem), std::string::npos) << rasd.Stderr();
  const auto text = rasd.Rasctl({"status"});
  EXPECT_NE(text.out.find("DAMAGED AT START: "), std::string::npos) << text.out;
  const auto devices = Devices(rasd);
  ASSERT_FALSE(devices["devices"].empty());
  for (const auto& device : devices["devices"]) {
    EXPECT_EQ(device["state"], "isolated") << device.dump();
  }
}

TEST(StateIntegrityTest, ALogDeletedAfterAKillIsADegradedStart) {
  LoseTheLogAfterAKill(
      [](const std::filesystem::path& wal) {
        std::filesystem::remove(wal);
        std::filesystem::remove(wal.string().substr(0, wal.string().size() - 4) + "-shm");
      },
      "write-ahead log is missing or empty");
}

TEST(StateIntegrityTest, AGarbledLogAfterAKillIsADegradedStart) {
  LoseTheLogAfterAKill(
      [](const std::filesystem::path& wal) {
        std::fstream file(wal, std::ios::in | std::ios::out | std::ios::binary);
        const std::string junk(32, '\x5a');
        file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
      },
      "not a SQLite write-ahead log");
}

TEST(StateIntegrityTest, AKillWithTheLogIntactIsNoDamage) {
  RasdInstance rasd;
  ASSERT_TRUE(Start(rasd));
  ASSERT_EQ(rasd.Rasctl({"isolate", "2"}).exit_code, 0);
  rasd.Proc().Signal(SIGKILL);
  ASSERT_TRUE(rasd.Proc().Wait(5s).has_value());
  ASSERT_TRUE(Start(rasd));
  EXPECT_TRUE(Status(rasd)["database"]["damaged_at_start"].is_null());
  const auto devices = Devices(rasd);
  EXPECT_EQ(devices["devices"][2]["state"], "isolated");
  EXPECT_EQ(devices["devices"][0]["state"], "healthy");
}

// The saved link-health rows of devices whose links kept them out of collectives,
// damaged: rasd starts, keeps each such device out until its links prove
// themselves (never a flapping hold only an operator could end) and says
// why; an unreadable whole is a fresh start, said as such.
TEST(StateIntegrityTest, ADamagedLinkHealthRowKeepsItsDeviceOutOfCollectivesAndRasdUp) {
  RasdInstance rasd;
  ASSERT_TRUE(Start(rasd));
  auto devices = Devices(rasd)["devices"];
  ASSERT_GE(devices.size(), 3U) << devices.dump();
  const std::string wrong_type = devices[1]["uuid"].get<std::string>();
  const std::string not_an_object = devices[2]["uuid"].get<std::string>();
  ASSERT_TRUE(rasd.Stop().has_value());
  auto save = [&](const std::string& value) {
    auto store = ras::StateStore::Open(rasd.StateDir());
    ASSERT_TRUE(store.has_value()) << store.error().message;
    ASSERT_TRUE((*store)->SaveNodeValue("link_health", value).has_value());
  };
  save(nlohmann::json{
      {wrong_type, {{"held", "yes"}, {"degraded_by_link", true}}},
      {not_an_object,
       7}}.dump());
  ASSERT_TRUE(Start(rasd));
  devices = Devices(rasd)["devices"];
  EXPECT_EQ(devices[0]["links_usable"], true) << devices.dump();
  EXPECT_EQ(devices[1]["links_usable"], false) << devices.dump();
  EXPECT_EQ(devices[2]["links_usable"], false) << devices.dump();
  EXPECT_NE(rasd.Stderr().find("device 1: its saved link state is damaged (bad argument 'held'"),
            std::string::npos)
      << rasd.Stderr();
  EXPECT_NE(rasd.Stderr().find("device 2: its saved link state is damaged (not an object)"),
            std::string::npos)
      << rasd.Stderr();
  ASSERT_TRUE(rasd.Stop().has_value());

  save("{\"" + wrong_type + "\": ");
  ASSERT_TRUE(Start(rasd));
  devices = Devices(rasd)["devices"];
  EXPECT_EQ(devices[1]["links_usable"], true) << devices.dump();
  EXPECT_NE(rasd.Stderr().find("link health: the saved state is unreadable: started afresh"),
            std::string::npos)
      << rasd.Stderr();
}

}  // namespace
}  // namespace rasd::testing
