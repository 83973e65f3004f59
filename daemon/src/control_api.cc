#include "control_api.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>

#include "arg_reader.h"
#include "node_verdict.h"
#include "rasd/common/logging.h"
#include "rasd/jobs/load_generator.h"

namespace rasd::daemon {
namespace {

// Device indices as arguments: far above any machine's, far below int's end.
constexpr std::int64_t kMaxDevice = 1 << 20;

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

nlohmann::json EventJson(const ras::StoredEvent& stored) {
  const ras::RasEvent& event = stored.event;
  auto optional = [](const auto& value) -> nlohmann::json {
    if (!value) return nullptr;
    return *value;
  };
  nlohmann::json pages = nlohmann::json::array();
  for (const auto& page : event.pages)
    pages.push_back({{"page", fmt::format("0x{:x}", page.page)}, {"errors", page.errors}});
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
      {"dimm", optional(event.dimm)},
      {"pci_bdf", optional(event.pci_bdf)},
      {"address", event.address ? nlohmann::json(event.address->printed) : nlohmann::json()},
      {"pages", std::move(pages)},
      {"pages_not_listed", event.pages_not_listed},
      {"last", stored.last ? nlohmann::json(Iso8601(*stored.last)) : nlohmann::json()},
      {"vendor_code", optional(event.vendor_code)},
      {"count", event.count},
      {"historical", event.historical},
      {"before_start", event.before_start},
      {"summary", event.summary},
  };
}

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
          {"address", action.address ? nlohmann::json(ras::HexText(*action.address)) : nlohmann::json()},
          {"rule", action.rule},
          {"reason", action.reason},
          {"result", action.result},
          {"detail", action.detail},
          {"count", action.count}};
}

}  // namespace

std::string Iso8601(std::chrono::system_clock::time_point time) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", std::chrono::floor<std::chrono::seconds>(time));
}

std::map<std::string, Command> ControlApi::Commands() {
  std::map<std::string, Command> commands;
  auto view = [this](bool changes_state,
                     Result<nlohmann::json> (ControlApi::*handler)(const nlohmann::json&)) {
    return Command{changes_state, [this, handler](const auto& request, const auto&) {
                     return (this->*handler)(request.args);
                   }};
  };
  // A liveness probe: answers whatever it is sent with.
  commands["ping"] = {false, [](const auto&, const auto&) -> Result<nlohmann::json> {
                        return nlohmann::json{{"pong", true}};
                      }};
  commands["status"] = {false,
                        [this](const auto& request, const auto&) { return Status(request.args); }};
  commands["reload"] = {true, [this](const auto&, const auto&) { return parts_.reload(); }};
  auto read = [this](void (ControlApi::*handler)(const nlohmann::json&, AsyncReply)) {
    return Command{false, nullptr,
                   [this, handler](const auto& request, const auto&, AsyncReply reply) {
                     (this->*handler)(request.args, std::move(reply));
                   }};
  };
  commands["events"] = read(&ControlApi::Events);
  commands["summary"] = view(false, &ControlApi::Summary);
  commands["devices"] = view(false, &ControlApi::Devices);
  commands["check"] = view(false, &ControlApi::Check);
  commands["actions"] = read(&ControlApi::Actions);
  commands["retired"] = read(&ControlApi::Retired);
  commands["jobs"] = view(false, &ControlApi::Jobs);
  // Anyone may attach a process of their own; the handler checks whose.
  commands["attach"] = {false, nullptr, nullptr,
                        [this](const auto& request, const auto& peer, Push push) {
                          return Attach(request.args, peer, std::move(push));
                        }};
  commands["watch"] = {false, nullptr, nullptr,
                       [this](const auto& request, const auto&, Push push) {
                         return Watch(request.args, std::move(push));
                       }};
  commands["inject"] = {true, [this](const auto& request, const auto&) {
                          return parts_.injection.Inject(request.args);
                        }};
  // Work on the devices: admin only, like every command that uses them.
  commands["infer"] = {true, nullptr, [this](const auto& request, const auto&, AsyncReply reply) {
                         Infer(request.args, std::move(reply));
                       }};
  commands["job-start"] = view(true, &ControlApi::StartJob);
  commands["job-stop"] = view(true, &ControlApi::StopJob);
  // It writes a file where rasd (root) is told to: admin only.
  commands["backup"] = {true, nullptr, [this](const auto& request, const auto&, AsyncReply reply) {
                          Backup(request.args, std::move(reply));
                        }};
  for (const char* name : {"isolate", "drain", "undrain"}) {
    commands[name] = {true, nullptr,
                      [this, name](const auto& request, const auto&, AsyncReply reply) {
                        ChangeDeviceState(name, request.args, std::move(reply));
                      }};
  }
  return commands;
}

Result<nlohmann::json> ControlApi::Status(const nlohmann::json& args) {
  ArgReader reader("status", args);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  auto status = parts_.status();  // the daemon's own: version, paths, sources, config
  if (!status) return status;
  auto counts = parts_.store.CountEventsBySeverity();
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
  for (const auto& device : parts_.runtime.Devices()) {
    const std::string health(runtime::HealthStateName(device->Health()));
    by_health[health] = by_health[health].get<int>() + 1;
    const auto& properties = device->Properties();
    nlohmann::json entry = {{"index", properties.index}, {"name", properties.name},
                            {"uuid", properties.uuid},   {"pci_bdf", properties.pci_bdf},
                            {"health", health},          {"memory_bytes", properties.memory_bytes}};
    if (auto pool = parts_.runtime.Pool(properties.index)) {
      const auto stats = (*pool)->Stats();
      entry["pool"] = {{"reserved_bytes", stats.reserved_bytes},
                       {"allocated_bytes", stats.allocated_bytes},
                       {"retired_pages", stats.retired_pages}};
    }
    device_list.push_back(std::move(entry));
  }
  (*status)["devices"] = {{"driver", std::string(parts_.runtime.DriverName())},
                          {"count", parts_.runtime.DeviceCount()},
                          {"by_health", std::move(by_health)},
                          {"list", std::move(device_list)}};
  (*status)["jobs"] = {{"count", parts_.jobs.Count()}};
  (*status)["workloads"] = {{"count", parts_.workloads.Count()}};
  (*status)["events"] = {{"total", total}, {"by_severity", std::move(by_severity)}};
  return status;
}

void ControlApi::ReadStore(StoreReader::Query query, AsyncReply reply) {
  if (parts_.reader != nullptr) {
    parts_.reader->Read(std::move(query), std::move(reply));
    return;
  }
  reply(query(parts_.store));
}

void ControlApi::Events(const nlohmann::json& args, AsyncReply reply) {
  ArgReader reader("events", args);
  ras::EventQuery query;
  query.limit = static_cast<std::size_t>(reader.Int("limit", 1, 10000).value_or(100));
  if (auto since = reader.Number("since_seconds", 0, 1e10)) {
    query.since = parts_.loop.GetClock().Wall() -
                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                      std::chrono::duration<double>(*since));
  }
  if (auto severity = reader.String("severity", 16)) {
    query.severity = ras::ParseSeverity(*severity);
    if (!query.severity)
      return reply(Fail(ErrorCode::kInvalidArgument,
                        "bad argument 'severity' for events: must be one of CE, UCNA, SRAO, SRAR, "
                        "UCE, FATAL, INFO"));
  }
  if (auto device = reader.Int("device", 0, kMaxDevice)) query.device = static_cast<int>(*device);
  if (auto after = reader.Int("after_id", 0, INT64_MAX)) query.after_id = *after;
  if (auto ids = reader.IntList("ids", 1, INT64_MAX, Watchers::kMaxGrownIds)) query.ids = *ids;
  if (auto ok = reader.Finish(); !ok) return reply(Fail(ok.error()));
  ReadStore(
      [query](ras::StateStore& store) -> Result<nlohmann::json> {
        auto events = store.QueryEvents(query);
        if (!events) return Fail(events.error());
        nlohmann::json list = nlohmann::json::array();
        for (const auto& stored : *events) list.push_back(EventJson(stored));
        return nlohmann::json{{"events", std::move(list)}};
      },
      std::move(reply));
}

Result<nlohmann::json> ControlApi::Summary(const nlohmann::json& args) {
  ArgReader reader("summary", args);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  auto rows = parts_.store.Summarize();
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

Result<nlohmann::json> ControlApi::Devices(const nlohmann::json& args) {
  ArgReader reader("devices", args);
  const auto only = reader.Int("device", 0, kMaxDevice);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  if (only && !parts_.runtime.GetDevice(static_cast<int>(*only))) {
    return Fail(ErrorCode::kNotFound, fmt::format("no device {}", *only));
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& device : parts_.runtime.Devices()) {
    if (only && *only != device->Index()) continue;
    list.push_back(DeviceJson(*device));
  }
  return nlohmann::json{{"devices", std::move(list)}};
}

Result<nlohmann::json> ControlApi::Check(const nlohmann::json& args) {
  ArgReader reader("check", args);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  std::vector<DeviceCondition> conditions;
  nlohmann::json by_state = nlohmann::json::object();
  for (auto state : {runtime::HealthState::kHealthy, runtime::HealthState::kDegraded,
                     runtime::HealthState::kDraining, runtime::HealthState::kIsolated}) {
    by_state[std::string(runtime::HealthStateName(state))] = 0;
  }
  for (const auto& device : parts_.runtime.Devices()) {
    const auto state = device->Health();
    const std::string name(runtime::HealthStateName(state));
    by_state[name] = by_state[name].get<int>() + 1;
    conditions.push_back(DeviceCondition{.index = device->Index(),
                                         .state = state,
                                         .reason = parts_.health.StatusOf(device->Index()).reason});
  }
  const auto& fault = parts_.node.Current();
  const NodeVerdict verdict =
      JudgeNode(conditions, fault ? std::optional<std::string>(fault->reason) : std::nullopt,
                parts_.missing_backends);
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& finding : verdict.findings) {
    findings.push_back({{"level", std::string(NodeHealthName(finding.level))},
                        {"device", finding.device ? nlohmann::json(*finding.device) : nlohmann::json()},
                        {"state", finding.state},
                        {"reason", finding.reason}});
  }
  return nlohmann::json{
      {"health", std::string(NodeHealthName(verdict.health))},
      {"devices", {{"count", conditions.size()}, {"by_state", std::move(by_state)}}},
      {"findings", std::move(findings)},
      {"node_fault", fault ? nlohmann::json{{"reason", fault->reason}, {"since", Iso8601(fault->since)}}
                           : nlohmann::json()},
      {"scheduler", parts_.scheduler ? parts_.scheduler() : nlohmann::json{{"kind", "none"}}},
  };
}

nlohmann::json ControlApi::DeviceJson(const runtime::Device& device) {
  const int index = device.Index();
  const auto& properties = device.Properties();
  const DeviceStatus status = parts_.health.StatusOf(index);
  nlohmann::json holds = nlohmann::json::array();
  for (const auto& hold : status.holds) {
    holds.push_back({{"cause", std::string(HealthCauseName(hold.cause))},
                     {"state", std::string(runtime::HealthStateName(hold.state))},
                     {"reason", hold.reason},
                     {"since", Iso8601(hold.since)}});
  }
  nlohmann::json entry = {
      {"index", index},
      {"name", properties.name},
      {"vendor", properties.vendor},
      {"uuid", properties.uuid},
      {"pci_bdf", properties.pci_bdf},
      {"state", std::string(runtime::HealthStateName(device.Health()))},
      {"takes_new_work", runtime::TakesNewWork(device.Health())},
      {"links_usable", device.LinksUsable()},
      {"reason", status.reason},
      {"held_by", std::move(holds)},
      {"since", status.since.time_since_epoch().count() == 0
                    ? nlohmann::json()
                    : nlohmann::json(Iso8601(status.since))},
      {"memory_bytes", properties.memory_bytes},
      {"jobs", parts_.runtime.JobsOn(index)},
      {"workloads", parts_.workloads.OnDevice(index)},
  };
  const auto recovery = parts_.recovery.For(index);
  entry["suggested_action"] = std::string(ras::RecoveryActionName(recovery.action));
  entry["suggested_why"] = recovery.why;
  entry["clears"] = recovery.clears;
  if (parts_.link_clears) {
    if (auto clears = parts_.link_clears(index)) entry["clears"] = *clears;
  }
  entry["recoveries_24h"] = recovery.recoveries_24h;
  entry["auto_recovery_scheduled"] = parts_.lifecycle.RecoveryScheduled(index);
  entry["rdma_ports"] = parts_.rdma_ports ? parts_.rdma_ports(index) : nlohmann::json::array();
  if (auto pool = parts_.runtime.Pool(index)) {
    const auto stats = (*pool)->Stats();
    entry["pool"] = {{"reserved_bytes", stats.reserved_bytes},
                     {"allocated_bytes", stats.allocated_bytes},
                     {"retired_bytes", stats.retired_bytes},
                     {"retired_pages", stats.retired_pages}};
  }
  if (auto test = parts_.lifecycle.LastSelfTest(index)) {
    entry["self_test"] = {
        {"time", Iso8601(test->time)}, {"passed", test->passed}, {"summary", test->summary}};
  } else {
    entry["self_test"] = nullptr;
  }
  entry["self_test_running"] = parts_.lifecycle.SelfTestRunning(index);
  entry["screening"] = nullptr;
  if (parts_.screening) {
    for (const auto& view : parts_.screening->Views()) {
      if (view.device != index) continue;
      entry["screening"] = {{"screenings", view.screenings},
                            {"kernels_checked", view.kernels_checked},
                            {"mismatches", view.mismatches},
                            {"incomplete", view.incomplete},
                            {"verdicts", view.verdicts},
                            {"cross_checks", nlohmann::json(view.cross_checks)},
                            {"cross_check_mismatches", nlohmann::json(view.cross_check_mismatches)},
                            {"suspect", view.suspect},
                            {"overdue", view.overdue},
                            {"budget_used", view.budget_used},
                            {"last", view.screened ? nlohmann::json{{"time", Iso8601(view.last_at)},
                                                                    {"passed", view.last_passed},
                                                                    {"summary", view.last_summary}}
                                                   : nlohmann::json()}};
    }
  }
  // The device's state is in memory and is shown whatever the store says;
  // what the store cannot tell is null (not "none"), with the reason.
  ras::EventQuery query;
  query.device = index;
  query.limit = 5;
  auto recent_events = parts_.store.QueryEvents(query);
  auto recent_actions = parts_.store.QueryActions(index, 5);
  entry["recent_events"] = nullptr;
  entry["recent_actions"] = nullptr;
  if (recent_events) {
    entry["recent_events"] = nlohmann::json::array();
    for (const auto& stored : *recent_events) entry["recent_events"].push_back(EventJson(stored));
  }
  if (recent_actions) {
    entry["recent_actions"] = nlohmann::json::array();
    for (const auto& action : *recent_actions)
      entry["recent_actions"].push_back(ActionJson(action));
  }
  if (!recent_events || !recent_actions) {
    entry["store_error"] = (recent_events ? recent_actions.error() : recent_events.error()).message;
  }
  return entry;
}

void ControlApi::Actions(const nlohmann::json& args, AsyncReply reply) {
  ArgReader reader("actions", args);
  const auto device = reader.Int("device", 0, kMaxDevice);
  const auto limit = reader.Int("limit", 1, 10000).value_or(100);
  if (auto ok = reader.Finish(); !ok) return reply(Fail(ok.error()));
  const std::optional<int> only =
      device ? std::optional<int>(static_cast<int>(*device)) : std::nullopt;
  ReadStore(
      [only, limit](ras::StateStore& store) -> Result<nlohmann::json> {
        auto actions = store.QueryActions(only, static_cast<std::size_t>(limit));
        if (!actions) return Fail(actions.error());
        nlohmann::json list = nlohmann::json::array();
        for (const auto& action : *actions) list.push_back(ActionJson(action));
        return nlohmann::json{{"actions", std::move(list)}};
      },
      std::move(reply));
}

void ControlApi::Retired(const nlohmann::json& args, AsyncReply reply) {
  ArgReader reader("retired", args);
  const auto only = reader.Int("device", 0, kMaxDevice);
  if (auto ok = reader.Finish(); !ok) return reply(Fail(ok.error()));
  // The devices as the loop knows them now; the query runs elsewhere.
  std::map<std::string, int> by_uuid;
  for (const auto& device : parts_.runtime.Devices()) {
    by_uuid[device->Properties().uuid] = device->Index();
  }
  ReadStore(
      [only, by_uuid = std::move(by_uuid)](ras::StateStore& store) -> Result<nlohmann::json> {
        auto pages = store.LoadRetiredPages();
        if (!pages) return Fail(pages.error());
        nlohmann::json list = nlohmann::json::array();
        for (const auto& page : *pages) {
          auto index = by_uuid.find(page.device_uuid);
          if (only && (index == by_uuid.end() || index->second != *only)) continue;
          list.push_back({{"device", index == by_uuid.end() ? nlohmann::json()
                                                            : nlohmann::json(index->second)},
                          {"uuid", page.device_uuid},
                          {"address", fmt::format("0x{:x}", page.address)},
                          {"reason", page.reason},
                          {"time", Iso8601(page.retired)}});
        }
        return nlohmann::json{{"pages", std::move(list)}};
      },
      std::move(reply));
}

namespace {

// "TERM", "term", "SIGTERM", 15 or "15".
std::optional<int> ParseSignal(const nlohmann::json& value) {
  if (value.is_number_integer()) {
    const auto number = value.get<std::int64_t>();
    if (number >= 1 && number <= SIGRTMAX) return static_cast<int>(number);
    return std::nullopt;
  }
  if (!value.is_string()) return std::nullopt;
  std::string name = value.get<std::string>();
  if (!name.empty() && name.size() <= 3 &&
      std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return ParseSignal(std::stoi(name));
  }
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.starts_with("SIG")) name = name.substr(3);
  for (int signal = 1; signal < NSIG; ++signal) {
    const char* abbreviation = ::sigabbrev_np(signal);
    if (abbreviation && name == abbreviation) return signal;
  }
  return std::nullopt;
}

}  // namespace

Result<Subscribed> ControlApi::Attach(const nlohmann::json& args, const PeerCredentials& peer,
                                      Push push) {
  ArgReader reader("attach", args);
  WorkloadSpec spec;
  if (auto pid = reader.Int("pid", 1, 4'194'304)) spec.pid = static_cast<pid_t>(*pid);
  if (auto name = reader.String("name", 64)) spec.name = *name;
  if (auto devices = reader.Required(reader.IntList("devices", 0, kMaxDevice, 1024), "devices")) {
    for (auto device : *devices) spec.devices.push_back(static_cast<int>(device));
  }
  if (auto grace = reader.Int("grace_ms", 0, 3'600'000)) spec.grace = std::chrono::milliseconds(*grace);
  const nlohmann::json* signal = reader.Raw("drain_signal");
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  if (signal) {
    const auto parsed = ParseSignal(*signal);
    if (!parsed) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("attach: drain_signal {} is not a signal (TERM, INT, USR1, 15, ...)",
                              signal->dump()));
    }
    spec.drain_signal = *parsed;
  }
  return parts_.workloads.Attach(std::move(spec), peer, parts_.is_admin(peer), std::move(push));
}

Result<Subscribed> ControlApi::Watch(const nlohmann::json& args, Push push) {
  ArgReader reader("watch", args);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  // The newest event's id, from which the watcher fetches what follows.
  ras::EventQuery newest;
  newest.limit = 1;
  auto events = parts_.store.QueryEvents(newest);
  if (!events) return Fail(events.error());
  const std::int64_t last_id = events->empty() ? 0 : events->back().id;
  return parts_.watchers.Subscribe(std::move(push), last_id);
}

Result<nlohmann::json> ControlApi::Jobs(const nlohmann::json& args) {
  ArgReader reader("jobs", args);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& report : parts_.jobs.Report()) {
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
                           {"waiting", report.waiting},
                           {"overloaded", report.overloaded}};
      entry["load"] = {{"sent", report.load_sent},
                       {"wrong", report.load_wrong},
                       {"corrected", report.load_corrected},
                       {"wrong_corrected", report.load_wrong_corrected},
                       {"corrections_wrong", report.load_corrections_wrong},
                       {"p50_ms", report.load_p50_ms},
                       {"p99_ms", report.load_p99_ms}};
    } else if (report.kind == jobs::JobKind::kLlm) {
      entry["requests"] = {{"served", report.served},
                           {"lost", report.lost},
                           {"waiting", report.waiting},
                           {"overloaded", report.overloaded}};
      entry["kv_blocks"] = {{"total", report.kv_blocks_total},
                            {"used", report.kv_blocks_used},
                            {"free", report.kv_blocks_free},
                            {"retired", report.kv_blocks_retired}};
      entry["sequences"] = {{"running", report.sequences_running},
                            {"waiting", report.sequences_waiting},
                            {"preempted", report.sequences_preempted},
                            {"recomputed", report.sequences_recomputed},
                            {"moved", report.sequences_moved}};
      entry["tokens"] = report.tokens;
      entry["preemption"] = report.preemption;
      auto replicas = nlohmann::json::array();
      for (const auto& replica : report.llm_replicas) {
        replicas.push_back({{"device", replica.device},
                            {"serving", replica.serving},
                            {"kv_blocks",
                             {{"total", replica.blocks.total},
                              {"used", replica.blocks.used},
                              {"free", replica.blocks.free},
                              {"retired", replica.blocks.retired}}},
                            {"sequences",
                             {{"running", replica.running},
                              {"waiting", replica.waiting},
                              {"preempted", replica.preempted},
                              {"recomputed", replica.recomputed},
                              {"moved", replica.moved_out},
                              {"swapped_out", replica.swapped_out},
                              {"swapped_in", replica.swapped_in}}}});
      }
      entry["replicas"] = std::move(replicas);
      entry["load"] = {{"sent", report.load_sent},     {"wrong", report.load_wrong},
                       {"errors", report.load_errors}, {"checked", report.load_checked},
                       {"p50_ms", report.load_p50_ms}, {"p99_ms", report.load_p99_ms}};
    } else {
      entry["step"] = report.step;
      entry["steps"] = report.steps;
      entry["reforms"] = report.reforms;
      entry["grown"] = report.grown;
      entry["checksums_match"] = report.checksums_match;
      entry["distrust_rollbacks"] = report.distrust_rollbacks;
      entry["steps_redone"] = report.steps_redone;
      entry["cross_checks"] = {{"parts", report.parts_checked},
                               {"differing", report.parts_differing},
                               {"corrected", report.parts_corrected}};
    }
    list.push_back(std::move(entry));
  }
  return nlohmann::json{{"jobs", std::move(list)}, {"workloads", parts_.workloads.Report()}};
}

Result<nlohmann::json> ControlApi::StartJob(const nlohmann::json& args) {
  ArgReader reader("job-start", args);
  jobs::JobSpec spec;
  const auto kind = reader.Required(reader.String("kind", 32), "kind");
  if (auto name = reader.String("name", 128)) spec.name = *name;
  if (auto devices = reader.IntList("devices", 0, kMaxDevice, 1024)) {
    for (auto device : *devices) spec.devices.push_back(static_cast<int>(device));
  }
  if (auto n = reader.Int("load_rps", 1, 1'000'000)) spec.load_rps = static_cast<double>(*n);
  if (auto n = reader.Int("max_batch", 1, 4096)) spec.max_batch = static_cast<std::size_t>(*n);
  if (auto n = reader.Int("max_queue", 1, 1'000'000)) spec.max_queue = static_cast<std::size_t>(*n);
  if (auto n = reader.Int("steps", 1, 100'000'000)) spec.steps = static_cast<int>(*n);
  if (auto n = reader.Int("elements", 1, 1LL << 26)) spec.elements = static_cast<std::uint64_t>(*n);
  if (auto n = reader.Int("checkpoint_every", 1, 1'000'000))
    spec.checkpoint_every = static_cast<int>(*n);
  if (auto n = reader.Int("min_ranks", 1, 1024)) spec.min_ranks = static_cast<int>(*n);
  if (auto grow = reader.Bool("grow_on_return")) spec.grow_on_return = *grow;
  if (auto n = reader.Int("kv_bytes", 4096, 1LL << 34))
    spec.kv_bytes = static_cast<std::uint64_t>(*n);
  if (auto n = reader.Int("tokens_per_block", 1, 4096))
    spec.tokens_per_block = static_cast<std::uint32_t>(*n);
  const auto preemption = reader.String("preemption", 16);
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  const auto parsed = jobs::ParseJobKind(*kind);
  if (!parsed)
    return Fail(ErrorCode::kInvalidArgument,
                "bad argument 'kind' for job-start: must be inference, llm or collective");
  spec.kind = *parsed;
  if (preemption) {
    const auto policy = jobs::ParsePreemption(*preemption);
    if (!policy)
      return Fail(ErrorCode::kInvalidArgument,
                  "bad argument 'preemption' for job-start: must be recompute or swap");
    spec.preemption = *policy;
  }
  const std::string name = spec.name;
  if (auto started = parts_.jobs.Start(std::move(spec)); !started) return Fail(started.error());
  RASD_LOG_INFO("job '{}' started by an operator", name);
  return nlohmann::json{{"name", name}, {"started", true}};
}

Result<nlohmann::json> ControlApi::StopJob(const nlohmann::json& args) {
  ArgReader reader("job-stop", args);
  const auto name = reader.Required(reader.String("name", 128), "name");
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  if (auto stopped = parts_.jobs.Stop(*name); !stopped) return Fail(stopped.error());
  RASD_LOG_INFO("job '{}' stopped by an operator", *name);
  return nlohmann::json{{"name", *name}, {"stopped", true}};
}

void ControlApi::Infer(const nlohmann::json& args, AsyncReply reply) {
  ArgReader reader("infer", args);
  const std::string job = reader.String("job", 128).value_or("");
  std::optional<std::vector<float>> input = reader.NumberList("input", 65536);
  const std::uint64_t seed = reader.Unsigned("seed", UINT64_MAX).value_or(0);
  if (auto ok = reader.Finish(); !ok) return reply(Fail(ok.error()));
  auto service = parts_.jobs.Inference(job);
  if (!service) {
    return reply(Fail(ErrorCode::kNotFound, fmt::format("no inference job '{}'", job)));
  }
  // Without an input: the load generator's input number `seed`.
  if (!input) input = jobs::LoadGenerator::InputFor(seed, jobs::MlpModel{}.inputs);
  const auto started = parts_.loop.Now();
  const std::shared_ptr<const common::Clock> clock = parts_.loop.SharedClock();
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

void ControlApi::ChangeDeviceState(const std::string& command, const nlohmann::json& args,
                                   AsyncReply reply) {
  ArgReader reader(command, args);
  const auto device = reader.Required(reader.Int("device", 0, kMaxDevice), "device");
  const std::string reason = reader.String("reason", 512).value_or("");
  const bool force = command == "undrain" && reader.Bool("force").value_or(false);
  std::optional<std::chrono::milliseconds> deadline;
  if (command == "drain") {
    if (auto ms = reader.Int("deadline_ms", 0, 86'400'000))
      deadline = std::chrono::milliseconds(*ms);
  }
  if (auto ok = reader.Finish(); !ok) return reply(Fail(ok.error()));
  const int index = static_cast<int>(*device);
  auto answer = [this, reply](Result<StateChange> change) {
    if (!change) return reply(Fail(change.error()));
    reply(StateChangeJson(*change));
  };
  if (command == "isolate") return answer(parts_.lifecycle.Isolate(index, reason));
  if (command == "drain") return answer(parts_.lifecycle.Drain(index, reason, deadline));
  parts_.lifecycle.Undrain(index, reason, force, std::move(answer));
}

void ControlApi::Backup(const nlohmann::json& args, AsyncReply reply) {
  ArgReader reader("backup", args);
  const auto file = reader.Required(reader.String("file", 4096), "file");
  const bool force = reader.Bool("force").value_or(false);
  if (auto ok = reader.Finish(); !ok) return reply(Fail(ok.error()));
  // rasd's working directory is not the caller's: rasctl resolves it.
  if (!std::filesystem::path(*file).is_absolute()) {
    return reply(Fail(ErrorCode::kInvalidArgument,
                      "bad argument 'file' for backup: must be an absolute path"));
  }
  if (backup_) {
    return reply(Fail(ErrorCode::kUnavailable,
                      fmt::format("a backup to {} is running; try again when it is done",
                                  backup_->backup->Destination().string())));
  }
  auto started = parts_.store.StartBackup(*file, force);
  if (!started) {
    if (started.error().code == ErrorCode::kAlreadyExists) {
      return reply(Fail(ErrorCode::kAlreadyExists,
                        started.error().message + " (--force replaces it)"));
    }
    return reply(Fail(started.error()));
  }
  RASD_LOG_INFO("backup of the state database to {} started", *file);
  backup_ = std::make_shared<RunningBackup>(RunningBackup{std::move(*started), std::move(reply)});
  PostBackupSlice();
}

void ControlApi::PostBackupSlice() {
  parts_.loop.Post([this, weak = std::weak_ptr<RunningBackup>(backup_)] {
    if (auto running = weak.lock()) StepBackup();
  });
}

void ControlApi::StepBackup() {
  RunningBackup& running = *backup_;
  auto done = running.backup->Step(kBackupPagesPerSlice);
  if (done && !*done) return PostBackupSlice();
  rasd::Status detached = done ? running.backup->Detach() : rasd::Status(Fail(done.error()));
  if (!detached) {
    RASD_LOG_ERROR("backup of the state database failed: {}", detached.error().message);
    running.reply(Fail(detached.error()));
    backup_.reset();
    return;
  }
  // Off the loop from here: the backup no longer touches the store.
  running.finisher = std::thread([this, &running, weak = std::weak_ptr<RunningBackup>(backup_)] {
    auto summary = running.backup->Finish();
    running.backup.reset();
    if (summary) {
      RASD_LOG_INFO("backup of the state database written to {} ({} bytes, {} pages)",
                   summary->file.string(), summary->bytes, summary->pages);
      running.reply(nlohmann::json{{"file", summary->file.string()},
                                   {"bytes", summary->bytes},
                                   {"pages", summary->pages}});
    } else {
      RASD_LOG_ERROR("backup of the state database failed: {}", summary.error().message);
      running.reply(Fail(summary.error()));
    }
    parts_.loop.Post([this, weak] {
      if (auto alive = weak.lock()) EndBackup();
    });
  });
}

void ControlApi::EndBackup() {
  if (backup_->finisher.joinable()) backup_->finisher.join();
  backup_.reset();  // the next backup may start from here on
}

ControlApi::~ControlApi() {
  if (backup_ && backup_->finisher.joinable()) backup_->finisher.join();
}

}  // namespace rasd::daemon
