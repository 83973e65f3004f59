#include "config_apply.h"

#include <charconv>

#include "rasd/common/logging.h"

namespace rasd::daemon {

ControlServer::Options ServerOptions(const Config& config) {
  ControlServer::Options options;
  options.client_timeout = config.control.client_timeout;
  options.max_clients = config.control.max_clients;
  return options;
}

Actuator::Options ActuatorOptions(const Config& config) {
  return {.host_page_offline = config.policy.host_page_offline,
          .hook_timeout = config.policy.hook_timeout};
}

RasPipeline::Options PipelineOptions(const Config& config) {
  return {.storm_threshold = config.ras.storm_threshold,
          .retention_days = config.ras.retention_days,
          .max_events = config.ras.max_events};
}

DeviceLifecycle::Options LifecycleOptions(const Config& config,
                                          const runtime::SelfTestOptions& self_test) {
  DeviceLifecycle::Options options;
  options.self_test = self_test;
  options.drain_deadline = config.policy.drain_deadline;
  options.auto_recover = config.policy.auto_recover;
  options.auto_recover_delay = config.policy.auto_recover_delay;
  options.auto_recover_window = config.policy.auto_recover_window;
  options.resume_on_undrain = config.scheduler.resume_on_undrain;
  return options;
}

Workloads::Options WorkloadOptions(const Config& config) {
  return {.default_grace = config.workloads.grace,
          .kill_after_grace = config.workloads.on_drain == "kill",
          .kill_consumer = config.workloads.kill_consumer};
}

DeviceHeartbeat::Options HeartbeatOptions(const Config& config) {
  return {.period = config.liveness.period,
          .deadline = config.liveness.deadline,
          .misses = config.liveness.misses,
          .idle_period = config.liveness.idle_period};
}

CorruptionScreening::Options ScreeningOptions(const Config& config) {
  return {.budget = config.screening.budget,
          .interval = config.screening.interval,
          .elements = config.screening.elements,
          .confirm = config.screening.confirm,
          .window = config.screening.window};
}

ReloadCandidate LoadReloadCandidate(const std::optional<std::filesystem::path>& path,
                                    const ConfigOverrides& overrides) {
  ConfigParseResult loaded;
  if (path) loaded = LoadConfigFile(*path);
  ReloadCandidate candidate;
  for (const auto& problem : loaded.problems) candidate.errors.push_back(problem.ToString());
  if (!loaded.ok()) return candidate;
  candidate.config = std::move(loaded.config);
  overrides.ApplyTo(candidate.config);
  auto resolved = ResolveAdminGroup(candidate.config.control.admin_group);
  if (resolved) {
    candidate.admin_gid = *resolved;
  } else {
    candidate.errors.push_back(resolved.error().message);
  }
  return candidate;
}

LinkHealth::Options LinkHealthOptions(const Config& config) {
  return {.up_debounce =
              std::chrono::duration_cast<std::chrono::milliseconds>(config.policy.link_up_debounce),
          .flap_limit = static_cast<std::size_t>(config.policy.link_flap_limit),
          .flap_window = std::chrono::hours(1)};
}

std::optional<std::chrono::system_clock::time_point> BootTime(const common::HostEnv& host) {
  // /proc/uptime: "12345.67 23456.78", seconds since boot first.
  auto uptime = host.ReadFile("/proc/uptime", 128);
  double seconds = -1;
  if (uptime) {
    const std::string text = *uptime;
    const auto space = text.find(' ');
    const std::string first = text.substr(0, space);
    std::from_chars(first.data(), first.data() + first.size(), seconds);
  }
  // At most a century: "1e308" or "inf" would overflow the subtraction and
  // put every boot-grace rule in grace for ever.
  if (!uptime || !(seconds >= 0) || !(seconds < 100.0 * 365 * 86400)) {
    RASD_LOG_INFO("policy: the node's uptime is unknown ({}): no rule's boot grace applies",
                  uptime ? "unreadable /proc/uptime" : uptime.error().message);
    return std::nullopt;
  }
  return host.GetClock().Wall() - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      std::chrono::duration<double>(seconds));
}

}  // namespace rasd::daemon
