// The real rasd with its state directory on a tiny tmpfs that an operator
// (the test) fills up: errors that arrive meanwhile wait in memory and are
// stored once there is room again, an isolation that cannot be saved says
// so, and after a restart nothing is lost and nothing un-isolated. Needs
// root (mount); skips with that reason otherwise.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <fstream>

#include "test_support.h"

namespace rasd::testing {
namespace {

class StoreFullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: mounts a tmpfs to fill as the state disk";
    std::filesystem::create_directories(rasd_.StateDir());
    ASSERT_EQ(::mount("tmpfs", rasd_.StateDir().c_str(), "tmpfs", 0, "size=4m,mode=0750"), 0)
        << std::strerror(errno);
    mounted_ = true;
  }
  void TearDown() override {
    if (!mounted_) return;  // skipped: rasd never started
    if (rasd_.Proc().Running()) rasd_.Stop();
    ::umount2(rasd_.StateDir().c_str(), MNT_DETACH);
  }

  // Fills the state disk to the last byte.
  void Fill() {
    std::ofstream filler(rasd_.StateDir() / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
  }
  void MakeRoom() { std::filesystem::remove(rasd_.StateDir() / "filler"); }

  static std::string Records(int first, int count) {
    std::string text;
    for (int i = first; i < first + count; ++i) {
      text += "4," + std::to_string(i) + "," + std::to_string(1000 + i) +
              ",-;EDAC MC0: 1 CE memory read error on DIMM_A" + std::to_string(i) +
              " (channel:0 slot:0 page:0x" + std::to_string(100 + i) +
              " offset:0x0 grain:32 syndrome:0x0)\n";
    }
    return text;
  }

  nlohmann::json Status() { return rasd_.RasctlJson({"status"}); }

  RasdInstance rasd_;
  bool mounted_ = false;
};

TEST_F(StoreFullDiskTest, NothingIsLostAndNoIsolationForgottenWhileTheDiskIsFull) {
  rasd_.WriteConfig("simulator:\n  devices: 2\n  memory_mib: 64\n");
  std::string why;
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  rasd_.AppendKmsg(Records(1, 10));
  ASSERT_TRUE(WaitUntil([&] { return Status()["events"]["total"] == 10; }, 10s));

  Fill();
  // Enough distinct records that the database must grow to take them.
  for (int chunk = 0; chunk < 20; ++chunk) rasd_.AppendKmsg(Records(11 + chunk * 100, 100));
  ASSERT_TRUE(WaitUntil([&] { return Status()["ras"]["kmsg_records"] == 2010; }, 20s));
  ASSERT_TRUE(WaitUntil([&] { return Status()["ras"]["store_ok"] == false; }, 10s))
      << Status()["ras"].dump();
  EXPECT_GT(Status()["ras"]["store_backlog_events"].get<int>(), 0);
  const auto isolate = rasd_.Rasctl({"isolate", "1"});
  EXPECT_NE(isolate.exit_code, 0) << "the operator is told: " << isolate.out;
  EXPECT_NE(isolate.err.find("could not be saved"), std::string::npos) << isolate.err;
  EXPECT_EQ(rasd_.RasctlJson({"devices", "1"})["devices"][0]["state"], "isolated");

  MakeRoom();
  ASSERT_TRUE(WaitUntil([&] { return Status()["ras"]["store_ok"] == true; }, 20s));
  ASSERT_TRUE(WaitUntil([&] { return Status()["events"]["total"] == 2010; }, 10s))
      << Status()["events"].dump();
  EXPECT_EQ(Status()["ras"]["store_backlog_events"], 0);
  EXPECT_EQ(Status()["ras"]["store_dropped_events"], 0);

  ASSERT_EQ(rasd_.Stop(), 0);
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  EXPECT_EQ(Status()["events"]["total"], 2010) << "nothing lost, nothing read twice";
  EXPECT_EQ(rasd_.RasctlJson({"devices", "1"})["devices"][0]["state"], "isolated")
      << "a restart does not forget the isolation";
}

// An attachment made while the disk is full: `rasctl run` says it is not
// saved, rasd retries, and once there is room a rasd killed and restarted
// follows the workload again.
TEST_F(StoreFullDiskTest, AnAttachmentTheDiskCouldNotTakeIsSavedOnceThereIsRoom) {
  rasd_.WriteConfig("simulator:\n  devices: 2\n  memory_mib: 64\n");
  std::string why;
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  Fill();
  const auto err = rasd_.Dir() / "run.err";
  Process run({.argv = {RASCTL_BINARY, "--socket", rasd_.Socket().string(), "run", "--devices",
                        "1", "--name", "unsaved", "--", "/bin/sh", "-c",
                        "while :; do sleep 0.05; done"},
               .stderr_path = err});
  ASSERT_TRUE(WaitUntil([&] { return ReadText(err).find("on device(s) 1") != std::string::npos; },
                        5s))
      << ReadText(err);
  EXPECT_NE(ReadText(err).find("could not save the attachment"), std::string::npos)
      << ReadText(err);
  MakeRoom();
  ASSERT_TRUE(WaitUntil([&] { return rasd_.Stderr().find("is saved now") != std::string::npos; },
                        5s))
      << rasd_.Stderr();
  rasd_.Proc().Signal(SIGKILL);
  (void)rasd_.Proc().Wait(5s);
  ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
  const auto workloads = rasd_.RasctlJson({"jobs"})["workloads"];
  ASSERT_EQ(workloads.size(), 1U) << workloads.dump();
  EXPECT_EQ(workloads[0]["name"], "unsaved");
  ASSERT_EQ(rasd_.Rasctl({"isolate", "1"}).exit_code, 0);
  EXPECT_TRUE(run.Wait(5s).has_value()) << "the re-adopted workload was drained";
}

}  // namespace
}  // namespace rasd::testing
