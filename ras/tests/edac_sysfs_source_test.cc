#include "rasd/ras/edac_sysfs_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>

namespace rasd::ras {
namespace {

// Copies one of the corpus's EDAC trees (tests/data/edac_sysfs) so that
// tests can change its counters.
class EdacSysfsTest : public ::testing::Test {
 protected:
  void UseTree(const std::string& name) {
    char pattern[] = "/tmp/rasd-edac-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    std::filesystem::copy(std::string(RASD_TEST_DATA_DIR) + "/edac_sysfs/" + name, root_,
                          std::filesystem::copy_options::recursive);
    std::filesystem::permissions(root_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root_)) {
      std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_write,
                                   std::filesystem::perm_options::add);
    }
    host_ = std::make_unique<common::HostEnv>(root_, clock_);
  }
  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  void Set(const std::string& path, const std::string& value) {
    std::ofstream(root_ / "sys/devices/system/edac/mc" / path, std::ios::trunc) << value << "\n";
  }

  std::filesystem::path root_;
  std::shared_ptr<common::ManualClock> clock_ = std::make_shared<common::ManualClock>();
  std::unique_ptr<common::HostEnv> host_;
};

TEST_F(EdacSysfsTest, ReadsTheCsrowLayoutAsNodeExporterDoes) {
  UseTree("node_exporter-fixture");
  const auto snapshot = ReadEdacSnapshot(*host_);
  // node_exporter's own output for this fixture (corpus README).
  ASSERT_EQ(snapshot.controllers.size(), 1u);
  const auto& mc0 = snapshot.controllers.at(0);
  EXPECT_EQ(mc0.ce, 1u);
  EXPECT_EQ(mc0.ue, 5u);
  EXPECT_EQ(mc0.ce_noinfo, 2u);
  EXPECT_EQ(mc0.ue_noinfo, 6u);
  ASSERT_EQ(snapshot.units.size(), 3u);
  const std::uint64_t ce[] = {3, 0, 0}, ue[] = {4, 4, 5};
  for (int i = 0; i < 3; ++i) {
    const auto& unit = snapshot.units[static_cast<std::size_t>(i)];
    EXPECT_EQ(unit.kind, "csrow");
    EXPECT_EQ(unit.index, i);
    EXPECT_EQ(unit.ce, ce[i]) << "csrow" << i;
    EXPECT_EQ(unit.ue, ue[i]) << "csrow" << i;
  }
  EXPECT_EQ(snapshot.units[0].label, "mc0csrow0channel0");
}

TEST_F(EdacSysfsTest, ReadsTheRankLayoutOfARealServer) {
  UseTree("edac-utils-15");
  const auto snapshot = ReadEdacSnapshot(*host_);
  EXPECT_EQ(snapshot.controllers.size(), 4u);
  ASSERT_EQ(snapshot.units.size(), 16u);
  std::uint64_t total = 0;
  for (const auto& unit : snapshot.units) {
    EXPECT_EQ(unit.kind, "rank");
    total += unit.ce;
    if (unit.ce > 0) {
      EXPECT_EQ(unit.mc, 0);
      EXPECT_EQ(unit.index, 4);
    }
  }
  EXPECT_EQ(total, 1u) << "only mc0/rank4 has a corrected error";
}

TEST_F(EdacSysfsTest, IncreasesBecomeEventsResetsDoNot) {
  UseTree("edac-utils-15");
  EdacSysfsSource source(*host_);
  EXPECT_TRUE(source.Poll().empty()) << "the first poll is the baseline";
  EXPECT_TRUE(source.Poll().empty()) << "nothing changed";
  Set("mc0/rank4/dimm_ce_count", "3");
  Set("mc2/rank1/dimm_ue_count", "1");
  clock_->Advance(std::chrono::seconds(30));
  const auto polled_at = clock_->Wall();
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].time, polled_at) << "stamped with the host's clock at the poll";
  EXPECT_EQ(events[1].time, polled_at);
  EXPECT_EQ(events[0].severity, Severity::kCe);
  EXPECT_EQ(events[0].mc, 0);
  EXPECT_EQ(events[0].count, 2u);
  EXPECT_EQ(events[0].source, "edac_sysfs");
  EXPECT_NE(events[0].summary.find("mc0 rank4"), std::string::npos) << events[0].summary;
  EXPECT_EQ(events[1].severity, Severity::kUce);
  EXPECT_EQ(events[1].mc, 2);
  // A reset (counters back to 0) is re-based silently; the next increase counts from there.
  Set("mc0/rank4/dimm_ce_count", "0");
  EXPECT_TRUE(source.Poll().empty());
  Set("mc0/rank4/dimm_ce_count", "1");
  clock_->Advance(std::chrono::seconds(30));
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, 1u);
  EXPECT_EQ(events[0].time, polled_at + std::chrono::seconds(30));
}

TEST_F(EdacSysfsTest, NoinfoCountersAndVanishedFilesAreHandled) {
  UseTree("node_exporter-fixture");
  EdacSysfsSource source(*host_);
  (void)source.Poll();
  Set("mc0/ce_noinfo_count", "5");
  Set("mc0/ce_count", "9");  // mc0 has csrows: its total must not be counted again
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, 3u);
  EXPECT_NE(events[0].summary.find("location unknown"), std::string::npos);
  std::filesystem::remove_all(root_ / "sys/devices/system/edac/mc/mc0/csrow1");
  std::filesystem::remove(root_ / "sys/devices/system/edac/mc/mc0/csrow2/ue_count");
  EXPECT_TRUE(source.Poll().empty()) << "vanished attributes are not errors";
}

TEST(EdacSysfsNoEdacTest, AHostWithoutEdacIsEmpty) {
  common::HostEnv host("/nonexistent-root", std::make_shared<common::SystemClock>());
  const auto snapshot = ReadEdacSnapshot(host);
  EXPECT_TRUE(snapshot.controllers.empty());
  EdacSysfsSource source(host);
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_TRUE(source.Poll().empty());
}

}  // namespace
}  // namespace rasd::ras
