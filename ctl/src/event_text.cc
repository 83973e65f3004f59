#include "event_text.h"

#include <fmt/format.h>

#include <charconv>

namespace rasd::ctl {
namespace {

std::string Text(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return {};
  const auto& value = object[key];
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

std::optional<double> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double scale = 1;
  switch (text.back()) {
    case 's':
      scale = 1;
      text.remove_suffix(1);
      break;
    case 'm':
      scale = 60;
      text.remove_suffix(1);
      break;
    case 'h':
      scale = 3600;
      text.remove_suffix(1);
      break;
    case 'd':
      scale = 86400;
      text.remove_suffix(1);
      break;
    default:
      break;
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    return std::nullopt;
  return value * scale;
}

std::string FormatEvent(const nlohmann::json& event) {
  std::string detail;
  auto add = [&detail](const std::string& name, const std::string& value) {
    if (value.empty()) return;
    if (!detail.empty()) detail += ' ';
    detail += name + "=" + value;
  };
  add("device", Text(event, "device"));
  add("code", Text(event, "vendor_code"));
  add("pci", Text(event, "pci_bdf"));
  add("mc", Text(event, "mc"));
  add("addr", Text(event, "address"));
  if (Text(event, "count") != "1" && !Text(event, "count").empty())
    add("count", Text(event, "count"));
  if (Text(event, "historical") == "true")
    detail += detail.empty() ? "previous-boot" : " previous-boot";
  return fmt::format("{:<20} {:<5} {:<14} {:<30} {}\n", Text(event, "time"),
                     Text(event, "severity"), Text(event, "origin"), detail.empty() ? "-" : detail,
                     Text(event, "summary"));
}

std::string FormatEvents(const nlohmann::json& result) {
  if (!result.contains("events") || !result["events"].is_array() || result["events"].empty())
    return "no events\n";
  std::string out = fmt::format("{:<20} {:<5} {:<14} {:<30} {}\n", "TIME", "CLASS", "ORIGIN",
                                "DETAIL", "SUMMARY");
  for (const auto& event : result["events"]) out += FormatEvent(event);
  return out;
}

std::string FormatSummary(const nlohmann::json& result) {
  if (!result.contains("rows") || !result["rows"].is_array() || result["rows"].empty())
    return "no events\n";
  std::string out =
      fmt::format("{:<15} {:<6} {:>8} {:>8}  {}\n", "ORIGIN", "CLASS", "EVENTS", "ERRORS", "LAST");
  for (const auto& row : result["rows"]) {
    out += fmt::format("{:<15} {:<6} {:>8} {:>8}  {}\n", Text(row, "origin"), Text(row, "severity"),
                       Text(row, "events"), Text(row, "errors"), Text(row, "last"));
  }
  return out;
}

}  // namespace rasd::ctl
