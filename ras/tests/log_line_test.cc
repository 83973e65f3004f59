#include "rasd/ras/log_line.h"

#include <gtest/gtest.h>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {
namespace {

TEST(LogLineTest, StripsEveryCommonPrefix) {
  struct Case {
    const char* raw;
    const char* text;
    const char* producer;
  };
  const Case cases[] = {
      {"[   51.871339] pcieport 0000:00:1c.1: AER: x", "pcieport 0000:00:1c.1: AER: x", ""},
      {"[Mon Jan 27 19:27:15 2020] mce: [Hardware Error]: y", "mce: [Hardware Error]: y", ""},
      {"[Do M\xc3\xa4r 26 07:38:49 2020] {2}[Hardware Error]: z", "{2}[Hardware Error]: z", ""},
      {"Jun  9 16:21:24 mr-fox kernel: EDAC MC0: 1 CE", "EDAC MC0: 1 CE", ""},
      {"Feb 23 03:28:16  kernel: EDAC MC1: 1 CE", "EDAC MC1: 1 CE", ""},
      {"May  7 06:45:12 errol kernel: [21584690.529862] mce: a", "mce: a", ""},
      {"2019-08-19T04:18:38.274699-04:00 linux-dgwd kernel: [ 261.273240] Memory failure: b",
       "Memory failure: b", ""},
      {"May 16 18:17:22 foo06.example.org rasdaemon[12671]: rasdaemon: c", "rasdaemon: c",
       "rasdaemon"},
      {"6,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 31, d", "NVRM: Xid (PCI:0000:01:00): 31, d",
       ""},
      {"kernel: pcieport 0000:00:1b.2: e", "pcieport 0000:00:1b.2: e", ""},
      {"+> NVRM: Xid (PCI:0000:cb:00): 109, f", "NVRM: Xid (PCI:0000:cb:00): 109, f", ""},
      {"/hisi_logs/device-2/x/bbox/kbox.txt:2014[2454.830692] {6}[Hardware Error] g",
       "{6}[Hardware Error] g", "ascend"},
      {"     pcieport 0000:00:1c.5:    [ 0] Receiver Error",
       "pcieport 0000:00:1c.5:    [ 0] Receiver Error", ""},
      {"[ascend] [devdrv] [ERROR] h", "[ascend] [devdrv] [ERROR] h", ""},
      {"<4>[  100.000000] mce: i", "mce: i", ""},
      {"<<<edac>>>", "<<<edac>>>", ""},
  };
  for (const auto& c : cases) {
    const LogLine line = SplitLogLine(c.raw);
    EXPECT_EQ(line.text, c.text) << c.raw;
    EXPECT_EQ(line.producer, c.producer) << c.raw;
  }
}

TEST(MciStatusTest, ClassesFollowTheUcPccSArBits) {
  EXPECT_EQ(ClassifyMciStatus(0), Severity::kInfo);
  EXPECT_EQ(ClassifyMciStatus(0x8c00004000010092), Severity::kCe);
  EXPECT_EQ(ClassifyMciStatus(0xa600000000020408), Severity::kFatal);
  EXPECT_EQ(ClassifyMciStatus(0xbd80000000100134), Severity::kSrar);
  EXPECT_EQ(ClassifyMciStatus(0xbd00000000100134), Severity::kSrao);
  EXPECT_EQ(ClassifyMciStatus(0xb000000000100134), Severity::kUcna);
}

TEST(KernelLogScannerTest, UnrelatedLinesCostNothingAndYieldNothing) {
  const auto records = ScanKernelLog(
      "[    0.000000] Linux version 6.1.0\n[    1.2] usb 1-1: new high-speed USB device\n\nrandom "
      "text\n");
  EXPECT_TRUE(records.empty());
  EXPECT_FALSE(MainRecord(records).has_value());
}

TEST(KernelLogScannerTest, SeparateEventsStaySeparate) {
  const auto records = ScanKernelLog(
      "[ 10.0] EDAC MC0: 1 CE memory read error on X (page:0x1 offset:0x2 grain:32)\n"
      "[ 11.0] NVRM: Xid (PCI:0000:07:00): 79, pid=1, GPU has fallen off the bus.\n"
      "[ 12.0] Memory failure: 0x1234: recovery action for dirty LRU page: Recovered\n");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].origin, "edac");
  EXPECT_EQ(records[0].address, Address::Of(0x1002));
  EXPECT_EQ(records[1].xid, 79);
  EXPECT_EQ(records[1].severity, Severity::kFatal);
  EXPECT_EQ(records[2].severity, Severity::kSrao);
  EXPECT_EQ(MainRecord(records)->origin, "nvidia_xid");
}

TEST(KernelLogScannerTest, HostileInputIsHarmless) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage.push_back(static_cast<char>((i * 131) % 256));
  const auto records = ScanKernelLog(
      garbage +
      "\nEDAC MC\nEDAC MC99999999999999999999: 1 CE\nNVRM: Xid (PCI:\n"
      "{\n{123456789[Hardware Error]\n[Hardware Error]: Error Addr:\nmce_record: , MC\n");
  for (const auto& record : records) EXPECT_FALSE(record.origin.empty());
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

TEST(KernelLogScannerStreamingTest, RecordsAreTakenAsSoonAsNothingCanExtendThem) {
  KernelLogScanner scanner;
  scanner.AddLine("[ 1.0] Memory failure: 0x1: already hardware poisoned");
  auto taken = scanner.TakeCompleted();
  ASSERT_EQ(taken.size(), 1u) << "a one-line record is complete at once";
  // A GHES block stays open while its lines keep coming.
  scanner.AddLine(
      "[ 2.0] {3}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1");
  scanner.AddLine("[ 2.0] {3}[Hardware Error]: event severity: corrected");
  EXPECT_TRUE(scanner.TakeCompleted().empty());
  scanner.AddLine("[ 2.0] {3}[Hardware Error]:   physical_address: 0x0000000012345000");
  for (int i = 0; i < 10; ++i) scanner.AddLine("[ 3.0] usb 1-1: unrelated");
  taken = scanner.TakeCompleted();
  ASSERT_EQ(taken.size(), 1u) << "the block closed once other lines had gone past";
  EXPECT_EQ(taken[0].severity, Severity::kCe);
  ASSERT_TRUE(taken[0].address);
  EXPECT_EQ(taken[0].address->printed, "0x0000000012345000");
  EXPECT_EQ(taken[0].address->value, 0x12345000u);
  EXPECT_EQ(taken[0].lines.size(), 3u);
  // A quiet log: the owner closes what is open.
  scanner.AddLine(
      "[ 4.0] {4}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 2");
  EXPECT_TRUE(scanner.TakeCompleted().empty());
  scanner.CloseOpenBlocks();
  EXPECT_EQ(scanner.TakeCompleted().size(), 1u);
  EXPECT_TRUE(scanner.Finish().empty());
}

}  // namespace
}  // namespace rasd::ras

namespace rasd::ras {
namespace {

// Lines the fuzzer found: each crashed the scanner (an uncaught out_of_range)
// before the fix.
TEST(KernelLogScannerTest, LinesWithoutTheExpectedMarkersAreHarmless) {
  const auto records = ScanKernelLog(
      "mce: [Hardware Error]: CPU 1: Machine Check without a bank\n"
      "EDAC sbridge MC0: CPU 0: Machine Check Event without a bank\n"
      "amdgpu 0000:01:00.0:\n");
  ASSERT_FALSE(records.empty());
  for (const auto& record : records) EXPECT_EQ(record.severity, Severity::kInfo) << record.message;
}

}  // namespace
}  // namespace rasd::ras
