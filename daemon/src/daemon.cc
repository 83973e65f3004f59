#include "daemon.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>

#include "rasd/common/default_paths.h"
#include "rasd/common/logging.h"
#include "rasd/common/version.h"
#include "rasd/drivers_shim/sim_driver.h"

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
    return Fail(ErrorCode::kNotFound,
                fmt::format("control.admin_group '{}' is not a group on this host", name));
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

nlohmann::json IngestStatus(const RasIngest::Stats& stats) {
  return {{"kmsg_active", stats.kmsg_active},
          {"kmsg_records", stats.kmsg_records},
          {"kmsg_lost", stats.kmsg_lost},
          {"tracefs_active", stats.tracefs_active},
          {"tracefs_pages", stats.tracefs_pages},
          {"tracefs_events", stats.tracefs_events},
          {"events_ingested", stats.events},
          {"store_failures", stats.store_failures},
          {"edac_controllers", stats.edac_controllers},
          {"coalesced", stats.coalesced},
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
  check(running.runtime.driver != loaded.runtime.driver, "runtime.driver");
  check(running.simulator.devices != loaded.simulator.devices, "simulator.devices");
  check(running.simulator.memory_mib != loaded.simulator.memory_mib, "simulator.memory_mib");
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

Daemon::Daemon(StartOptions options)
    : options_(std::move(options)), clock_(std::make_shared<common::SystemClock>()) {}

Daemon::~Daemon() {
  control_.reset();
  ingest_.reset();
  for (auto* source : sources_) sd_event_source_disable_unref(source);
  if (!socket_.activated && !socket_.bound_path.empty()) ::unlink(socket_.bound_path.c_str());
  sd_event_unref(event_);
}

Status Daemon::Initialize(Config config) {
  config_ = std::move(config);
  started_monotonic_ = clock_->Monotonic();
  started_wall_ = clock_->Wall();
  const common::DefaultPaths defaults = common::ComputeDefaultPaths();
  state_dir_ = config_.daemon.state_dir.empty() ? defaults.state_dir : config_.daemon.state_dir;
  socket_path_ = config_.control.socket.empty() ? defaults.socket : config_.control.socket;

  struct stat root_stat {};
  if (::stat(config_.host.root.c_str(), &root_stat) != 0 || !S_ISDIR(root_stat.st_mode)) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("host root {} is not a directory", config_.host.root.string()));
  }
  host_ = std::make_unique<common::HostEnv>(config_.host.root, clock_);

  auto admin_gid = ResolveAdminGroup(config_.control.admin_group);
  if (!admin_gid) return Fail(admin_gid.error());
  authorizer_ = Authorizer{::geteuid(), *admin_gid, config_.control.admin_group};

  auto store = ras::StateStore::Open(state_dir_);
  if (!store) {
    return Fail(store.error().code,
                fmt::format("cannot use state directory: {}", store.error().message));
  }
  store_ = std::move(*store);

  auto driver = drivers::SimDriver::Create(
      {.device_count = config_.simulator.devices,
       .memory_bytes_per_device = config_.simulator.memory_mib * 1024 * 1024});
  if (!driver) return Fail(driver.error());
  auto runtime = runtime::Runtime::Create(std::move(*driver));
  if (!runtime) return Fail(runtime.error());
  runtime_ = std::move(*runtime);

  if (int rc = sd_event_new(&event_); rc < 0) return Fail(ErrnoError("sd_event_new", -rc));
  auto add_signal = [this](int signal, sd_event_signal_handler_t handler) -> Status {
    sd_event_source* source = nullptr;
    if (int rc = sd_event_add_signal(event_, &source, signal, handler, this); rc < 0) {
      return Fail(ErrnoError(fmt::format("watch signal {}", signal), -rc));
    }
    sources_.push_back(source);
    return {};
  };
  for (int signal : {SIGTERM, SIGINT}) {
    if (auto added = add_signal(signal, &Daemon::OnTerminate); !added) return added;
  }
  if (auto added = add_signal(SIGHUP, &Daemon::OnHangup); !added) return added;

  if (sd_watchdog_enabled(/*unset_environment=*/0, &watchdog_usec_) > 0 && watchdog_usec_ > 0) {
    sd_event_source* source = nullptr;
    if (int rc = sd_event_add_time_relative(event_, &source, CLOCK_MONOTONIC, watchdog_usec_ / 2, 0,
                                            &Daemon::OnWatchdog, this);
        rc < 0) {
      return Fail(ErrnoError("arm watchdog timer", -rc));
    }
    sources_.push_back(source);
  }

  auto ingest = RasIngest::Create(event_, *host_, *store_, *runtime_, config_.ras);
  if (!ingest) return Fail(ingest.error());
  ingest_ = std::move(*ingest);

  auto socket = OpenControlSocket(socket_path_, config_.control.socket_mode);
  if (!socket)
    return Fail(socket.error().code, fmt::format("control socket: {}", socket.error().message));
  socket_ = std::move(*socket);
  auto listen_fd = common::UniqueFd(::dup(socket_.fd.Get()));
  if (!listen_fd) return Fail(ErrnoError("dup control socket", errno));
  auto server = ControlServer::Create(event_, std::move(listen_fd), ServerOptions(config_),
                                      authorizer_, Commands());
  if (!server) return Fail(server.error());
  control_ = std::move(*server);

  if (!config_.metrics.listen.empty()) {
    spdlog::warn(
        "metrics.listen {} is accepted but not served yet: the Prometheus exporter is not "
        "built in this version",
        config_.metrics.listen);
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
  const int rc = sd_event_loop(event_);
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

int Daemon::OnTerminate(sd_event_source*, const struct signalfd_siginfo* info, void* userdata) {
  auto* daemon = static_cast<Daemon*>(userdata);
  spdlog::info("received {}; stopping", ::strsignal(static_cast<int>(info->ssi_signo)));
  sd_event_exit(daemon->event_, 0);
  return 0;
}

int Daemon::OnHangup(sd_event_source*, const struct signalfd_siginfo*, void* userdata) {
  auto* daemon = static_cast<Daemon*>(userdata);
  (void)daemon->Reload();  // logs its own outcome
  return 0;
}

int Daemon::OnWatchdog(sd_event_source* source, uint64_t, void* userdata) {
  auto* daemon = static_cast<Daemon*>(userdata);
  // Sent from the loop itself: a wedged loop stops the pings and systemd
  // restarts us, which is the point.
  daemon->Notify("WATCHDOG=1");
  sd_event_source_set_time_relative(source, daemon->watchdog_usec_ / 2);
  sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
  return 0;
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
  const std::string when = Iso8601(clock_->Wall());
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
  config_ = applied;
  common::SetLogLevel(config_.daemon.log_level);
  authorizer_ = Authorizer{::geteuid(), admin_gid, config_.control.admin_group};
  control_->Reconfigure(ServerOptions(config_), authorizer_);
  ingest_->SetCodeTable(config_.ras.codes);
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
          clock_->Wall() - std::chrono::duration_cast<std::chrono::system_clock::duration>(
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
      std::chrono::duration<double>(clock_->Monotonic() - started_monotonic_).count();
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
      {"jobs", {{"count", jobs_.Count()}}},
      {"events", {{"total", total}, {"by_severity", std::move(by_severity)}}},
      {"control",
       {{"clients", control_->ClientCount()}, {"rejected_requests", control_->RejectedRequests()}}},
      {"watchdog_usec", watchdog_usec_},
      {"ras", IngestStatus(ingest_->GetStats())},
  };
}

}  // namespace rasd::daemon
