#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/daemon/config.h"

namespace rasd::daemon {

// Reads typed values out of a parsed YAML tree, recording every problem
// with its position ("'ras.kmsg' must be true or false, not 'maybe'") and
// going on, so that one run reports them all. A Read* that finds a problem
// records it and returns nullopt.
//
// Nodes must come from a successful YAML::Load; the reader checks a node's
// kind before converting it, so yaml-cpp does not throw from here. Not
// thread-safe; lives for one parse, appending to `problems`, which must
// outlive it.
class ConfigValueReader {
 public:
  ConfigValueReader(std::string file, std::vector<ConfigProblem>& problems)
      : file_(std::move(file)), problems_(problems) {}

  using KeyHandler = std::function<void(const YAML::Node& value, const std::string& path)>;
  struct Key {
    std::string_view name;
    KeyHandler read;
  };

  std::size_t ProblemCount() const { return problems_.size(); }

  void Problem(const YAML::Mark& mark, std::string message);

  // Reads a mapping whose keys must all be in `keys`, calling each key's
  // handler with its value and dotted path. Unknown and duplicate keys are
  // problems; a key with no value keeps its default (its handler is not
  // called); a null `node` is an empty mapping.
  void ReadMapping(const YAML::Node& node, const std::string& path, const std::vector<Key>& keys);

  std::optional<std::string> ReadString(const YAML::Node& node, const std::string& path);
  // true/yes/on, false/no/off.
  std::optional<bool> ReadBool(const YAML::Node& node, const std::string& path);
  // A decimal integer in min..max.
  std::optional<std::int64_t> ReadInteger(const YAML::Node& node, const std::string& path,
                                          std::int64_t min, std::int64_t max);
  // Appends the strings of a list to `out`, skipping (and recording) items
  // that are not strings; false when there was any problem.
  bool ReadStringList(const YAML::Node& node, const std::string& path,
                      std::vector<std::string>& out);

  // How a node is named in a problem: "a mapping", "a list", "'text'", "empty".
  static std::string KindName(const YAML::Node& node);

 private:
  std::string file_;
  std::vector<ConfigProblem>& problems_;
};

}  // namespace rasd::daemon
