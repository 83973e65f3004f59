#include "daemon.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>

#include "backends.h"
#include "config_apply.h"
#include "rasd/common/default_paths.h"
#include "rasd/common/logging.h"
#include "rasd/common/version.h"

namespace rasd::daemon {

Result<std::unique_ptr<Daemon>> Daemon::Start(StartOptions options, Config config) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
  if (auto initialized = daemon->Initialize(std::move(config)); !initialized) {
    return Fail(initialized.error());
  }
  return daemon;
}

Daemon::Daemon(StartOptions options) : options_(std::move(options)) {}

Daemon::~Daemon() {
  // Nobody hears of a device's change past this point.
  health_subscriptions_.clear();
  metrics_.reset();  // no scrape may run past this point
  metrics_state_.reset();
  // The kubelet plugins stop serving first.
  kubelet_plugins_retry_.reset();
  kubelet_plugins_.reset();
  control_.reset();
  injection_.reset();
  screening_.reset();
  heartbeat_.reset();
  probe_watchdog_.reset();
  device_prober_.reset();  // leaves a query that does not return behind
  ingest_.reset();
  lifecycle_.reset();  // waits for a running self-test
  jobs_.reset();
  watchdog_timer_.reset();
  signals_.clear();
  if (!socket_.activated && !socket_.bound_path.empty()) ::unlink(socket_.bound_path.c_str());
}

Status Daemon::Initialize(Config config) {
  config_ = std::move(config);
  if (auto opened = OpenLoopAndHost(); !opened) return opened;
  if (auto opened = OpenStateAndDevices(); !opened) return opened;
  if (auto watched = WatchSignals(); !watched) return watched;
  jobs_ = std::make_unique<jobs::JobManager>(*runtime_, config_.policy.drain_deadline);
  // Cross-checks come from replica threads; screening judges on the loop.
  jobs_->SetCrossChecks(
      config_.screening.sample_one_in, kCollectiveCheckShare,
      [this](const std::string& job, const jobs::CrossCheck& check) {
        loop_->Post([this, job, check] {
          if (!screening_) return;
          if (check.job == jobs::CrossCheck::Job::kCollective) {
            screening_->ReportCrossCheck(
                check.device, "collective", check.agreed,
                {.kernel = fmt::format("collective job {} ({})", job, check.kernels),
                 .shape = fmt::format("step {}", check.step),
                 .detail = check.detail});
            return;
          }
          screening_->ReportCrossCheck(check.device, "inference", check.agreed,
                                       {.kernel = fmt::format("inference job {}", job),
                                        .shape = fmt::format("request {}", check.request),
                                        .detail = check.detail});
        });
      });
  jobs_->SetReviewListener([this](const std::string& job, const jobs::AnswerReview& review) {
    loop_->Post([this, job, review] { RecordAnswerReview(job, review); });
  });
  policy_.Reconfigure(config_.policy.engine);
  if (const auto boot = BootTime(*host_)) policy_.SetBootTime(*boot);
  RestorePageHistory();
  health_ = std::make_unique<DeviceHealth>(*loop_, *runtime_, *store_);
  // Before anything can admit work: an isolated device stays isolated.
  Status restored = health_->Restore();
  health_subscriptions_.push_back(
      health_->Subscribe([this](const DeviceStateChanged&) { jobs_->Reconsider(); }));
  node_fault_ = std::make_unique<NodeFault>(*store_, loop_->GetClock());
  node_fault_->Restore();
  actuator_ = std::make_unique<Actuator>(*host_, *store_, *runtime_, *health_, *node_fault_,
                                         ActuatorOptions(config_));
  health_->SetActionCounter([this](const std::string& action, const std::string& result) {
    actuator_->Count(action, result);
  });
  if (auto pages = actuator_->Restore(); !pages) {
    restored = Fail(ErrorCode::kIoError,
                    (restored ? "" : restored.error().message + "; ") + pages.error().message);
  }
  if (state_damage_) {
    health_->IsolateEveryDevice("the state database was damaged (kept as " +
                                    state_damage_->kept_as.filename().string() +
                                    "): isolated until an operator checks it",
                                "state-lost");
  } else if (!restored) {
    // As for a damaged database, the file kept in place (it passed its
    // check); undrain waits for the pages (SetReturnCheck).
    state_unreadable_ = restored.error().message;
    RASD_LOG_ERROR("{}; every device is isolated until an operator checks it (rasctl undrain)",
                   restored.error().message);
    health_->IsolateEveryDevice(restored.error().message + ": isolated until an operator checks it",
                                "state-unreadable");
  }
  StartScheduler();
  StartRas();
  if (auto started = StartControl(); !started) return started;
  // Once every observer of the pipeline is wired, before jobs start: the
  // records found at start are decided as any later one.
  if (auto started = ingest_->Start(); !started) return started;
  WatchProbes();
  StartJobsAndMetrics();
  StartKubeletPlugins();
  RASD_LOG_INFO("rasd {} started: {}, state {}, socket {}{}, host root {}", kVersion,
               DevicesPhrase(), state_dir_.string(),
               socket_.activated ? "(from systemd) " : "", socket_path_.string(),
               config_.host.root.string());
  return {};
}

Status Daemon::OpenLoopAndHost() {
  if (options_.loop != nullptr) {
    loop_ = options_.loop;
  } else {
    auto loop = common::CreateSdEventLoop(std::make_shared<common::SystemClock>());
    if (!loop) return Fail(loop.error());
    owned_loop_ = std::move(*loop);
    loop_ = owned_loop_.get();
  }
  started_monotonic_ = loop_->Now();
  started_wall_ = loop_->GetClock().Wall();
  const common::DefaultPaths defaults = common::ComputeDefaultPaths();
  state_dir_ = config_.daemon.state_dir.empty() ? defaults.state_dir : config_.daemon.state_dir;
  socket_path_ = config_.control.socket.empty() ? defaults.socket : config_.control.socket;

  struct stat root_stat {};
  if (::stat(config_.host.root.c_str(), &root_stat) != 0 || !S_ISDIR(root_stat.st_mode)) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("host root {} is not a directory", config_.host.root.string()));
  }
  host_ = std::make_unique<common::HostEnv>(config_.host.root, loop_->SharedClock());

  auto admin_gid = ResolveAdminGroup(config_.control.admin_group);
  if (!admin_gid) return Fail(admin_gid.error());
  authorizer_ = Authorizer{::geteuid(), *admin_gid, config_.control.admin_group};

  return {};
}

Status Daemon::OpenStateAndDevices() {
  auto store = ras::StateStore::Open(state_dir_, loop_->SharedClock());
  if (!store && store.error().code == ErrorCode::kCorruptData) {
    // Decision: run (the host still needs its RAS handling) on a fresh
    // database, keep the damaged one for examination, and fence every
    // device until an operator has looked: what it recorded as isolated is
    // unknown now, and must not come back healthy without a word.
    const std::string stamp = fmt::format(
        "{:%Y%m%dT%H%M%S}", std::chrono::floor<std::chrono::seconds>(loop_->GetClock().Wall()));
    auto kept = ras::StateStore::SetAsideDamaged(state_dir_, stamp);
    if (!kept) return Fail(kept.error());
    state_damage_ = StateDamage{store.error().message, *kept};
    RASD_LOG_ERROR("{}; kept as {}; starting on a fresh database with every device isolated until "
                  "an operator checks it (rasctl undrain)",
                  store.error().message, kept->string());
    store = ras::StateStore::Open(state_dir_, loop_->SharedClock());
  }
  if (!store) {
    return Fail(store.error().code,
                fmt::format("cannot use state directory: {}", store.error().message));
  }
  store_ = std::move(*store);
  if (options_.prepare_store) options_.prepare_store(*store_);

  auto driver = OpenBackends(config_, &missing_backends_);
  if (!driver) return Fail(driver.error());
  auto runtime = runtime::Runtime::Create(std::move(*driver));
  if (!runtime) return Fail(runtime.error());
  runtime_ = std::move(*runtime);
  if (config_.simulator.link_sysfs) {
    // Before the RDMA poller's first look, so that it finds the NICs at once.
    std::vector<drivers::DeviceProperties> devices;
    for (const auto& device : runtime_->Devices()) devices.push_back(device->Properties());
    auto tree = SimLinkTree::Create(*host_, devices);
    if (!tree) {
      RASD_LOG_WARN("simulator.link_sysfs: {}; inject link keeps the simulator's own report",
                    tree.error().message);
    } else {
      sim_links_ = std::move(*tree);
      RASD_LOG_INFO("simulator.link_sysfs: the simulated devices' RDMA NICs are under {}",
                    host_->Resolve("/sys/class/infiniband").string());
    }
  }

  return {};
}

void Daemon::StartScheduler() {
  if (config_.scheduler.kind != "slurm") return;
  SchedulerLink::Options link;
  link.node = config_.scheduler.node;
  if (link.node.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    link.node = name;
  }
  link.scontrol = config_.scheduler.scontrol.string();
  // sinfo sits beside scontrol (both from slurm-client).
  link.sinfo = (config_.scheduler.scontrol.parent_path() / "sinfo").string();
  link.environment = cluster::SlurmClient::EnvironmentFromCaller();
  link.max_drained_fraction = config_.scheduler.max_drained_fraction;
  link.guard_window = config_.scheduler.guard_window;
  link.drain_spread = cluster::kDrainSpread;
  link.clock = loop_->SharedClock();
  scheduler_ = std::make_unique<SchedulerLink>(link);
  actuator_->SetNodeDrainer([this](const std::string& reason) {
    std::string isolated;
    for (const auto& device : runtime_->Devices()) {
      if (device->Health() != runtime::HealthState::kIsolated) continue;
      if (!isolated.empty()) isolated += ",";
      isolated += std::to_string(device->Index());
    }
    scheduler_->Drain(isolated.empty() ? reason : reason + "; isolated accelerators " + isolated);
    return "asked slurm to drain node " + scheduler_->Node();
  });
  RASD_LOG_INFO("scheduler: slurm, node {}", scheduler_->Node());
}

void Daemon::RestorePageHistory() {
  // The page counters carry on from the errors stored before this start,
  // as far back as the page threshold's window reaches.
  const auto window = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      config_.policy.engine.ce_page.window);
  auto pages = store_->LoadPageErrors(loop_->GetClock().Wall() - window);
  if (!pages) {
    RASD_LOG_WARN("page thresholds start from zero: {}", pages.error().message);
    return;
  }
  if (!pages->empty())
    RASD_LOG_INFO("page thresholds: {} page(s) erred within the last {} s", pages->size(),
                  config_.policy.engine.ce_page.window.count());
  policy_.SetPageHistory(std::move(*pages));
}

void Daemon::StartRas() {
  lifecycle_ = std::make_unique<DeviceLifecycle>(*loop_, *runtime_, *health_, *node_fault_, *jobs_,
                                                 *store_, scheduler_.get(),
                                                 LifecycleOptions(config_, options_.self_test));
  lifecycle_->SetReturnCheck([this](int) { return actuator_->EnsurePagesRestored(); });
  pipeline_ = std::make_unique<RasPipeline>(*loop_, *runtime_, policy_, *actuator_, *health_,
                                            *store_, PipelineOptions(config_));
  pipeline_->SetFaultRules(ras::MergeFaultRules(config_.ras.fault_rules));
  if (const auto boot = BootTime(*host_)) pipeline_->SetBootTime(*boot);
  if (auto connection = store_->OpenCheckpointer()) {
    checkpointer_ = std::make_unique<StoreCheckpointer>(std::move(*connection));
    pipeline_->SetCheckpointer(checkpointer_.get());
  } else {
    RASD_LOG_WARN("checkpoints run on the loop: {}", connection.error().message);
  }
  metrics_state_ = std::make_unique<DaemonMetrics>(*loop_, *runtime_, *jobs_, *actuator_,
                                                   scheduler_.get(), *pipeline_);
  health_subscriptions_.push_back(
      health_->Subscribe([this](const DeviceStateChanged&) { metrics_state_->Refresh(); }));
  pipeline_->AddObserver([this](const HandledBatch& batch) { ObserveBatch(batch); });
  ingest_ = std::make_unique<RasIngest>(
      *loop_, *host_, *store_, *runtime_, config_.ras, [this](SourceBatch batch) {
        pipeline_->Handle(std::move(batch.events), std::move(batch.cursors),
                          std::move(batch.links));
      });
  ingest_->SetReadDeadline(config_.probe.deadline);
  StartRecovery();
  injection_ = std::make_unique<FaultInjection>(*runtime_, *host_, *ingest_, config_.inject);
  injection_->SetSimLinkTree(sim_links_.get());
  injection_->SetJobFaultTarget(
      [this](std::string_view job, int device) { return jobs_->MemoryFaultTarget(job, device); });
  heartbeat_ = std::make_unique<DeviceHeartbeat>(*loop_, *runtime_, HeartbeatOptions(config_));
  heartbeat_->Start();
  metrics_state_->SetHeartbeat(heartbeat_.get());
  screening_ =
      std::make_unique<CorruptionScreening>(*loop_, *runtime_, *health_, ScreeningOptions(config_));
  screening_->SetVerdictListener([this](const CorruptionScreening::Verdict& verdict) {
    // The jobs first: a collective that saw the isolation before it heard
    // of the corruption would keep what it had just computed there.
    for (const auto& job : jobs_->DistrustDevice(verdict.device, verdict.distrust_for))
      RASD_LOG_WARN("job {}: rolls back past device {}'s silent corruption", job, verdict.device);
    recovery_->OnVerdict(
        verdict.device,
        {.action = ras::RecoveryAction::kHardwareInspection,
         .why = "silent data corruption: `rasctl undrain` runs the extended self-test (screening "
                "rounds); replace the device if it fails again"});
    std::string spoiled;
    for (const auto& line : jobs_->AnsweredSinceLastCheck(verdict.device)) {
      RASD_LOG_WARN("device {}: possibly wrong answers: {}", verdict.device, line);
      spoiled += (spoiled.empty() ? "" : "; ") + line;
    }
    // Which of them were wrong, exactly: each runs again on another
    // replica (a review-answers action follows with the outcome).
    if (const auto rerun = jobs_->ReviewAnswers(verdict.device, verdict.distrust_for); rerun > 0)
      spoiled += fmt::format("; {} answer(s) being run again on other replicas", rerun);
    return spoiled;
  });
  screening_->Start();
  metrics_state_->SetScreening(screening_.get());
}

void Daemon::RecordAnswerReview(const std::string& job, const jobs::AnswerReview& review) {
  std::string wrong;
  constexpr std::size_t kListed = 256;  // the count says how many in all
  for (std::size_t i = 0; i < review.wrong.size() && i < kListed; ++i)
    wrong += fmt::format("{}{}", i == 0 ? "" : ", ", review.wrong[i]);
  if (review.wrong.size() > kListed) wrong += ", ...";
  ras::ActionRecord record;
  record.time = loop_->GetClock().Wall();
  record.action = "review-answers";
  record.device = review.device;
  record.rule = "screening";
  record.reason = "silent data corruption";
  record.result = review.unreviewed == 0 ? "ok" : "failed";
  record.detail = fmt::format(
      "inference job {}: {} answer(s) device {} gave since its corruption may have begun run "
      "again on other replicas: {} wrong{}{}; {} answered again to callers who asked{}",
      job, review.reviewed, review.device, review.wrong.size(), wrong.empty() ? "" : " (requests ",
      wrong.empty() ? "" : wrong + ")", review.corrected,
      review.unreviewed == 0 ? ""
                             : fmt::format("; at most {} could not be run again (no replica, or "
                                           "older than the answers kept)",
                                           review.unreviewed));
  RASD_LOG_WARN("device {}: {}", review.device, record.detail);
  if (auto stored = store_->RecordAction(record); !stored)
    RASD_LOG_ERROR("cannot store the answers' review: {}", stored.error().message);
}

void Daemon::WatchProbes() {
  drivers::DeviceQueries* queries = runtime_->Driver().Queries();
  if (!ingest_->NvmlActive() && queries == nullptr && !runtime_->Driver().MonitorsDevices()) return;
  probe_watchdog_ = std::make_unique<ProbeWatchdog>(
      *loop_, *health_,
      ProbeWatchdog::Options{.deadline = config_.probe.deadline,
                             .isolate_after = config_.probe.isolate_after});
  if (ingest_->NvmlActive()) {
    probe_watchdog_->Watch(
        "NVML", [this] { return ingest_->NvmlRunningCalls(); },
        [this](std::string_view name) { return ingest_->NvmlDeviceOf(name); });
  }
  if (runtime_->Driver().MonitorsDevices()) {
    probe_watchdog_->Watch(
        std::string(runtime_->DriverName()), [this] { return runtime_->Driver().RunningCalls(); },
        [this](std::string_view pci_bdf) {
          return RasPipeline::DeviceAtPciAddress(*runtime_, pci_bdf);
        });
  }
  metrics_state_->SetProbeWatchdog(probe_watchdog_.get());
  if (queries == nullptr) return;
  std::vector<DeviceProber::Device> probed;
  for (const auto& device : runtime_->Devices()) {
    const auto& properties = device->Properties();
    probed.push_back({.index = properties.index,
                      .name = properties.pci_bdf.empty()
                                  ? fmt::format("device {}", properties.index)
                                  : properties.pci_bdf});
  }
  device_prober_ = std::make_unique<DeviceProber>(
      *queries, std::move(probed), DeviceProber::Options{.interval = config_.probe.interval});
  probe_watchdog_->Watch(
      std::string(runtime_->DriverName()), [this] { return device_prober_->RunningCalls(); },
      [this](std::string_view name) { return device_prober_->DeviceNamed(name); });
}

Status Daemon::StartControl() {
  auto socket = OpenControlSocket(socket_path_, config_.control.socket_mode);
  if (!socket)
    return Fail(socket.error().code, fmt::format("control socket: {}", socket.error().message));
  socket_ = std::move(*socket);
  auto listen_fd = common::UniqueFd(::dup(socket_.fd.Get()));
  if (!listen_fd) return Fail(ErrnoError("dup control socket", errno));
  processes_ = SystemProcessTable();
  workloads_ = std::make_unique<Workloads>(
      *loop_, *runtime_, *processes_, store_.get(), WorkloadOptions(config_),
      [this](int device) { return health_->StatusOf(device).reason; });
  watchers_ = std::make_unique<Watchers>(
      *loop_, *runtime_, [this](int device) { return health_->StatusOf(device).reason; });
  health_subscriptions_.push_back(health_->Subscribe([this](const DeviceStateChanged& change) {
    workloads_->OnDeviceStateChanged(change);
    watchers_->OnDeviceStateChanged(change);
  }));
  // After the actuator restored the device states: a workload re-adopted on
  // a device isolated meanwhile is drained.
  workloads_->Readopt();
  // A device an attached process uses is watched as closely as one a job
  // of rasd's uses (from the next beat: at most the idle period).
  heartbeat_->SetBusyProbe([this](int device) { return !workloads_->OnDevice(device).empty(); });
  if (auto connection = store_->OpenReader()) {
    store_reader_ = std::make_unique<StoreReader>(*loop_, std::move(*connection));
  } else {
    RASD_LOG_WARN("history reads run on the loop: {}", connection.error().message);
  }
  control_api_ = std::make_unique<ControlApi>(ControlApi::Parts{
      .loop = *loop_,
      .runtime = *runtime_,
      .store = *store_,
      .jobs = *jobs_,
      .node = *node_fault_,
      .health = *health_,
      .lifecycle = *lifecycle_,
      .injection = *injection_,
      .workloads = *workloads_,
      .watchers = *watchers_,
      .recovery = *recovery_,
      .is_admin = [this](const PeerCredentials& peer) { return authorizer_.MayChangeState(peer); },
      .status = [this] { return StatusReport(); },
      .reload = [this] { return Reload(); },
      .rdma_ports =
          [this](int device) {
            nlohmann::json ports = nlohmann::json::array();
            for (const auto& port : ingest_->RdmaPortsOf(device)) {
              ports.push_back({{"device", port.device}, {"port", port.port}, {"how", port.how}});
            }
            return ports;
          },
      .link_clears = [this](int device) { return link_health_->Clears(device); },
      .missing_backends = missing_backends_,
      .scheduler = [this] { return SchedulerView(); },
      .reader = store_reader_.get(),
      .screening = screening_.get()});
  metrics_state_->SetWorkloads(workloads_.get());
  actuator_->SetConsumerKiller(
      [this](std::int64_t pid, int device, const std::string& reason) -> Result<std::string> {
        if (!workloads_) return Fail(ErrorCode::kUnavailable, "rasd is stopping");
        return workloads_->KillConsumer(pid, device, reason);
      });
  actuator_->SetProcessLister([this](int device) -> Result<std::vector<std::int64_t>> {
    auto found = runtime_->GetDevice(device);
    if (!found) return Fail(found.error());
    const std::string& pci_bdf = (*found)->Properties().pci_bdf;
    if (pci_bdf.empty()) return Fail(ErrorCode::kNotFound, "the device has no PCI address");
    return ingest_->ComputeProcesses(pci_bdf);
  });
  auto server = ControlServer::Create(*loop_, std::move(listen_fd), ServerOptions(config_),
                                      authorizer_, control_api_->Commands());
  if (!server) return Fail(server.error());
  control_ = std::move(*server);

  return {};
}

void Daemon::StartRecovery() {
  recovery_ = std::make_unique<DeviceRecovery>(*loop_, *runtime_, store_.get(), ingest_->BootId());
  recovery_->SetTable(ras::RecoveryTable::WithOverrides(config_.ras.recovery));
  recovery_->Load();
  pipeline_->SetDecisionObserver(
      [this](const ras::RasEvent& event, const std::vector<ras::Action>& actions) {
        const bool sticks = std::any_of(actions.begin(), actions.end(), [](const auto& action) {
          return !action.withheld && (action.kind == ras::ActionKind::kDegradeDevice ||
                                      action.kind == ras::ActionKind::kDrainDevice ||
                                      action.kind == ras::ActionKind::kIsolateDevice);
        });
        (void)recovery_->OnEvent(event, sticks);
      });
  actuator_->SetSuggester([this](const ras::RasEvent& event) {
    return std::string(ras::RecoveryActionName(recovery_->SuggestFor(event).action));
  });
  link_health_ = std::make_unique<LinkHealth>(*loop_, *runtime_, *health_, *jobs_, *store_,
                                              *pipeline_, LinkHealthOptions(config_));
  link_health_->Load();
  link_health_->SetSettle(config_.policy.link_settle);
  if (const auto boot = BootTime(*host_)) link_health_->SettleFrom(*boot);
  // A record that names a process (a SIGBUS from a memory error, an Xid's
  // pid=) says which attached workload it was: the kernel killed it, and
  // its owner reads why in the event.
  pipeline_->SetAnnotator([this](ras::RasEvent& event) {
    if (!event.pid || !workloads_) return;
    if (auto who = workloads_->DescribePid(*event.pid)) event.summary += " [" + *who + "]";
  });
  pipeline_->SetFabricHealth(std::make_unique<FabricHealth>(
      *loop_, *host_, *runtime_, config_.policy.nic_fault_hold,
      [this](ras::LinkReport report) { pipeline_->Handle({}, {}, {std::move(report)}); }));
  lifecycle_->SetRecoveredObserver([this](int device, ReturnedBy how) {
    recovery_->OnRecovered(device, how);
    pipeline_->OnDeviceReturned(device);
    if (how == ReturnedBy::kUndrain) link_health_->OnOperatorReturned(device);
  });
  lifecycle_->SetRecoveryAdvisor([this](int device) { return recovery_->For(device).action; });
  metrics_state_->SetRecovery(recovery_.get());
  metrics_state_->SetLinkHealth(link_health_.get());
}

namespace {
constexpr std::chrono::seconds kKubeletPluginRetry{10};
}  // namespace

void Daemon::StartKubeletPlugins() {
  if (!config_.kubernetes.device_plugin) return;
  KubeletPlugins::Options options;
  options.plugin_dir = config_.host.root / "var/lib/kubelet/device-plugins";
  options.resource_by_vendor = {{"nvidia", config_.kubernetes.gpu_resource},
                                {"huawei", config_.kubernetes.npu_resource},
                                {"sim", config_.kubernetes.sim_resource}};
  auto plugins = KubeletPlugins::Start(*loop_, *runtime_, options);
  if (!plugins) {
    // rasd may start before the kubelet has made its directory: try again.
    if (kubelet_plugins_error_ != plugins.error().message) {
      RASD_LOG_ERROR("{}; rasd serves on without the kubelet device plugin and tries again every "
                     "{} s",
                     plugins.error().message, kKubeletPluginRetry.count());
    }
    kubelet_plugins_error_ = plugins.error().message;
    if (!kubelet_plugins_retry_)
      kubelet_plugins_retry_ = loop_->CreateTimer([this] { StartKubeletPlugins(); });
    kubelet_plugins_retry_->ArmAfter(kKubeletPluginRetry);
    return;
  }
  if (!kubelet_plugins_error_.empty()) RASD_LOG_INFO("kubernetes: the device plugin serves now");
  kubelet_plugins_error_.clear();
  kubelet_plugins_ = std::move(*plugins);
  // Every state change reaches the kubelet at once (the plugins' own poll
  // is the backstop).
  health_subscriptions_.push_back(health_->Subscribe([this](const DeviceStateChanged&) {
    if (kubelet_plugins_) kubelet_plugins_->DevicesChanged();
  }));
}

void Daemon::StartJobsAndMetrics() {
  for (const auto& spec : config_.jobs) {
    if (auto started = jobs_->Start(spec); !started) {
      // A job that cannot start does not keep the daemon down: it says why.
      RASD_LOG_ERROR("job '{}' not started: {}", spec.name, started.error().message);
    } else {
      RASD_LOG_INFO("job '{}' ({}) started", spec.name, jobs::JobKindName(spec.kind));
    }
  }
  metrics_state_->SetIngest(ingest_.get());
  metrics_state_->Refresh();
  if (!config_.metrics.listen.empty()) {
    auto exposer = exporters::MetricsServer::Start(config_.metrics.listen,
                                                   [this] { return metrics_state_->Now(); });
    if (!exposer) {
      // RAS handling matters more than its metrics: say so and go on.
      metrics_error_ = exposer.error().message;
      RASD_LOG_ERROR("{}; running without a metrics endpoint", metrics_error_);
    } else {
      metrics_ = std::move(*exposer);
      RASD_LOG_INFO("metrics: http://{}/metrics (port {})", config_.metrics.listen,
                   metrics_->Port());
    }
  }
}

void Daemon::ObserveBatch(const HandledBatch& batch) {
  // A consumer's streams may have been aborted: the jobs look again.
  jobs_->Reconsider();
  if (watchers_ && batch.stored) watchers_->OnStored(batch.event_ids);
  metrics_state_->ObserveBatch(batch);
  // A driver (re)loaded: its GPUs' links train again.
  for (const auto& event : batch.events)
    if (event.origin == "nvidia_driver" && !event.historical) link_health_->SettleFrom(event.time);
}

}  // namespace rasd::daemon
