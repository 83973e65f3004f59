#include "rasd/ras/edac_sysfs_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "rasd/ras/log_line.h"

namespace rasd::ras {
namespace {

constexpr std::string_view kEdacMc = "/sys/devices/system/edac/mc";

std::optional<std::uint64_t> ReadCounter(const common::HostEnv& host, const std::string& path) {
  auto text = host.ReadFile(path, 64);
  if (!text) return std::nullopt;
  return ParseNumber(TrimView(*text));
}

std::string ReadLabel(const common::HostEnv& host, const std::string& path) {
  auto text = host.ReadFile(path, 256);
  return text ? std::string(TrimView(*text)) : std::string();
}

// "mc12" with prefix "mc" -> 12; anything else (power, subsystem, uevent) -> nullopt.
std::optional<int> NumberedEntry(const std::string& name, std::string_view prefix) {
  if (!StartsWith(name, prefix) || name.size() == prefix.size()) return std::nullopt;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
  }
  return static_cast<int>(*ParseNumber(std::string_view(name).substr(prefix.size())));
}

std::vector<std::string> EntriesOf(const std::filesystem::path& directory) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  return names;
}

}  // namespace

EdacSnapshot ReadEdacSnapshot(const common::HostEnv& host) {
  EdacSnapshot snapshot;
  const auto root = host.Resolve(kEdacMc);
  for (const auto& name : EntriesOf(root)) {
    const auto mc = NumberedEntry(name, "mc");
    if (!mc) continue;
    const std::string base = std::string(kEdacMc) + "/" + name;
    EdacSnapshot::Controller controller;
    controller.mc = *mc;
    const auto mc_ce = ReadCounter(host, base + "/ce_count");
    const auto mc_ue = ReadCounter(host, base + "/ue_count");
    const auto mc_ce_noinfo = ReadCounter(host, base + "/ce_noinfo_count");
    const auto mc_ue_noinfo = ReadCounter(host, base + "/ue_noinfo_count");
    controller.ce = mc_ce.value_or(0);
    controller.ue = mc_ue.value_or(0);
    controller.ce_noinfo = mc_ce_noinfo.value_or(0);
    controller.ue_noinfo = mc_ue_noinfo.value_or(0);
    controller.has_ce = mc_ce.has_value();
    controller.has_ue = mc_ue.has_value();
    controller.has_ce_noinfo = mc_ce_noinfo.has_value();
    controller.has_ue_noinfo = mc_ue_noinfo.has_value();
    snapshot.controllers[*mc] = controller;
    for (const auto& entry : EntriesOf(root / name)) {
      for (std::string_view kind : {"csrow", "dimm", "rank"}) {
        const auto index = NumberedEntry(entry, kind);
        if (!index) continue;
        const std::string unit_path = base + "/" + entry;
        EdacSnapshot::Unit unit{*mc, std::string(kind), *index, {}, 0, 0, false, false};
        if (kind == "csrow") {
          // The csrow totals; older drivers only give per-channel counts.
          auto ce = ReadCounter(host, unit_path + "/ce_count");
          auto ue = ReadCounter(host, unit_path + "/ue_count");
          std::uint64_t channel_ce = 0, channel_ue = 0;
          bool any_channel_ce = false, any_channel_ue = false;
          for (int channel = 0; channel < 16; ++channel) {
            const auto channel_ce_value =
                ReadCounter(host, fmt::format("{}/ch{}_ce_count", unit_path, channel));
            const auto channel_ue_value =
                ReadCounter(host, fmt::format("{}/ch{}_ue_count", unit_path, channel));
            channel_ce += channel_ce_value.value_or(0);
            channel_ue += channel_ue_value.value_or(0);
            any_channel_ce = any_channel_ce || channel_ce_value.has_value();
            any_channel_ue = any_channel_ue || channel_ue_value.has_value();
            if (unit.label.empty())
              unit.label = ReadLabel(host, fmt::format("{}/ch{}_dimm_label", unit_path, channel));
          }
          unit.ce = ce.value_or(channel_ce);
          unit.ue = ue.value_or(channel_ue);
          unit.has_ce = ce.has_value() || any_channel_ce;
          unit.has_ue = ue.has_value() || any_channel_ue;
        } else {
          const auto dimm_ce = ReadCounter(host, unit_path + "/dimm_ce_count");
          const auto dimm_ue = ReadCounter(host, unit_path + "/dimm_ue_count");
          unit.ce = dimm_ce.value_or(0);
          unit.ue = dimm_ue.value_or(0);
          unit.has_ce = dimm_ce.has_value();
          unit.has_ue = dimm_ue.has_value();
          unit.label = ReadLabel(host, unit_path + "/dimm_label");
        }
        snapshot.units.push_back(std::move(unit));
      }
    }
  }
  std::sort(snapshot.units.begin(), snapshot.units.end(), [](const auto& a, const auto& b) {
    return std::tie(a.mc, a.kind, a.index) < std::tie(b.mc, b.kind, b.index);
  });
  return snapshot;
}

std::vector<RasEvent> EdacSysfsSource::Poll() {
  EdacSnapshot current = ReadEdacSnapshot(host_);
  std::vector<RasEvent> events;
  if (!have_baseline_) {
    have_baseline_ = true;
    last_ = std::move(current);
    return events;
  }
  const auto now = host_.GetClock().Wall();
  auto emit = [&](int mc, const std::string& where, Severity severity, std::uint64_t before,
                  std::uint64_t after) {
    if (after <= before) return;  // unchanged, or reset: re-based below
    RasEvent event;
    event.time = now;
    event.source = std::string(kSourceName);
    event.origin = "edac";
    event.severity = severity;
    event.mc = mc;
    event.count = after - before;
    event.summary =
        fmt::format("{}: {} new {} error(s), {} since the counters were reset", where,
                    after - before, severity == Severity::kCe ? "corrected" : "uncorrected", after);
    event.raw = fmt::format("{} {} {} -> {}", where, severity == Severity::kCe ? "ce" : "ue",
                            before, after);
    events.push_back(std::move(event));
  };
  std::map<std::tuple<int, std::string, int>, const EdacSnapshot::Unit*> previous_units;
  for (const auto& unit : last_.units) previous_units[{unit.mc, unit.kind, unit.index}] = &unit;
  std::map<int, bool> has_units;
  for (const auto& unit : current.units) {
    has_units[unit.mc] = true;
    auto previous = previous_units.find({unit.mc, unit.kind, unit.index});
    if (previous == previous_units.end()) continue;  // appeared now: baseline
    std::string where = fmt::format("mc{} {}{}", unit.mc, unit.kind, unit.index);
    if (!unit.label.empty()) where += " (" + unit.label + ")";
    emit(unit.mc, where, Severity::kCe, previous->second->ce, unit.ce);
    emit(unit.mc, where, Severity::kUce, previous->second->ue, unit.ue);
  }
  for (const auto& [mc, controller] : current.controllers) {
    auto previous = last_.controllers.find(mc);
    if (previous == last_.controllers.end()) continue;
    const std::string where = fmt::format("mc{}", mc);
    emit(mc, where + " (location unknown)", Severity::kCe, previous->second.ce_noinfo,
         controller.ce_noinfo);
    emit(mc, where + " (location unknown)", Severity::kUce, previous->second.ue_noinfo,
         controller.ue_noinfo);
    if (!has_units[mc]) {
      emit(mc, where, Severity::kCe, previous->second.ce, controller.ce);
      emit(mc, where, Severity::kUce, previous->second.ue, controller.ue);
    }
  }
  last_ = std::move(current);
  return events;
}

}  // namespace rasd::ras
