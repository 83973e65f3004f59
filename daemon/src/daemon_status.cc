// What `rasctl status` and systemd's status line show of the running daemon.
#include <fmt/format.h>
#include <unistd.h>

#include "daemon.h"
#include "rasd/common/logging.h"
#include "rasd/common/version.h"

namespace rasd::daemon {

// "4 sim device(s)", or what a host without accelerators gets.
std::string Daemon::DevicesPhrase() const {
  if (runtime_->DeviceCount() == 0) return "no devices (host errors only)";
  return fmt::format("{} {} device(s)", runtime_->DeviceCount(), runtime_->DriverName());
}

nlohmann::json Daemon::ProbeReport() const {
  nlohmann::json stuck = nlohmann::json::array();
  if (probe_watchdog_) {
    for (const auto& call : probe_watchdog_->Stuck()) {
      stuck.push_back(
          {{"device", call.device},
           {"source", call.source},
           {"function", call.call.function},
           {"name", call.call.device},
           {"running_ms",
            std::chrono::duration_cast<std::chrono::milliseconds>(call.call.running).count()}});
    }
  }
  nlohmann::json watched = nlohmann::json::array();
  if (ingest_->NvmlActive()) watched.push_back("NVML");
  if (device_prober_) watched.push_back(std::string(runtime_->DriverName()) + " device queries");
  if (runtime_->Driver().MonitorsDevices())
    watched.push_back(std::string(runtime_->DriverName()) + " health monitor");
  return {{"deadline_ms", config_.probe.deadline.count()},
          {"isolate_after", config_.probe.isolate_after},
          {"interval_ms", config_.probe.interval.count()},
          {"watched", std::move(watched)},
          {"stuck", std::move(stuck)}};
}

nlohmann::json Daemon::LinksReport() const {
  const auto until = link_health_ ? link_health_->SettlingUntil() : std::nullopt;
  nlohmann::json settles_in = nullptr;
  if (until) {
    const auto left = *until - loop_->GetClock().Wall();
    settles_in = std::max(0.0, std::chrono::duration<double>(left).count());
  }
  return {{"settle_s", config_.policy.link_settle.count()},
          {"settling_until", until ? nlohmann::json(Iso8601(*until)) : nlohmann::json()},
          {"settles_in_s", std::move(settles_in)}};
}

nlohmann::json Daemon::LivenessReport() const {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& stats : heartbeat_->Stats()) {
    devices.push_back({{"device", stats.device},
                       {"beats", stats.beats},
                       {"misses", stats.misses},
                       {"hangs", stats.hangs},
                       {"op_timeouts", stats.op_timeouts},
                       {"last_latency_ms",
                        std::chrono::duration<double, std::milli>(stats.last_latency).count()}});
  }
  return {{"period_ms", config_.liveness.period.count()},
          {"idle_period_ms", config_.liveness.idle_period.count()},
          {"deadline_ms", config_.liveness.deadline.count()},
          {"misses", config_.liveness.misses},
          {"devices", std::move(devices)}};
}

Result<nlohmann::json> Daemon::StatusReport() {
  nlohmann::json ras = ingest_->GetStats().ToJson();
  ras.update(pipeline_->GetStats().ToJson());
  ras["store_sqlite_bytes"] = ras::StateStore::SqliteMemoryBytes();
  const double uptime = std::chrono::duration<double>(loop_->Now() - started_monotonic_).count();
  nlohmann::json config = {
      {"path",
       options_.config_path ? nlohmann::json(options_.config_path->string()) : nlohmann::json()},
      {"generation", config_generation_},
      {"last_reload", last_reload_},
      {"log_level", std::string(common::LogLevelName(config_.daemon.log_level))},
      {"admin_group", config_.control.admin_group},
  };
  return nlohmann::json{
      {"version", kVersion},
      {"pid", ::getpid()},
      {"started_at", Iso8601(started_wall_)},
      {"uptime_seconds", uptime},
      {"config", std::move(config)},
      {"host_root", config_.host.root.string()},
      {"state_dir", state_dir_.string()},
      {"socket", {{"path", socket_path_.string()}, {"activated", socket_.activated}}},
      {"database",
       {{"path", store_->DatabasePath().string()},
        {"schema_version", store_->SchemaVersion()},
        {"damaged_at_start", state_damage_
                                 ? nlohmann::json{{"problem", state_damage_->problem},
                                                  {"kept_as", state_damage_->kept_as.string()}}
                                 : nlohmann::json()},
        {"unreadable_at_start",
         state_unreadable_ ? nlohmann::json(*state_unreadable_) : nlohmann::json()}}},
      {"control",
       {{"clients", control_->ClientCount()},
        {"rejected_requests", control_->RejectedRequests()},
        {"refused_connections", control_->RefusedConnections()},
        {"watchers", watchers_ ? watchers_->Count() : 0}}},
      {"watchdog_usec", watchdog_usec_},
      {"ras", ras},
      {"liveness", LivenessReport()},
      {"probe", ProbeReport()},
      {"links", LinksReport()},
      {"actions", actuator_->Counts()},
      {"scheduler", SchedulerView()},
      {"kubernetes",
       {{"device_plugin", config_.kubernetes.device_plugin},
        {"plugins", kubelet_plugins_ ? kubelet_plugins_->View() : nlohmann::json::array()},
        {"error", kubelet_plugins_error_.empty() ? nlohmann::json()
                                                 : nlohmann::json(kubelet_plugins_error_)}}},
      {"metrics",
       {{"listen", config_.metrics.listen},
        {"port", metrics_ ? nlohmann::json(metrics_->Port()) : nlohmann::json()},
        {"error", metrics_error_.empty() ? nlohmann::json() : nlohmann::json(metrics_error_)}}},
  };
}

nlohmann::json Daemon::SchedulerView() const {
  if (!scheduler_) return nlohmann::json{{"kind", "none"}};
  const auto guarded = scheduler_->Guarded();
  return nlohmann::json{{"kind", config_.scheduler.kind},
                        {"node", scheduler_->Node()},
                        {"drained", scheduler_->DrainedByRasd()},
                        {"drain_wanted", scheduler_->Drained()},
                        {"guarded", guarded ? nlohmann::json(*guarded) : nlohmann::json()},
                        {"confirming", scheduler_->Confirming()},
                        {"max_drained_fraction", config_.scheduler.max_drained_fraction},
                        {"guard_window_s", config_.scheduler.guard_window.count()},
                        {"calls", scheduler_->Counts()}};
}

}  // namespace rasd::daemon
