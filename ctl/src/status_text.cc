#include "status_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rasd::ctl {
namespace {

using nlohmann::json;

// The value at a "/"-separated path as text, or "?" when absent.
std::string Field(const json& root, const char* pointer) {
  const json::json_pointer path(pointer);
  if (!root.contains(path)) return "?";
  const json& value = root.at(path);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "-";
  return value.dump();
}

// Bytes at a path as "64.0 MiB" (the pool's sizes), or "?" when absent.
std::string Bytes(const json& root, const char* pointer) {
  const json::json_pointer path(pointer);
  if (!root.contains(path) || !root.at(path).is_number()) return "?";
  const double bytes = root.at(path).get<double>();
  if (bytes < 1024) return fmt::format("{} B", static_cast<long long>(bytes));
  if (bytes < 1024.0 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024);
  if (bytes < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024));
}

// Where Prometheus scrapes rasd: the bound port (the listen address may say
// port 0), "off", or why the endpoint is not there.
std::string MetricsLine(const json& status) {
  const std::string listen = Field(status, "/metrics/listen");
  if (listen == "off") return "off (metrics.listen)";
  const std::string error = Field(status, "/metrics/error");
  if (error != "?" && error != "-") return fmt::format("NOT SERVED: {}", error);
  const std::string port = Field(status, "/metrics/port");
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || port == "?" || port == "-") return listen;
  return fmt::format("http://{}:{}/metrics", listen.substr(0, colon), port);
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(seconds);
  const long long days = total / 86400, hours = total % 86400 / 3600, minutes = total % 3600 / 60,
                  secs = total % 60;
  if (days > 0) return fmt::format("{}d {}h", days, hours);
  if (hours > 0) return fmt::format("{}h {}m", hours, minutes);
  if (minutes > 0) return fmt::format("{}m {}s", minutes, secs);
  return fmt::format("{}s", secs);
}

namespace {

// The last reload, when there was one: ok, or the first of its errors.
std::string LastReloadLine(const json& status) {
  std::string out;
  const json::json_pointer reload("/config/last_reload");
  if (status.contains(reload) && status.at(reload).is_object()) {
    const json& last = status.at(reload);
    if (last.value("ok", true)) {
      out += fmt::format("{:<12}ok at {}\n", "last reload", Field(last, "/time"));
    } else {
      std::string first_error = "?";
      if (last.contains("errors") && last["errors"].is_array() && !last["errors"].empty()) {
        first_error = last["errors"][0].is_string() ? last["errors"][0].get<std::string>() : "?";
      }
      out += fmt::format("{:<12}REJECTED at {}: {}\n", "last reload", Field(last, "/time"),
                         first_error);
    }
  }
  return out;
}

// What the probe deadline watches, and each call past it.
std::string ProbeLines(const json& status) {
  const json::json_pointer pointer("/probe");
  if (!status.contains(pointer) || !status.at(pointer).is_object()) return "";
  const json& probe = status.at(pointer);
  std::string watched;
  if (probe.contains("watched") && probe["watched"].is_array()) {
    for (const auto& name : probe["watched"]) {
      if (!watched.empty()) watched += ", ";
      watched += name.is_string() ? name.get<std::string>() : name.dump();
    }
  }
  if (watched.empty()) watched = "no driver calls (neither NVML nor device queries)";
  std::string out = fmt::format(
      "{:<12}driver calls past {} ms drain their device, past {} deadlines isolate it: "
      "{}\n",
      "probes", Field(probe, "/deadline_ms"), Field(probe, "/isolate_after"), watched);
  if (probe.contains("stuck") && probe["stuck"].is_array()) {
    for (const auto& call : probe["stuck"]) {
      out += fmt::format("  {:>2} {} {} on {} has not returned for {} ms\n", Field(call, "/device"),
                         Field(call, "/source"), Field(call, "/function"), Field(call, "/name"),
                         Field(call, "/running_ms"));
    }
  }
  return out;
}

// Whether the links are still training after a boot or a driver load: their
// reports are read and decided when the window ends.
std::string LinksLine(const json& status) {
  if (!status.contains(json::json_pointer("/links/settle_s"))) return {};
  const std::string settle = Field(status, "/links/settle_s");
  if (settle == "0")
    return fmt::format("{:<12}no settle window (policy.link_settle_s: 0)\n", "links");
  const json::json_pointer left("/links/settles_in_s");
  if (status.contains(left) && status.at(left).is_number()) {
    return fmt::format(
        "{:<12}training after a boot or driver load: their states are decided in {:.0f} s ({})\n",
        "links", status.at(left).get<double>(), Field(status, "/links/settling_until"));
  }
  return fmt::format(
      "{:<12}settled (decided as read; {} s settle window after a boot or driver "
      "load)\n",
      "links", settle);
}

// The heartbeat's settings and each device's beats.
std::string LivenessLines(const json& status) {
  std::string out;
  const json::json_pointer liveness("/liveness");
  if (status.contains(liveness) && status.at(liveness).is_object()) {
    const json& live = status.at(liveness);
    if (Field(live, "/period_ms") == "0") {
      out += fmt::format("{:<12}off (liveness.period_ms: 0)\n", "liveness");
    } else {
      out += fmt::format("{:<12}a heartbeat every {} ms, deadline {} ms, hung after {} missed\n",
                         "liveness", Field(live, "/period_ms"), Field(live, "/deadline_ms"),
                         Field(live, "/misses"));
    }
    if (live.contains("devices") && live["devices"].is_array()) {
      for (const auto& device : live["devices"]) {
        const json::json_pointer latency("/last_latency_ms");
        const std::string last =
            device.contains(latency) && device.at(latency).is_number()
                ? fmt::format("{:.1f} ms", device.at(latency).get<double>())
                : "?";
        out += fmt::format(
            "  {:>2} {} beat(s), {} missed, {} hang(s), {} op timeout(s), last {}\n",
            Field(device, "/device"), Field(device, "/beats"), Field(device, "/misses"),
            Field(device, "/hangs"), Field(device, "/op_timeouts"), last);
      }
    }
  }
  return out;
}

// The scheduler link and whether it drained the node.
std::string SchedulerLine(const json& status) {
  std::string out;
  if (status.contains(json::json_pointer("/scheduler/kind"))) {
    const std::string kind = Field(status, "/scheduler/kind");
    std::string state;
    if (Field(status, "/scheduler/drained") == "true") {
      state = ", DRAINED by rasd";
    } else if (Field(status, "/scheduler/drain_wanted") == "true") {
      const std::string guarded = Field(status, "/scheduler/guarded");
      state = guarded == "-" || guarded == "?"
                  ? ", drain wanted, not done yet (see the log)"
                  : ", drain HELD by the blast-radius guard: " + guarded;
    }
    out += kind == "none" ? fmt::format("{:<12}none (scheduler.kind)\n", "scheduler")
                          : fmt::format("{:<12}{}, node {}{}\n", "scheduler", kind,
                                        Field(status, "/scheduler/node"), state);
  }
  return out;
}

// Each RAS source with its state and why, in aligned columns.
std::string SourceLines(const json& status) {
  std::string out;
  const json::json_pointer sources("/ras/sources");
  if (status.contains(sources) && status.at(sources).is_object()) {
    out += "sources\n";
    // Each column fits its longest entry: a source's name never runs into
    // its state, nor its state into the reason.
    std::size_t name_width = 0;
    std::size_t state_width = 0;
    for (const auto& [name, source] : status.at(sources).items()) {
      name_width = std::max(name_width, name.size());
      state_width = std::max(state_width, Field(source, "/state").size());
    }
    for (const auto& [name, source] : status.at(sources).items()) {
      out += fmt::format("  {:<{}}  {:<{}}  {}\n", name, name_width, Field(source, "/state"),
                         state_width, Field(source, "/reason"));
    }
  }
  return out;
}

}  // namespace

std::string FormatStatus(const json& status) {
  std::string out;
  const json::json_pointer uptime("/uptime_seconds");
  const std::string up = status.contains(uptime) && status.at(uptime).is_number()
                             ? FormatDuration(status.at(uptime).get<double>())
                             : "?";
  out += fmt::format("rasd {} (pid {}), up {}\n", Field(status, "/version"), Field(status, "/pid"),
                     up);

  const json::json_pointer config_path("/config/path");
  const std::string config = status.contains(config_path) && status.at(config_path).is_string()
                                 ? status.at(config_path).get<std::string>()
                                 : "built-in defaults";
  out += fmt::format("{:<12}{} (generation {}, log level {})\n", "config", config,
                     Field(status, "/config/generation"), Field(status, "/config/log_level"));
  out += LastReloadLine(status);
  out += fmt::format("{:<12}{}\n", "host root", Field(status, "/host_root"));
  out += fmt::format("{:<12}{} (schema {})\n", "state dir", Field(status, "/state_dir"),
                     Field(status, "/database/schema_version"));
  const json::json_pointer damage("/database/damaged_at_start");
  if (status.contains(damage) && status.at(damage).is_object()) {
    out += fmt::format("{:<12}DAMAGED AT START: {}; kept as {}\n", "database",
                       Field(status.at(damage), "/problem"), Field(status.at(damage), "/kept_as"));
  }
  out += fmt::format(
      "{:<12}{}{}\n", "socket", Field(status, "/socket/path"),
      Field(status, "/socket/activated") == "true" ? " (systemd socket activation)" : "");
  out += fmt::format(
      "{:<12}{} {}: {} healthy, {} degraded, {} draining, {} isolated\n", "devices",
      Field(status, "/devices/count"), Field(status, "/devices/driver"),
      Field(status, "/devices/by_health/healthy"), Field(status, "/devices/by_health/degraded"),
      Field(status, "/devices/by_health/draining"), Field(status, "/devices/by_health/isolated"));
  const json::json_pointer list("/devices/list");
  if (status.contains(list) && status.at(list).is_array()) {
    for (const auto& device : status.at(list)) {
      out +=
          fmt::format("  {:>2} {:<10} {:<9} pool {} reserved, {} allocated, {} retired page(s)\n",
                      Field(device, "/index"), Field(device, "/name"), Field(device, "/health"),
                      Bytes(device, "/pool/reserved_bytes"), Bytes(device, "/pool/allocated_bytes"),
                      Field(device, "/pool/retired_pages"));
    }
  }
  out += LivenessLines(status);
  out += ProbeLines(status);
  out += LinksLine(status);
  out += fmt::format("{:<12}{}\n", "jobs", Field(status, "/jobs/count"));
  if (status.contains(json::json_pointer("/workloads/count"))) {
    out += fmt::format("{:<12}{} attached from outside rasd (rasctl run, attach)\n", "workloads",
                       Field(status, "/workloads/count"));
  }
  std::string severities;
  for (const char* severity : {"FATAL", "UCE", "SRAR", "SRAO", "UCNA", "CE", "INFO"}) {
    severities +=
        fmt::format("{}{} {}", severities.empty() ? "" : ", ", severity,
                    Field(status, (std::string("/events/by_severity/") + severity).c_str()));
  }
  out += fmt::format("{:<12}{} total: {}\n", "events", Field(status, "/events/total"), severities);
  if (status.contains(json::json_pointer("/ras/kmsg_records"))) {
    out += fmt::format(
        "{:<12}{} record(s) read, {} from user space (never acted on), {} event(s) logged before "
        "rasd's first start in this boot, {} crash record(s) read\n",
        "kernel log", Field(status, "/ras/kmsg_records"), Field(status, "/ras/kmsg_untrusted"),
        Field(status, "/ras/kmsg_before_start"), Field(status, "/ras/crash_records_read"));
  }
  if (status.contains(json::json_pointer("/metrics"))) {
    out += fmt::format("{:<12}{}\n", "metrics", MetricsLine(status));
  }
  out += SchedulerLine(status);
  out += SourceLines(status);
  return out;
}

}  // namespace rasd::ctl
