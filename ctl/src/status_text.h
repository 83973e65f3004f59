#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rasd::ctl {

// Renders the result of the "status" command for people. Tolerates missing
// or mistyped fields (an older or newer daemon): they show as "?".
std::string FormatStatus(const nlohmann::json& status);

// "3d 4h", "2h 5m", "4m 10s", "12s".
std::string FormatDuration(double seconds);

}  // namespace rasd::ctl
