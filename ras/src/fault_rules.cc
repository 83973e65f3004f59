#include "rasd/ras/fault_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace rasd::ras {
namespace {

bool Lists(const std::vector<int>& codes, int code) {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

std::string CodeName(const std::string& origin, int code) {
  if (origin == "nvidia_xid") return fmt::format("Xid {}", code);
  return fmt::format("{} code {}", origin, code);
}

std::string Where(const RasEvent& event) {
  if (event.device) return fmt::format("device {}", *event.device);
  return event.pci_bdf.value_or("?");
}

double SecondsBetween(std::chrono::system_clock::time_point from,
                      std::chrono::system_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

std::string_view FaultRuleKindName(FaultRuleKind kind) {
  switch (kind) {
    case FaultRuleKind::kEcho:
      return "echo";
    case FaultRuleKind::kSupersede:
      return "supersede";
    case FaultRuleKind::kStorm:
      return "storm";
    case FaultRuleKind::kSettle:
      return "settle";
  }
  return "echo";
}

std::optional<FaultRuleKind> ParseFaultRuleKind(std::string_view name) {
  for (auto kind : {FaultRuleKind::kEcho, FaultRuleKind::kSupersede, FaultRuleKind::kStorm,
                    FaultRuleKind::kSettle}) {
    if (FaultRuleKindName(kind) == name) return kind;
  }
  return std::nullopt;
}

std::vector<FaultRule> DefaultFaultRules() {
  using std::chrono::seconds;
  return {
      FaultRule{.name = "fallen-off-the-bus",
                .kind = FaultRuleKind::kSupersede,
                .codes = {13, 31, 43, 45, 62, 119, 120, 154},
                .after_codes = {79},
                .window = seconds(300)},
      FaultRule{.name = "echo-of-another-xid",
                .kind = FaultRuleKind::kEcho,
                .codes = {43, 45},
                .window = seconds(30)},
      FaultRule{.name = "xid-storm", .kind = FaultRuleKind::kStorm, .window = seconds(60)},
      FaultRule{.name = "links-training",
                .kind = FaultRuleKind::kSettle,
                .codes = {74, 144, 145, 146, 147, 148, 149, 150},
                .window = seconds(300)},
  };
}

std::vector<FaultRule> MergeFaultRules(const std::vector<FaultRule>& site) {
  std::vector<FaultRule> rows = DefaultFaultRules();
  for (const auto& row : site) {
    auto same = std::find_if(rows.begin(), rows.end(),
                             [&](const FaultRule& built_in) { return built_in.name == row.name; });
    if (same != rows.end()) {
      *same = row;
    } else {
      rows.push_back(row);
    }
  }
  std::erase_if(rows, [](const FaultRule& row) { return !row.enabled; });
  return rows;
}

FaultRules::FaultRules(std::vector<FaultRule> rows) { SetRows(std::move(rows)); }

void FaultRules::SetRows(std::vector<FaultRule> rows) {
  rows_ = std::move(rows);
  std::erase_if(rows_, [](const FaultRule& row) { return !row.enabled; });
  longest_ = std::chrono::seconds(0);
  for (const auto& row : rows_) longest_ = std::max(longest_, row.window);
}

std::optional<std::string> FaultRules::DeviceKey(const RasEvent& event) {
  if (event.device) return fmt::format("dev{}", *event.device);
  if (event.pci_bdf) return *event.pci_bdf;
  return std::nullopt;
}

const FaultRules::Seen* FaultRules::Primary(const FaultRule& row, const std::string& device,
                                            const RasEvent& event) const {
  auto found = faults_.find({row.origin, device});
  if (found == faults_.end()) return nullptr;
  const int code = *event.vendor_code;
  // The latest first: the fault this one follows.
  for (auto seen = found->second.rbegin(); seen != found->second.rend(); ++seen) {
    if (seen->time > event.time) continue;  // logged after this one
    if (event.time - seen->time > row.window) break;
    bool primary = false;
    if (!row.after_codes.empty()) {
      primary = Lists(row.after_codes, seen->code);
    } else if (!row.after_classes.empty()) {
      primary = std::find(row.after_classes.begin(), row.after_classes.end(), seen->severity) !=
                row.after_classes.end();
    } else {
      primary = seen->code != code && !Lists(row.codes, seen->code);
    }
    if (primary) return &*seen;
  }
  return nullptr;
}

std::optional<std::chrono::system_clock::time_point> FaultRules::SettleStart(
    const std::string& origin) const {
  std::optional<std::chrono::system_clock::time_point> start = boot_;
  if (auto loaded = driver_loaded_.find(origin); loaded != driver_loaded_.end())
    start = start ? std::max(*start, loaded->second) : loaded->second;
  return start;
}

void FaultRules::Judge(RasEvent& event) {
  event.context = {};
  if (event.historical) return;
  if (event.origin == "nvidia_driver") {
    auto& loaded = driver_loaded_["nvidia_xid"];
    loaded = std::max(loaded, event.time);
    return;
  }
  if (!event.vendor_code) return;
  const auto device = DeviceKey(event);
  if (!device) return;
  if (++judged_ % 1024 == 0) Prune(event.time);
  const int code = *event.vendor_code;
  for (const auto& row : rows_) {
    if (row.origin != event.origin || row.kind != FaultRuleKind::kSettle) continue;
    if (!Lists(row.codes, code)) continue;
    const auto start = SettleStart(row.origin);
    if (!start || event.time < *start || event.time - *start >= row.window) continue;
    event.context.kind = FaultContext::Kind::kSettling;
    event.context.rule = row.name;
    event.context.why = fmt::format(
        "{} {:.0f} s after {}, while links train (settle window {} s)", CodeName(row.origin, code),
        SecondsBetween(*start, event.time),
        boot_ && *start == *boot_ ? "the boot" : "the driver was loaded", row.window.count());
    break;
  }
  for (const auto& row : rows_) {
    if (event.context.kind != FaultContext::Kind::kOwn) break;
    if (row.origin != event.origin || row.kind == FaultRuleKind::kStorm ||
        row.kind == FaultRuleKind::kSettle)
      continue;
    if (!Lists(row.codes, code)) continue;
    const Seen* primary = Primary(row, *device, event);
    if (primary == nullptr) continue;
    event.context.kind = row.kind == FaultRuleKind::kEcho ? FaultContext::Kind::kEcho
                                                          : FaultContext::Kind::kSuperseded;
    event.context.rule = row.name;
    event.context.why = fmt::format("{} of {} on {} {:.1f} s before",
                                    row.kind == FaultRuleKind::kEcho ? "echo" : "part",
                                    CodeName(row.origin, primary->code), Where(event),
                                    SecondsBetween(primary->time, event.time));
    break;
  }
  for (const auto& row : rows_) {
    if (event.context.kind == FaultContext::Kind::kSettling) break;
    if (row.origin != event.origin || row.kind != FaultRuleKind::kStorm) continue;
    if (!row.codes.empty() && !Lists(row.codes, code)) continue;
    if (event.severity == Severity::kSrar) break;
    auto [window, opened] = windows_.try_emplace(WindowKey{
        row.origin, *device, code, event.vendor_action.value_or(-1), event.pid.value_or(-1),
        event.address ? PageOf(event.address->value) : ~std::uint64_t{0}, event.before_start});
    if (!opened && event.time >= window->second.start &&
        event.time - window->second.start < window->second.length) {
      ++window->second.repeats;
      event.context.window_start = window->second.start;
      event.context.window = window->second.length;
      if (event.context.kind == FaultContext::Kind::kOwn) {
        event.context.kind = FaultContext::Kind::kRepeat;
        event.context.rule = row.name;
        event.context.why = fmt::format("{} again on {}, {:.1f} s into its {} s window (repeat {})",
                                        CodeName(row.origin, code), Where(event),
                                        SecondsBetween(window->second.start, event.time),
                                        row.window.count(), window->second.repeats);
      }
      break;
    }
    window->second = Window{.start = event.time, .length = row.window};
    event.context.window_start = event.time;
    event.context.window = row.window;
    if (event.context.rule.empty()) event.context.rule = row.name;
    break;
  }
  // A fault of its own, or a link code while links train: what follows
  // it may be its echo ("Xid 45 ... caused by previous Xid 149").
  if (event.context.kind != FaultContext::Kind::kOwn &&
      event.context.kind != FaultContext::Kind::kSettling)
    return;
  auto& seen = faults_[{event.origin, *device}];
  seen.push_back(Seen{.time = event.time, .code = code, .severity = event.severity});
  // A device's history is as long as the longest window needs; a burst of
  // distinct codes keeps at most this many.
  constexpr std::size_t kKeptPerDevice = 64;
  while (seen.size() > kKeptPerDevice ||
         (!seen.empty() && event.time - seen.front().time > longest_))
    seen.pop_front();
}

void FaultRules::ForgetDevice(int device) {
  const std::string key = fmt::format("dev{}", device);
  std::erase_if(windows_, [&](const auto& entry) { return std::get<1>(entry.first) == key; });
  std::erase_if(faults_, [&](const auto& entry) { return entry.first.second == key; });
}

void FaultRules::Prune(std::chrono::system_clock::time_point now) {
  std::erase_if(windows_,
                [&](const auto& entry) { return now - entry.second.start > entry.second.length; });
  std::erase_if(faults_, [&](const auto& entry) {
    return entry.second.empty() || now - entry.second.back().time > longest_;
  });
}

}  // namespace rasd::ras
