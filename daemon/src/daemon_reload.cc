// The daemon's configuration reload (SIGHUP, rasctl reload): every unit
// takes what changed that it can apply live.
#include "config_apply.h"
#include "daemon.h"
#include "rasd/common/logging.h"

namespace rasd::daemon {

Result<nlohmann::json> Daemon::Reload() {
  Notify("RELOADING=1\nSTATUS=reloading configuration");
  ReloadCandidate loaded = LoadReloadCandidate(options_.config_path, options_.overrides);
  const std::string when = Iso8601(loop_->GetClock().Wall());
  if (!loaded.errors.empty()) {
    std::string failure;
    for (const auto& error : loaded.errors) {
      RASD_LOG_ERROR("reload: {}", error);
      failure += (failure.empty() ? "" : "\n") + error;
    }
    RASD_LOG_ERROR("reload rejected; keeping configuration generation {}", config_generation_);
    last_reload_ = {{"time", when}, {"ok", false}, {"errors", loaded.errors}};
    Notify("READY=1");
    NotifyStatus();
    return Fail(ErrorCode::kInvalidArgument, "configuration rejected, old one kept:\n" + failure);
  }

  const auto restart_required = SchemaRestartRequiredChanges(config_, loaded.config);
  for (const auto& key : restart_required) {
    RASD_LOG_WARN("reload: {} changed; it takes effect when rasd restarts", key);
  }
  // Keys that need a restart keep their running values, so that status tells
  // the truth about what is in force.
  config_ = SchemaApplyLiveChanges(config_, loaded.config);
  common::SetLogLevel(config_.daemon.log_level);
  authorizer_ = Authorizer{::geteuid(), loaded.admin_gid, config_.control.admin_group};
  control_->Reconfigure(ServerOptions(config_), authorizer_);
  ingest_->SetCodeTable(config_.ras.codes);
  recovery_->SetTable(ras::RecoveryTable::WithOverrides(config_.ras.recovery));
  policy_.Reconfigure(config_.policy.engine);  // keeps the counters of unchanged rules
  actuator_->SetOptions(ActuatorOptions(config_));
  pipeline_->SetOptions(PipelineOptions(config_));
  pipeline_->SetFaultRules(ras::MergeFaultRules(config_.ras.fault_rules));
  injection_->SetOptions(config_.inject);
  lifecycle_->SetOptions(LifecycleOptions(config_, options_.self_test));
  link_health_->SetOptions(LinkHealthOptions(config_));
  link_health_->SetSettle(config_.policy.link_settle);
  pipeline_->GetFabricHealth()->SetHold(config_.policy.nic_fault_hold);
  heartbeat_->SetOptions(HeartbeatOptions(config_));
  screening_->SetOptions(ScreeningOptions(config_));
  jobs_->SetCrossCheckSampling(config_.screening.sample_one_in, kCollectiveCheckShare);
  workloads_->SetOptions(WorkloadOptions(config_));
  ++config_generation_;
  RASD_LOG_INFO("configuration reloaded (generation {})", config_generation_);
  last_reload_ = {{"time", when}, {"ok", true}, {"restart_required", restart_required}};
  Notify("READY=1");
  NotifyStatus();
  return nlohmann::json{{"generation", config_generation_}, {"restart_required", restart_required}};
}

}  // namespace rasd::daemon
