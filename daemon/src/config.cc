#include "rasd/daemon/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "config_schema.h"
#include "config_value_reader.h"

namespace rasd::daemon {
namespace {

// The schema's dotted keys as a tree of sections: "ras.codes.ascend" is the
// leaf "ascend" in section "codes" of section "ras".
struct SchemaNode {
  std::string name;                  // one segment of the dotted key
  const ConfigKey* key = nullptr;    // a leaf: its row
  std::vector<SchemaNode> children;  // a section: its keys, in schema order
};

const SchemaNode& SchemaTree() {
  static const SchemaNode kTree = [] {
    SchemaNode root;
    for (const auto& key : ConfigSchema()) {
      SchemaNode* node = &root;
      std::string_view rest = key.name;
      for (bool last = false; !last;) {
        const auto dot = rest.find('.');
        last = dot == std::string_view::npos;
        const std::string_view segment = rest.substr(0, dot);
        auto child = std::find_if(node->children.begin(), node->children.end(),
                                  [segment](const SchemaNode& c) { return c.name == segment; });
        if (child == node->children.end()) {
          node->children.push_back(SchemaNode{std::string(segment), nullptr, {}});
          child = std::prev(node->children.end());
        }
        node = &*child;
        if (!last) rest.remove_prefix(dot + 1);
      }
      node->key = &key;
    }
    return root;
  }();
  return kTree;
}

// Reads the mapping `node` at `path` against `section`: unknown keys,
// duplicates and bad values are problems; every key read goes into `config`.
void ReadSection(ConfigValueReader& reader, const YAML::Node& node, const std::string& path,
                 const SchemaNode& section, Config& config) {
  std::vector<ConfigValueReader::Key> keys;
  keys.reserve(section.children.size());
  for (const auto& child : section.children) {
    keys.push_back({child.name, [&reader, &child, &config](const YAML::Node& value,
                                                           const std::string& key_path) {
                      if (child.key != nullptr) {
                        child.key->read(reader, value, key_path, config);
                      } else {
                        ReadSection(reader, value, key_path, child, config);
                      }
                    }});
  }
  reader.ReadMapping(node, path, keys);
}

}  // namespace

std::string ConfigProblem::ToString() const {
  return fmt::format("{}:{}:{}: {}", file, line, column, message);
}

ConfigParseResult ParseConfig(std::string_view yaml_text, const std::string& file_name) {
  ConfigParseResult result;
  ConfigValueReader reader(file_name, result.problems);
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
    ReadSection(reader, root, "", SchemaTree(), result.config);
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
  if (tracefs_instance) config.ras.tracefs_instance = *tracefs_instance;
  if (log_level) config.daemon.log_level = *log_level;
}

}  // namespace rasd::daemon
