// Raw ring-buffer pages laid out as the kernel writes them (page header:
// u64 timestamp, local_t commit; then events with a 32-bit type_len/
// time_delta header), decoded with the format files of a real 6.18 kernel
// (tests/fixtures/tracefs, copied from /sys/kernel/tracing/events).

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
using testing::GhesEvent;
using testing::McEvent;
using testing::Page;
using testing::Put;

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
  EXPECT_EQ(events[2].origin, "ghes");
  EXPECT_EQ(events[2].severity, Severity::kFatal);
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
