#include "config_value_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

namespace rasd::daemon {
namespace {

// "did you mean" for one-letter slips: same length ±1 and a shared prefix.
std::string Suggestion(const std::string& name, const std::vector<ConfigValueReader::Key>& keys) {
  for (const auto& key : keys) {
    const std::string_view known = key.name;
    std::size_t common = 0;
    while (common < name.size() && common < known.size() && name[common] == known[common]) ++common;
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

}  // namespace

void ConfigValueReader::Problem(const YAML::Mark& mark, std::string message) {
  // yaml-cpp marks are 0-based; a null mark (-1) means "no position".
  problems_.push_back(ConfigProblem{file_, mark.line >= 0 ? mark.line + 1 : 1,
                                    mark.column >= 0 ? mark.column + 1 : 1, std::move(message)});
}

void ConfigValueReader::ReadMapping(const YAML::Node& node, const std::string& path,
                                    const std::vector<Key>& keys) {
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
    const auto key = std::find_if(keys.begin(), keys.end(),
                                  [&name](const Key& candidate) { return candidate.name == name; });
    if (key == keys.end()) {
      Problem(key_node.Mark(), fmt::format("unknown key '{}'{}", key_path, Suggestion(name, keys)));
      continue;
    }
    // A key with no value keeps its default, like a key that is absent.
    if (value.IsNull()) continue;
    key->read(value, key_path);
  }
}

std::optional<std::string> ConfigValueReader::ReadString(const YAML::Node& node,
                                                         const std::string& path) {
  if (!node.IsScalar()) {
    Problem(node.Mark(), fmt::format("'{}' must be a string, not {}", path, KindName(node)));
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<bool> ConfigValueReader::ReadBool(const YAML::Node& node, const std::string& path) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (text == "true" || text == "yes" || text == "on") return true;
    if (text == "false" || text == "no" || text == "off") return false;
  }
  Problem(node.Mark(), fmt::format("'{}' must be true or false, not {}", path, KindName(node)));
  return std::nullopt;
}

std::optional<std::int64_t> ConfigValueReader::ReadInteger(const YAML::Node& node,
                                                           const std::string& path,
                                                           std::int64_t min, std::int64_t max) {
  if (!node.IsScalar()) {
    Problem(node.Mark(), fmt::format("'{}' must be an integer, not {}", path, KindName(node)));
    return std::nullopt;
  }
  const std::string& text = node.Scalar();
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    Problem(node.Mark(), fmt::format("'{}' must be an integer, not '{}'", path, text));
    return std::nullopt;
  }
  if (value < min || value > max) {
    Problem(node.Mark(), fmt::format("'{}' must be in {}..{}, not {}", path, min, max, value));
    return std::nullopt;
  }
  return value;
}

bool ConfigValueReader::ReadStringList(const YAML::Node& node, const std::string& path,
                                       std::vector<std::string>& out) {
  if (!node.IsSequence()) {
    Problem(node.Mark(), fmt::format("'{}' must be a list", path));
    return false;
  }
  bool ok = true;
  for (std::size_t i = 0; i < node.size(); ++i) {
    auto text = ReadString(node[i], fmt::format("{}[{}]", path, i));
    if (!text) {
      ok = false;
      continue;
    }
    out.push_back(*text);
  }
  return ok;
}

std::string ConfigValueReader::KindName(const YAML::Node& node) {
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

}  // namespace rasd::daemon
