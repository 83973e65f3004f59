#include "rasd/daemon/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include "rasd/common/logging.h"
#include "rasd/exporters/listen_address.h"
#include "rasd/ras/severity.h"

namespace rasd::daemon {
namespace {

// Walks a parsed YAML tree against the schema, recording every problem with
// its position. yaml-cpp exceptions stay inside this class.
class SchemaReader {
 public:
  SchemaReader(std::string file, std::vector<ConfigProblem>& problems)
      : file_(std::move(file)), problems_(problems) {}

  using KeyHandler = std::function<void(const YAML::Node& value, const std::string& path)>;
  struct Key {
    std::string_view name;
    KeyHandler read;
  };

  std::size_t ProblemCount() const { return problems_.size(); }

  void Problem(const YAML::Mark& mark, std::string message) {
    // yaml-cpp marks are 0-based; a null mark (-1) means "no position".
    problems_.push_back(ConfigProblem{file_, mark.line >= 0 ? mark.line + 1 : 1,
                                      mark.column >= 0 ? mark.column + 1 : 1, std::move(message)});
  }

  // Reads a mapping whose keys must all be in `keys`.
  void ReadMapping(const YAML::Node& node, const std::string& path, const std::vector<Key>& keys) {
    if (node.IsNull()) return;  // "section:" with nothing under it: all defaults
    if (!node.IsMap()) {
      Problem(node.Mark(), fmt::format("'{}' must be a mapping, not {}",
                                       path.empty() ? "the document" : path, KindName(node)));
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key_node = it->first;
      const YAML::Node value = it->second;
      if (!key_node.IsScalar()) {
        Problem(key_node.Mark(), "keys must be plain names");
        continue;
      }
      const std::string name = key_node.Scalar();
      const std::string key_path = path.empty() ? name : path + "." + name;
      if (!seen.insert(name).second) {
        Problem(key_node.Mark(), fmt::format("duplicate key '{}'", key_path));
        continue;
      }
      const Key* key = nullptr;
      for (const auto& candidate : keys) {
        if (candidate.name == name) key = &candidate;
      }
      if (key == nullptr) {
        Problem(key_node.Mark(),
                fmt::format("unknown key '{}'{}", key_path, Suggestion(name, keys)));
        continue;
      }
      // A key with no value keeps its default, like a key that is absent.
      if (value.IsNull()) continue;
      key->read(value, key_path);
    }
  }

  std::optional<std::string> ReadString(const YAML::Node& node, const std::string& path) {
    if (!node.IsScalar()) {
      Problem(node.Mark(), fmt::format("'{}' must be a string, not {}", path, KindName(node)));
      return std::nullopt;
    }
    return node.Scalar();
  }

  std::optional<bool> ReadBool(const YAML::Node& node, const std::string& path) {
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      if (text == "true" || text == "yes" || text == "on") return true;
      if (text == "false" || text == "no" || text == "off") return false;
    }
    Problem(node.Mark(), fmt::format("'{}' must be true or false, not {}", path, KindName(node)));
    return std::nullopt;
  }

  template <typename Int>
  std::optional<Int> ReadInteger(const YAML::Node& node, const std::string& path, Int min,
                                 Int max) {
    if (!node.IsScalar()) {
      Problem(node.Mark(), fmt::format("'{}' must be an integer, not {}", path, KindName(node)));
      return std::nullopt;
    }
    const std::string& text = node.Scalar();
    long long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      Problem(node.Mark(), fmt::format("'{}' must be an integer, not '{}'", path, text));
      return std::nullopt;
    }
    if (value < static_cast<long long>(min) || value > static_cast<long long>(max)) {
      Problem(node.Mark(), fmt::format("'{}' must be in {}..{}, not {}", path, min, max, value));
      return std::nullopt;
    }
    return static_cast<Int>(value);
  }

 private:
  static std::string KindName(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Map:
        return "a mapping";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Scalar:
        return "'" + node.Scalar() + "'";
      case YAML::NodeType::Null:
        return "empty";
      default:
        return "undefined";
    }
  }

  // "did you mean" for one-letter slips: same length ±1 and a shared prefix.
  static std::string Suggestion(const std::string& name, const std::vector<Key>& keys) {
    for (const auto& key : keys) {
      const std::string_view known = key.name;
      std::size_t common = 0;
      while (common < name.size() && common < known.size() && name[common] == known[common])
        ++common;
      const auto longer = std::max(name.size(), known.size());
      if (common >= 3 && longer - common <= 2) return fmt::format(" (did you mean '{}'?)", known);
    }
    std::string list;
    for (const auto& key : keys) {
      if (!list.empty()) list += ", ";
      list += key.name;
    }
    return " (known: " + list + ")";
  }

  std::string file_;
  std::vector<ConfigProblem>& problems_;
};

void ReadDocument(SchemaReader& reader, const YAML::Node& root, Config& config) {
  using Key = SchemaReader::Key;
  auto path_key = [&reader](std::filesystem::path& out, bool must_be_absolute) {
    return [&reader, &out, must_be_absolute](const YAML::Node& value, const std::string& path) {
      auto text = reader.ReadString(value, path);
      if (!text) return;
      if (must_be_absolute && !text->empty() && text->front() != '/') {
        reader.Problem(value.Mark(),
                       fmt::format("'{}' must be an absolute path, not '{}'", path, *text));
        return;
      }
      out = *text;
    };
  };

  const std::vector<Key> host_keys = {{"root", path_key(config.host.root, true)}};
  const std::vector<Key> daemon_keys = {
      {"state_dir", path_key(config.daemon.state_dir, true)},
      {"log_level",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         auto level = common::ParseLogLevel(*text);
         if (!level) {
           reader.Problem(value.Mark(), fmt::format("'{}': {}", path, level.error().message));
           return;
         }
         config.daemon.log_level = *level;
       }},
  };
  const std::vector<Key> control_keys = {
      {"socket", path_key(config.control.socket, true)},
      {"socket_mode",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         unsigned mode = 0;
         const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), mode, 8);
         if (text->empty() || ec != std::errc() || end != text->data() + text->size() ||
             mode > 0777) {
           reader.Problem(
               value.Mark(),
               fmt::format("'{}' must be an octal mode such as \"0660\", not '{}'", path, *text));
           return;
         }
         config.control.socket_mode = static_cast<mode_t>(mode);
       }},
      {"admin_group",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto text = reader.ReadString(value, path)) config.control.admin_group = *text;
       }},
      {"client_timeout_ms",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto ms = reader.ReadInteger<int>(value, path, 100, 3'600'000)) {
           config.control.client_timeout = std::chrono::milliseconds(*ms);
         }
       }},
      {"max_clients",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<int>(value, path, 1, 4096))
           config.control.max_clients = *n;
       }},
  };
  const std::vector<Key> metrics_keys = {
      {"listen",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         if (*text == "off") text->clear();
         if (!text->empty()) {
           if (auto parsed = exporters::ParseListenAddress(*text); !parsed) {
             reader.Problem(value.Mark(), fmt::format("'{}': {}", path, parsed.error().message));
             return;
           }
         }
         config.metrics.listen = *text;
       }},
  };
  const std::vector<Key> runtime_keys = {
      {"driver",
       [&](const YAML::Node& value, const std::string& path) {
         std::vector<YAML::Node> items;
         if (value.IsSequence()) {
           for (const auto& item : value) items.push_back(item);
         } else {
           items.push_back(value);
         }
         std::vector<std::string> drivers;
         for (const auto& item : items) {
           auto text = reader.ReadString(item, path);
           if (!text) return;
           static const std::set<std::string> kKnown = {"sim", "cuda", "ascend", "auto"};
           if (!kKnown.contains(*text)) {
             reader.Problem(item.Mark(),
                            fmt::format("'{}' must be one of: sim, cuda, ascend, auto (or a list "
                                        "of them); not '{}'",
                                        path, *text));
             return;
           }
           if (std::find(drivers.begin(), drivers.end(), *text) != drivers.end()) {
             reader.Problem(item.Mark(), fmt::format("'{}' names '{}' twice", path, *text));
             return;
           }
           drivers.push_back(*text);
         }
         if (drivers.empty()) {
           reader.Problem(value.Mark(), fmt::format("'{}' must name a backend", path));
           return;
         }
         config.runtime.drivers = std::move(drivers);
       }},
      {"cuda_library",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto text = reader.ReadString(value, path); text && !text->empty())
           config.runtime.cuda_library = *text;
       }},
      {"ascend_library",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto text = reader.ReadString(value, path); text && !text->empty())
           config.runtime.ascend_library = *text;
       }},
      {"dcmi_library",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto text = reader.ReadString(value, path); text && !text->empty())
           config.runtime.dcmi_library = *text;
       }},
  };
  std::vector<Key> ras_keys = {
      {"kmsg",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto enabled = reader.ReadBool(value, path)) config.ras.kmsg = *enabled;
       }},
      {"kmsg_quiet_flush_ms",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto ms = reader.ReadInteger<int>(value, path, 10, 60'000)) {
           config.ras.kmsg_quiet_flush = std::chrono::milliseconds(*ms);
         }
       }},
      {"kmsg_file_poll_ms",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto ms = reader.ReadInteger<int>(value, path, 10, 60'000)) {
           config.ras.kmsg_file_poll = std::chrono::milliseconds(*ms);
         }
       }},
  };
  ras_keys.push_back({"tracefs", [&](const YAML::Node& value, const std::string& path) {
                        if (auto enabled = reader.ReadBool(value, path))
                          config.ras.tracefs = *enabled;
                      }});
  ras_keys.push_back(
      {"tracefs_instance", [&](const YAML::Node& value, const std::string& path) {
         auto name = reader.ReadString(value, path);
         if (!name) return;
         const bool valid =
             !name->empty() && name->size() <= 64 &&
             std::all_of(name->begin(), name->end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
             });
         if (!valid) {
           reader.Problem(value.Mark(),
                          fmt::format("'{}' must be 1 to 64 letters, digits, '-' or '_'", path));
           return;
         }
         config.ras.tracefs_instance = *name;
       }});
  ras_keys.push_back({"edac_poll_ms", [&](const YAML::Node& value, const std::string& path) {
                        if (auto ms = reader.ReadInteger<int>(value, path, 0, 3'600'000)) {
                          if (*ms != 0 && *ms < 100) {
                            reader.Problem(
                                value.Mark(),
                                fmt::format("'{}' must be 0 (off) or at least 100", path));
                            return;
                          }
                          config.ras.edac_poll = std::chrono::milliseconds(*ms);
                        }
                      }});
  ras_keys.push_back({"nvml", [&](const YAML::Node& value, const std::string& path) {
                        if (auto enabled = reader.ReadBool(value, path)) config.ras.nvml = *enabled;
                      }});
  ras_keys.push_back({"nvml_library", [&](const YAML::Node& value, const std::string& path) {
                        auto name = reader.ReadString(value, path);
                        if (!name) return;
                        if (name->empty()) {
                          reader.Problem(value.Mark(), fmt::format("'{}' must not be empty", path));
                          return;
                        }
                        config.ras.nvml_library = *name;
                      }});
  ras_keys.push_back({"nvml_poll_ms", [&](const YAML::Node& value, const std::string& path) {
                        if (auto ms = reader.ReadInteger<int>(value, path, 100, 3'600'000)) {
                          config.ras.nvml_poll = std::chrono::milliseconds(*ms);
                        }
                      }});
  ras_keys.push_back({"retention_days", [&](const YAML::Node& value, const std::string& path) {
                        if (auto days = reader.ReadInteger<int>(value, path, 1, 3650))
                          config.ras.retention_days = *days;
                      }});
  ras_keys.push_back({"max_events", [&](const YAML::Node& value, const std::string& path) {
                        if (auto rows =
                                reader.ReadInteger<std::uint64_t>(value, path, 1000, 100'000'000)) {
                          config.ras.max_events = *rows;
                        }
                      }});
  ras_keys.push_back({"storm_threshold", [&](const YAML::Node& value, const std::string& path) {
                        if (auto n = reader.ReadInteger<int>(value, path, 1, 1'000'000)) {
                          config.ras.storm_threshold = static_cast<std::size_t>(*n);
                        }
                      }});
  // ras.codes.nvidia_xid / ras.codes.ascend: {code: CLASS, ...} over the built-in table.
  // Ascend's DCMI fault codes are 32-bit hex values (0x80E01801): the
  // ascend table also takes hex keys up to 0xffffffff, stored with the bits
  // the driver reports them with (a negative int above 0x7fffffff).
  auto code_map = [&reader](std::map<int, ras::Severity>& table, bool hex_keys) {
    return [&reader, &table, hex_keys](const YAML::Node& value, const std::string& path) {
      if (!value.IsMap()) {
        reader.Problem(value.Mark(), fmt::format("'{}' must be a mapping of code: class", path));
        return;
      }
      for (auto it = value.begin(); it != value.end(); ++it) {
        const YAML::Node key = it->first;
        const YAML::Node severity_node = it->second;
        std::optional<int> code;
        const std::string key_text = key.IsScalar() ? key.Scalar() : "";
        if (hex_keys && (key_text.starts_with("0x") || key_text.starts_with("0X"))) {
          std::uint32_t bits = 0;
          const auto [end, ec] =
              std::from_chars(key_text.data() + 2, key_text.data() + key_text.size(), bits, 16);
          if (key_text.size() == 2 || ec != std::errc() ||
              end != key_text.data() + key_text.size()) {
            reader.Problem(key.Mark(), fmt::format("'{} key' must be a code such as 507053 or "
                                                   "0x80E01801, not '{}'",
                                                   path, key_text));
            continue;
          }
          code = static_cast<int>(static_cast<std::int32_t>(bits));
        } else {
          code = reader.ReadInteger<int>(key, path + " key", 0, 99'999'999);
        }
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
    };
  };
  const std::vector<Key> code_keys = {
      {"nvidia_xid", code_map(config.ras.codes.nvidia_xid, /*hex_keys=*/false)},
      {"ascend", code_map(config.ras.codes.ascend, /*hex_keys=*/true)},
  };
  ras_keys.push_back(
      {"codes", [&reader, &code_keys](const YAML::Node& value, const std::string& path) {
         reader.ReadMapping(value, path, code_keys);
       }});
  const std::vector<Key> simulator_keys = {
      {"devices",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<int>(value, path, 1, 64)) config.simulator.devices = *n;
       }},
      {"memory_mib",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::uint64_t>(value, path, 1, 1 << 20))
           config.simulator.memory_mib = *n;
       }},
  };
  // policy.rules: a list of {name, match: {...}, threshold: {...}, actions: [...], hook: [...]}.
  auto read_rule = [&reader](const YAML::Node& node,
                             const std::string& path) -> std::optional<ras::PolicyRule> {
    ras::PolicyRule rule;
    bool ok = true;
    auto string_list = [&](const YAML::Node& value, const std::string& list_path,
                           std::vector<std::string>& out) {
      if (!value.IsSequence()) {
        reader.Problem(value.Mark(), fmt::format("'{}' must be a list", list_path));
        ok = false;
        return;
      }
      for (std::size_t i = 0; i < value.size(); ++i) {
        auto text = reader.ReadString(value[i], fmt::format("{}[{}]", list_path, i));
        if (!text) {
          ok = false;
          continue;
        }
        out.push_back(*text);
      }
    };
    const std::vector<Key> match_keys = {
        {"origin",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto text = reader.ReadString(value, key_path)) rule.origin = *text;
         }},
        {"severity",
         [&](const YAML::Node& value, const std::string& key_path) {
           auto text = reader.ReadString(value, key_path);
           if (!text) return;
           rule.severity = ras::ParseSeverity(*text);
           if (!rule.severity) {
             reader.Problem(value.Mark(), fmt::format("'{}' must be one of CE, UCNA, SRAO, "
                                                      "SRAR, UCE, FATAL, INFO, not '{}'",
                                                      key_path, *text));
             ok = false;
           }
         }},
        {"component",
         [&](const YAML::Node& value, const std::string& key_path) {
           auto text = reader.ReadString(value, key_path);
           if (!text) return;
           rule.component = ras::ParseComponentKind(*text);
           if (!rule.component) {
             reader.Problem(value.Mark(),
                            fmt::format("'{}' must be one of host-memory, device-memory, device, "
                                        "pci-device, cpu, other, not '{}'",
                                        key_path, *text));
             ok = false;
           }
         }},
        {"vendor_code",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto code = reader.ReadInteger<int>(value, key_path, 0, 99'999'999))
             rule.vendor_code = *code;
         }},
    };
    ras::Threshold threshold;
    bool has_threshold = false;
    const std::vector<Key> threshold_keys = {
        {"count",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<std::uint64_t>(value, key_path, 1, 1'000'000))
             threshold.count = *n;
         }},
        {"window_s",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<std::int64_t>(value, key_path, 1, 365LL * 86400))
             threshold.window = std::chrono::seconds(*n);
         }},
        {"per",
         [&](const YAML::Node& value, const std::string& key_path) {
           auto text = reader.ReadString(value, key_path);
           if (!text) return;
           if (*text == "page") {
             threshold.key = ras::Threshold::Key::kPage;
           } else if (*text == "dimm") {
             threshold.key = ras::Threshold::Key::kDimm;
           } else if (*text == "device") {
             threshold.key = ras::Threshold::Key::kDevice;
           } else {
             reader.Problem(value.Mark(), fmt::format("'{}' must be page, dimm or device, not '{}'",
                                                      key_path, *text));
             ok = false;
           }
         }},
    };
    bool has_actions = false;
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
           std::vector<std::string> names;
           string_list(value, key_path, names);
           for (std::size_t i = 0; i < names.size(); ++i) {
             auto kind = ras::ParseActionKind(names[i]);
             if (!kind) {
               reader.Problem(value[i].Mark(),
                              fmt::format("'{}[{}]': unknown action '{}' (known: record, "
                                          "retire-page, mark-at-risk, kill-consumer, "
                                          "degrade-device, drain-device, isolate-device, "
                                          "drain-node, soft-offline-page, hard-offline-page, "
                                          "run-hook)",
                                          key_path, i, names[i]));
               ok = false;
               continue;
             }
             rule.actions.push_back(*kind);
           }
           has_actions = true;
         }},
        {"hook",
         [&](const YAML::Node& value, const std::string& key_path) {
           string_list(value, key_path, rule.hook);
           if (!rule.hook.empty() &&
               (rule.hook.front().empty() || rule.hook.front().front() != '/')) {
             reader.Problem(value.Mark(),
                            fmt::format("'{}': the program must be an absolute path (no shell, "
                                        "no PATH search), not '{}'",
                                        key_path, rule.hook.front()));
             ok = false;
           }
         }},
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
  };
  const std::vector<Key> policy_keys = {
      {"rules",
       [&](const YAML::Node& value, const std::string& path) {
         if (!value.IsSequence()) {
           reader.Problem(value.Mark(), fmt::format("'{}' must be a list of rules", path));
           return;
         }
         std::set<std::string> names;
         for (std::size_t i = 0; i < value.size(); ++i) {
           auto rule = read_rule(value[i], fmt::format("{}[{}]", path, i));
           if (!rule) continue;
           if (!names.insert(rule->name).second) {
             reader.Problem(value[i].Mark(),
                            fmt::format("'{}[{}]': duplicate rule name '{}'", path, i, rule->name));
             continue;
           }
           config.policy.engine.rules.push_back(std::move(*rule));
         }
       }},
      {"ce_page_threshold",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::uint64_t>(value, path, 1, 1'000'000))
           config.policy.engine.ce_page.count = *n;
       }},
      {"ce_page_window_s",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::int64_t>(value, path, 1, 365LL * 86400))
           config.policy.engine.ce_page.window = std::chrono::seconds(*n);
       }},
      {"ce_device_threshold",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::uint64_t>(value, path, 1, 100'000'000))
           config.policy.engine.ce_device.count = *n;
       }},
      {"ce_device_window_s",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::int64_t>(value, path, 1, 365LL * 86400))
           config.policy.engine.ce_device.window = std::chrono::seconds(*n);
       }},
      {"degrade_after_retirements",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::uint64_t>(value, path, 1, 1'000'000))
           config.policy.engine.degrade_after_retirements = *n;
       }},
      {"isolate_after_retirements",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::uint64_t>(value, path, 1, 1'000'000))
           config.policy.engine.isolate_after_retirements = *n;
       }},
      {"escalation_window_s",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::int64_t>(value, path, 1, 365LL * 86400))
           config.policy.engine.escalation_window = std::chrono::seconds(*n);
       }},
      {"host_page_offline",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto enabled = reader.ReadBool(value, path))
           config.policy.host_page_offline = *enabled;
       }},
      {"drain_deadline_ms",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto ms = reader.ReadInteger<int>(value, path, 0, 3'600'000))
           config.policy.drain_deadline = std::chrono::milliseconds(*ms);
       }},
      {"auto_recover",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto enabled = reader.ReadBool(value, path)) config.policy.auto_recover = *enabled;
       }},
      {"auto_recover_delay_ms",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto ms = reader.ReadInteger<int>(value, path, 0, 3'600'000))
           config.policy.auto_recover_delay = std::chrono::milliseconds(*ms);
       }},
      {"auto_recover_window_s",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto n = reader.ReadInteger<std::int64_t>(value, path, 1, 365LL * 86400))
           config.policy.auto_recover_window = std::chrono::seconds(*n);
       }},
      {"hook_timeout_ms",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto ms = reader.ReadInteger<int>(value, path, 100, 600'000))
           config.policy.hook_timeout = std::chrono::milliseconds(*ms);
       }},
  };
  // jobs: a list of {name, kind, devices, ...}.
  auto read_job = [&reader](const YAML::Node& node,
                            const std::string& path) -> std::optional<jobs::JobSpec> {
    jobs::JobSpec spec;
    bool has_kind = false;
    const std::size_t problems_before = reader.ProblemCount();
    const std::vector<Key> job_keys = {
        {"name",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto text = reader.ReadString(value, key_path)) spec.name = *text;
         }},
        {"kind",
         [&](const YAML::Node& value, const std::string& key_path) {
           auto text = reader.ReadString(value, key_path);
           if (!text) return;
           auto kind = jobs::ParseJobKind(*text);
           if (!kind) {
             reader.Problem(
                 value.Mark(),
                 fmt::format("'{}' must be inference or collective, not '{}'", key_path, *text));
             return;
           }
           spec.kind = *kind;
           has_kind = true;
         }},
        {"devices",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (!value.IsSequence()) {
             reader.Problem(value.Mark(),
                            fmt::format("'{}' must be a list of device indexes", key_path));
             return;
           }
           for (std::size_t i = 0; i < value.size(); ++i) {
             if (auto device =
                     reader.ReadInteger<int>(value[i], fmt::format("{}[{}]", key_path, i), 0, 1023))
               spec.devices.push_back(*device);
           }
         }},
        {"max_batch",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<int>(value, key_path, 1, 4096))
             spec.max_batch = static_cast<std::size_t>(*n);
         }},
        {"max_wait_us",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<int>(value, key_path, 0, 1'000'000))
             spec.max_wait = std::chrono::microseconds(*n);
         }},
        {"load_rps",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<int>(value, key_path, 0, 1'000'000)) spec.load_rps = *n;
         }},
        {"elements",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<std::uint64_t>(value, key_path, 1, 1ULL << 26))
             spec.elements = *n;
         }},
        {"steps",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<int>(value, key_path, 1, 100'000'000)) spec.steps = *n;
         }},
        {"checkpoint_every",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<int>(value, key_path, 1, 1'000'000))
             spec.checkpoint_every = *n;
         }},
        {"min_ranks",
         [&](const YAML::Node& value, const std::string& key_path) {
           if (auto n = reader.ReadInteger<int>(value, key_path, 1, 1024)) spec.min_ranks = *n;
         }},
    };
    reader.ReadMapping(node, path, job_keys);
    if (!node.IsMap()) return std::nullopt;
    if (spec.name.empty()) reader.Problem(node.Mark(), fmt::format("'{}' needs a name", path));
    if (!has_kind)
      reader.Problem(node.Mark(), fmt::format("'{}' needs a kind (inference or collective)", path));
    if (reader.ProblemCount() != problems_before) return std::nullopt;
    return spec;
  };
  auto jobs_key = [&](const YAML::Node& value, const std::string& path) {
    if (!value.IsSequence()) {
      reader.Problem(value.Mark(), fmt::format("'{}' must be a list of jobs", path));
      return;
    }
    std::set<std::string> names;
    for (std::size_t i = 0; i < value.size(); ++i) {
      auto spec = read_job(value[i], fmt::format("{}[{}]", path, i));
      if (!spec) continue;
      if (!names.insert(spec->name).second) {
        reader.Problem(value[i].Mark(),
                       fmt::format("'{}[{}]': duplicate job name '{}'", path, i, spec->name));
        continue;
      }
      config.jobs.push_back(std::move(*spec));
    }
  };
  const std::vector<Key> scheduler_keys = {
      {"kind",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         if (*text != "none" && *text != "slurm") {
           reader.Problem(value.Mark(),
                          fmt::format("'{}' must be none or slurm, not '{}'", path, *text));
           return;
         }
         config.scheduler.kind = *text;
       }},
      {"node",
       [&](const YAML::Node& value, const std::string& path) {
         auto text = reader.ReadString(value, path);
         if (!text) return;
         const bool valid = std::all_of(text->begin(), text->end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
         if (!valid || text->size() > 255) {
           reader.Problem(value.Mark(), fmt::format("'{}' must be a node name (letters, digits, "
                                                    "'-', '_', '.')",
                                                    path));
           return;
         }
         config.scheduler.node = *text;
       }},
      {"scontrol", path_key(config.scheduler.scontrol, true)},
      {"resume_on_undrain",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto enabled = reader.ReadBool(value, path))
           config.scheduler.resume_on_undrain = *enabled;
       }},
  };
  const std::vector<Key> inject_keys = {
      {"allow_sources",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto allowed = reader.ReadBool(value, path)) config.inject.allow_sources = *allowed;
       }},
      {"allow_hardware",
       [&](const YAML::Node& value, const std::string& path) {
         if (auto allowed = reader.ReadBool(value, path)) config.inject.allow_hardware = *allowed;
       }},
  };
  auto section = [&reader](const std::vector<Key>& keys) {
    return [&reader, &keys](const YAML::Node& value, const std::string& path) {
      reader.ReadMapping(value, path, keys);
    };
  };
  reader.ReadMapping(root, "",
                     {{"host", section(host_keys)},
                      {"daemon", section(daemon_keys)},
                      {"control", section(control_keys)},
                      {"metrics", section(metrics_keys)},
                      {"runtime", section(runtime_keys)},
                      {"ras", section(ras_keys)},
                      {"policy", section(policy_keys)},
                      {"inject", section(inject_keys)},
                      {"scheduler", section(scheduler_keys)},
                      {"jobs", jobs_key},
                      {"simulator", section(simulator_keys)}});
}

}  // namespace

std::string ConfigProblem::ToString() const {
  return fmt::format("{}:{}:{}: {}", file, line, column, message);
}

ConfigParseResult ParseConfig(std::string_view yaml_text, const std::string& file_name) {
  ConfigParseResult result;
  SchemaReader reader(file_name, result.problems);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::ParserException& error) {
    reader.Problem(error.mark, error.msg);
    return result;
  } catch (const YAML::Exception& error) {
    reader.Problem(error.mark, error.msg);
    return result;
  }
  try {
    ReadDocument(reader, root, result.config);
  } catch (const YAML::Exception& error) {
    // Not expected: the reader checks node kinds before converting.
    reader.Problem(error.mark, std::string("unexpected YAML error: ") + error.msg);
  }
  return result;
}

ConfigParseResult LoadConfigFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    ConfigParseResult result;
    result.problems.push_back(ConfigProblem{
        path.string(), 1, 1, fmt::format("cannot read config file: {}", std::strerror(errno))});
    return result;
  }
  std::ostringstream text;
  text << file.rdbuf();
  return ParseConfig(text.str(), path.string());
}

void ConfigOverrides::ApplyTo(Config& config) const {
  if (state_dir) config.daemon.state_dir = *state_dir;
  if (socket) config.control.socket = *socket;
  if (host_root) config.host.root = *host_root;
  if (metrics_listen) config.metrics.listen = *metrics_listen == "off" ? "" : *metrics_listen;
  if (log_level) config.daemon.log_level = *log_level;
}

}  // namespace rasd::daemon
