#include "rasd/ras/ras_event.h"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <tuple>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {

std::vector<RasEvent> CoalesceStorm(std::vector<RasEvent> events, std::size_t threshold) {
  if (events.size() <= threshold) return events;
  using Key = std::tuple<std::string, std::string, Severity, std::optional<int>, std::optional<int>,
                         std::optional<std::string>, std::optional<std::string>, std::optional<int>,
                         bool, std::int64_t>;
  std::map<Key, std::size_t> index;  // -> position in merged
  std::vector<RasEvent> merged;
  std::vector<std::uint64_t> members;
  for (auto& event : events) {
    const auto minute =
        std::chrono::duration_cast<std::chrono::minutes>(event.time.time_since_epoch()).count();
    Key key{event.source,  event.origin,  event.severity,    event.device,     event.mc,
            event.pci_bdf, event.address, event.vendor_code, event.historical, minute};
    auto [it, inserted] = index.try_emplace(std::move(key), merged.size());
    if (inserted) {
      merged.push_back(std::move(event));
      members.push_back(1);
    } else {
      merged[it->second].count += event.count;
      members[it->second] += 1;
    }
  }
  for (std::size_t i = 0; i < merged.size(); ++i) {
    if (members[i] > 1)
      merged[i].summary = fmt::format("[{} events coalesced] {}", members[i], merged[i].summary);
  }
  return merged;
}

RasEvent EventFromRecord(ScannedRecord&& record, std::string source,
                         std::chrono::system_clock::time_point time) {
  RasEvent event;
  event.time = time;
  event.source = std::move(source);
  event.origin = std::move(record.origin);
  event.severity = record.severity;
  event.mc = record.mc;
  event.pci_bdf = std::move(record.pci_bdf);
  event.address = std::move(record.address);
  event.vendor_code = record.xid;
  event.count = record.count;
  event.historical = record.historical;
  event.summary = std::move(record.message);
  if (record.lines.size() == 1) {
    event.raw = std::move(record.lines.front());  // most records: no joining
  } else {
    std::size_t size = 0;
    for (const auto& line : record.lines) size += line.size() + 1;
    event.raw.reserve(size);
    for (const auto& line : record.lines) {
      if (!event.raw.empty()) event.raw += '\n';
      event.raw += line;
    }
  }
  return event;
}

RasEvent EventFromRecord(const ScannedRecord& record, std::string source,
                         std::chrono::system_clock::time_point time) {
  return EventFromRecord(ScannedRecord(record), std::move(source), time);
}

std::optional<std::uint64_t> ParseAddress(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::string_view digits = *text;
  if (digits.starts_with("0x") || digits.starts_with("0X")) digits.remove_prefix(2);
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  return value;
}

}  // namespace rasd::ras
