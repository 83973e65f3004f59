#include "config_compound_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <set>

namespace rasd::daemon {
namespace {

using Key = ConfigValueReader::Key;

// A key whose value is an integer in min..max, handed to `store`.
template <typename Store>
Key IntegerKey(ConfigValueReader& reader, std::string_view name, std::int64_t min, std::int64_t max,
               Store store) {
  return {name, [&reader, min, max, store](const YAML::Node& value, const std::string& path) {
            if (auto n = reader.ReadInteger(value, path, min, max)) store(*n);
          }};
}

std::vector<Key> MatchKeys(ConfigValueReader& reader, ras::PolicyRule& rule, bool& ok) {
  return {
      {"origin",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto text = reader.ReadString(value, path)) rule.origin = *text;
       }},
      {"severity",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         rule.severity = ras::ParseSeverity(*text);
         if (!rule.severity) {
           reader.Problem(value.Mark(), fmt::format("'{}' must be one of CE, UCNA, SRAO, "
                                                    "SRAR, UCE, FATAL, INFO, not '{}'",
                                                    path, *text));
           ok = false;
         }
       }},
      {"component",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         rule.component = ras::ParseComponentKind(*text);
         if (!rule.component) {
           reader.Problem(value.Mark(),
                          fmt::format("'{}' must be one of host-memory, device-memory, device, "
                                      "pci-device, cpu, other, not '{}'",
                                      path, *text));
           ok = false;
         }
       }},
      IntegerKey(reader, "vendor_code", 0, 99'999'999,
                 [&rule](std::int64_t code) { rule.vendor_code = static_cast<int>(code); }),
  };
}

std::vector<Key> ThresholdKeys(ConfigValueReader& reader, ras::Threshold& threshold, bool& ok) {
  return {
      IntegerKey(reader, "count", 1, 1'000'000,
                 [&threshold](std::int64_t n) { threshold.count = static_cast<std::uint64_t>(n); }),
      IntegerKey(reader, "window_s", 1, 365LL * 86400,
                 [&threshold](std::int64_t n) { threshold.window = std::chrono::seconds(n); }),
      {"per",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         if (*text == "page") {
           threshold.key = ras::Threshold::Key::kPage;
         } else if (*text == "dimm") {
           threshold.key = ras::Threshold::Key::kDimm;
         } else if (*text == "device") {
           threshold.key = ras::Threshold::Key::kDevice;
         } else {
           reader.Problem(value.Mark(),
                          fmt::format("'{}' must be page, dimm or device, not '{}'", path, *text));
           ok = false;
         }
       }},
  };
}

void ReadActions(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 ras::PolicyRule& rule, bool& ok) {
  std::vector<std::string> names;
  if (!reader.ReadStringList(value, path, names)) ok = false;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto kind = ras::ParseActionKind(names[i]);
    if (!kind) {
      reader.Problem(value[i].Mark(),
                     fmt::format("'{}[{}]': unknown action '{}' (known: record, "
                                 "retire-page, mark-at-risk, kill-consumer, "
                                 "degrade-device, drain-device, isolate-device, "
                                 "drain-node, soft-offline-page, hard-offline-page, "
                                 "run-hook)",
                                 path, i, names[i]));
      ok = false;
      continue;
    }
    rule.actions.push_back(*kind);
  }
}

void ReadHook(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
              ras::PolicyRule& rule, bool& ok) {
  if (!reader.ReadStringList(value, path, rule.hook)) ok = false;
  if (!rule.hook.empty() && (rule.hook.front().empty() || rule.hook.front().front() != '/')) {
    reader.Problem(value.Mark(), fmt::format("'{}': the program must be an absolute path (no "
                                             "shell, no PATH search), not '{}'",
                                             path, rule.hook.front()));
    ok = false;
  }
}

// One rule: {name, match: {...}, threshold: {...}, actions: [...], hook: [...]}.
std::optional<ras::PolicyRule> ReadRule(ConfigValueReader& reader, const YAML::Node& node,
                                        const std::string& path) {
  ras::PolicyRule rule;
  bool ok = true;
  ras::Threshold threshold;
  bool has_threshold = false;
  bool has_actions = false;
  const std::vector<Key> match_keys = MatchKeys(reader, rule, ok);
  const std::vector<Key> threshold_keys = ThresholdKeys(reader, threshold, ok);
  const std::vector<Key> rule_keys = {
      {"name",
       [&](const YAML::Node& value, const std::string& key_path) {
         if (auto text = reader.ReadString(value, key_path)) rule.name = *text;
       }},
      {"match",
       [&](const YAML::Node& value, const std::string& key_path) {
         reader.ReadMapping(value, key_path, match_keys);
       }},
      {"threshold",
       [&](const YAML::Node& value, const std::string& key_path) {
         has_threshold = true;
         reader.ReadMapping(value, key_path, threshold_keys);
       }},
      {"actions",
       [&](const YAML::Node& value, const std::string& key_path) {
         ReadActions(reader, value, key_path, rule, ok);
         has_actions = true;
       }},
      {"hook", [&](const YAML::Node& value,
                   const std::string& key_path) { ReadHook(reader, value, key_path, rule, ok); }},
      IntegerKey(reader, "boot_grace_s", 0, 86400,
                 [&rule](std::int64_t n) { rule.boot_grace = std::chrono::seconds(n); }),
  };
  const std::size_t problems_before = reader.ProblemCount();
  reader.ReadMapping(node, path, rule_keys);
  if (!node.IsMap()) return std::nullopt;
  if (rule.name.empty()) {
    reader.Problem(node.Mark(), fmt::format("'{}' needs a name", path));
    ok = false;
  }
  if (!has_actions || (rule.actions.empty() && reader.ProblemCount() == problems_before)) {
    reader.Problem(node.Mark(), fmt::format("'{}' needs a non-empty 'actions' list", path));
    ok = false;
  }
  const bool runs_hook = std::find(rule.actions.begin(), rule.actions.end(),
                                   ras::ActionKind::kRunHook) != rule.actions.end();
  if (runs_hook && rule.hook.empty()) {
    reader.Problem(node.Mark(), fmt::format("'{}' runs a hook but has no 'hook' argv", path));
    ok = false;
  }
  if (has_threshold) rule.threshold = threshold;
  if (!ok || reader.ProblemCount() != problems_before) return std::nullopt;
  return rule;
}

std::vector<Key> JobKeys(ConfigValueReader& reader, jobs::JobSpec& spec, bool& has_kind) {
  return {
      {"name",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto text = reader.ReadString(value, path)) spec.name = *text;
       }},
      {"kind",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         auto kind = jobs::ParseJobKind(*text);
         if (!kind) {
           reader.Problem(
               value.Mark(),
               fmt::format("'{}' must be inference, llm or collective, not '{}'", path, *text));
           return;
         }
         spec.kind = *kind;
         has_kind = true;
       }},
      {"preemption",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         auto preemption = jobs::ParsePreemption(*text);
         if (!preemption) {
           reader.Problem(value.Mark(),
                          fmt::format("'{}' must be recompute or swap, not '{}'", path, *text));
           return;
         }
         spec.preemption = *preemption;
       }},
      {"devices",
       [&](const YAML::Node& value, const std::string& path) {
         if (!value.IsSequence()) {
           reader.Problem(value.Mark(), fmt::format("'{}' must be a list of device indexes", path));
           return;
         }
         for (std::size_t i = 0; i < value.size(); ++i) {
           if (auto device = reader.ReadInteger(value[i], fmt::format("{}[{}]", path, i), 0, 1023))
             spec.devices.push_back(static_cast<int>(*device));
         }
       }},
      IntegerKey(reader, "max_batch", 1, 4096,
                 [&spec](std::int64_t n) { spec.max_batch = static_cast<std::size_t>(n); }),
      IntegerKey(reader, "max_queue", 1, 1'000'000,
                 [&spec](std::int64_t n) { spec.max_queue = static_cast<std::size_t>(n); }),
      IntegerKey(reader, "max_wait_us", 0, 1'000'000,
                 [&spec](std::int64_t n) { spec.max_wait = std::chrono::microseconds(n); }),
      IntegerKey(reader, "load_rps", 0, 1'000'000,
                 [&spec](std::int64_t n) { spec.load_rps = static_cast<double>(n); }),
      IntegerKey(reader, "kv_bytes", 4096, 1LL << 34,
                 [&spec](std::int64_t n) { spec.kv_bytes = static_cast<std::uint64_t>(n); }),
      IntegerKey(
          reader, "tokens_per_block", 1, 4096,
          [&spec](std::int64_t n) { spec.tokens_per_block = static_cast<std::uint32_t>(n); }),
      IntegerKey(reader, "elements", 1, 1LL << 26,
                 [&spec](std::int64_t n) { spec.elements = static_cast<std::uint64_t>(n); }),
      IntegerKey(reader, "steps", 1, 100'000'000,
                 [&spec](std::int64_t n) { spec.steps = static_cast<int>(n); }),
      IntegerKey(reader, "checkpoint_every", 1, 1'000'000,
                 [&spec](std::int64_t n) { spec.checkpoint_every = static_cast<int>(n); }),
      IntegerKey(reader, "min_ranks", 1, 1024,
                 [&spec](std::int64_t n) { spec.min_ranks = static_cast<int>(n); }),
      {"grow_on_return",
       [&reader, &spec](const YAML::Node& value, const std::string& path) {
         if (auto grow = reader.ReadBool(value, path)) spec.grow_on_return = *grow;
       }},
  };
}

std::optional<jobs::JobSpec> ReadJob(ConfigValueReader& reader, const YAML::Node& node,
                                     const std::string& path) {
  jobs::JobSpec spec;
  bool has_kind = false;
  const std::size_t problems_before = reader.ProblemCount();
  reader.ReadMapping(node, path, JobKeys(reader, spec, has_kind));
  if (!node.IsMap()) return std::nullopt;
  if (spec.name.empty()) reader.Problem(node.Mark(), fmt::format("'{}' needs a name", path));
  if (!has_kind)
    reader.Problem(node.Mark(), fmt::format("'{}' needs a kind (inference or collective)", path));
  if (reader.ProblemCount() != problems_before) return std::nullopt;
  return spec;
}

// A code of ras.codes: decimal, or with `hex_keys` also 0x + 32 bits.
// A code: a mapping's key (`is_key`: messages say "PATH key") or a value.
std::optional<int> ReadCode(ConfigValueReader& reader, const YAML::Node& key,
                            const std::string& path, bool hex_keys, bool is_key = true) {
  const std::string key_text = key.IsScalar() ? key.Scalar() : "";
  const std::string where = is_key ? path + " key" : path;
  if (!hex_keys || !(key_text.starts_with("0x") || key_text.starts_with("0X"))) {
    auto code = reader.ReadInteger(key, where, 0, 99'999'999);
    if (!code) return std::nullopt;
    return static_cast<int>(*code);
  }
  std::uint32_t bits = 0;
  const auto [end, ec] =
      std::from_chars(key_text.data() + 2, key_text.data() + key_text.size(), bits, 16);
  if (key_text.size() == 2 || ec != std::errc() || end != key_text.data() + key_text.size()) {
    reader.Problem(key.Mark(), fmt::format("'{}' must be a code such as 507053 or "
                                           "0x80E01801, not '{}'",
                                           where, key_text));
    return std::nullopt;
  }
  return static_cast<int>(static_cast<std::int32_t>(bits));
}

// A recovery action by name, or a problem at `value`.
std::optional<ras::RecoveryAction> ReadRecoveryAction(ConfigValueReader& reader,
                                                      const YAML::Node& value,
                                                      const std::string& path) {
  auto text = reader.ReadString(value, path);
  if (!text) return std::nullopt;
  auto action = ras::ParseRecoveryAction(*text);
  if (!action) {
    reader.Problem(value.Mark(), fmt::format("'{}' must be one of none, restart-app, reset-device, "
                                             "reboot-node, hardware-inspection, contact-vendor, "
                                             "not '{}'",
                                             path, *text));
  }
  return action;
}

std::optional<ras::RecoveryRow> ReadRecoveryRow(ConfigValueReader& reader, const YAML::Node& node,
                                                const std::string& path) {
  ras::RecoveryRow row;
  row.source = "site: " + path;
  bool ok = true;
  bool has_action = false;
  // The policy's matchers, read into a rule and copied: one spelling of a
  // match in the whole config.
  ras::PolicyRule match;
  std::vector<Key> match_keys = MatchKeys(reader, match, ok);
  // vendor_code here also takes DCMI's hex codes, as ras.codes.ascend does.
  for (auto& key : match_keys) {
    if (key.name != "vendor_code") continue;
    key.read = [&reader, &match](const YAML::Node& value, const std::string& key_path) {
      if (auto code = ReadCode(reader, value, key_path, /*hex_keys=*/true, /*is_key=*/false))
        match.vendor_code = *code;
    };
  }
  const std::vector<Key> row_keys = {
      {"match",
       [&](const YAML::Node& value, const std::string& key_path) {
         reader.ReadMapping(value, key_path, match_keys);
       }},
      {"action",
       [&](const YAML::Node& value, const std::string& key_path) {
         has_action = true;
         if (auto action = ReadRecoveryAction(reader, value, key_path)) {
           row.action = *action;
         } else {
           ok = false;
         }
       }},
      IntegerKey(reader, "escalate_after", 0, 1000,
                 [&row](std::int64_t n) { row.escalate_after = static_cast<std::uint32_t>(n); }),
      IntegerKey(reader, "escalate_window_s", 1, 365LL * 86400,
                 [&row](std::int64_t n) { row.escalate_window = std::chrono::seconds(n); }),
      {"escalate_to",
       [&](const YAML::Node& value, const std::string& key_path) {
         if (auto action = ReadRecoveryAction(reader, value, key_path)) {
           row.escalate_to = *action;
         } else {
           ok = false;
         }
       }},
  };
  const std::size_t problems_before = reader.ProblemCount();
  reader.ReadMapping(node, path, row_keys);
  if (!node.IsMap()) return std::nullopt;
  if (!has_action) {
    reader.Problem(node.Mark(), fmt::format("'{}' needs an 'action'", path));
    ok = false;
  }
  if (has_action && row.escalate_to && *row.escalate_to <= row.action) {
    reader.Problem(node.Mark(),
                   fmt::format("'{}': escalate_to ({}) must be stronger than action ({})", path,
                               ras::RecoveryActionName(*row.escalate_to),
                               ras::RecoveryActionName(row.action)));
    ok = false;
  }
  if (!ok || reader.ProblemCount() != problems_before) return std::nullopt;
  row.origin = match.origin;
  row.vendor_code = match.vendor_code;
  row.severity = match.severity;
  row.component = match.component;
  return row;
}

// A list of codes: one integer or a list of them, each in 0..99999999.
std::optional<std::vector<int>> ReadCodeList(ConfigValueReader& reader, const YAML::Node& value,
                                             const std::string& path) {
  std::vector<YAML::Node> items;
  if (value.IsSequence()) {
    for (const auto& item : value) items.push_back(item);
  } else {
    items.push_back(value);
  }
  std::vector<int> codes;
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto code = reader.ReadInteger(
        items[i], value.IsSequence() ? fmt::format("{}[{}]", path, i) : path, 0, 99'999'999);
    if (!code) return std::nullopt;
    codes.push_back(static_cast<int>(*code));
  }
  return codes;
}

std::optional<ras::FaultRule> ReadFaultRule(ConfigValueReader& reader, const YAML::Node& node,
                                            const std::string& path) {
  ras::FaultRule row;
  bool has_kind = false;
  bool ok = true;
  auto codes_key = [&](std::string_view name, std::vector<int>& into) -> Key {
    return {name, [&reader, &into, &ok](const YAML::Node& value, const std::string& key_path) {
              if (auto codes = ReadCodeList(reader, value, key_path)) {
                into = std::move(*codes);
              } else {
                ok = false;
              }
            }};
  };
  const std::vector<Key> keys = {
      {"name",
       [&](const YAML::Node& value, const std::string& key_path) {
         if (auto text = reader.ReadString(value, key_path)) row.name = *text;
       }},
      {"rule",
       [&](const YAML::Node& value, const std::string& key_path) {
         has_kind = true;
         auto text = reader.ReadString(value, key_path);
         if (!text) return;
         if (auto kind = ras::ParseFaultRuleKind(*text)) {
           row.kind = *kind;
         } else {
           reader.Problem(value.Mark(),
                          fmt::format("'{}' must be one of echo, supersede, storm, settle, "
                                      "not '{}'",
                                      key_path, *text));
         }
       }},
      {"enabled",
       [&](const YAML::Node& value, const std::string& key_path) {
         if (auto on = reader.ReadBool(value, key_path)) row.enabled = *on;
       }},
      {"origin",
       [&](const YAML::Node& value, const std::string& key_path) {
         if (auto text = reader.ReadString(value, key_path)) row.origin = *text;
       }},
      codes_key("codes", row.codes),
      codes_key("after_codes", row.after_codes),
      {"after_classes",
       [&](const YAML::Node& value, const std::string& key_path) {
         std::vector<std::string> names;
         if (!reader.ReadStringList(value, key_path, names)) return;
         for (const auto& name : names) {
           auto severity = ras::ParseSeverity(name);
           if (!severity) {
             reader.Problem(value.Mark(), fmt::format("'{}' must list CE, UCNA, SRAO, SRAR, UCE, "
                                                      "FATAL or INFO, not '{}'",
                                                      key_path, name));
             return;
           }
           row.after_classes.push_back(*severity);
         }
       }},
      IntegerKey(reader, "window_s", 1, 86400,
                 [&row](std::int64_t n) { row.window = std::chrono::seconds(n); }),
  };
  const std::size_t problems_before = reader.ProblemCount();
  reader.ReadMapping(node, path, keys);
  if (!node.IsMap()) return std::nullopt;
  if (row.name.empty()) {
    reader.Problem(node.Mark(), fmt::format("'{}' needs a 'name'", path));
    return std::nullopt;
  }
  if (!ok || reader.ProblemCount() != problems_before) return std::nullopt;
  const auto built_in = ras::DefaultFaultRules();
  const bool replaces =
      std::any_of(built_in.begin(), built_in.end(),
                  [&](const ras::FaultRule& rule) { return rule.name == row.name; });
  // `{name: <built-in>, enabled: false}` removes a built-in row; anything
  // else states the whole row.
  if (row.enabled && !has_kind) {
    reader.Problem(node.Mark(),
                   fmt::format("'{}' needs a 'rule' (echo, supersede, storm, settle){}", path,
                               replaces ? "; a built-in row is replaced whole, or turned off with "
                                          "'enabled: false'"
                                        : ""));
    return std::nullopt;
  }
  if (row.enabled && row.kind != ras::FaultRuleKind::kStorm && row.codes.empty()) {
    // Every row but a storm's names what it judges.
    reader.Problem(node.Mark(), fmt::format("'{}': an {} row needs 'codes'", path,
                                            ras::FaultRuleKindName(row.kind)));
    return std::nullopt;
  }
  if (row.enabled && row.kind == ras::FaultRuleKind::kSupersede && row.after_codes.empty()) {
    reader.Problem(node.Mark(), fmt::format("'{}': a supersede row needs 'after_codes'", path));
    return std::nullopt;
  }
  return row;
}

}  // namespace

void ReadFaultRules(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                    std::vector<ras::FaultRule>& rows) {
  if (!value.IsSequence()) {
    reader.Problem(value.Mark(), fmt::format("'{}' must be a list of rows", path));
    return;
  }
  std::vector<ras::FaultRule> read;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string row_path = fmt::format("{}[{}]", path, i);
    auto row = ReadFaultRule(reader, value[i], row_path);
    if (!row) continue;
    if (std::any_of(read.begin(), read.end(),
                    [&](const ras::FaultRule& other) { return other.name == row->name; })) {
      reader.Problem(value[i].Mark(),
                     fmt::format("'{}': a second row named '{}'", row_path, row->name));
      continue;
    }
    read.push_back(std::move(*row));
  }
  rows = std::move(read);
}

void ReadRecoveryRows(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                      std::vector<ras::RecoveryRow>& rows) {
  if (!value.IsSequence()) {
    reader.Problem(value.Mark(), fmt::format("'{}' must be a list of rows", path));
    return;
  }
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (auto row = ReadRecoveryRow(reader, value[i], fmt::format("{}[{}]", path, i)))
      rows.push_back(std::move(*row));
  }
}

void ReadDrivers(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 std::vector<std::string>& drivers) {
  std::vector<YAML::Node> items;
  if (value.IsSequence()) {
    for (const auto& item : value) items.push_back(item);
  } else {
    items.push_back(value);
  }
  std::vector<std::string> read;
  for (const auto& item : items) {
    auto text = reader.ReadString(item, path);
    if (!text) return;
    static const std::set<std::string> kKnown = {"sim", "cuda", "ascend", "auto"};
    if (!kKnown.contains(*text)) {
      reader.Problem(item.Mark(), fmt::format("'{}' must be one of: sim, cuda, ascend, auto (or a "
                                              "list of them); not '{}'",
                                              path, *text));
      return;
    }
    if (std::find(read.begin(), read.end(), *text) != read.end()) {
      reader.Problem(item.Mark(), fmt::format("'{}' names '{}' twice", path, *text));
      return;
    }
    read.push_back(*text);
  }
  if (read.empty()) {
    reader.Problem(value.Mark(), fmt::format("'{}' must name a backend", path));
    return;
  }
  drivers = std::move(read);
}

void ReadCodeMap(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 bool hex_keys, std::map<int, ras::Severity>& table) {
  if (!value.IsMap()) {
    reader.Problem(value.Mark(), fmt::format("'{}' must be a mapping of code: class", path));
    return;
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node severity_node = it->second;
    const std::optional<int> code = ReadCode(reader, key, path, hex_keys);
    const auto name =
        reader.ReadString(severity_node, path + "." + (key.IsScalar() ? key.Scalar() : "?"));
    if (!code || !name) continue;
    const auto severity = ras::ParseSeverity(*name);
    if (!severity) {
      reader.Problem(
          severity_node.Mark(),
          fmt::format("'{}.{}' must be one of CE, UCNA, SRAO, SRAR, UCE, FATAL, INFO, not '{}'",
                      path, *code, *name));
      continue;
    }
    table[*code] = *severity;
  }
}

void ReadPolicyRules(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                     std::vector<ras::PolicyRule>& rules) {
  if (!value.IsSequence()) {
    reader.Problem(value.Mark(), fmt::format("'{}' must be a list of rules", path));
    return;
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < value.size(); ++i) {
    auto rule = ReadRule(reader, value[i], fmt::format("{}[{}]", path, i));
    if (!rule) continue;
    if (!names.insert(rule->name).second) {
      reader.Problem(value[i].Mark(),
                     fmt::format("'{}[{}]': duplicate rule name '{}'", path, i, rule->name));
      continue;
    }
    rules.push_back(std::move(*rule));
  }
}

void ReadJobs(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
              std::vector<jobs::JobSpec>& specs) {
  if (!value.IsSequence()) {
    reader.Problem(value.Mark(), fmt::format("'{}' must be a list of jobs", path));
    return;
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < value.size(); ++i) {
    auto spec = ReadJob(reader, value[i], fmt::format("{}[{}]", path, i));
    if (!spec) continue;
    if (!names.insert(spec->name).second) {
      reader.Problem(value[i].Mark(),
                     fmt::format("'{}[{}]': duplicate job name '{}'", path, i, spec->name));
      continue;
    }
    specs.push_back(std::move(*spec));
  }
}

}  // namespace rasd::daemon
