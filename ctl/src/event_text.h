#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace rasd::ctl {

// "90", "400ms", "30s", "5m", "2h", "1d" -> seconds; nullopt for anything else.
std::optional<double> ParseDuration(std::string_view text);

// One line per event of an `events` result ({"events": [...]}).
std::string FormatEvents(const nlohmann::json& result);
std::string FormatEvent(const nlohmann::json& event);
// The `summary` result as a table.
std::string FormatSummary(const nlohmann::json& result);

}  // namespace rasd::ctl
