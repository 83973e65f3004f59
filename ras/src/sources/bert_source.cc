#include "rasd/ras/bert_source.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <optional>

namespace rasd::ras {
namespace {

using Guid = std::array<std::uint8_t, 16>;

// GUIDs in their in-memory byte order (the first three fields little-endian).
constexpr Guid MakeGuid(std::uint32_t a, std::uint16_t b, std::uint16_t c,
                        std::array<std::uint8_t, 8> d) {
  return {static_cast<std::uint8_t>(a),
          static_cast<std::uint8_t>(a >> 8),
          static_cast<std::uint8_t>(a >> 16),
          static_cast<std::uint8_t>(a >> 24),
          static_cast<std::uint8_t>(b),
          static_cast<std::uint8_t>(b >> 8),
          static_cast<std::uint8_t>(c),
          static_cast<std::uint8_t>(c >> 8),
          d[0],
          d[1],
          d[2],
          d[3],
          d[4],
          d[5],
          d[6],
          d[7]};
}

constexpr Guid kMemoryError =
    MakeGuid(0xA5BC1114, 0x6F64, 0x4EDE, {0xB8, 0x63, 0x3E, 0x83, 0xED, 0x7C, 0x83, 0xB1});
constexpr Guid kPcieError =
    MakeGuid(0xD995E954, 0xBBC1, 0x430F, {0xAD, 0x91, 0xB4, 0x4D, 0xCB, 0x3C, 0x6F, 0x35});
constexpr Guid kProcessorGeneric =
    MakeGuid(0x9876CCAD, 0x47B4, 0x4BDB, {0xB6, 0x5E, 0x16, 0xF1, 0x93, 0xC4, 0xF3, 0xDB});
constexpr Guid kFirmwareRecord =
    MakeGuid(0x81212A96, 0x09ED, 0x4996, {0x94, 0x71, 0x8D, 0x72, 0x9C, 0x8E, 0x69, 0xED});

// Little-endian reads that never leave the buffer.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> data) : data_(data) {}
  template <typename T>
  std::optional<T> At(std::size_t offset) const {
    if (offset > data_.size() || data_.size() - offset < sizeof(T)) return std::nullopt;
    T value{};
    std::memcpy(&value, data_.data() + offset,
                sizeof(T));  // x86 and arm64 rasd hosts are little-endian
    return value;
  }
  std::span<const std::uint8_t> Slice(std::size_t offset, std::size_t length) const {
    if (offset > data_.size()) return {};
    return data_.subspan(offset, std::min(length, data_.size() - offset));
  }
  std::size_t Size() const { return data_.size(); }

 private:
  std::span<const std::uint8_t> data_;
};

// CPER error severity: 0 recoverable, 1 fatal, 2 corrected, 3 informational.
Severity CperSeverity(std::uint32_t severity) {
  switch (severity) {
    case 0:
      return Severity::kUce;
    case 1:
      return Severity::kFatal;
    case 2:
      return Severity::kCe;
    default:
      return Severity::kInfo;
  }
}

std::string_view CperSeverityName(std::uint32_t severity) {
  switch (severity) {
    case 0:
      return "recoverable";
    case 1:
      return "fatal";
    case 2:
      return "corrected";
    default:
      return "informational";
  }
}

void DecodeMemorySection(const Reader& section, RasEvent& event) {
  const auto valid = section.At<std::uint64_t>(0);
  if (!valid) return;
  constexpr std::uint64_t kPhysicalAddressValid = 1U << 1;
  if ((*valid & kPhysicalAddressValid) != 0) {
    if (auto address = section.At<std::uint64_t>(16))
      event.address = Address{*address, fmt::format("0x{:016x}", *address)};
  }
  const auto node = section.At<std::uint16_t>(32), card = section.At<std::uint16_t>(34);
  const auto module = section.At<std::uint16_t>(36), bank = section.At<std::uint16_t>(38);
  const auto row = section.At<std::uint16_t>(42), column = section.At<std::uint16_t>(44);
  if (node && card && module && bank && row && column) {
    event.summary += fmt::format(" node:{} card:{} module:{} bank:{} row:{} column:{}", *node,
                                 *card, *module, *bank, *row, *column);
  }
}

void DecodePcieSection(const Reader& section, RasEvent& event) {
  // Validation bits at 0, then port type, version, command/status and a
  // reserved word; the device id block at offset 24: vendor(2) device(2)
  // class(3) function(1) device(1) segment(2) bus(1) secondary bus(1) slot(2).
  const auto valid = section.At<std::uint64_t>(0);
  constexpr std::uint64_t kDeviceIdValid = 1U << 3;
  if (!valid || (*valid & kDeviceIdValid) == 0) return;
  constexpr std::size_t kDeviceId = 24;
  const auto function = section.At<std::uint8_t>(kDeviceId + 7),
             device = section.At<std::uint8_t>(kDeviceId + 8);
  const auto segment = section.At<std::uint16_t>(kDeviceId + 9);
  const auto bus = section.At<std::uint8_t>(kDeviceId + 11);
  if (function && device && segment && bus) {
    event.pci_bdf = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", *segment, *bus, *device, *function);
  }
}

}  // namespace

std::vector<RasEvent> DecodeBert(std::span<const std::uint8_t> data,
                                 std::chrono::system_clock::time_point now) {
  std::vector<RasEvent> events;
  const Reader region(data);
  std::size_t block = 0;
  // Generic Error Status Blocks follow one another; a zero block status ends the region.
  while (block + 20 <= region.Size()) {
    const auto status = region.At<std::uint32_t>(block);
    const auto data_length = region.At<std::uint32_t>(block + 12);
    const auto block_severity = region.At<std::uint32_t>(block + 16);
    if (!status || !data_length || !block_severity || *status == 0 || *data_length == 0) break;
    const std::size_t entries_end = std::min<std::size_t>(region.Size(), block + 20 + *data_length);
    std::size_t entry = block + 20;
    while (entry + 72 <= entries_end) {
      Guid type{};
      const auto type_bytes = region.Slice(entry, 16);
      std::copy(type_bytes.begin(), type_bytes.end(), type.begin());
      const auto severity = region.At<std::uint32_t>(entry + 16);
      const auto revision = region.At<std::uint16_t>(entry + 20);
      const auto length = region.At<std::uint32_t>(entry + 24);
      if (!severity || !revision || !length) break;
      // Revision 3 and later carry an 8-byte timestamp before the section data.
      const std::size_t header = *revision >= 0x300 ? 72 : 64;
      const Reader section(region.Slice(
          entry + header, std::min<std::size_t>(*length, entries_end - entry - header)));
      RasEvent event;
      event.time = now;
      event.source = "bert";
      event.origin = "ghes";
      event.historical = true;
      event.severity = CperSeverity(*severity);
      std::string_view kind = "error";
      if (type == kMemoryError) {
        kind = "memory error";
        DecodeMemorySection(section, event);
      } else if (type == kPcieError) {
        kind = "PCIe error";
        DecodePcieSection(section, event);
      } else if (type == kProcessorGeneric) {
        kind = "processor error";
      } else if (type == kFirmwareRecord) {
        kind = "firmware error record reference";
      }
      event.summary = fmt::format("BERT (previous boot): {} {}{}", CperSeverityName(*severity),
                                  kind, event.summary);
      event.raw = fmt::format("bert block {} entry {} severity {} length {}", block, entry - block,
                              *severity, *length);
      events.push_back(std::move(event));
      const std::size_t next = entry + header + *length;
      if (next <= entry) break;
      entry = next;
    }
    block = block + 20 + *data_length;
  }
  return events;
}

std::vector<RasEvent> ReadBertEvents(const common::HostEnv& host) {
  auto data = host.ReadFile("/sys/firmware/acpi/tables/data/BERT", 16 << 20);
  if (!data) return {};
  return DecodeBert(std::span(reinterpret_cast<const std::uint8_t*>(data->data()), data->size()),
                    host.GetClock().Wall());
}

}  // namespace rasd::ras
