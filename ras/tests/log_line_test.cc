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
      // dmesg's other stamp forms (util-linux print_record).
      {"[May19 19:57] EDAC MC0: j", "EDAC MC0: j", ""},
      // CONFIG_PRINTK_CALLER: the task or the CPU after the stamp.
      {"[  637.164222][ T8357] soft offline: m", "soft offline: m", ""},
      {"[   12.000001][    C3] mce: n", "mce: n", ""},
      {"[  +0.000127] EDAC MC0: k", "EDAC MC0: k", ""},
      {"[<    0.000127>] mce: l", "mce: l", ""},
      {"[  261.273240 <    0.000127>] mce: m", "mce: m", ""},
      {"2024-05-19T19:57:01,123456+00:00 EDAC MC0: n", "EDAC MC0: n", ""},
      {"kern  :err   : [  261.273240] mce: o", "mce: o", ""},
      {"kern  :warn  : [May19 19:57] NVRM: p", "NVRM: p", ""},
      // journalctl's output modes, any locale.
      {"\xd0\xb8\xd1\x8e\xd0\xbd 09 16:21:24 host kernel: EDAC MC0: q", "EDAC MC0: q", ""},
      {"6\xe6\x9c\x88 09 16:21:24 host kernel: EDAC MC0: r", "EDAC MC0: r", ""},
      {"f\xc3\xa9vr. 09 16:21:24 host kernel: EDAC MC0: s", "EDAC MC0: s", ""},
      {"Jun 09 16:21:24.123456 host kernel: EDAC MC0: t", "EDAC MC0: t", ""},
      {"Sun 2024-06-09 16:21:24 CEST host kernel: EDAC MC0: u", "EDAC MC0: u", ""},
      {"2024-06-09T16:21:24+0200 host kernel: EDAC MC0: v", "EDAC MC0: v", ""},
      {"1717942884.123456 host kernel: EDAC MC0: w", "EDAC MC0: w", ""},
      {"[  123.456789] host kernel: EDAC MC0: x", "EDAC MC0: x", ""},
      {"    MESSAGE=EDAC MC0: y", "EDAC MC0: y", ""},
      {"{\"PRIORITY\":\"4\",\"MESSAGE\":\"EDAC MC0: z\",\"_BOOT_ID\":\"b\"}", "EDAC MC0: z", ""},
      {"<3>1 2024-06-09T16:21:24.123Z host kernel - - - EDAC MC0: aa", "EDAC MC0: aa", ""},
      {"6,1234,5678901,-,caller=T12;NVRM: bb", "NVRM: bb", ""},
      // Lines whose beginning was cut off.
      {"56789] EDAC MC0: cc", "EDAC MC0: cc", ""},
      {"nel: EDAC MC0: dd", "EDAC MC0: dd", ""},
      {"n  9 16:21:24 mr-fox kernel: EDAC MC0: ee", "EDAC MC0: ee", ""},
      {"docker-host | EDAC MC0: ff", "EDAC MC0: ff", ""},
      {"x: pcieport 0000:00:1c.1: AER: gg", "pcieport 0000:00:1c.1: AER: gg", ""},
      // Report rows stay whole.
      {"1 2021-02-27 03:09:05 +0100 1 Corrected error(s): hh",
       "1 2021-02-27 03:09:05 +0100 1 Corrected error(s): hh", ""},
      {"TIME 1385447316 Tue Nov 26 07:28:36 2013", "TIME 1385447316 Tue Nov 26 07:28:36 2013", ""},
      {"[ 0] Receiver Error", "[ 0] Receiver Error", ""},
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

// A live kernel record is the message itself: RAS words inside it are data
// (a USB device's product string, an audit record's file name), and a
// record built from them could isolate a device or kill a job.
TEST(KernelLogScannerTest, AnchoredLinesTakeNoRecordFromWordsInsideAMessage) {
  const char* quoted[] = {
      "usb 1-1: Product: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
      "usb 1-1: Product: GPU has fallen off the bus",
      "usb 1-1: Manufacturer: EDAC MC0: 1 UE memory read error on DIMM_A1 (page:0x1 offset:0x0)",
      "audit: type=1400 name=\"x due to hardware memory corruption\"",
      "usb 1-1: Product: Device[1] lost heartbeat",
      "usb 1-1: Product: | 0 910B3 | Critical |",
  };
  KernelLogScanner scanner;
  scanner.SetAnchoredLines(true);
  for (const char* line : quoted) scanner.AddLine(line);
  for (const auto& record : scanner.Finish()) {
    EXPECT_EQ(record.severity, Severity::kInfo) << record.message;
    EXPECT_FALSE(record.xid.has_value()) << record.message;
  }
  // The same words at the start of a record are the kernel's.
  KernelLogScanner live;
  live.SetAnchoredLines(true);
  live.AddLine("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
  const auto records = live.Finish();
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].xid, 79);
}

// In a saved log (which nothing acts on), a RAS message behind an unknown
// prefix is the record.
TEST(KernelLogScannerTest, OfflineScanFindsMessagesBehindUnknownPrefixes) {
  const auto records = ScanKernelLog("node7 | EDAC MC0: 1 UE memory read error on DIMM_A1");
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].severity, Severity::kUce);
}

}  // namespace
}  // namespace rasd::ras
