#include "rasd/ras/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace rasd::ras {
namespace {

constexpr std::array<std::pair<ActionKind, std::string_view>, 11> kActionNames = {{
    {ActionKind::kRecord, "record"},
    {ActionKind::kRetirePage, "retire-page"},
    {ActionKind::kMarkAtRisk, "mark-at-risk"},
    {ActionKind::kKillConsumer, "kill-consumer"},
    {ActionKind::kDegradeDevice, "degrade-device"},
    {ActionKind::kDrainDevice, "drain-device"},
    {ActionKind::kIsolateDevice, "isolate-device"},
    {ActionKind::kDrainNode, "drain-node"},
    {ActionKind::kSoftOfflinePage, "soft-offline-page"},
    {ActionKind::kHardOfflinePage, "hard-offline-page"},
    {ActionKind::kRunHook, "run-hook"},
}};

constexpr std::array<std::pair<ComponentKind, std::string_view>, 6> kComponentNames = {{
    {ComponentKind::kHostMemory, "host-memory"},
    {ComponentKind::kDeviceMemory, "device-memory"},
    {ComponentKind::kDevice, "device"},
    {ComponentKind::kPciDevice, "pci-device"},
    {ComponentKind::kCpu, "cpu"},
    {ComponentKind::kOther, "other"},
}};

PolicyRule Rule(std::string name, std::optional<Severity> severity,
                std::optional<ComponentKind> component, std::vector<ActionKind> actions,
                std::optional<Threshold> threshold = {}) {
  PolicyRule rule;
  rule.name = std::move(name);
  rule.severity = severity;
  rule.component = component;
  rule.actions = std::move(actions);
  rule.threshold = threshold;
  return rule;
}

PolicyRule OfOrigin(std::string origin, PolicyRule rule) {
  rule.origin = std::move(origin);
  return rule;
}

}  // namespace

std::string_view ActionKindName(ActionKind kind) {
  for (const auto& [value, name] : kActionNames)
    if (value == kind) return name;
  return "unknown";
}

std::optional<ActionKind> ParseActionKind(std::string_view name) {
  for (const auto& [value, known] : kActionNames)
    if (known == name) return value;
  return std::nullopt;
}

std::string_view ComponentKindName(ComponentKind kind) {
  for (const auto& [value, name] : kComponentNames)
    if (value == kind) return name;
  return "unknown";
}

std::optional<ComponentKind> ParseComponentKind(std::string_view name) {
  for (const auto& [value, known] : kComponentNames)
    if (known == name) return value;
  return std::nullopt;
}

ComponentKind ComponentOf(const RasEvent& event) {
  if (event.device) return event.address ? ComponentKind::kDeviceMemory : ComponentKind::kDevice;
  if (event.address || event.mc) return ComponentKind::kHostMemory;
  if (event.pci_bdf) return ComponentKind::kPciDevice;
  if (event.origin == "mce") return ComponentKind::kCpu;
  return ComponentKind::kOther;
}

void WindowCounter::Expire(std::chrono::nanoseconds now) {
  auto live = entries_.begin();
  for (; live != entries_.end() && now - live->first >= window_; ++live) sum_ -= live->second;
  entries_.erase(entries_.begin(), live);
}

std::uint64_t WindowCounter::Count(std::chrono::nanoseconds now) const {
  std::uint64_t sum = 0;
  for (const auto& [at, count] : entries_)
    if (now - at < window_) sum += count;
  return sum;
}

bool WindowCounter::Add(std::uint64_t count, std::chrono::nanoseconds now) {
  Expire(now);
  count = std::max<std::uint64_t>(count, 1);
  entries_.emplace_back(now, count);
  sum_ += count;
  if (sum_ < limit_) return false;
  entries_.clear();
  sum_ = 0;
  return true;
}

std::vector<PolicyRule> DefaultRules(const PolicyConfig& config) {
  using C = ComponentKind;
  using A = ActionKind;
  return {
      Rule("ce-device-memory", Severity::kCe, C::kDeviceMemory, {A::kRetirePage}, config.ce_page),
      Rule("ce-host-memory", Severity::kCe, C::kHostMemory, {A::kSoftOfflinePage}, config.ce_page),
      Rule("ce-device", Severity::kCe, C::kDevice, {A::kDegradeDevice}, config.ce_device),
      Rule("ucna-device-memory", Severity::kUcna, C::kDeviceMemory,
           {A::kRetirePage, A::kMarkAtRisk}),
      Rule("ucna-host-memory", Severity::kUcna, C::kHostMemory, {A::kSoftOfflinePage}),
      Rule("srao-device-memory", Severity::kSrao, C::kDeviceMemory,
           {A::kRetirePage, A::kMarkAtRisk}),
      Rule("srao-host-memory", Severity::kSrao, C::kHostMemory, {A::kHardOfflinePage}),
      // The consumer is killed before the page is retired: its allocation
      // still names it.
      Rule("srar-device-memory", Severity::kSrar, C::kDeviceMemory,
           {A::kKillConsumer, A::kRetirePage}),
      // Without an address (Xid 94, a contained error) the device serves
      // on; the process the record names (pid=) must end: it is killed if it
      // is a workload attached to rasd, never another process.
      Rule("srar-device", Severity::kSrar, C::kDevice, {A::kKillConsumer}),
      // The kernel kills a host consumer itself.
      Rule("srar-host", Severity::kSrar, std::nullopt, {A::kRecord}),
      Rule("uce-device-memory", Severity::kUce, C::kDeviceMemory,
           {A::kDrainDevice, A::kIsolateDevice}),
      Rule("uce-device", Severity::kUce, C::kDevice, {A::kDrainDevice, A::kIsolateDevice}),
      // A CXL memory device's uncorrected media error at a host address:
      // the page's data is lost, and the kernel takes the page only when
      // something reads it; offlined now, no new allocation lands on it.
      OfOrigin("cxl",
               Rule("uce-cxl-host-memory", Severity::kUce, C::kHostMemory, {A::kHardOfflinePage})),
      Rule("uce-host", Severity::kUce, std::nullopt, {A::kRecord}),
      Rule("fatal-device-memory", Severity::kFatal, C::kDeviceMemory,
           {A::kDrainDevice, A::kIsolateDevice}),
      Rule("fatal-device", Severity::kFatal, C::kDevice, {A::kDrainDevice, A::kIsolateDevice}),
      // A NIC's fatal health: a link fault of the accelerators behind it
      // (the daemon's NIC health), not a reason to drain the node.
      OfOrigin("mlx5", Rule("fatal-nic", Severity::kFatal, C::kPciDevice, {A::kRecord})),
      OfOrigin("devlink", Rule("fatal-nic-devlink", Severity::kFatal, C::kPciDevice, {A::kRecord})),
      // An NVSwitch's fatal error: a link fault of the NVIDIA GPUs (the
      // daemon's NIC health, which covers the NVLink fabric too).
      OfOrigin("nvswitch", Rule("fatal-nvswitch", Severity::kFatal, std::nullopt, {A::kRecord})),
      // An accelerator rasd does not run (an amdgpu or Gaudi card beside the
      // devices it serves) that its driver declares unusable: recorded and
      // alerted on, not a reason to drain the node whose other devices
      // serve on. One rasd does run is a runtime device and isolated by
      // fatal-device.
      OfOrigin("amdgpu",
               Rule("fatal-other-accelerator", Severity::kFatal, C::kPciDevice, {A::kRecord})),
      OfOrigin("habanalabs", Rule("fatal-other-accelerator-gaudi", Severity::kFatal, C::kPciDevice,
                                  {A::kRecord})),
      // An NPU's failure read from text that names no device rasd can place
      // (CANN prints the process's own device number, which its visible-
      // device setting renumbers): recorded and alerted on. The NPU leaves
      // service through its own health (DCMI, the runtime backend), never
      // by draining the node whose other devices serve on.
      OfOrigin("ascend",
               Rule("fatal-ascend-unplaced", Severity::kFatal, std::nullopt, {A::kRecord})),
      Rule("fatal-host", Severity::kFatal, std::nullopt, {A::kDrainNode}),
      Rule("record", std::nullopt, std::nullopt, {A::kRecord}),
  };
}

PolicyEngine::PolicyEngine(PolicyConfig config) { Reconfigure(std::move(config)); }

void PolicyEngine::Reconfigure(PolicyConfig config) {
  config_ = std::move(config);
  rules_ = config_.rules;
  for (auto& rule : DefaultRules(config_)) rules_.push_back(std::move(rule));
  // Counters of a rule that is gone, or whose threshold changed, start again.
  std::erase_if(buckets_, [this](const auto& entry) {
    const std::string& key = entry.first;
    const std::string rule_name = key.substr(0, key.find('|'));
    auto rule = std::find_if(rules_.begin(), rules_.end(),
                             [&](const PolicyRule& r) { return r.name == rule_name; });
    return rule == rules_.end() || !rule->threshold || *rule->threshold != entry.second.threshold;
  });
  std::erase_if(page_buckets_, [this](const auto& entry) {
    auto rule = std::find_if(rules_.begin(), rules_.end(),
                             [&](const PolicyRule& r) { return r.name == entry.second.rule; });
    return rule == rules_.end() || !rule->threshold || *rule->threshold != entry.second.threshold;
  });
}

const PolicyRule* PolicyEngine::Match(const RasEvent& event) const {
  const ComponentKind component = ComponentOf(event);
  for (const auto& rule : rules_) {
    if (rule.origin && *rule.origin != event.origin) continue;
    if (rule.severity && *rule.severity != event.severity) continue;
    if (rule.component && *rule.component != component) continue;
    if (rule.vendor_code && rule.vendor_code != event.vendor_code) continue;
    return &rule;
  }
  return nullptr;
}

std::string PolicyEngine::BucketKey(const PolicyRule& rule, const RasEvent& event) const {
  const std::string where = PageScope(event);
  switch (rule.threshold->key) {
    case Threshold::Key::kPage:  // a page's counter is in page_buckets_ under this key
      return fmt::format("{}|{}", rule.name, where);
    case Threshold::Key::kDimm:
      return fmt::format("{}|{}", rule.name, where);
    case Threshold::Key::kDevice:
      return fmt::format("{}|{}", rule.name,
                         event.device ? fmt::format("dev{}", *event.device) : where);
  }
  return rule.name;
}

BeforeStartVerdict StillActsBeforeStart(ActionKind kind, const RasEvent& event) {
  switch (kind) {
    case ActionKind::kRecord:
    case ActionKind::kRetirePage:
    case ActionKind::kSoftOfflinePage:
    case ActionKind::kHardOfflinePage:
      return BeforeStartVerdict::kStillActs;
    case ActionKind::kDrainDevice:
    case ActionKind::kIsolateDevice:
      return event.severity == Severity::kFatal && event.device ? BeforeStartVerdict::kStillActs
                                                                : BeforeStartVerdict::kRecordOnly;
    case ActionKind::kDegradeDevice:
    case ActionKind::kMarkAtRisk:
    case ActionKind::kKillConsumer:
    case ActionKind::kDrainNode:
    case ActionKind::kRunHook:
      return BeforeStartVerdict::kRecordOnly;
  }
  return BeforeStartVerdict::kRecordOnly;
}

std::vector<Action> PolicyEngine::Decide(const RasEvent& event, std::chrono::nanoseconds now) {
  std::vector<Action> actions = DecideLive(event, now);
  if (!event.before_start || event.historical) return actions;
  for (auto& action : actions) {
    if (StillActsBeforeStart(action.kind, event) == BeforeStartVerdict::kStillActs) continue;
    action.withheld = true;
    action.reason += "; logged before rasd started in this boot";
  }
  return actions;
}

std::vector<Action> PolicyEngine::DecideLive(const RasEvent& event, std::chrono::nanoseconds now) {
  std::vector<Action> actions;
  auto act = [&](ActionKind kind, const std::string& rule, std::string reason) {
    Action action;
    action.kind = kind;
    action.device = event.device;
    if (event.address) action.address = event.address->value;
    action.pid = event.pid;
    action.rule = rule;
    action.reason = std::move(reason);
    actions.push_back(std::move(action));
  };
  const std::string what = fmt::format("{} {}", SeverityName(event.severity), event.origin);
  if (event.historical) {
    act(ActionKind::kRecord, "previous-boot", what + " from a previous boot");
    return actions;
  }
  // Counters of keys that went quiet are dropped now and then, so memory
  // follows the pages erring now, not every page that ever did.
  if (++decisions_ % 4096 == 0) {
    std::erase_if(buckets_,
                  [now](const auto& entry) { return entry.second.counter.Count(now) == 0; });
    for (auto scope = page_buckets_.begin(); scope != page_buckets_.end();) {
      std::erase_if(scope->second.pages,
                    [now](const auto& page) { return page.second.Count(now) == 0; });
      scope = scope->second.pages.empty() ? page_buckets_.erase(scope) : std::next(scope);
    }
  }
  // Part of an earlier fault (fault_rules.h): recorded with it, and not
  // counted by any rule's threshold as a fault of its own.
  if (event.context.kind == FaultContext::Kind::kEcho ||
      event.context.kind == FaultContext::Kind::kSuperseded) {
    act(ActionKind::kRecord, event.context.rule, what + ": " + event.context.why);
    return actions;
  }
  const PolicyRule* rule = Match(event);
  if (rule == nullptr) {
    act(ActionKind::kRecord, "record", what);
    return actions;
  }
  // A repeat within its storm window: the first acted; a threshold still
  // counts every error.
  if (event.context.kind == FaultContext::Kind::kRepeat && !rule->threshold) {
    act(ActionKind::kRecord, event.context.rule, what + ": " + event.context.why);
    return actions;
  }
  const bool settling = event.context.kind == FaultContext::Kind::kSettling;
  if (settling || (rule->boot_grace.count() > 0 && boot_time_ && event.time >= *boot_time_ &&
                   event.time - *boot_time_ < rule->boot_grace)) {
    // What the rule would do, stored as not taken: people see it, nothing
    // runs, and the rule's counter does not count the boot's flapping.
    const std::string why =
        settling ? event.context.why
                 : fmt::format("{:.0f} s after boot, within the rule's boot grace of {} s",
                               std::chrono::duration<double>(event.time - *boot_time_).count(),
                               rule->boot_grace.count());
    for (ActionKind kind : rule->actions) {
      act(kind, rule->name, what + (settling ? ": " + event.context.rule : ": boot grace"));
      actions.back().withheld = kind != ActionKind::kRecord;
      actions.back().withheld_why = why;
    }
    return actions;
  }
  if (rule->threshold && rule->threshold->key == Threshold::Key::kPage && !event.pages.empty()) {
    DecidePages(*rule, event, what, now, actions);
    return actions;
  }
  if (rule->threshold) {
    const bool reached =
        rule->threshold->key == Threshold::Key::kPage
            ? PageCountReaches(*rule, PageBucketsOf(*rule, event), event,
                               event.address ? PageOf(event.address->value) : kNoPage, event.count,
                               now)
            : CountReaches(*rule, BucketKey(*rule, event), event.count, now);
    if (!reached) {
      act(ActionKind::kRecord, rule->name,
          fmt::format("{}: below {} in {}s", what, rule->threshold->count,
                      rule->threshold->window.count()));
      return actions;
    }
  }
  const std::string reason =
      rule->threshold ? fmt::format("{}: {} or more in {}s", what, rule->threshold->count,
                                    rule->threshold->window.count())
                      : what;
  for (ActionKind kind : rule->actions) {
    act(kind, rule->name, reason);
    if (kind == ActionKind::kRunHook) actions.back().hook = rule->hook;
  }
  Escalate(event, now, actions);
  return actions;
}

bool PolicyEngine::CountReaches(const PolicyRule& rule, const std::string& key,
                                std::uint64_t errors, std::chrono::nanoseconds now) {
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    it = buckets_
             .emplace(key, Bucket{*rule.threshold,
                                  WindowCounter(rule.threshold->count, rule.threshold->window)})
             .first;
  }
  return it->second.counter.Add(errors, now);
}

PolicyEngine::PageBuckets& PolicyEngine::PageBucketsOf(const PolicyRule& rule,
                                                       const RasEvent& event) {
  auto [it, added] = page_buckets_.try_emplace(BucketKey(rule, event));
  if (added) {
    it->second.rule = rule.name;
    it->second.threshold = *rule.threshold;
    it->second.scope = PageScope(event);
  }
  return it->second;
}

bool PolicyEngine::PageCountReaches(const PolicyRule& rule, PageBuckets& buckets,
                                    const RasEvent& event, std::uint64_t page, std::uint64_t errors,
                                    std::chrono::nanoseconds now) {
  auto [it, added] =
      buckets.pages.try_emplace(page, WindowCounter(rule.threshold->count, rule.threshold->window));
  if (added && page != kNoPage && !page_history_.empty()) {
    auto history = page_history_.find({buckets.scope, page});
    if (history != page_history_.end()) {
      const std::uint64_t before = history->second.errors % rule.threshold->count;
      // As of its last error, on the monotonic clock.
      const auto ago = std::max(
          std::chrono::nanoseconds(0),
          std::chrono::duration_cast<std::chrono::nanoseconds>(event.time - history->second.last));
      if (before > 0) it->second.Add(before, std::max(now - ago, std::chrono::nanoseconds(0)));
      page_history_.erase(history);
    }
  }
  return it->second.Add(errors, now);
}

void PolicyEngine::SetPageHistory(std::vector<PageErrorsRecord> pages) {
  page_history_.clear();
  for (auto& page : pages) {
    auto key = std::make_pair(page.scope, page.page);
    page_history_.emplace(std::move(key), std::move(page));
  }
}

void PolicyEngine::DecidePages(const PolicyRule& rule, const RasEvent& event,
                               const std::string& what, std::chrono::nanoseconds now,
                               std::vector<Action>& actions) {
  const std::string reason = fmt::format("{}: {} or more in {}s", what, rule.threshold->count,
                                         rule.threshold->window.count());
  std::size_t below = 0;
  PageBuckets& buckets = PageBucketsOf(rule, event);
  for (const PageErrors& page : event.pages) {
    if (!PageCountReaches(rule, buckets, event, page.page, page.errors, now)) {
      ++below;
      continue;
    }
    // This page's actions, then what they add up to on its device.
    std::vector<Action> page_actions;
    for (ActionKind kind : rule.actions) {
      Action action;
      action.kind = kind;
      action.device = event.device;
      action.address = page.page;
      action.pid = event.pid;
      action.rule = rule.name;
      action.reason = fmt::format("{} on page 0x{:x}", reason, page.page);
      if (kind == ActionKind::kRunHook) action.hook = rule.hook;
      page_actions.push_back(std::move(action));
    }
    Escalate(event, now, page_actions);
    for (auto& action : page_actions) actions.push_back(std::move(action));
  }
  if (below == 0) return;
  Action record;
  record.kind = ActionKind::kRecord;
  record.device = event.device;
  record.pid = event.pid;
  record.rule = rule.name;
  record.reason =
      fmt::format("{}: below {} in {}s on {} of {} page(s)", what, rule.threshold->count,
                  rule.threshold->window.count(), below, event.pages.size());
  actions.insert(actions.begin(), std::move(record));
}

void PolicyEngine::Escalate(const RasEvent& event, std::chrono::nanoseconds now,
                            std::vector<Action>& actions) {
  if (!event.device) return;
  const bool retires = std::any_of(actions.begin(), actions.end(), [](const Action& action) {
    return action.kind == ActionKind::kRetirePage;
  });
  if (!retires) return;
  auto& times = retirements_[*event.device];
  times.push_back(now);
  std::erase_if(times, [&](std::chrono::nanoseconds at) {
    return now - at > std::chrono::nanoseconds(config_.escalation_window);
  });
  const std::uint64_t recent = times.size();
  auto add = [&](ActionKind kind, const char* rule) {
    Action action;
    action.kind = kind;
    action.device = event.device;
    action.rule = rule;
    action.reason = fmt::format("{} page retirements on device {} within {}s", recent,
                                *event.device, config_.escalation_window.count());
    actions.push_back(std::move(action));
  };
  if (recent >= config_.isolate_after_retirements) {
    add(ActionKind::kDrainDevice, "escalation");
    add(ActionKind::kIsolateDevice, "escalation");
  } else if (recent >= config_.degrade_after_retirements) {
    add(ActionKind::kDegradeDevice, "escalation");
  }
}

}  // namespace rasd::ras
