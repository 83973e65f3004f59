#include "rasd/ras/ras_event.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <functional>
#include <string_view>

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {

std::int64_t MinuteOf(const RasEvent& event) { return MinuteOf(event.time); }

std::int64_t MinuteOf(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::minutes>(time.time_since_epoch()).count();
}

bool OpensWindow(const RasEvent& event) {
  return event.context.window_start && *event.context.window_start == event.time;
}

namespace {

// A fault rule's window: its first event and its repeats are one, so that a
// storm's batch holding both is one event, decided once with the count of
// all. Otherwise: the same judgement.
bool SameJudgement(const FaultContext& a, const FaultContext& b) {
  using Kind = FaultContext::Kind;
  if (a.window_start != b.window_start) return false;
  if (a.kind == b.kind) return true;
  return a.window_start && (a.kind == Kind::kOwn || a.kind == Kind::kRepeat) &&
         (b.kind == Kind::kOwn || b.kind == Kind::kRepeat);
}

}  // namespace

std::string_view FaultContextKindName(FaultContext::Kind kind) {
  switch (kind) {
    case FaultContext::Kind::kOwn:
      return "own";
    case FaultContext::Kind::kEcho:
      return "echo";
    case FaultContext::Kind::kSuperseded:
      return "superseded";
    case FaultContext::Kind::kRepeat:
      return "repeat";
    case FaultContext::Kind::kSettling:
      return "settling";
  }
  return "own";
}

bool SameComponent(const RasEvent& a, const RasEvent& b) {
  return a.severity == b.severity && a.historical == b.historical &&
         a.before_start == b.before_start && a.device == b.device && a.mc == b.mc &&
         a.vendor_code == b.vendor_code && a.vendor_action == b.vendor_action &&
         a.address.has_value() == b.address.has_value() && a.dimm == b.dimm &&
         a.pci_bdf == b.pci_bdf && a.origin == b.origin && a.source == b.source &&
         SameJudgement(a.context, b.context);
}

namespace {

std::uint64_t Mix(std::uint64_t seed, std::uint64_t value) {
  seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  return seed;
}

std::uint64_t ComponentHash(const RasEvent& event, std::int64_t minute) {
  const std::hash<std::string_view> text;
  auto optional_int = [](const std::optional<int>& value) -> std::uint64_t {
    return value ? static_cast<std::uint32_t>(*value) : std::uint64_t{1} << 40;
  };
  auto optional_text = [&text](const std::optional<std::string>& value) -> std::uint64_t {
    return value ? text(*value) : 0x5bd1e995ULL;
  };
  std::uint64_t hash = static_cast<std::uint64_t>(minute);
  hash = Mix(hash, text(event.source));
  hash = Mix(hash, text(event.origin));
  hash = Mix(hash, static_cast<std::uint64_t>(event.severity) << 3 | (event.historical ? 1 : 0) |
                       (event.before_start ? 2 : 0) | (event.address ? 4 : 0));
  hash = Mix(hash, optional_int(event.device));
  hash = Mix(hash, optional_int(event.mc));
  hash = Mix(hash, optional_int(event.vendor_code));
  hash = Mix(hash, optional_text(event.dimm));
  hash = Mix(hash, optional_text(event.pci_bdf));
  return hash;
}

// Where each (merged event, page) pair sits in that event's `pages`: an
// open-addressing table like CoalesceStorm's, grown when half full.
class PageSlots {
 public:
  // The position of `page` in `pages` of event `row`, adding it (with no
  // errors yet) when it is new.
  std::size_t Find(std::size_t row, std::uint64_t page, std::vector<PageErrors>& pages) {
    if (2 * (used_ + 1) > keys_.size()) Grow();
    std::size_t slot = Hash(row, page) & (keys_.size() - 1);
    for (; keys_[slot].position != 0; slot = (slot + 1) & (keys_.size() - 1)) {
      if (keys_[slot].row == row && keys_[slot].page == page) return keys_[slot].position - 1;
    }
    pages.push_back(PageErrors{.page = page});
    keys_[slot] = Key{row, page, pages.size()};
    ++used_;
    return pages.size() - 1;
  }

 private:
  struct Key {
    std::size_t row = 0;
    std::uint64_t page = 0;
    std::size_t position = 0;  // plus one; 0 is empty
  };
  static std::uint64_t Hash(std::size_t row, std::uint64_t page) {
    return Mix(Mix(0, row), page >> 12) * 0x9e3779b97f4a7c15ULL >> 20;
  }
  void Grow() {
    std::vector<Key> old = std::move(keys_);
    keys_.assign(old.empty() ? 64 : 2 * old.size(), Key{});
    for (const Key& key : old) {
      if (key.position == 0) continue;
      std::size_t slot = Hash(key.row, key.page) & (keys_.size() - 1);
      while (keys_[slot].position != 0) slot = (slot + 1) & (keys_.size() - 1);
      keys_[slot] = key;
    }
  }
  std::vector<Key> keys_;
  std::size_t used_ = 0;
};

}  // namespace

std::vector<RasEvent> CoalesceStorm(std::vector<RasEvent> events, std::size_t threshold) {
  if (events.size() <= threshold) return events;
  // An open-addressing table of positions in `merged` (plus one; 0 is
  // empty), at most half full: the key is compared in place, never copied.
  std::size_t capacity = 16;
  while (capacity < 2 * events.size()) capacity *= 2;
  std::vector<std::uint32_t> slots(capacity, 0);
  std::vector<RasEvent> merged;
  std::vector<std::int64_t> minutes;   // by position in merged
  std::vector<std::uint64_t> members;  // by position in merged
  PageSlots page_slots;
  // Adds `errors` on the page of `address` to the histogram of event `row`.
  auto count_page = [&](std::size_t row, const Address& address, std::uint64_t errors) {
    auto& pages = merged[row].pages;
    pages[page_slots.Find(row, PageOf(address.value), pages)].errors += errors;
  };
  for (auto& event : events) {
    const std::int64_t minute = MinuteOf(event);
    std::size_t slot = ComponentHash(event, minute) & (capacity - 1);
    for (; slots[slot] != 0; slot = (slot + 1) & (capacity - 1)) {
      const std::size_t row = slots[slot] - 1;
      if (minutes[row] == minute && SameComponent(merged[row], event)) break;
    }
    if (slots[slot] == 0) {
      slots[slot] = static_cast<std::uint32_t>(merged.size() + 1);
      // An event coalesced before (a backlog coalesced again) brings its
      // histogram: the table learns where its pages sit.
      std::vector<PageErrors> pages = std::move(event.pages);
      event.pages.clear();
      merged.push_back(std::move(event));
      minutes.push_back(minute);
      members.push_back(1);
      for (const auto& page : pages)
        merged.back()
            .pages[page_slots.Find(merged.size() - 1, page.page, merged.back().pages)]
            .errors += page.errors;
      continue;
    }
    const std::size_t row = slots[slot] - 1;
    RasEvent& into = merged[row];
    if (into.address && (!into.pages.empty() || !event.pages.empty() ||
                         PageOf(into.address->value) != PageOf(event.address->value))) {
      // A second page: the histogram starts with the first record's.
      if (into.pages.empty()) count_page(row, *into.address, into.count);
      if (event.pages.empty()) {
        count_page(row, *event.address, event.count);
      } else {
        for (const auto& page : event.pages)
          into.pages[page_slots.Find(row, page.page, into.pages)].errors += page.errors;
      }
    }
    into.count += event.count;
    members[row] += 1;
  }
  for (std::size_t i = 0; i < merged.size(); ++i) {
    if (members[i] > 1)
      merged[i].summary = fmt::format("[{} events coalesced] {}", members[i], merged[i].summary);
  }
  return merged;
}

std::string PageScope(const RasEvent& event) {
  if (event.device) return fmt::format("dev{}", *event.device);
  if (event.pci_bdf) return *event.pci_bdf;
  if (event.mc) return fmt::format("mc{}", *event.mc);
  return "host";
}

RasEvent EventFromRecord(ScannedRecord&& record, std::string source,
                         std::chrono::system_clock::time_point time) {
  RasEvent event;
  event.time = time;
  event.source = std::move(source);
  event.origin = std::move(record.origin);
  event.severity = record.severity;
  event.mc = record.mc;
  event.dimm = std::move(record.dimm);
  event.pci_bdf = std::move(record.pci_bdf);
  event.address = std::move(record.address);
  event.vendor_code = record.xid;
  event.vendor_action = record.vendor_action;
  event.pid = record.pid;
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

}  // namespace rasd::ras
