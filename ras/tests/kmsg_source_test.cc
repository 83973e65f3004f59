#include "rasd/ras/kmsg_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace rasd::ras {
namespace {

TEST(DecodeKmsgRecordTest, SplitsHeaderTextAndDictionary) {
  auto record = DecodeKmsgRecord(
      "3,1234,56789012,-;EDAC MC0: 1 CE on mc#0\n SUBSYSTEM=edac\n DEVICE=+edac:mc0");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->priority, 3);
  EXPECT_EQ(record->sequence, 1234u);
  EXPECT_EQ(record->usec, 56789012u);
  EXPECT_EQ(record->text, "EDAC MC0: 1 CE on mc#0");
  EXPECT_TRUE(DecodeKmsgRecord("6,1,2,c;continued").has_value());
  for (const char* bad : {"", "no header", "6,1;x", "a,b,c,-;x", "6,1,2"}) {
    EXPECT_FALSE(DecodeKmsgRecord(bad).has_value()) << bad;
  }
}

class KmsgSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rasd-kmsg-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    std::filesystem::create_directories(root_ / "dev");
    host_ = std::make_unique<common::HostEnv>(root_, std::make_shared<common::SystemClock>());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Append(const std::string& text) { std::ofstream(root_ / "dev/kmsg", std::ios::app) << text; }

  std::filesystem::path root_;
  std::unique_ptr<common::HostEnv> host_;
};

TEST_F(KmsgSourceTest, FollowsAGrowingLogAndSkipsNoise) {
  Append(
      "6,1,100,-;Linux version 6.1\n"
      "3,2,200,-;EDAC MC0: 1 CE memory read error on DIMM (page:0x10 offset:0x20 grain:32)\n"
      " SUBSYSTEM=edac\n");
  KmsgSource source(*host_, "boot-a", std::nullopt);
  ASSERT_TRUE(source.Open().has_value());
  EXPECT_FALSE(source.IsCharacterDevice());
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].source, "kmsg");
  EXPECT_EQ(events[0].origin, "edac");
  EXPECT_EQ(events[0].severity, Severity::kCe);
  EXPECT_EQ(events[0].address, Address::Of(0x10020));
  EXPECT_EQ(source.Cursor().position, "2");

  Append("4,3,300,-;NVRM: Xid (PCI:0000:07:00): 79, pid=1, GPU has fallen off the bus.\n");
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].vendor_code, 79);
  EXPECT_EQ(events[0].severity, Severity::kFatal);
  EXPECT_EQ(source.Cursor().position, "3");
  EXPECT_EQ(source.LostRecords(), 0u);
}

TEST_F(KmsgSourceTest, ResumesWithoutRepeatsAndReportsGaps) {
  Append(
      "3,10,100,-;Memory failure: 0x1: already hardware poisoned\n"
      "3,11,200,-;Memory failure: 0x2: already hardware poisoned\n"
      "3,15,300,-;Memory failure: 0x3: already hardware poisoned\n");
  // The previous run stopped after sequence 10 in this boot.
  KmsgSource source(*host_, "boot-a", SourceCursor{"kmsg", "boot-a", "10"});
  ASSERT_TRUE(source.Open().has_value());
  const auto events = source.Poll();
  ASSERT_EQ(events.size(), 3u) << "11, a gap notice, 15";
  std::vector<std::string> addresses;
  std::string gap;
  for (const auto& event : events) {
    if (event.address) addresses.push_back(event.address->printed);
    if (event.origin == "kmsg") gap = event.summary;
  }
  EXPECT_EQ(addresses, (std::vector<std::string>{"0x2", "0x3"}));
  EXPECT_NE(gap.find("3 kernel log record(s) (sequence 12 to 14)"), std::string::npos) << gap;
  EXPECT_EQ(source.LostRecords(), 3u);

  // Another boot: the cursor does not apply.
  KmsgSource fresh(*host_, "boot-b", SourceCursor{"kmsg", "boot-a", "99"});
  ASSERT_TRUE(fresh.Open().has_value());
  EXPECT_EQ(fresh.Poll().size(), 4u) << "all three records, and the gap between 11 and 15";
}

TEST_F(KmsgSourceTest, QuietLogFlushesOpenBlocks) {
  Append(
      "3,1,100,-;{2}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1\n"
      "3,2,100,-;{2}[Hardware Error]: event severity: recoverable\n");
  KmsgSource source(*host_, "boot-a", std::nullopt);
  ASSERT_TRUE(source.Open().has_value());
  EXPECT_TRUE(source.Poll().empty());
  const auto events = source.Flush();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kUce);
  EXPECT_EQ(events[0].origin, "ghes");
}

TEST_F(KmsgSourceTest, MissingKmsgIsAnErrorNotACrash) {
  std::filesystem::remove_all(root_ / "dev");
  KmsgSource source(*host_, "boot-a", std::nullopt);
  const auto opened = source.Open();
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace rasd::ras
