// RasIngest on a SimulatedEventLoop over a fixture host: sources that are
// not there at start are looked for again with a backoff (10 s doubling to
// 10 min), status says so, and a source that appears later becomes active
// without a restart; crash records are decoded once, remembered in the store
// across a restart.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ras_ingest.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class RasIngestSourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("ingest");
    fs::create_directories(dir_ / "host/proc/sys/kernel/random");
    Write("proc/sys/kernel/random/boot_id", "11111111-2222-3333-4444-555555555555\n");
    host_ = std::make_unique<common::HostEnv>(dir_ / "host", loop_.SharedClock());
    auto store = ras::StateStore::Open(dir_ / "state");
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ = testing::SimRuntime({.devices = 1});
    ASSERT_NE(runtime_, nullptr);
    options_.kmsg = false;
    options_.nvml = false;
    options_.edac_poll = 1s;
  }
  void TearDown() override {
    ingest_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  void Write(const std::string& path, const std::string& text) {
    fs::create_directories((dir_ / "host" / path).parent_path());
    std::ofstream(dir_ / "host" / path, std::ios::trunc) << text;
  }
  void StartIngest() {
    ingest_.reset();
    // As the pipeline does: events and cursors in one transaction.
    ingest_ = std::make_unique<RasIngest>(loop_, *host_, *store_, *runtime_, options_,
                                          [this](SourceBatch batch) {
                                            ras::StoreBatch stored;
                                            stored.events = batch.events;
                                            stored.cursors = std::move(batch.cursors);
                                            ASSERT_TRUE(store_->Commit(stored).has_value());
                                            for (auto& event : batch.events)
                                              delivered_.push_back(std::move(event));
                                            for (auto& report : batch.links)
                                              links_.push_back(std::move(report));
                                          });
    auto started = ingest_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().ToString();
  }
  RasIngest::Stats::SourceState Source(const std::string& name) const {
    return ingest_->GetStats().sources.at(name);
  }

  common::SimulatedEventLoop loop_;
  fs::path dir_;
  std::unique_ptr<common::HostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  std::unique_ptr<runtime::Runtime> runtime_;
  Config::Ras options_;
  std::unique_ptr<RasIngest> ingest_;
  std::vector<ras::RasEvent> delivered_;
  std::vector<ras::LinkReport> links_;  // the link reports delivered, in order
};

TEST_F(RasIngestSourcesTest, MissingSourcesAreLookedForWithABackoffAndActivateWhenTheyAppear) {
  StartIngest();
  for (const char* name : {"edac", "pstore", "bert", "tracefs"}) {
    EXPECT_EQ(Source(name).state, "absent") << name << ": " << Source(name).reason;
    EXPECT_NE(Source(name).reason.find("looked for again in 10 s"), std::string::npos)
        << name << ": " << Source(name).reason;
  }
  EXPECT_EQ(Source("kmsg").state, "disabled");
  EXPECT_EQ(Source("nvml").state, "disabled");

  // Each look that finds nothing doubles the wait, up to 10 minutes: a host
  // without EDAC does not re-open the missing directory every few seconds.
  std::chrono::seconds waited{10};
  for (const int next : {20, 40, 80, 160, 320, 600, 600}) {
    loop_.AdvanceBy(waited - 1s);
    EXPECT_NE(Source("edac").reason.find(fmt::format("in {} s", waited.count())),
              std::string::npos)
        << "not looked again early: " << Source("edac").reason;
    loop_.AdvanceBy(1s);
    for (const char* name : {"edac", "pstore", "bert", "tracefs"}) {
      EXPECT_NE(Source(name).reason.find(fmt::format("looked for again in {} s", next)),
                std::string::npos)
          << name << " after " << waited.count() << " s: " << Source(name).reason;
    }
    waited = std::chrono::seconds(next);
  }

  // A driver loads, and the crash dump and boot error table show up.
  Write("sys/devices/system/edac/mc/mc0/ce_count", "0\n");
  Write("sys/devices/system/edac/mc/mc0/ue_count", "0\n");
  Write("var/lib/systemd/pstore/dmesg-ramoops-0",
        "Panic#1 Part1\n<0>[ 10.0] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: "
        "a600000000020408\n");
  Write("sys/firmware/acpi/tables/data/BERT", "");
  loop_.AdvanceBy(600s);
  EXPECT_EQ(Source("edac").state, "active") << Source("edac").reason;
  EXPECT_EQ(Source("pstore").state, "active") << Source("pstore").reason;
  EXPECT_EQ(Source("bert").state, "active") << Source("bert").reason;
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(delivered_[0].source, "pstore");
  EXPECT_TRUE(delivered_[0].historical);
  EXPECT_EQ(ingest_->GetStats().crash_records_read, 2u) << "the dump and the BERT table";

  // Active EDAC is polled at its period; an increase is an event.
  Write("sys/devices/system/edac/mc/mc0/ce_count", "3\n");
  loop_.AdvanceBy(1s);
  ASSERT_EQ(delivered_.size(), 2u);
  EXPECT_EQ(delivered_[1].count, 3u);

  // A restart (same store) finds the dump already read.
  StartIngest();
  EXPECT_EQ(delivered_.size(), 2u) << "the crash dump is remembered in the store";
  EXPECT_EQ(Source("pstore").state, "active");
  EXPECT_NE(Source("pstore").reason.find("0 new"), std::string::npos) << Source("pstore").reason;
  EXPECT_NE(Source("bert").reason.find("read before"), std::string::npos) << Source("bert").reason;

  // The driver goes away: looked for again soon, then backing off.
  fs::remove_all(dir_ / "host/sys/devices/system/edac");
  loop_.AdvanceBy(1s);
  EXPECT_EQ(Source("edac").state, "absent");
  EXPECT_NE(Source("edac").reason.find("in 10 s"), std::string::npos) << Source("edac").reason;
}

TEST_F(RasIngestSourcesTest, AnUnreadablePstoreIsNoPermission) {
  fs::create_directories(dir_ / "host/sys/fs/pstore");
  fs::permissions(dir_ / "host/sys/fs/pstore", fs::perms::none);
  // Root reads a mode 000 directory: as root the sources start under
  // nobody's effective uid, as an unprivileged rasd would.
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::seteuid(65534), 0);
  }
  StartIngest();
  if (root) {
    ASSERT_EQ(::seteuid(0), 0);
  }
  EXPECT_EQ(Source("pstore").state, "no_permission") << Source("pstore").reason;
  fs::permissions(dir_ / "host/sys/fs/pstore", fs::perms::owner_all);
}

}  // namespace
}  // namespace rasd::daemon

namespace rasd::daemon {
namespace {

// NVML numbers GPUs in PCI order: an index NVML could not open is the
// runtime's NVIDIA device at that place in PCI order, where the GPUs it did
// open bear that order out; otherwise nothing is guessed.
TEST(DeviceOfUnopenedGpuTest, AnIndexIsItsPlaceInPciOrderWhereTheOpenedGpusBearThatOut) {
  const std::vector<std::pair<std::string, int>> nvidia = {
      {"0000:D7:00.0", 5}, {"0000:3b:00.0", 2}, {"0000:5e:00.0", 7}};
  // NVML opened GPU 0 (device 2) and GPU 2 (device 5); GPU 1 did not open.
  const std::vector<std::pair<unsigned, std::optional<int>>> opened = {{0, 2}, {2, 5}};
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 1", 3, opened, nvidia), 7);
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 3", 3, opened, nvidia), std::nullopt) << "no such index";
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 1", 4, opened, nvidia), std::nullopt)
      << "NVML counts a GPU rasd does not run";
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 1", 3, {{0, 2}, {2, std::nullopt}}, nvidia), std::nullopt)
      << "an opened GPU at no runtime device";
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 1", 3, {{0, 5}, {2, 2}}, nvidia), std::nullopt)
      << "the opened GPUs are not in PCI order";
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 1", 3, {{0, 2}}, nvidia), 7) << "one refused: still in order";
  EXPECT_EQ(DeviceOfUnopenedGpu("0000:5e:00.0", 3, opened, nvidia), std::nullopt);
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU 1x", 3, opened, nvidia), std::nullopt);
  EXPECT_EQ(DeviceOfUnopenedGpu("GPU ", 3, opened, nvidia), std::nullopt);
}

}  // namespace
}  // namespace rasd::daemon
