#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actuator.h"
#include "control_api.h"
#include "control_server.h"
#include "corruption_screening.h"
#include "daemon_metrics.h"
#include "device_health.h"
#include "device_heartbeat.h"
#include "device_lifecycle.h"
#include "device_prober.h"
#include "device_recovery.h"
#include "fault_injection.h"
#include "kubelet_plugins.h"
#include "link_health.h"
#include "probe_watchdog.h"
#include "ras_ingest.h"
#include "ras_pipeline.h"
#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/daemon/config.h"
#include "rasd/exporters/metrics.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/policy.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"
#include "rasd/runtime/self_test.h"
#include "scheduler.h"
#include "sim_link_tree.h"
#include "store_checkpointer.h"

namespace rasd::daemon {

// The running daemon: one sd-event loop that owns the control server, the
// state store and the runtime, and wires signals, the systemd watchdog and
// reloads into it. Created and run on the main thread; the signals it
// handles (TERM, INT, HUP) must be blocked in every thread before Start().
class Daemon {
 public:
  struct StartOptions {
    std::optional<std::filesystem::path> config_path;  // none: built-in defaults
    ConfigOverrides overrides;
    // The loop to run on (tests: a SimulatedEventLoop); it must outlive the
    // daemon. Null: the daemon makes an sd-event loop of its own.
    common::EventLoop* loop = nullptr;
    // How the device self-test runs (undrain, recovery); tests shorten its
    // step timeout.
    runtime::SelfTestOptions self_test;
    // Called on the store right after it opens, before anything reads it
    // (tests: a read or write fault). Unset: nothing.
    std::function<void(ras::StateStore&)> prepare_store;
  };

  // Builds everything and binds the control socket. Every failure is a clear
  // start-up error naming what is wrong (state directory, socket, host root).
  static Result<std::unique_ptr<Daemon>> Start(StartOptions options, Config config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Announces READY=1 and runs the loop until SIGTERM/SIGINT. Returns the
  // process exit code.
  int Run();

 private:
  explicit Daemon(StartOptions options);

  Status Initialize(Config config);
  // The steps of Initialize, in order.
  Status OpenLoopAndHost();
  Status OpenStateAndDevices();
  Status WatchSignals();
  void StartScheduler();
  // The recovery advisor, wired into the pipeline, actuator, lifecycle and
  // metrics.
  void StartRecovery();
  // The kubelet device plugins, when kubernetes.device_plugin is on; a
  // failure is logged and shown in status, and rasd serves on without them.
  void StartKubeletPlugins();
  // The scheduler link as status and check show it.
  nlohmann::json SchedulerView() const;
  void StartRas();
  // Once the sources run: a deadline on the driver calls of those that
  // make some (NVML). None: no timer, so that an idle node sleeps.
  void WatchProbes();
  // A silent-corruption verdict's answers, run again: an action row that
  // names the wrong ones.
  void RecordAnswerReview(const std::string& job, const jobs::AnswerReview& review);
  // The store's page errors within the page threshold's window, to the policy.
  void RestorePageHistory();
  Status StartControl();
  void StartJobsAndMetrics();
  Result<nlohmann::json> StatusReport();
  nlohmann::json LivenessReport() const;
  // The probe deadline's settings, what it watches and the calls past it.
  nlohmann::json ProbeReport() const;
  // The links' settle window after a boot or a driver load, as status shows it.
  nlohmann::json LinksReport() const;
  // After the pipeline handled a batch: lifecycle, jobs and metrics.
  void ObserveBatch(const HandledBatch& batch);
  // Re-reads the config file; keeps the running config when the new one has
  // problems. Returns what changed, or the problems.
  Result<nlohmann::json> Reload();
  void Notify(const std::string& message);
  void NotifyStatus();
  std::string DevicesPhrase() const;

  void OnWatchdog();

  StartOptions options_;
  Config config_;
  std::filesystem::path state_dir_;
  std::filesystem::path socket_path_;
  Authorizer authorizer_;
  std::unique_ptr<common::EventLoop> owned_loop_;  // when StartOptions gave none
  common::EventLoop* loop_ = nullptr;
  std::unique_ptr<common::HostEnv> host_;
  std::chrono::nanoseconds started_monotonic_{};
  std::chrono::system_clock::time_point started_wall_;

  std::vector<std::unique_ptr<common::SignalWatch>> signals_;
  std::unique_ptr<common::Timer> watchdog_timer_;
  std::uint64_t watchdog_usec_ = 0;

  std::unique_ptr<ras::StateStore> store_;
  // Closed before store_ (declared after it), after pipeline_, which asks it.
  std::unique_ptr<StoreCheckpointer> checkpointer_;
  std::unique_ptr<runtime::Runtime> runtime_;
  // The one writer of the devices' gates; every unit below decides through it.
  std::unique_ptr<DeviceHealth> health_;
  // Who hears of each change of a device's state (jobs, workloads, watchers,
  // metrics, the kubelet): dropped first in ~Daemon, before any of them.
  std::vector<DeviceHealth::Subscription> health_subscriptions_;
  std::vector<std::string> missing_backends_;  // named in the config, not available
  ras::PolicyEngine policy_;
  std::unique_ptr<SchedulerLink> scheduler_;  // before actuator_, whose drain-node uses it
  // What to do next about each device; the pipeline, actuator and lifecycle
  // call into it, so it is destroyed after them.
  std::unique_ptr<DeviceRecovery> recovery_;
  std::unique_ptr<SimLinkTree> sim_links_;  // simulator.link_sysfs
  std::unique_ptr<NodeFault> node_fault_;   // after store_: the actuator declares to it
  std::unique_ptr<Actuator> actuator_;        // after runtime_ and store_: destroyed before them
  std::unique_ptr<jobs::JobManager> jobs_;    // after runtime_: stopped before it goes

  // The exposer reads metrics_state_ on its own thread: it goes first.
  std::unique_ptr<DaemonMetrics> metrics_state_;
  std::unique_ptr<exporters::MetricsServer> metrics_;
  std::string metrics_error_;
  std::unique_ptr<DeviceLifecycle> lifecycle_;  // after jobs_ and actuator_: goes before them

  ControlSocket socket_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<RasPipeline> pipeline_;  // before ingest_, which feeds it
  std::unique_ptr<LinkHealth> link_health_;  // decides in pipeline_'s batches: goes before it
  std::unique_ptr<RasIngest> ingest_;
  std::unique_ptr<FaultInjection> injection_;  // after ingest_: goes before it
  std::unique_ptr<DeviceHeartbeat> heartbeat_;  // reports through ingest_: goes before it
  // Decides through health_ and tells jobs_ and recovery_: goes before them.
  std::unique_ptr<CorruptionScreening> screening_;
  // Runs the driver's device queries; reads runtime_'s driver: goes before it.
  std::unique_ptr<DeviceProber> device_prober_;
  std::unique_ptr<ProbeWatchdog> probe_watchdog_;  // reads ingest_'s monitors and device_prober_
  // Outside processes on the devices; control_ (its attach connections) goes first.
  std::unique_ptr<ProcessTable> processes_;
  std::unique_ptr<Workloads> workloads_;
  std::unique_ptr<Watchers> watchers_;
  // The kubelet device plugins read the runtime's gates from gRPC threads.
  std::unique_ptr<KubeletPlugins> kubelet_plugins_;
  std::string kubelet_plugins_error_;
  std::unique_ptr<common::Timer> kubelet_plugins_retry_;  // while the plugins cannot start
  // Reads of stored history, off the loop; null where the second
  // connection could not be opened (they run on the loop then).
  std::unique_ptr<StoreReader> store_reader_;
  // Its commands hold references to it: ~Daemon drops control_ first.
  std::unique_ptr<ControlApi> control_api_;

  std::uint64_t config_generation_ = 1;
  // The state database was damaged at start: what was wrong, where it went.
  struct StateDamage {
    std::string problem;
    std::filesystem::path kept_as;
  };
  std::optional<StateDamage> state_damage_;
  // The saved device states or retired pages could not be read at start
  // (an I/O error on a database that opened): why.
  std::optional<std::string> state_unreadable_;
  nlohmann::json last_reload_;  // null until the first reload
};

}  // namespace rasd::daemon
