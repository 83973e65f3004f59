#include "event_text.h"

#include <fmt/format.h>

#include <charconv>

#include "json_text.h"

namespace rasd::ctl {
namespace {}  // namespace

std::optional<double> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  // "ms" before "m" and "s": the longest suffix that matches.
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"ms", 0.001}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}};
  double scale = 1;
  for (const auto& [suffix, seconds] : kUnits) {
    if (text.ends_with(suffix)) {
      scale = seconds;
      text.remove_suffix(suffix.size());
      break;
    }
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
  add("device", JsonText(event, "device"));
  add("code", JsonText(event, "vendor_code"));
  add("pci", JsonText(event, "pci_bdf"));
  add("mc", JsonText(event, "mc"));
  add("dimm", JsonText(event, "dimm"));
  add("addr", JsonText(event, "address"));
  // A storm-coalesced event names how many pages it touched (listed or not).
  if (event.contains("pages") && event["pages"].is_array() && !event["pages"].empty()) {
    const std::uint64_t not_listed =
        event.contains("pages_not_listed") && event["pages_not_listed"].is_number_unsigned()
            ? event["pages_not_listed"].get<std::uint64_t>()
            : 0;
    add("pages", std::to_string(event["pages"].size() + not_listed));
  }
  if (JsonText(event, "count") != "1" && !JsonText(event, "count").empty())
    add("count", JsonText(event, "count"));
  if (JsonText(event, "historical") == "true")
    detail += detail.empty() ? "previous-boot" : " previous-boot";
  if (JsonText(event, "before_start") == "true")
    detail += detail.empty() ? "before-start" : " before-start";
  return fmt::format("{:<20} {:<5} {:<14} {:<30} {}\n", JsonText(event, "time"),
                     JsonText(event, "severity"), JsonText(event, "origin"),
                     detail.empty() ? "-" : detail, JsonText(event, "summary"));
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
    out += fmt::format("{:<15} {:<6} {:>8} {:>8}  {}\n", JsonText(row, "origin"),
                       JsonText(row, "severity"), JsonText(row, "events"), JsonText(row, "errors"),
                       JsonText(row, "last"));
  }
  return out;
}

}  // namespace rasd::ctl
