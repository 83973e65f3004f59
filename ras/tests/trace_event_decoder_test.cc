// Raw ring-buffer pages laid out as the kernel writes them (page header:
// u64 timestamp, local_t commit; then events with a 32-bit type_len/
// time_delta header), decoded with the format files of a real 6.18 kernel
// (tests/fixtures/tracefs, copied from /sys/kernel/tracing/events; the cxl
// and devlink formats, which this kernel lacks, laid out from the
// kernel's TRACE_EVENT definitions as ftrace prints them, and reri_event's
// from the fields rasdaemon reads).

#include "rasd/ras/trace_event_decoder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "byte_writer.h"
#include "trace_pages.h"

namespace rasd::ras {
namespace {

using testing::Bytes;
using testing::CxlGeneralMedia;
using testing::CxlMemoryModule;
using testing::CxlPoison;
using testing::DevlinkHealthReport;
using testing::GhesEvent;
using testing::McEvent;
using testing::Page;
using testing::Put;
using testing::SignalGenerate;

const auto kReadAt = std::chrono::system_clock::time_point(std::chrono::seconds(1'750'000'000));

std::unique_ptr<TraceEventDecoder> Decoder() {
  auto decoder = TraceEventDecoder::Load(RASD_TRACEFS_FIXTURES "/events",
                                         {"ras/mc_event", "ras/arm_event", "ras/non_standard_event",
                                          "ras/aer_event", "mce/mce_record"});
  EXPECT_TRUE(decoder.has_value()) << decoder.error().ToString();
  return decoder ? std::move(*decoder) : nullptr;
}

TEST(TraceEventDecoderTest, LoadsTheFormatsThisKernelHas) {
  auto decoder = Decoder();
  ASSERT_NE(decoder, nullptr);
  EXPECT_EQ(decoder->Loaded(),
            (std::vector<std::string>{"ras/mc_event", "ras/arm_event", "ras/non_standard_event"}))
      << "aer_event and mce_record have no format here and are left out";
  EXPECT_EQ(TraceEventDecoder::Load("/nonexistent", {"ras/mc_event"}).error().code,
            ErrorCode::kNotFound);
}

TEST(TraceEventDecoderTest, DecodesMcEventsAndGhesEventsFromARawPage) {
  auto decoder = Decoder();
  ASSERT_NE(decoder, nullptr);
  // IDs as the fixture's format files give them (2206 mc_event, 2205 arm_event); 5 is not a RAS
  // event.
  const Bytes page =
      Page({McEvent(2206, 0, 3, 1, 0x12345000, "CPU_SrcID#0_MC#1_Chan#2_DIMM#0"), GhesEvent(5, 1),
            McEvent(2206, 1, 1, 0, 0x9ffff000, "DIMM_B2"), GhesEvent(2205, 3)});
  const auto events = decoder->DecodePage(page, kReadAt);
  ASSERT_EQ(events.size(), 3u);
  for (const auto& event : events) EXPECT_EQ(event.time, kReadAt) << "the time it was read";
  EXPECT_EQ(events[0].origin, "edac");
  EXPECT_EQ(events[0].severity, Severity::kCe);
  EXPECT_EQ(events[0].count, 3u);
  EXPECT_EQ(events[0].mc, 1);
  EXPECT_EQ(events[0].address, Address::Of(0x12345000));
  EXPECT_NE(events[0].summary.find("CPU_SrcID#0_MC#1_Chan#2_DIMM#0"), std::string::npos)
      << events[0].summary;
  EXPECT_EQ(events[0].source, "tracefs");
  EXPECT_EQ(events[1].severity, Severity::kUce);
  EXPECT_EQ(events[1].address, Address::Of(0x9ffff000));
  EXPECT_EQ(events[2].origin, "arm");
  EXPECT_EQ(events[2].severity, Severity::kFatal);
}

// Formats for the events this VM's kernel lacks (cxl, devlink) are laid out
// from their TRACE_EVENT definitions; signal_generate's is this kernel's.
std::unique_ptr<TraceEventDecoder> NewFamiliesDecoder() {
  auto decoder =
      TraceEventDecoder::Load(RASD_TRACEFS_FIXTURES "/events",
                              {"cxl/cxl_general_media", "cxl/cxl_poison", "cxl/cxl_memory_module",
                               "devlink/devlink_health_report", "signal/signal_generate"});
  EXPECT_TRUE(decoder.has_value()) << decoder.error().ToString();
  return decoder ? std::move(*decoder) : nullptr;
}

TEST(TraceEventDecoderTest, CxlEventsCarryTheHostPageAndTheDevicesSeverity) {
  auto decoder = NewFamiliesDecoder();
  ASSERT_NE(decoder, nullptr);
  constexpr std::uint64_t kNoHostAddress = ~0ULL;
  const Bytes page = Page({
      CxlGeneralMedia(1501, 2, 0x1, 0x40, 0x1f8000040, "mem0", "0000:0d:00.0"),
      CxlGeneralMedia(1501, 1, 0x2, 0x80, kNoHostAddress, "mem1", "0000:0e:00.0"),
      CxlPoison(1504, 0, 0x2c0000000, 0x1000, "mem0", "0000:0d:00.0"),
      CxlPoison(1504, 2, 0x2c0000000, 0x1000, "mem0", "0000:0d:00.0"),
      CxlMemoryModule(1503, 0, 0, 0, "mem0", "0000:0d:00.0"),
      CxlMemoryModule(1503, 1, 0, 3, "mem2", "0000:0f:00.0"),
  });
  const auto events = decoder->DecodePage(page, kReadAt);
  ASSERT_EQ(events.size(), 6u);
  for (const auto& event : events) EXPECT_EQ(event.origin, "cxl");
  EXPECT_EQ(events[0].severity, Severity::kUce) << "descriptor bit 0: uncorrectable";
  EXPECT_EQ(events[0].address, Address::Of(0x1f8000040)) << "the host page, not the device's";
  EXPECT_EQ(events[0].pci_bdf, "0000:0d:00.0");
  EXPECT_NE(events[0].summary.find("mem0"), std::string::npos) << events[0].summary;
  EXPECT_EQ(events[1].severity, Severity::kCe) << "a threshold event the media corrected";
  EXPECT_FALSE(events[1].address) << "no region: no host page to act on";
  EXPECT_EQ(events[2].severity, Severity::kUce) << "a poison list entry";
  EXPECT_EQ(events[2].address, Address::Of(0x2c0000000));
  EXPECT_EQ(events[3].severity, Severity::kInfo) << "poison cleared";
  EXPECT_FALSE(events[3].address);
  EXPECT_EQ(events[4].severity, Severity::kInfo) << "an informational health record";
  EXPECT_EQ(events[5].severity, Severity::kFatal) << "media status: all data lost";
}

TEST(TraceEventDecoderTest, DevlinkHealthReportsAndMemoryErrorSignalsDecode) {
  auto decoder = NewFamiliesDecoder();
  ASSERT_NE(decoder, nullptr);
  constexpr int kSigbus = 7, kSigsegv = 11;
  constexpr int kBusAdrerr = 2, kBusMceerrAr = 4, kBusMceerrAo = 5;
  const Bytes page = Page({
      DevlinkHealthReport(1601, "mlx5_core", "0000:08:00.0", "fw_fatal", "FW fatal error"),
      DevlinkHealthReport(1601, "mlx5_core", "0000:08:00.1", "tx", "TX timeout on queue: 3"),
      DevlinkHealthReport(1601, "bnxt_en", "0000:3b:00.0", "fw", "FW crashed"),
      SignalGenerate(261, kSigbus, kBusMceerrAr, "python3", 4242),
      SignalGenerate(261, kSigbus, kBusMceerrAo, "redis-server", 77),
      SignalGenerate(261, kSigbus, kBusAdrerr, "mmap-test", 12),
      SignalGenerate(261, kSigsegv, kBusMceerrAr, "crashy", 13),
  });
  const auto events = decoder->DecodePage(page, kReadAt);
  ASSERT_EQ(events.size(), 5u) << "SIGBUS for a bad mapping and SIGSEGV are no memory errors";
  EXPECT_EQ(events[0].origin, "mlx5");
  EXPECT_EQ(events[0].severity, Severity::kFatal);
  EXPECT_EQ(events[0].pci_bdf, "0000:08:00.0");
  EXPECT_EQ(events[1].severity, Severity::kCe) << "a queue the driver recovers";
  EXPECT_EQ(events[2].origin, "devlink");
  EXPECT_EQ(events[2].severity, Severity::kUce);
  EXPECT_EQ(events[3].origin, "memory_failure");
  EXPECT_EQ(events[3].severity, Severity::kSrar);
  EXPECT_EQ(events[3].pid, 4242);
  EXPECT_NE(events[3].summary.find("python3"), std::string::npos) << events[3].summary;
  EXPECT_EQ(events[4].severity, Severity::kSrao);
  EXPECT_EQ(events[4].pid, 77);
}

// block_rq_error's format is this kernel's; reri_event's is laid out from
// the fields rasdaemon's ras-reri-handler.c reads (no released kernel has
// the event yet).
TEST(TraceEventDecoderTest, FailedBlockRequestsAndReriRecordsDecode) {
  auto decoder = TraceEventDecoder::Load(
      RASD_TRACEFS_FIXTURES "/events",
      {"block/block_rq_error", "block/block_rq_complete", "ras/reri_event"});
  ASSERT_TRUE(decoder.has_value()) << decoder.error().ToString();
  constexpr int kEio = -5, kEnolink = -67, kEopnotsupp = -95;
  constexpr std::uint64_t kCe = 1ULL << 1, kDeferred = 1ULL << 2, kCritical = 1ULL << 3;
  constexpr std::uint64_t kPhysical = 1ULL << 12, kCacheData = 3ULL << 24;
  const Bytes page = testing::Page({
      testing::BlockRqError(2106, 8, 16, 123456, kEio, "W"),
      testing::BlockRqError(2106, 259, 0, 88, kEnolink, "R"),
      testing::BlockRqError(2106, 8, 0, 1, kEopnotsupp, "D"),
      testing::BlockRqError(2106, 7, 0, 4096, kEio, "R"),
      testing::BlockRqError(2107, 8, 0, 4096, 0, "R"),
      testing::BlockRqError(2107, 8, 32, 4096, kEio, "R"),
      testing::ReriEvent(2210, 0, 5, kCe | 1 | kPhysical | kCacheData, 0x8000'1040),
      testing::ReriEvent(2210, 0, 6, kDeferred | 1 | kPhysical, 0x8000'2000),
      testing::ReriEvent(2210, 1, 0, kCritical | kDeferred | 1, 0x1234),
  });
  const auto events = (*decoder)->DecodePage(page, kReadAt);
  ASSERT_EQ(events.size(), 8u) << "a completion without an error is no record";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(events[i].origin, "block") << i;
  EXPECT_EQ(events[0].severity, Severity::kUce) << "EIO: data the disk could not move";
  EXPECT_NE(events[0].summary.find("8,16"), std::string::npos) << events[0].summary;
  EXPECT_NE(events[0].summary.find("123456"), std::string::npos) << events[0].summary;
  EXPECT_EQ(events[1].severity, Severity::kCe) << "ENOLINK: a transport error the layer retried";
  EXPECT_EQ(events[2].severity, Severity::kInfo) << "EOPNOTSUPP: a request refused";
  EXPECT_EQ(events[3].severity, Severity::kInfo) << "a loop device has no hardware of its own";
  EXPECT_EQ(events[4].severity, Severity::kUce) << "a failed completion, older kernels' form";
  for (int i = 5; i < 8; ++i) EXPECT_EQ(events[i].origin, "reri") << i;
  EXPECT_EQ(events[5].severity, Severity::kCe);
  EXPECT_EQ(events[5].address, Address::Of(0x8000'1040)) << "a supervisor physical address";
  EXPECT_NE(events[5].summary.find("hart 5"), std::string::npos) << events[5].summary;
  EXPECT_EQ(events[6].severity, Severity::kUcna) << "deferred: not consumed yet";
  EXPECT_EQ(events[7].severity, Severity::kUce) << "critical outranks deferred";
  EXPECT_FALSE(events[7].address) << "no address type: the field means nothing";
  EXPECT_NE(events[7].summary.find("IOMMU"), std::string::npos) << events[7].summary;
}

TEST(TraceEventDecoderTest, DamagedPagesAreHarmless) {
  auto decoder = Decoder();
  ASSERT_NE(decoder, nullptr);
  EXPECT_TRUE(decoder->DecodePage({}, kReadAt).empty());
  Bytes lying = Page({McEvent(2206, 0, 1, 0, 0x1000, "X")});
  Put<std::uint64_t>(lying, 8, 1 << 20);  // commit beyond the page
  EXPECT_TRUE(decoder->DecodePage(lying, kReadAt).empty());
  // Found by the fuzzer: a length word whose 4 + length wraps to 0 in 32
  // bits made the page walk stand still forever.
  Bytes wrap(16, 0);
  Put<std::uint32_t>(wrap, 16, 0);  // type_len 0: a length word follows
  Put<std::uint32_t>(wrap, 20, 0xfffffffc);
  Put<std::uint32_t>(wrap, 24, 0);
  Put<std::uint64_t>(wrap, 8, 64);
  wrap.resize(4096, 0);
  EXPECT_TRUE(decoder->DecodePage(wrap, kReadAt).empty());
  // Also found by the fuzzer: end-of-page padding whose length word wraps.
  Bytes padding(16, 0);
  Put<std::uint32_t>(padding, 16, 29);  // type_len 29, time_delta 0
  Put<std::uint32_t>(padding, 20, 0xfffffffc);
  Put<std::uint64_t>(padding, 8, 1805);
  padding.resize(4096, 0);
  EXPECT_TRUE(decoder->DecodePage(padding, kReadAt).empty());
  std::mt19937 random(7);
  for (int i = 0; i < 500; ++i) {
    Bytes garbage(4096);
    for (auto& byte : garbage) byte = static_cast<std::uint8_t>(random());
    Put<std::uint64_t>(garbage, 8, random() % 4000);
    (void)decoder->DecodePage(garbage, kReadAt);
  }
}

}  // namespace
}  // namespace rasd::ras
