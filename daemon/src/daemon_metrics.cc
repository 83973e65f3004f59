#include "daemon_metrics.h"

#include "rasd/common/version.h"

namespace rasd::daemon {

DaemonMetrics::DaemonMetrics(common::EventLoop& loop, runtime::Runtime& runtime,
                             jobs::JobManager& jobs, Actuator& actuator,
                             const SchedulerLink* scheduler, const RasPipeline& pipeline)
    : loop_(loop),
      runtime_(runtime),
      jobs_(jobs),
      actuator_(actuator),
      scheduler_(scheduler),
      pipeline_(pipeline),
      timer_(loop.CreateTimer([this] { Refresh(); })) {}

void DaemonMetrics::ObserveBatch(const HandledBatch& batch) {
  {
    std::lock_guard lock(mutex_);
    for (const auto& event : batch.events) {
      loop_part_.events[{event.origin, std::string(ras::SeverityName(event.severity)),
                         event.device ? std::to_string(*event.device) : std::string()}] +=
          event.count;
      if (event.context.kind != ras::FaultContext::Kind::kOwn) {
        loop_part_.fault_rule_events[{
            event.context.rule, std::string(ras::FaultContextKindName(event.context.kind))}] +=
            event.count;
      }
    }
    for (double seconds : batch.isolation_seconds) loop_part_.fault_to_isolation.Observe(seconds);
  }
  Refresh();
}

void DaemonMetrics::Refresh() {
  const auto stats = ingest_ ? ingest_->GetStats() : RasIngest::Stats{};
  auto edac = ingest_ ? ingest_->EdacCounters() : ras::EdacSnapshot{};
  const auto now = loop_.Now();
  // Drains: from a device entering Draining to no job left on it (or to it
  // leaving Draining some other way).
  std::vector<double> drains;
  for (const auto& device : runtime_.Devices()) {
    const int index = device->Index();
    const bool draining = device->Health() == runtime::HealthState::kDraining;
    auto since = draining_since_.find(index);
    if (draining && since == draining_since_.end()) {
      draining_since_[index] = now;
    } else if (since != draining_since_.end() && (!draining || runtime_.JobsOn(index).empty())) {
      drains.push_back(std::chrono::duration<double>(now - since->second).count());
      if (!draining) {
        draining_since_.erase(since);
      } else {
        since->second = std::chrono::nanoseconds::max();  // counted; wait for the end
      }
    }
  }
  std::map<int, std::string> suggested;
  if (recovery_) {
    for (const auto& [device, action] : recovery_->Actions())
      suggested[device] = std::string(ras::RecoveryActionName(action));
  }
  auto links_down = links_ ? links_->DownLinks() : decltype(links_->DownLinks()){};
  std::lock_guard lock(mutex_);
  loop_part_.links_down = std::move(links_down);
  loop_part_.link_errors = stats.link_errors;
  loop_part_.suggested_actions = std::move(suggested);
  loop_part_.edac = std::move(edac);
  loop_part_.kmsg_gaps = stats.kmsg_gaps;
  loop_part_.kmsg_untrusted = stats.kmsg_untrusted;
  loop_part_.source_errors["kmsg"] = stats.kmsg_undecoded;
  const auto& store = pipeline_.GetStats();
  loop_part_.source_errors["store"] = store.store_failures;
  loop_part_.store_ok = store.store_ok;
  loop_part_.store_backlog_events = store.backlog_events;
  loop_part_.store_dropped_events = store.dropped_events;
  for (double seconds : drains)
    if (seconds >= 0 && seconds < 1e9) loop_part_.drain_duration.Observe(seconds);
  if (!draining_since_.empty()) timer_->ArmAfter(std::chrono::seconds(1));
}

exporters::MetricsSnapshot DaemonMetrics::Now() const {
  exporters::MetricsSnapshot snapshot;
  {
    std::lock_guard lock(mutex_);
    snapshot = loop_part_;
  }
  snapshot.version = kVersion;
  if (ingest_) snapshot.infiniband = ingest_->InfinibandPorts();
  // Thread-safe reads: device gates are atomics, pools and the actuator's
  // counts and the jobs have their own locks.
  for (const auto& device : runtime_.Devices()) {
    exporters::DeviceMetrics metrics;
    metrics.index = device->Index();
    metrics.vendor = device->Properties().vendor;
    metrics.model = device->Properties().name;
    metrics.bdf = device->Properties().pci_bdf;
    metrics.state = std::string(runtime::HealthStateName(device->Health()));
    if (auto pool = runtime_.Pool(device->Index())) {
      const auto stats = (*pool)->Stats();
      metrics.reserved_bytes = stats.reserved_bytes;
      metrics.allocated_bytes = stats.allocated_bytes;
      metrics.retired_bytes = stats.retired_bytes;
      metrics.retired_pages = stats.retired_pages;
    }
    metrics.op_timeouts = device->OpTimeouts();
    metrics.links_usable = device->LinksUsable();
    snapshot.devices.push_back(std::move(metrics));
  }
  if (heartbeat_) {
    for (const auto& stats : heartbeat_->Stats()) {
      for (auto& metrics : snapshot.devices) {
        if (metrics.index != stats.device) continue;
        metrics.heartbeats = stats.beats;
        metrics.heartbeat_misses = stats.misses;
        metrics.hangs = stats.hangs;
        metrics.heartbeat_latency_seconds =
            std::chrono::duration<double>(stats.last_latency).count();
      }
    }
  }
  if (screening_) {
    for (const auto& view : screening_->Views()) {
      for (auto& metrics : snapshot.devices) {
        if (metrics.index != view.device) continue;
        metrics.sdc_checks["screen"] = view.kernels_checked;
        metrics.sdc_mismatches["screen"] = view.mismatches;
        for (const auto& [kind, count] : view.cross_checks) metrics.sdc_checks[kind] = count;
        for (const auto& [kind, count] : view.cross_check_mismatches)
          metrics.sdc_mismatches[kind] = count;
        metrics.sdc_verdicts = view.verdicts;
        metrics.sdc_budget_used = view.budget_used;
        if (view.screened)
          metrics.sdc_last_screening_seconds =
              std::chrono::duration<double>(view.last_at.time_since_epoch()).count();
      }
    }
  }
  if (probes_) {
    for (const auto& stuck : probes_->Stuck()) {
      for (auto& metrics : snapshot.devices) {
        if (metrics.index == stuck.device)
          metrics.probe_stuck_seconds = std::chrono::duration<double>(stuck.call.running).count();
      }
    }
  }
  for (const auto& [key, count] : actuator_.Counts()) {
    const auto space = key.rfind(' ');
    snapshot
        .actions[{key.substr(0, space), space == std::string::npos ? "" : key.substr(space + 1)}] =
        count;
  }
  if (scheduler_) {
    snapshot.scheduler_actions = scheduler_->Counts();
    snapshot.scheduler_drain_guarded = scheduler_->Guarded().has_value();
    snapshot.scheduler_node_drained = scheduler_->DrainedByRasd();
  }
  if (workloads_) {
    const auto counts = workloads_->PublishedCounts();
    snapshot.workloads = counts.by_state;
    snapshot.workload_signals = counts.signals;
    snapshot.workload_attaches = counts.attaches;
  }
  const auto reports = jobs_.Report();
  {
    // A collective's re-forms are seen when scraped: no loop timer polls
    // the jobs for them.
    std::lock_guard lock(mutex_);
    for (const auto& report : reports) {
      if (report.kind != jobs::JobKind::kCollective) continue;
      auto& seen = reforms_seen_[report.name];
      if (report.reforms > seen) {
        loop_part_.collective_abort.Observe(report.last_release_seconds);
        snapshot.collective_abort.Observe(report.last_release_seconds);
      }
      seen = report.reforms;
    }
  }
  for (const auto& report : reports) {
    snapshot.jobs[{std::string(jobs::JobKindName(report.kind)), report.state}] += 1;
    if (report.kind == jobs::JobKind::kInference || report.kind == jobs::JobKind::kLlm) {
      snapshot.requests[{report.name, "served"}] = report.served;
      snapshot.requests[{report.name, "requeued"}] = report.requeued + report.rerun;
      snapshot.requests[{report.name, "lost"}] = report.lost;
      snapshot.requests[{report.name, "overloaded"}] = report.overloaded;
    }
    for (const auto& replica : report.llm_replicas) {
      snapshot.llm_replicas[{report.name, replica.device}] = {.kv_used = replica.blocks.used,
                                                              .kv_free = replica.blocks.free,
                                                              .kv_retired = replica.blocks.retired,
                                                              .running = replica.running,
                                                              .waiting = replica.waiting,
                                                              .preempted = replica.preempted,
                                                              .recomputed = replica.recomputed,
                                                              .moved_out = replica.moved_out,
                                                              .swapped_out = replica.swapped_out,
                                                              .swapped_in = replica.swapped_in};
    }
  }
  return snapshot;
}

}  // namespace rasd::daemon
