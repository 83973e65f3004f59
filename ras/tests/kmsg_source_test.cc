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

// The kernel-log record "seq" with `text`, in /dev/kmsg's form.
std::string Kmsg(int sequence, const std::string& text) {
  return "3," + std::to_string(sequence) + "," + std::to_string(sequence * 1000) + ",-;" + text +
         "\n";
}

std::string Noise(int from, int count) {
  std::string lines;
  for (int sequence = from; sequence < from + count; ++sequence)
    lines += Kmsg(sequence, "usb 1-1: noise " + std::to_string(sequence));
  return lines;
}

std::vector<std::string> Origins(const std::vector<RasEvent>& events) {
  std::vector<std::string> origins;
  for (const auto& event : events) origins.push_back(event.origin);
  return origins;
}

const std::string kCe = "EDAC MC0: 1 CE memory read error on DIMM (page:0x10 offset:0x20 grain:32)";

TEST_F(KmsgSourceTest, AnOpenBlockHoldsTheCursorBeforeItAndARestartReadsItWholeOnce) {
  Append(Kmsg(1, kCe) +
         Kmsg(2, "{7}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4") +
         Kmsg(3, "{7}[Hardware Error]: event severity: recoverable") + Kmsg(4, kCe));
  std::vector<RasEvent> stored;  // what a caller stored, with the cursor, before a kill
  SourceCursor cursor;
  {
    KmsgSource source(*host_, "boot-a", std::nullopt);
    ASSERT_TRUE(source.Open().has_value());
    stored = source.Poll();
    EXPECT_EQ(Origins(stored), std::vector<std::string>{"edac"})
        << "the CE after the open block waits behind it";
    cursor = source.Cursor();
    EXPECT_EQ(cursor.position, "1") << "held before the block's first line, not at the last read";
  }  // killed here
  Append(Kmsg(5, "{7}[Hardware Error]:   physical_address: 0x0000000012345000") + Noise(6, 10));
  KmsgSource resumed(*host_, "boot-a", cursor);
  ASSERT_TRUE(resumed.Open().has_value());
  auto after = resumed.Poll();
  for (auto& event : resumed.Flush()) after.push_back(std::move(event));
  EXPECT_EQ(Origins(after), (std::vector<std::string>{"ghes", "edac"}))
      << "the block whole, the CE behind it once, the CE before it not again";
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after[0].severity, Severity::kUce);
  EXPECT_EQ(after[0].address, Address::Of(0x12345000)) << "its lines read after the restart too";
  EXPECT_EQ(resumed.Cursor().position, "15");
}

TEST_F(KmsgSourceTest, ABlockInterleavedWithAnOpenOneWaitsForItSoNoLineIsReadTwice) {
  // Block {7} starts, block {8} starts, {7} goes on and is closed by the gap
  // while {8} is still open: {7} has lines after {8}'s first.
  std::string log =
      Kmsg(10, "{7}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4") +
      Kmsg(11, "{8}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 5") +
      Kmsg(12, "{7}[Hardware Error]: event severity: recoverable") +
      Kmsg(13, "{7}[Hardware Error]:   physical_address: 0x0000000000007000");
  for (int sequence = 14; sequence < 26; sequence += 3) {
    log += Kmsg(sequence, "{8}[Hardware Error]: event severity: corrected") + Noise(sequence + 1, 2);
  }
  Append(log);
  KmsgSource source(*host_, "boot-a", SourceCursor{"kmsg", "boot-a", "9"});
  ASSERT_TRUE(source.Open().has_value());
  EXPECT_TRUE(source.Poll().empty()) << "{7} is closed but has lines after {8}'s start";
  EXPECT_EQ(source.Cursor().position, "9");
  // A restart from there reads both blocks whole, once each.
  KmsgSource resumed(*host_, "boot-a", source.Cursor());
  ASSERT_TRUE(resumed.Open().has_value());
  auto events = resumed.Poll();
  for (auto& event : resumed.Flush()) events.push_back(std::move(event));
  ASSERT_EQ(Origins(events), (std::vector<std::string>{"ghes", "ghes"}));
  EXPECT_EQ(events[0].severity, Severity::kUce);
  EXPECT_EQ(events[0].address, Address::Of(0x7000));
  EXPECT_EQ(events[1].severity, Severity::kCe);
}

// First start in a boot: what the ring held when rasd first read it to its
// end (a GHES block begun then included) is marked before_start; what is
// logged after, and everything after a restart in the same boot, is not.
TEST_F(KmsgSourceTest, TheRingFoundOnAFirstStartIsMarkedBeforeStart) {
  Append(
      "4,1,100,-;NVRM: Xid (PCI:0000:07:00): 79, pid=1, GPU has fallen off the bus.\n"
      "3,2,200,-;{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4\n"
      "3,3,200,-;{1}[Hardware Error]: event severity: recoverable\n");
  {
    KmsgSource source(*host_, "boot-b", SourceCursor{"kmsg", "boot-a", "40"});  // last boot's
    ASSERT_TRUE(source.Open().has_value());
    auto events = source.Poll();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_TRUE(events[0].before_start);
    Append(
        "3,4,300,-;{1}[Hardware Error]:   physical_address: 0x000000276aeb0180\n"
        "4,5,400,-;NVRM: Xid (PCI:0000:08:00): 79, pid=1, GPU has fallen off the bus.\n");
    events = source.Poll();
    const auto flushed = source.Flush();
    events.insert(events.end(), flushed.begin(), flushed.end());
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].origin, "ghes");
    EXPECT_TRUE(events[0].before_start) << "the block had begun before the start";
    EXPECT_EQ(events[1].pci_bdf, "0000:08:00");
    EXPECT_FALSE(events[1].before_start) << "logged while rasd ran";
    EXPECT_EQ(source.BeforeStartEvents(), 2u);
  }
  // A restart in the same boot: nothing before the cursor is read, nothing marked.
  KmsgSource restarted(*host_, "boot-b", SourceCursor{"kmsg", "boot-b", "3"});
  ASSERT_TRUE(restarted.Open().has_value());
  auto events = restarted.Poll();
  const auto flushed = restarted.Flush();
  events.insert(events.end(), flushed.begin(), flushed.end());
  ASSERT_FALSE(events.empty());
  for (const auto& event : events) EXPECT_FALSE(event.before_start) << event.summary;
  EXPECT_EQ(restarted.BeforeStartEvents(), 0u);
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
