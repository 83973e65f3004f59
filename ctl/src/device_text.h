#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rasd::ctl {

// The `devices` result for people: a table of every device, then, per
// device that is not Healthy or has history, its reason, self-test, recent
// actions and events.
std::string FormatDevices(const nlohmann::json& result);
// The `actions` result, newest first.
std::string FormatActions(const nlohmann::json& result);
// The `jobs` result as a table.
std::string FormatJobs(const nlohmann::json& result);
// The `retired` result as a table.
std::string FormatRetired(const nlohmann::json& result);
// The answer to isolate / drain / undrain.
std::string FormatStateChange(const nlohmann::json& result);

}  // namespace rasd::ctl
