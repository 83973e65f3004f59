#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rasd::ctl {

// A field of a daemon reply for a table: strings as they are, other values
// as JSON, "" when absent or null.
inline std::string JsonText(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return {};
  const auto& value = object[key];
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace rasd::ctl
