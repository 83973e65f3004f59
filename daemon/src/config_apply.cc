#include "config_apply.h"

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
  return {.storm_threshold = config.ras.storm_threshold};
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
          .misses = config.liveness.misses};
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

}  // namespace rasd::daemon
