#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "actuator.h"
#include "corruption_screening.h"
#include "device_heartbeat.h"
#include "device_recovery.h"
#include "link_health.h"
#include "probe_watchdog.h"
#include "ras_ingest.h"
#include "ras_pipeline.h"
#include "rasd/common/event_loop.h"
#include "rasd/exporters/metrics.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/runtime/runtime.h"
#include "scheduler.h"
#include "workloads.h"

namespace rasd::daemon {

// The daemon's Prometheus figures. The loop keeps its part (event counts,
// fault-to-isolation and drain durations, EDAC and source counters) current
// after every batch and state change; Now() adds what any thread may read
// (device gates, pools, action counts, jobs) when the exposer scrapes.
// While a device drains, a 1 s timer times the drain; otherwise nothing is
// armed, so an idle daemon does not wake for metrics.
//
// ObserveBatch and Refresh on the loop thread; Now() from any thread.
// Everything it refers to must outlive it.
class DaemonMetrics {
 public:
  DaemonMetrics(common::EventLoop& loop, runtime::Runtime& runtime, jobs::JobManager& jobs,
                Actuator& actuator, const SchedulerLink* scheduler, const RasPipeline& pipeline);

  // The sources' counters, once the ingest exists.
  void SetIngest(const RasIngest* ingest) { ingest_ = ingest; }
  void SetHeartbeat(const DeviceHeartbeat* heartbeat) { heartbeat_ = heartbeat; }
  void SetScreening(const CorruptionScreening* screening) { screening_ = screening; }
  void SetWorkloads(const Workloads* workloads) { workloads_ = workloads; }
  void SetRecovery(const DeviceRecovery* recovery) { recovery_ = recovery; }
  void SetLinkHealth(const LinkHealth* links) { links_ = links; }
  void SetProbeWatchdog(const ProbeWatchdog* probes) { probes_ = probes; }
  void ObserveBatch(const HandledBatch& batch);
  void Refresh();
  exporters::MetricsSnapshot Now() const;

 private:
  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  jobs::JobManager& jobs_;
  Actuator& actuator_;
  const SchedulerLink* scheduler_;
  const RasPipeline& pipeline_;
  const DeviceRecovery* recovery_ = nullptr;
  const LinkHealth* links_ = nullptr;
  const ProbeWatchdog* probes_ = nullptr;
  const RasIngest* ingest_ = nullptr;
  const DeviceHeartbeat* heartbeat_ = nullptr;
  const CorruptionScreening* screening_ = nullptr;
  const Workloads* workloads_ = nullptr;
  std::unique_ptr<common::Timer> timer_;
  std::map<int, std::chrono::nanoseconds> draining_since_;  // loop monotonic time

  mutable std::mutex mutex_;
  mutable exporters::MetricsSnapshot loop_part_;               // guarded by mutex_
  mutable std::map<std::string, std::uint64_t> reforms_seen_;  // guarded by mutex_
};

}  // namespace rasd::daemon
