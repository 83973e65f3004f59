#include "daemon.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <fstream>

#include "backends.h"
#include "rasd/common/default_paths.h"
#include "rasd/common/logging.h"
#include "rasd/common/version.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/self_test.h"

namespace rasd::daemon {
namespace {

// Resolves the admin group by name or number. An unknown group is an error:
// an operator who names one expects it to take effect.
Result<std::optional<gid_t>> ResolveAdminGroup(const std::string& name) {
  if (name.empty()) return std::optional<gid_t>();
  unsigned gid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), gid);
  if (ec == std::errc() && end == name.data() + name.size()) return std::optional<gid_t>(gid);
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16384);
  const int rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr) {
    // Not fatal: the daemon must run (and protect the hardware) before an
    // operator creates the group; until then only root may change state.
    spdlog::warn(
        "control.admin_group '{}' is not a group on this host: only root and rasd's own "
        "user may change state",
        name);
    return std::optional<gid_t>();
  }
  return std::optional<gid_t>(found->gr_gid);
}

ControlServer::Options ServerOptions(const Config& config) {
  ControlServer::Options options;
  options.client_timeout = config.control.client_timeout;
  options.max_clients = config.control.max_clients;
  return options;
}

std::string Iso8601(std::chrono::system_clock::time_point time) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", std::chrono::floor<std::chrono::seconds>(time));
}

Actuator::Options ActuatorOptions(const Config& config) {
  return {.host_page_offline = config.policy.host_page_offline,
          .hook_timeout = config.policy.hook_timeout};
}

RasPipeline::Options PipelineOptions(const Config& config) {
  return {.storm_threshold = config.ras.storm_threshold};
}

DeviceLifecycle::Options LifecycleOptions(const Config& config) {
  DeviceLifecycle::Options options;
  options.drain_deadline = config.policy.drain_deadline;
  options.auto_recover = config.policy.auto_recover;
  options.auto_recover_delay = config.policy.auto_recover_delay;
  options.auto_recover_window = config.policy.auto_recover_window;
  options.resume_on_undrain = config.scheduler.resume_on_undrain;
  return options;
}

nlohmann::json IngestStatus(const RasIngest::Stats& stats, const RasPipeline::Stats& pipeline) {
  return {{"kmsg_active", stats.kmsg_active},
          {"kmsg_records", stats.kmsg_records},
          {"kmsg_lost", stats.kmsg_lost},
          {"tracefs_active", stats.tracefs_active},
          {"tracefs_pages", stats.tracefs_pages},
          {"tracefs_events", stats.tracefs_events},
          {"nvml_gpus", stats.nvml_gpus},
          {"nvml_reports", stats.nvml_reports},
          {"events_ingested", pipeline.events},
          {"store_failures", pipeline.store_failures},
          {"edac_controllers", stats.edac_controllers},
          {"coalesced", pipeline.coalesced},
          {"pruned", stats.pruned}};
}

// Keys that the running daemon cannot change in place; a reload that changes
// them says so and the new value waits for a restart.
std::vector<std::string> RestartRequiredChanges(const Config& running, const Config& loaded) {
  std::vector<std::string> keys;
  auto check = [&keys](bool changed, const char* key) {
    if (changed) keys.emplace_back(key);
  };
  check(running.host.root != loaded.host.root, "host.root");
  check(running.daemon.state_dir != loaded.daemon.state_dir, "daemon.state_dir");
  check(running.control.socket != loaded.control.socket, "control.socket");
  check(running.control.socket_mode != loaded.control.socket_mode, "control.socket_mode");
  check(running.metrics.listen != loaded.metrics.listen, "metrics.listen");
  check(running.runtime != loaded.runtime, "runtime");
  check(running.simulator.devices != loaded.simulator.devices, "simulator.devices");
  check(running.simulator.memory_mib != loaded.simulator.memory_mib, "simulator.memory_mib");
  check(running.jobs != loaded.jobs, "jobs");
  Config::Ras running_ras = running.ras, loaded_ras = loaded.ras;
  running_ras.codes = loaded_ras.codes = {};  // the code tables apply on reload
  check(running_ras != loaded_ras, "ras");
  return keys;
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Start(StartOptions options, Config config) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(options)));
  if (auto initialized = daemon->Initialize(std::move(config)); !initialized) {
    return Fail(initialized.error());
  }
  return daemon;
}

Daemon::Daemon(StartOptions options) : options_(std::move(options)) {}

Daemon::~Daemon() {
  metrics_.reset();  // no scrape may run past this point
  metrics_timer_.reset();
  control_.reset();
  injection_.reset();
  ingest_.reset();
  jobs_.reset();
  lifecycle_.reset();
  watchdog_timer_.reset();
  signals_.clear();
  if (!socket_.activated && !socket_.bound_path.empty()) ::unlink(socket_.bound_path.c_str());
}

Status Daemon::Initialize(Config config) {
  config_ = std::move(config);
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

  auto store = ras::StateStore::Open(state_dir_);
  if (!store) {
    return Fail(store.error().code,
                fmt::format("cannot use state directory: {}", store.error().message));
  }
  store_ = std::move(*store);

  auto driver = OpenBackends(config_);
  if (!driver) return Fail(driver.error());
  auto runtime = runtime::Runtime::Create(std::move(*driver));
  if (!runtime) return Fail(runtime.error());
  runtime_ = std::move(*runtime);

  auto add_signal = [this](int signal, std::function<void()> handler) -> Status {
    auto watch = loop_->WatchSignal(signal, std::move(handler));
    if (!watch) return Fail(watch.error());
    signals_.push_back(std::move(*watch));
    return {};
  };
  for (int signal : {SIGTERM, SIGINT}) {
    if (auto added = add_signal(signal,
                                [this, signal] {
                                  spdlog::info("received {}; stopping", ::strsignal(signal));
                                  loop_->Exit(0);
                                });
        !added)
      return added;
  }
  // Reload logs its own outcome.
  if (auto added = add_signal(SIGHUP, [this] { (void)Reload(); }); !added) return added;

  if (sd_watchdog_enabled(/*unset_environment=*/0, &watchdog_usec_) > 0 && watchdog_usec_ > 0) {
    watchdog_timer_ = loop_->CreateTimer([this] { OnWatchdog(); });
    watchdog_timer_->ArmAfter(std::chrono::microseconds(watchdog_usec_ / 2));
  }

  jobs_ = std::make_unique<jobs::JobManager>(*runtime_, config_.policy.drain_deadline);
  policy_.Reconfigure(config_.policy.engine);
  actuator_ = std::make_unique<Actuator>(*host_, *store_, *runtime_, ActuatorOptions(config_));
  // Before anything can admit work: an isolated device stays isolated.
  actuator_->Restore();
  if (config_.scheduler.kind == "slurm") {
    SchedulerLink::Options link;
    link.node = config_.scheduler.node;
    if (link.node.empty()) {
      char name[256] = {};
      ::gethostname(name, sizeof name - 1);
      link.node = name;
    }
    link.scontrol = config_.scheduler.scontrol.string();
    if (const char* conf = std::getenv("SLURM_CONF"))
      link.environment.push_back(std::string("SLURM_CONF=") + conf);
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
    spdlog::info("scheduler: slurm, node {}", scheduler_->Node());
  }

  lifecycle_ = std::make_unique<DeviceLifecycle>(*loop_, *runtime_, *actuator_, *jobs_, *store_,
                                                 scheduler_.get(), LifecycleOptions(config_));
  pipeline_ = std::make_unique<RasPipeline>(*loop_, *runtime_, policy_, *actuator_, *store_,
                                            PipelineOptions(config_));
  pipeline_->AddObserver([this](const HandledBatch& batch) { ObserveBatch(batch); });
  auto ingest = RasIngest::Create(*loop_, *host_, *store_, *runtime_, config_.ras,
                                  [this](std::vector<ras::RasEvent> events,
                                         std::vector<ras::SourceCursor> cursors) {
                                    pipeline_->Handle(std::move(events), std::move(cursors));
                                  });
  if (!ingest) return Fail(ingest.error());
  ingest_ = std::move(*ingest);
  injection_ = std::make_unique<FaultInjection>(*runtime_, *host_, *ingest_, config_.inject);

  auto socket = OpenControlSocket(socket_path_, config_.control.socket_mode);
  if (!socket)
    return Fail(socket.error().code, fmt::format("control socket: {}", socket.error().message));
  socket_ = std::move(*socket);
  auto listen_fd = common::UniqueFd(::dup(socket_.fd.Get()));
  if (!listen_fd) return Fail(ErrnoError("dup control socket", errno));
  auto server = ControlServer::Create(*loop_, std::move(listen_fd), ServerOptions(config_),
                                      authorizer_, Commands());
  if (!server) return Fail(server.error());
  control_ = std::move(*server);

  for (const auto& spec : config_.jobs) {
    if (auto started = jobs_->Start(spec); !started) {
      // A job that cannot start does not keep the daemon down: it says why.
      spdlog::error("job '{}' not started: {}", spec.name, started.error().message);
    } else {
      spdlog::info("job '{}' ({}) started", spec.name, jobs::JobKindName(spec.kind));
    }
  }
  // Refreshed after each batch and state change; the timer runs only while
  // a drain is being timed, so an idle daemon does not wake for metrics.
  metrics_timer_ = loop_->CreateTimer([this] { RefreshMetrics(); });
  RefreshMetrics();
  if (!config_.metrics.listen.empty()) {
    auto exposer =
        exporters::MetricsServer::Start(config_.metrics.listen, [this] { return MetricsNow(); });
    if (!exposer) {
      // RAS handling matters more than its metrics: say so and go on.
      metrics_error_ = exposer.error().message;
      spdlog::error("{}; running without a metrics endpoint", metrics_error_);
    } else {
      metrics_ = std::move(*exposer);
      spdlog::info("metrics: http://{}/metrics (port {})", config_.metrics.listen,
                   metrics_->Port());
    }
  }
  spdlog::info("rasd {} started: {} {} device(s), state {}, socket {}{}, host root {}", kVersion,
               runtime_->DeviceCount(), runtime_->DriverName(), state_dir_.string(),
               socket_.activated ? "(from systemd) " : "", socket_path_.string(),
               config_.host.root.string());
  return {};
}

int Daemon::Run() {
  Notify("READY=1");
  NotifyStatus();
  const int rc = loop_->Run();
  Notify("STOPPING=1\nSTATUS=stopping");
  if (rc < 0) {
    spdlog::error("event loop failed: {}", std::strerror(-rc));
    return 1;
  }
  spdlog::info("rasd stopped");
  return 0;
}

void Daemon::Notify(const std::string& message) {
  // No NOTIFY_SOCKET (not under systemd) is a no-op, not an error.
  if (int rc = sd_notify(0, message.c_str()); rc < 0) {
    spdlog::debug("sd_notify failed: {}", std::strerror(-rc));
  }
}

void Daemon::NotifyStatus() {
  Notify(fmt::format("STATUS=serving {} {} device(s); control socket {}", runtime_->DeviceCount(),
                     runtime_->DriverName(), socket_path_.string()));
}

void Daemon::OnWatchdog() {
  // Sent from the loop itself: a wedged loop stops the pings and systemd
  // restarts us, which is the point.
  Notify("WATCHDOG=1");
  watchdog_timer_->ArmAfter(std::chrono::microseconds(watchdog_usec_ / 2));
}

Result<nlohmann::json> Daemon::Reload() {
  Notify("RELOADING=1\nSTATUS=reloading configuration");
  ConfigParseResult loaded;
  if (options_.config_path) {
    loaded = LoadConfigFile(*options_.config_path);
  }
  std::string failure;
  std::optional<gid_t> admin_gid;
  if (loaded.ok()) {
    options_.overrides.ApplyTo(loaded.config);
    auto resolved = ResolveAdminGroup(loaded.config.control.admin_group);
    if (resolved) {
      admin_gid = *resolved;
    } else {
      failure = resolved.error().message;
    }
  } else {
    for (const auto& problem : loaded.problems) {
      if (!failure.empty()) failure += '\n';
      failure += problem.ToString();
    }
  }
  const std::string when = Iso8601(loop_->GetClock().Wall());
  if (!failure.empty()) {
    for (const auto& problem : loaded.problems) spdlog::error("reload: {}", problem.ToString());
    if (loaded.problems.empty()) spdlog::error("reload: {}", failure);
    spdlog::error("reload rejected; keeping configuration generation {}", config_generation_);
    std::vector<std::string> errors;
    for (const auto& problem : loaded.problems) errors.push_back(problem.ToString());
    if (errors.empty()) errors.push_back(failure);
    last_reload_ = {{"time", when}, {"ok", false}, {"errors", errors}};
    Notify("READY=1");
    NotifyStatus();
    return Fail(ErrorCode::kInvalidArgument, "configuration rejected, old one kept:\n" + failure);
  }

  const auto restart_required = RestartRequiredChanges(config_, loaded.config);
  for (const auto& key : restart_required) {
    spdlog::warn("reload: {} changed; it takes effect when rasd restarts", key);
  }
  // Keys that need a restart keep their running values, so that status tells
  // the truth about what is in force.
  Config applied = config_;
  applied.daemon.log_level = loaded.config.daemon.log_level;
  applied.control.admin_group = loaded.config.control.admin_group;
  applied.control.client_timeout = loaded.config.control.client_timeout;
  applied.control.max_clients = loaded.config.control.max_clients;
  applied.ras.codes = loaded.config.ras.codes;
  applied.policy = loaded.config.policy;
  applied.inject = loaded.config.inject;
  config_ = applied;
  common::SetLogLevel(config_.daemon.log_level);
  authorizer_ = Authorizer{::geteuid(), admin_gid, config_.control.admin_group};
  control_->Reconfigure(ServerOptions(config_), authorizer_);
  ingest_->SetCodeTable(config_.ras.codes);
  policy_.Reconfigure(config_.policy.engine);  // keeps the counters of unchanged rules
  actuator_->SetOptions(ActuatorOptions(config_));
  pipeline_->SetOptions(PipelineOptions(config_));
  injection_->SetOptions(config_.inject);
  lifecycle_->SetOptions(LifecycleOptions(config_));
  ++config_generation_;
  spdlog::info("configuration reloaded (generation {})", config_generation_);
  last_reload_ = {{"time", when}, {"ok", true}, {"restart_required", restart_required}};
  Notify("READY=1");
  NotifyStatus();
  return nlohmann::json{{"generation", config_generation_}, {"restart_required", restart_required}};
}

std::map<std::string, Command> Daemon::Commands() {
  std::map<std::string, Command> commands;
  commands["ping"] = {false, [](const auto&, const auto&) -> Result<nlohmann::json> {
                        return nlohmann::json{{"pong", true}};
                      }};
  commands["status"] = {false, [this](const auto&, const auto&) { return StatusReport(); }};
  commands["reload"] = {true, [this](const auto&, const auto&) { return Reload(); }};
  commands["events"] = {
      false, [this](const auto& request, const auto&) { return EventsReport(request.args); }};
  commands["summary"] = {false, [this](const auto&, const auto&) { return SummaryReport(); }};
  commands["devices"] = {
      false, [this](const auto& request, const auto&) { return DevicesReport(request.args); }};
  commands["actions"] = {
      false, [this](const auto& request, const auto&) { return ActionsReport(request.args); }};
  commands["jobs"] = {false, [this](const auto&, const auto&) { return JobsReport(); }};
  commands["inject"] = {true, [this](const auto& request, const auto&) {
                          return injection_->Inject(request.args);
                        }};
  // Work on the devices: admin only, like every command that uses them.
  commands["infer"] = {true, nullptr, [this](const auto& request, const auto&, AsyncReply reply) {
                         Infer(request.args, std::move(reply));
                       }};
  commands["job-start"] = {
      true, [this](const auto& request, const auto&) { return StartJob(request.args); }};
  commands["job-stop"] = {
      true, [this](const auto& request, const auto&) { return StopJob(request.args); }};
  commands["retired"] = {
      false, [this](const auto& request, const auto&) { return RetiredReport(request.args); }};
  for (const char* name : {"isolate", "drain", "undrain"}) {
    commands[name] = {true, nullptr,
                      [this, name](const auto& request, const auto&, AsyncReply reply) {
                        ChangeDeviceState(name, request.args, std::move(reply));
                      }};
  }
  return commands;
}

namespace {

nlohmann::json EventJson(const ras::StoredEvent& stored) {
  const ras::RasEvent& event = stored.event;
  auto optional = [](const auto& value) -> nlohmann::json {
    if (!value) return nullptr;
    return *value;
  };
  return {
      {"id", stored.id},
      {"time", Iso8601(event.time)},
      {"time_ns",
       std::chrono::duration_cast<std::chrono::nanoseconds>(event.time.time_since_epoch()).count()},
      {"source", event.source},
      {"origin", event.origin},
      {"severity", std::string(ras::SeverityName(event.severity))},
      {"device", optional(event.device)},
      {"mc", optional(event.mc)},
      {"pci_bdf", optional(event.pci_bdf)},
      {"address", optional(event.address)},
      {"vendor_code", optional(event.vendor_code)},
      {"count", event.count},
      {"historical", event.historical},
      {"summary", event.summary},
  };
}

}  // namespace

Result<nlohmann::json> Daemon::EventsReport(const nlohmann::json& args) {
  ras::EventQuery query;
  query.limit = 100;
  for (const auto& [key, value] : args.items()) {
    if (key == "since_seconds") {
      if (!value.is_number() || value.get<double>() < 0) {
        return Fail(ErrorCode::kInvalidArgument, "since_seconds must be a number of seconds >= 0");
      }
      query.since =
          loop_->GetClock().Wall() - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               std::chrono::duration<double>(value.get<double>()));
    } else if (key == "severity") {
      const auto severity =
          value.is_string() ? ras::ParseSeverity(value.get<std::string>()) : std::nullopt;
      if (!severity)
        return Fail(ErrorCode::kInvalidArgument,
                    "severity must be one of CE, UCNA, SRAO, SRAR, UCE, FATAL, INFO");
      query.severity = severity;
    } else if (key == "device") {
      if (!value.is_number_integer())
        return Fail(ErrorCode::kInvalidArgument, "device must be an integer");
      query.device = value.get<int>();
    } else if (key == "limit") {
      if (!value.is_number_integer() || value.get<long long>() < 1 ||
          value.get<long long>() > 10000) {
        return Fail(ErrorCode::kInvalidArgument, "limit must be an integer in 1..10000");
      }
      query.limit = value.get<std::size_t>();
    } else if (key == "after_id") {
      if (!value.is_number_integer())
        return Fail(ErrorCode::kInvalidArgument, "after_id must be an integer");
      query.after_id = value.get<std::int64_t>();
    } else {
      return Fail(ErrorCode::kInvalidArgument,
                  "unknown argument '" + key +
                      "' (known: since_seconds, severity, device, limit, after_id)");
    }
  }
  auto events = store_->QueryEvents(query);
  if (!events) return Fail(events.error());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& stored : *events) list.push_back(EventJson(stored));
  return nlohmann::json{{"events", std::move(list)}};
}

Result<nlohmann::json> Daemon::SummaryReport() {
  auto rows = store_->Summarize();
  if (!rows) return Fail(rows.error());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& row : *rows) {
    list.push_back({{"origin", row.origin},
                    {"severity", std::string(ras::SeverityName(row.severity))},
                    {"events", row.events},
                    {"errors", row.errors},
                    {"last", Iso8601(row.last)}});
  }
  return nlohmann::json{{"rows", std::move(list)}};
}

Result<nlohmann::json> Daemon::StatusReport() {
  auto counts = store_->CountEventsBySeverity();
  if (!counts) return Fail(counts.error());
  nlohmann::json by_severity = nlohmann::json::object();
  std::uint64_t total = 0;
  for (const auto& [severity, count] : *counts) {
    by_severity[std::string(ras::SeverityName(severity))] = count;
    total += count;
  }
  nlohmann::json by_health = nlohmann::json::object();
  for (auto state : {runtime::HealthState::kHealthy, runtime::HealthState::kDegraded,
                     runtime::HealthState::kDraining, runtime::HealthState::kIsolated}) {
    by_health[std::string(runtime::HealthStateName(state))] = 0;
  }
  nlohmann::json device_list = nlohmann::json::array();
  for (const auto& device : runtime_->Devices()) {
    const std::string health(runtime::HealthStateName(device->Health()));
    by_health[health] = by_health[health].get<int>() + 1;
    const auto& properties = device->Properties();
    nlohmann::json entry = {{"index", properties.index}, {"name", properties.name},
                            {"uuid", properties.uuid},   {"pci_bdf", properties.pci_bdf},
                            {"health", health},          {"memory_bytes", properties.memory_bytes}};
    if (auto pool = runtime_->Pool(properties.index)) {
      const auto stats = (*pool)->Stats();
      entry["pool"] = {{"reserved_bytes", stats.reserved_bytes},
                       {"allocated_bytes", stats.allocated_bytes},
                       {"retired_pages", stats.retired_pages}};
    }
    device_list.push_back(std::move(entry));
  }
  const double uptime =
      std::chrono::duration<double>(loop_->Now() - started_monotonic_).count();
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
       {{"path", store_->DatabasePath().string()}, {"schema_version", store_->SchemaVersion()}}},
      {"devices",
       {{"driver", std::string(runtime_->DriverName())},
        {"count", runtime_->DeviceCount()},
        {"by_health", std::move(by_health)},
        {"list", std::move(device_list)}}},
      {"jobs", {{"count", jobs_->Count()}}},
      {"events", {{"total", total}, {"by_severity", std::move(by_severity)}}},
      {"control",
       {{"clients", control_->ClientCount()}, {"rejected_requests", control_->RejectedRequests()}}},
      {"watchdog_usec", watchdog_usec_},
      {"ras", IngestStatus(ingest_->GetStats(), pipeline_->GetStats())},
      {"actions", actuator_->Counts()},
      {"scheduler", scheduler_ ? nlohmann::json{{"kind", config_.scheduler.kind},
                                                {"node", scheduler_->Node()},
                                                {"drained", scheduler_->Drained()},
                                                {"calls", scheduler_->Counts()}}
                               : nlohmann::json{{"kind", "none"}}},
      {"metrics",
       {{"listen", config_.metrics.listen},
        {"port", metrics_ ? nlohmann::json(metrics_->Port()) : nlohmann::json()},
        {"error", metrics_error_.empty() ? nlohmann::json() : nlohmann::json(metrics_error_)}}},
  };
}

void Daemon::ObserveBatch(const HandledBatch& batch) {
  lifecycle_->OnPolicyActed();
  jobs_->Reconsider();
  {
    std::lock_guard lock(metrics_mutex_);
    for (const auto& event : batch.events) {
      metrics_loop_.events[{event.origin, std::string(ras::SeverityName(event.severity)),
                            event.device ? std::to_string(*event.device) : std::string()}] +=
          event.count;
    }
    for (double seconds : batch.isolation_seconds) metrics_loop_.fault_to_isolation.Observe(seconds);
  }
  RefreshMetrics();
}

namespace {

nlohmann::json ActionJson(const ras::ActionRecord& action) {
  auto optional = [](const auto& value) -> nlohmann::json {
    if (!value) return nullptr;
    return *value;
  };
  return {{"id", action.id},
          {"event_id", optional(action.event_id)},
          {"time", Iso8601(action.time)},
          {"action", action.action},
          {"device", optional(action.device)},
          {"address", optional(action.address)},
          {"rule", action.rule},
          {"reason", action.reason},
          {"result", action.result},
          {"detail", action.detail},
          {"count", action.count}};
}

// The only argument of `devices` and `retired`: an optional device.
Result<std::optional<int>> OptionalDeviceArg(const nlohmann::json& args) {
  std::optional<int> device;
  for (const auto& [key, value] : args.items()) {
    if (key != "device") {
      return Fail(ErrorCode::kInvalidArgument, "unknown argument '" + key + "' (known: device)");
    }
    if (!value.is_number_integer())
      return Fail(ErrorCode::kInvalidArgument, "device must be an integer");
    device = value.get<int>();
  }
  return device;
}

}  // namespace

Result<nlohmann::json> Daemon::DevicesReport(const nlohmann::json& args) {
  auto only = OptionalDeviceArg(args);
  if (!only) return Fail(only.error());
  if (*only && !runtime_->GetDevice(**only)) {
    return Fail(ErrorCode::kNotFound, fmt::format("no device {}", **only));
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& device : runtime_->Devices()) {
    const int index = device->Index();
    if (*only && **only != index) continue;
    const auto& properties = device->Properties();
    const DeviceStatus status = actuator_->StatusOf(index);
    nlohmann::json entry = {
        {"index", index},
        {"name", properties.name},
        {"vendor", properties.vendor},
        {"uuid", properties.uuid},
        {"pci_bdf", properties.pci_bdf},
        {"state", std::string(runtime::HealthStateName(device->Health()))},
        {"reason", status.reason},
        {"since", status.since.time_since_epoch().count() == 0
                      ? nlohmann::json()
                      : nlohmann::json(Iso8601(status.since))},
        {"memory_bytes", properties.memory_bytes},
        {"jobs", runtime_->OwnersOn(index)},
    };
    if (auto pool = runtime_->Pool(index)) {
      const auto stats = (*pool)->Stats();
      entry["pool"] = {{"reserved_bytes", stats.reserved_bytes},
                       {"allocated_bytes", stats.allocated_bytes},
                       {"retired_bytes", stats.retired_bytes},
                       {"retired_pages", stats.retired_pages}};
    }
    if (auto test = lifecycle_->LastSelfTest(index)) {
      entry["self_test"] = {
          {"time", Iso8601(test->time)}, {"passed", test->passed}, {"summary", test->summary}};
    } else {
      entry["self_test"] = nullptr;
    }
    entry["self_test_running"] = lifecycle_->SelfTestRunning(index);
    nlohmann::json events = nlohmann::json::array();
    ras::EventQuery query;
    query.device = index;
    query.limit = 5;
    if (auto recent = store_->QueryEvents(query)) {
      for (const auto& stored : *recent) events.push_back(EventJson(stored));
    }
    entry["recent_events"] = std::move(events);
    nlohmann::json actions = nlohmann::json::array();
    if (auto recent = store_->QueryActions(index, 5)) {
      for (const auto& action : *recent) actions.push_back(ActionJson(action));
    }
    entry["recent_actions"] = std::move(actions);
    list.push_back(std::move(entry));
  }
  return nlohmann::json{{"devices", std::move(list)}};
}

Result<nlohmann::json> Daemon::ActionsReport(const nlohmann::json& args) {
  std::optional<int> device;
  std::size_t limit = 100;
  for (const auto& [key, value] : args.items()) {
    if (key == "device" && value.is_number_integer()) {
      device = value.get<int>();
    } else if (key == "limit" && value.is_number_integer() && value.get<long long>() >= 1 &&
               value.get<long long>() <= 10000) {
      limit = value.get<std::size_t>();
    } else {
      return Fail(ErrorCode::kInvalidArgument,
                  "bad argument '" + key + "' (device: integer, limit: 1..10000)");
    }
  }
  auto actions = store_->QueryActions(device, limit);
  if (!actions) return Fail(actions.error());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& action : *actions) list.push_back(ActionJson(action));
  return nlohmann::json{{"actions", std::move(list)}};
}

Result<nlohmann::json> Daemon::RetiredReport(const nlohmann::json& args) {
  auto only = OptionalDeviceArg(args);
  if (!only) return Fail(only.error());
  std::map<std::string, int> by_uuid;
  for (const auto& device : runtime_->Devices()) {
    by_uuid[device->Properties().uuid] = device->Index();
  }
  auto pages = store_->LoadRetiredPages();
  if (!pages) return Fail(pages.error());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& page : *pages) {
    auto index = by_uuid.find(page.device_uuid);
    if (*only && (index == by_uuid.end() || index->second != **only)) continue;
    list.push_back(
        {{"device", index == by_uuid.end() ? nlohmann::json() : nlohmann::json(index->second)},
         {"uuid", page.device_uuid},
         {"address", fmt::format("0x{:x}", page.address)},
         {"reason", page.reason},
         {"time", Iso8601(page.retired)}});
  }
  return nlohmann::json{{"pages", std::move(list)}};
}

namespace {

// The arguments of isolate, drain and undrain.
struct StateChangeArgs {
  std::optional<int> device;
  std::string reason;
  bool force = false;
  std::optional<std::chrono::milliseconds> deadline;
};

Result<StateChangeArgs> ReadStateChangeArgs(const std::string& command,
                                            const nlohmann::json& args) {
  StateChangeArgs read;
  for (const auto& [key, value] : args.items()) {
    if (key == "device" && value.is_number_integer()) {
      read.device = value.get<int>();
    } else if (key == "reason" && value.is_string()) {
      read.reason = value.get<std::string>();
    } else if (key == "force" && value.is_boolean() && command == "undrain") {
      read.force = value.get<bool>();
    } else if (key == "deadline_ms" && value.is_number_integer() && command == "drain" &&
               value.get<long long>() >= 0 && value.get<long long>() <= 86'400'000) {
      read.deadline = std::chrono::milliseconds(value.get<long long>());
    } else {
      return Fail(
          ErrorCode::kInvalidArgument,
          fmt::format("bad argument '{}' for {} (device: integer, reason: string{})", key, command,
                      command == "undrain" ? ", force: boolean"
                      : command == "drain" ? ", deadline_ms: 0..86400000"
                                           : ""));
    }
  }
  if (!read.device) return Fail(ErrorCode::kInvalidArgument, command + " needs a device");
  if (read.reason.size() > 512)
    return Fail(ErrorCode::kInvalidArgument, "reason is over 512 bytes");
  return read;
}

nlohmann::json StateChangeJson(const StateChange& change) {
  nlohmann::json json = {{"device", change.device},
                         {"state", std::string(runtime::HealthStateName(change.state))},
                         {"was", std::string(runtime::HealthStateName(change.was))}};
  if (change.deadline) {
    json["deadline_ms"] = change.deadline->count();
    json["jobs"] = change.jobs;
  }
  if (change.self_test) {
    json["self_test"] = {{"passed", change.self_test->passed},
                         {"summary", change.self_test->summary}};
    json["forced"] = change.forced;
  }
  return json;
}

}  // namespace

void Daemon::ChangeDeviceState(const std::string& command, const nlohmann::json& args,
                               AsyncReply reply) {
  auto read = ReadStateChangeArgs(command, args);
  if (!read) return reply(Fail(read.error()));
  auto answer = [this, reply](Result<StateChange> change) {
    RefreshMetrics();  // times the drain that may have begun
    if (!change) return reply(Fail(change.error()));
    reply(StateChangeJson(*change));
  };
  if (command == "isolate") return answer(lifecycle_->Isolate(*read->device, read->reason));
  if (command == "drain")
    return answer(lifecycle_->Drain(*read->device, read->reason, read->deadline));
  lifecycle_->Undrain(*read->device, read->reason, read->force, std::move(answer));
}

Result<nlohmann::json> Daemon::JobsReport() {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& report : jobs_->Report()) {
    nlohmann::json entry = {{"name", report.name},
                            {"kind", std::string(jobs::JobKindName(report.kind))},
                            {"devices", report.devices},
                            {"state", report.state},
                            {"progress", report.progress}};
    if (report.kind == jobs::JobKind::kInference) {
      entry["requests"] = {{"served", report.served},
                           {"requeued", report.requeued},
                           {"rerun", report.rerun},
                           {"lost", report.lost},
                           {"waiting", report.waiting}};
      entry["load"] = {{"sent", report.load_sent},
                       {"wrong", report.load_wrong},
                       {"p50_ms", report.load_p50_ms},
                       {"p99_ms", report.load_p99_ms}};
    } else {
      entry["step"] = report.step;
      entry["steps"] = report.steps;
      entry["reforms"] = report.reforms;
      entry["checksums_match"] = report.checksums_match;
    }
    list.push_back(std::move(entry));
  }
  return nlohmann::json{{"jobs", std::move(list)}};
}

Result<nlohmann::json> Daemon::StartJob(const nlohmann::json& args) {
  jobs::JobSpec spec;
  bool has_kind = false;
  for (const auto& [key, value] : args.items()) {
    auto positive = [&key, &value](long long max) -> Result<long long> {
      if (!value.is_number_integer() || value.get<long long>() < 1 || value.get<long long>() > max)
        return Fail(ErrorCode::kInvalidArgument,
                    fmt::format("{} must be an integer in 1..{}", key, max));
      return value.get<long long>();
    };
    if (key == "name" && value.is_string()) {
      spec.name = value.get<std::string>();
    } else if (key == "kind" && value.is_string()) {
      auto kind = jobs::ParseJobKind(value.get<std::string>());
      if (!kind) return Fail(ErrorCode::kInvalidArgument, "kind must be inference or collective");
      spec.kind = *kind;
      has_kind = true;
    } else if (key == "devices" && value.is_array()) {
      for (const auto& device : value) {
        if (!device.is_number_integer())
          return Fail(ErrorCode::kInvalidArgument, "devices must be integers");
        spec.devices.push_back(device.get<int>());
      }
    } else if (key == "load_rps") {
      auto n = positive(1'000'000);
      if (!n) return Fail(n.error());
      spec.load_rps = static_cast<double>(*n);
    } else if (key == "max_batch") {
      auto n = positive(4096);
      if (!n) return Fail(n.error());
      spec.max_batch = static_cast<std::size_t>(*n);
    } else if (key == "steps") {
      auto n = positive(100'000'000);
      if (!n) return Fail(n.error());
      spec.steps = static_cast<int>(*n);
    } else if (key == "elements") {
      auto n = positive(1LL << 26);
      if (!n) return Fail(n.error());
      spec.elements = static_cast<std::uint64_t>(*n);
    } else if (key == "checkpoint_every") {
      auto n = positive(1'000'000);
      if (!n) return Fail(n.error());
      spec.checkpoint_every = static_cast<int>(*n);
    } else if (key == "min_ranks") {
      auto n = positive(1024);
      if (!n) return Fail(n.error());
      spec.min_ranks = static_cast<int>(*n);
    } else {
      return Fail(ErrorCode::kInvalidArgument,
                  "bad argument '" + key +
                      "' (name, kind, devices, load_rps, max_batch, steps, elements, "
                      "checkpoint_every, min_ranks)");
    }
  }
  if (!has_kind) return Fail(ErrorCode::kInvalidArgument, "job-start needs a kind");
  const std::string name = spec.name;
  if (auto started = jobs_->Start(std::move(spec)); !started) return Fail(started.error());
  spdlog::info("job '{}' started by an operator", name);
  return nlohmann::json{{"name", name}, {"started", true}};
}

Result<nlohmann::json> Daemon::StopJob(const nlohmann::json& args) {
  if (!args.contains("name") || !args["name"].is_string() || args.size() != 1)
    return Fail(ErrorCode::kInvalidArgument, "job-stop takes exactly a name");
  const std::string name = args["name"].get<std::string>();
  if (auto stopped = jobs_->Stop(name); !stopped) return Fail(stopped.error());
  spdlog::info("job '{}' stopped by an operator", name);
  return nlohmann::json{{"name", name}, {"stopped", true}};
}

void Daemon::Infer(const nlohmann::json& args, AsyncReply reply) {
  std::string job;
  std::optional<std::vector<float>> input;
  std::uint64_t seed = 0;
  for (const auto& [key, value] : args.items()) {
    if (key == "job" && value.is_string()) {
      job = value.get<std::string>();
    } else if (key == "input" && value.is_array() && value.size() <= 65536) {
      std::vector<float> values;
      for (const auto& number : value) {
        if (!number.is_number()) {
          return reply(Fail(ErrorCode::kInvalidArgument, "input must be a list of numbers"));
        }
        values.push_back(number.get<float>());
      }
      input = std::move(values);
    } else if (key == "seed" && value.is_number_unsigned()) {
      seed = value.get<std::uint64_t>();
    } else {
      return reply(Fail(ErrorCode::kInvalidArgument,
                        "bad argument '" + key + "' (job, input: numbers, seed: integer)"));
    }
  }
  auto service = jobs_->Inference(job);
  if (!service) {
    return reply(Fail(ErrorCode::kNotFound, fmt::format("no inference job '{}'", job)));
  }
  // Without an input: the load generator's input number `seed`.
  if (!input) input = jobs::LoadGenerator::InputFor(seed, jobs::MlpModel{}.inputs);
  const auto started = loop_->Now();
  const std::shared_ptr<const common::Clock> clock = loop_->SharedClock();
  // The callback must not hold the service: a stopped service answers what
  // it still has, and that must let it go.
  auto submitted = service->Submit(
      std::move(*input),
      [reply, started, clock](std::uint64_t id, jobs::InferenceService::Output output) {
        if (!output) return reply(Fail(output.error()));
        reply(nlohmann::json{
            {"request", id},
            {"output", *output},
            {"latency_ms",
             std::chrono::duration<double, std::milli>(clock->Monotonic() - started).count()}});
      });
  if (!submitted) reply(Fail(submitted.error()));
}

void Daemon::RefreshMetrics() {
  const auto stats = ingest_ ? ingest_->GetStats() : RasIngest::Stats{};
  auto edac = ingest_ ? ingest_->EdacCounters() : ras::EdacSnapshot{};
  const auto now = loop_->Now();
  // Drains: from a device entering Draining to no job left on it (or to it
  // leaving Draining some other way).
  std::vector<double> drains;
  for (const auto& device : runtime_->Devices()) {
    const int index = device->Index();
    const bool draining = device->Health() == runtime::HealthState::kDraining;
    auto since = draining_since_.find(index);
    if (draining && since == draining_since_.end()) {
      draining_since_[index] = now;
    } else if (since != draining_since_.end() && (!draining || runtime_->OwnersOn(index).empty())) {
      drains.push_back(std::chrono::duration<double>(now - since->second).count());
      if (!draining) {
        draining_since_.erase(since);
      } else {
        since->second = std::chrono::nanoseconds::max();  // counted; wait for the end
      }
    }
  }
  std::lock_guard lock(metrics_mutex_);
  metrics_loop_.edac = std::move(edac);
  metrics_loop_.kmsg_gaps = stats.kmsg_gaps;
  metrics_loop_.source_errors["kmsg"] = stats.kmsg_undecoded;
  metrics_loop_.source_errors["store"] = pipeline_ ? pipeline_->GetStats().store_failures : 0;
  for (double seconds : drains)
    if (seconds >= 0 && seconds < 1e9) metrics_loop_.drain_duration.Observe(seconds);
  if (!draining_since_.empty()) metrics_timer_->ArmAfter(std::chrono::seconds(1));
}

exporters::MetricsSnapshot Daemon::MetricsNow() const {
  exporters::MetricsSnapshot snapshot;
  {
    std::lock_guard lock(metrics_mutex_);
    snapshot = metrics_loop_;
  }
  snapshot.version = kVersion;
  // Thread-safe reads: device gates are atomics, pools and the actuator's
  // counts and the jobs have their own locks.
  for (const auto& device : runtime_->Devices()) {
    exporters::DeviceMetrics metrics;
    metrics.index = device->Index();
    metrics.vendor = device->Properties().vendor;
    metrics.model = device->Properties().name;
    metrics.bdf = device->Properties().pci_bdf;
    metrics.state = std::string(runtime::HealthStateName(device->Health()));
    if (auto pool = runtime_->Pool(device->Index())) {
      const auto stats = (*pool)->Stats();
      metrics.reserved_bytes = stats.reserved_bytes;
      metrics.allocated_bytes = stats.allocated_bytes;
      metrics.retired_bytes = stats.retired_bytes;
      metrics.retired_pages = stats.retired_pages;
    }
    snapshot.devices.push_back(std::move(metrics));
  }
  for (const auto& [key, count] : actuator_->Counts()) {
    const auto space = key.rfind(' ');
    snapshot
        .actions[{key.substr(0, space), space == std::string::npos ? "" : key.substr(space + 1)}] =
        count;
  }
  if (scheduler_) snapshot.scheduler_actions = scheduler_->Counts();
  const auto reports = jobs_->Report();
  {
    // A collective's re-forms are seen when scraped: no loop timer polls
    // the jobs for them.
    std::lock_guard lock(metrics_mutex_);
    for (const auto& report : reports) {
      if (report.kind != jobs::JobKind::kCollective) continue;
      auto& seen = reforms_seen_[report.name];
      if (report.reforms > seen) {
        metrics_loop_.collective_abort.Observe(report.last_release_seconds);
        snapshot.collective_abort.Observe(report.last_release_seconds);
      }
      seen = report.reforms;
    }
  }
  for (const auto& report : reports) {
    snapshot.jobs[{std::string(jobs::JobKindName(report.kind)), report.state}] += 1;
    if (report.kind == jobs::JobKind::kInference) {
      snapshot.requests[{report.name, "served"}] = report.served;
      snapshot.requests[{report.name, "requeued"}] = report.requeued + report.rerun;
      snapshot.requests[{report.name, "lost"}] = report.lost;
    }
  }
  return snapshot;
}

}  // namespace rasd::daemon
