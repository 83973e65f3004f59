#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "config_value_reader.h"
#include "rasd/daemon/config.h"

namespace rasd::daemon {

// One key of the config file: everything the parser, the defaults, reload,
// `rasd --print-config-schema` and README's config table know about it.
struct ConfigKey {
  std::string name;  // dotted: "ras.kmsg_quiet_flush_ms"
  std::string type;  // for people: "bool", "integer 1..64", "ms 10..60000"
  ConfigApply applies = ConfigApply::kRestart;
  std::string default_value;  // Config{}'s value, as YAML writes it: "500", "\"0666\"", "[]"
  std::string doc;            // one line, README's "meaning" column

  // Reads a non-null `value` at `path` into `config`, recording problems
  // through `reader` and leaving `config` as it was where the value is bad.
  std::function<void(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                     Config& config)>
      read;
  std::function<bool(const Config& a, const Config& b)> same;
  std::function<void(Config& into, const Config& from)> copy;  // this key's value only
};

// Every key, in the order the parser lists them ("known: host, daemon, ...")
// and README shows them. Built once, on first use; thread-safe after that.
const std::vector<ConfigKey>& ConfigSchema();

// README's config table: a header, a separator and one row per key,
// "| `key` | type | `default` | applied/restart | doc |", each line without
// its newline.
std::vector<std::string> ConfigSchemaMarkdown();

}  // namespace rasd::daemon
