// BERT regions built byte by byte as ACPI 6.x (Generic Error Status Block)
// and UEFI appendix N (CPER sections) lay them out.

#include "rasd/ras/bert_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "byte_writer.h"

namespace rasd::ras {
namespace {

using testing::Bytes;
using testing::Put;

const auto kReadAt = std::chrono::system_clock::time_point(std::chrono::seconds(1'750'000'000));

void PutGuid(Bytes& out, std::size_t offset, std::uint32_t a, std::uint16_t b, std::uint16_t c,
             std::array<std::uint8_t, 8> d) {
  Put(out, offset, a);
  Put(out, offset + 4, b);
  Put(out, offset + 6, c);
  for (std::size_t i = 0; i < 8; ++i) Put(out, offset + 8 + i, d[i]);
}

// A Generic Error Data Entry (revision 0x300: with a timestamp) and its section.
Bytes Entry(std::uint32_t severity, const std::function<void(Bytes&)>& guid, const Bytes& section) {
  Bytes entry;
  guid(entry);
  Put(entry, 16, severity);
  Put<std::uint16_t>(entry, 20, 0x300);
  Put<std::uint32_t>(entry, 24, static_cast<std::uint32_t>(section.size()));
  entry.resize(72);
  entry.insert(entry.end(), section.begin(), section.end());
  return entry;
}

Bytes Block(std::uint32_t severity, const std::vector<Bytes>& entries) {
  Bytes data;
  for (const auto& entry : entries) data.insert(data.end(), entry.begin(), entry.end());
  Bytes block;
  Put<std::uint32_t>(block, 0, 0x1);  // uncorrectable error valid
  Put<std::uint32_t>(block, 12, static_cast<std::uint32_t>(data.size()));
  Put(block, 16, severity);
  block.resize(20);
  block.insert(block.end(), data.begin(), data.end());
  return block;
}

void MemoryGuid(Bytes& out) {
  PutGuid(out, 0, 0xA5BC1114, 0x6F64, 0x4EDE, {0xB8, 0x63, 0x3E, 0x83, 0xED, 0x7C, 0x83, 0xB1});
}
void PcieGuid(Bytes& out) {
  PutGuid(out, 0, 0xD995E954, 0xBBC1, 0x430F, {0xAD, 0x91, 0xB4, 0x4D, 0xCB, 0x3C, 0x6F, 0x35});
}
void OtherGuid(Bytes& out) { PutGuid(out, 0, 0x12345678, 0x1, 0x2, {1, 2, 3, 4, 5, 6, 7, 8}); }

Bytes MemorySection(std::uint64_t address) {
  Bytes section(80, 0);
  Put<std::uint64_t>(section, 0, (1U << 1) | (1U << 3));  // physical address and node valid
  Put(section, 16, address);
  Put<std::uint16_t>(section, 32, 1);      // node
  Put<std::uint16_t>(section, 42, 24237);  // row
  return section;
}

Bytes PcieSection() {
  Bytes section(72, 0);
  Put<std::uint64_t>(section, 0, 1U << 3);  // device id valid
  Put<std::uint8_t>(section, 24 + 7, 0);    // function
  Put<std::uint8_t>(section, 24 + 8, 0);    // device
  Put<std::uint16_t>(section, 24 + 9, 0);   // segment
  Put<std::uint8_t>(section, 24 + 11, 0x5e);
  return section;
}

TEST(BertTest, DecodesMemoryAndPcieSectionsAsHistoricalEvents) {
  Bytes region = Block(
      1, {Entry(1, MemoryGuid, MemorySection(0x276aeb0180)), Entry(0, PcieGuid, PcieSection())});
  const Bytes second = Block(2, {Entry(2, OtherGuid, Bytes(16, 0))});
  region.insert(region.end(), second.begin(), second.end());
  region.resize(region.size() + 64, 0);  // the unused rest of the region
  const auto events = DecodeBert(region, kReadAt);
  ASSERT_EQ(events.size(), 3u);
  for (const auto& event : events) EXPECT_EQ(event.time, kReadAt) << "the time it was read";
  EXPECT_EQ(events[0].severity, Severity::kFatal);
  ASSERT_TRUE(events[0].address);
  EXPECT_EQ(events[0].address->value, 0x276aeb0180u);
  EXPECT_EQ(events[0].address->printed, "0x000000276aeb0180");
  EXPECT_TRUE(events[0].historical);
  EXPECT_EQ(events[0].source, "bert");
  EXPECT_NE(events[0].summary.find("fatal memory error node:1"), std::string::npos)
      << events[0].summary;
  EXPECT_NE(events[0].summary.find("row:24237"), std::string::npos) << events[0].summary;
  EXPECT_EQ(events[1].severity, Severity::kUce);
  EXPECT_EQ(events[1].pci_bdf, "0000:5e:00.0");
  EXPECT_EQ(events[2].severity, Severity::kCe);
  EXPECT_NE(events[2].summary.find("corrected error"), std::string::npos);
}

TEST(BertTest, TruncatedOrEmptyRegionsStopCleanly) {
  EXPECT_TRUE(DecodeBert({}, kReadAt).empty());
  EXPECT_TRUE(DecodeBert(Bytes(200, 0), kReadAt).empty()) << "a zero block status: no records";
  const Bytes region = Block(1, {Entry(1, MemoryGuid, MemorySection(0x1000))});
  for (std::size_t cut = 0; cut < region.size(); ++cut) {
    const auto events =
        DecodeBert(std::span(region.data(), cut), kReadAt);  // must not read past the end
    EXPECT_LE(events.size(), 1u);
  }
  Bytes lying = region;
  Put<std::uint32_t>(lying, 12, 0xffffffff);  // data length far beyond the buffer
  Put<std::uint32_t>(lying, 20 + 24, 0xfffffff0);
  EXPECT_LE(DecodeBert(lying, kReadAt).size(), 1u);
}

TEST(BertTest, TheTableReadFromTheHostIsStampedWithTheHostsWallClock) {
  char pattern[] = "/tmp/rasd-bert-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path root = pattern;
  auto clock = std::make_shared<common::ManualClock>(kReadAt);
  clock->Advance(std::chrono::seconds(90));
  const common::HostEnv host(root, clock);
  const Bytes region = Block(1, {Entry(1, MemoryGuid, MemorySection(0x1000))});
  ASSERT_TRUE(host.WriteFile("/sys/firmware/acpi/tables/data/BERT",
                             std::string(region.begin(), region.end()), /*create=*/true)
                  .has_value());
  const auto events = ReadBertEvents(host);
  std::filesystem::remove_all(root);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].time, kReadAt + std::chrono::seconds(90));
}

}  // namespace
}  // namespace rasd::ras
