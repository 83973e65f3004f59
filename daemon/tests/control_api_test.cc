// ControlApi on a SimulatedEventLoop over a real store and a simulator
// runtime, without a socket: the command table and who may run each
// command, the views' filters and argument errors, the views following
// DeviceHealth, state changes answered through their replies, and a store
// that cannot be read answered with its error where a view needs it (and
// not where the view's state is in memory).

#include "control_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using runtime::HealthState;

class ControlApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("control-api");
    fs::create_directories(dir_ / "host/proc/sys/kernel/random");
    std::ofstream(dir_ / "host/proc/sys/kernel/random/boot_id") << "test-boot\n";
    host_ = std::make_unique<common::HostEnv>(dir_ / "host", loop_.SharedClock());
    auto store = ras::StateStore::Open(dir_ / "state", loop_.SharedClock());
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    store_ = std::move(*store);
    runtime_ =
        testing::SimRuntime({.memory_bytes_per_device = 32 << 20, .arena_bytes = 8 << 20}, &sim_);
    ASSERT_NE(runtime_, nullptr);
    jobs_ = std::make_unique<jobs::JobManager>(*runtime_, 1000ms);
    health_ = std::make_unique<DeviceHealth>(loop_, *runtime_, *store_);
    ASSERT_TRUE(health_->Restore().has_value());
    node_fault_ = std::make_unique<NodeFault>(*store_, loop_.GetClock());
    DeviceLifecycle::Options lifecycle;
    lifecycle.self_test.pattern_bytes = 4 << 20;
    lifecycle_ = std::make_unique<DeviceLifecycle>(loop_, *runtime_, *health_, *node_fault_, *jobs_,
                                                   *store_, nullptr, lifecycle);
    const Config::Ras sources = testing::NoRasSources();
    ingest_ =
        std::make_unique<RasIngest>(loop_, *host_, *store_, *runtime_, sources, [](SourceBatch) {});
    ASSERT_TRUE(ingest_->Start().has_value());
    injection_ = std::make_unique<FaultInjection>(*runtime_, *host_, *ingest_, Config::Inject{});
    processes_ = SystemProcessTable();
    auto reason_of = [this](int device) { return health_->StatusOf(device).reason; };
    workloads_ = std::make_unique<Workloads>(loop_, *runtime_, *processes_, store_.get(),
                                             Workloads::Options{}, reason_of);
    watchers_ = std::make_unique<Watchers>(loop_, *runtime_, reason_of);
    recovery_ = std::make_unique<DeviceRecovery>(loop_, *runtime_, store_.get(), "test-boot");
    api_ = std::make_unique<ControlApi>(
        ControlApi::Parts{.loop = loop_,
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
                          .is_admin = [](const PeerCredentials& peer) { return peer.uid == 0; },
                          .status =
                              [] {
                                return Result<json>(json{{"version", "test"}});
                              },
                          .reload =
                              [] {
                                return Result<json>(json{{"reloaded", true}});
                              },
                          .rdma_ports = nullptr,
                          .link_clears = nullptr,
                          .missing_backends = {},
                          .scheduler = nullptr});
  }
  // A read's answer: without a reader thread the reply comes at once.
  Result<json> Read(void (ControlApi::*handler)(const json&, AsyncReply), const json& args) {
    std::optional<Result<json>> answer;
    ((*api_).*handler)(args, [&answer](Result<json> reply) { answer = std::move(reply); });
    EXPECT_TRUE(answer.has_value()) << "no reply";
    return answer ? std::move(*answer) : Fail(ErrorCode::kInternal, "no reply");
  }
  void TearDown() override {
    api_.reset();
    recovery_.reset();
    watchers_.reset();
    workloads_.reset();
    injection_.reset();
    ingest_.reset();
    lifecycle_.reset();
    loop_.RunUntilIdle();
    node_fault_.reset();
    health_.reset();
    jobs_.reset();
    runtime_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // Runs an asynchronous command to its reply, turning the loop meanwhile
  // (a self-test answers from its worker through the loop).
  Result<json> RunAsync(const std::string& command, const json& args) {
    std::optional<Result<json>> answer;
    api_->ChangeDeviceState(command, args, [&](Result<json> reply) { answer = std::move(reply); });
    const bool answered = rasd::testing::Eventually(
        [&] {
          loop_.RunUntilIdle();
          return answer.has_value();
        },
        20s);
    if (!answered) return Fail(ErrorCode::kTimeout, command + " never answered");
    return *answer;
  }

  void StoreEvents() {
    ras::StoreBatch batch;
    const auto now = loop_.GetClock().Wall();
    batch.events.push_back({.time = now - 2s,
                            .source = "kmsg",
                            .origin = "nvidia_xid",
                            .severity = ras::Severity::kFatal,
                            .device = 1,
                            .summary = "Xid 79 on device 1"});
    batch.events.push_back({.time = now - 1s,
                            .source = "edac",
                            .origin = "edac",
                            .severity = ras::Severity::kCe,
                            .summary = "corrected DRAM error"});
    batch.events.back().count = 3;
    batch.events.push_back({.time = now,
                            .source = "kmsg",
                            .origin = "nvidia_xid",
                            .severity = ras::Severity::kUce,
                            .device = 0,
                            .summary = "Xid 48 on device 0"});
    batch.pages.push_back({(*runtime_->GetDevice(0))->Properties().uuid, 0x20000, "UCNA", now});
    batch.pages.push_back({"GPU-gone", 0x1000, "SRAO", now});
    ASSERT_TRUE(store_->Commit(batch).has_value());
  }

  fs::path dir_;
  common::SimulatedEventLoop loop_;
  std::unique_ptr<common::HostEnv> host_;
  std::unique_ptr<ras::StateStore> store_;
  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<jobs::JobManager> jobs_;
  std::unique_ptr<DeviceHealth> health_;
  std::unique_ptr<NodeFault> node_fault_;
  std::unique_ptr<DeviceLifecycle> lifecycle_;
  std::unique_ptr<RasIngest> ingest_;
  std::unique_ptr<FaultInjection> injection_;
  std::unique_ptr<ProcessTable> processes_;
  std::unique_ptr<Workloads> workloads_;
  std::unique_ptr<Watchers> watchers_;
  std::unique_ptr<DeviceRecovery> recovery_;
  std::unique_ptr<ControlApi> api_;
};

TEST_F(ControlApiTest, TheTableHasEveryCommandAndOnlyStateChangesNeedAnAdmin) {
  const auto commands = api_->Commands();
  std::set<std::string> names, admin_only;
  for (const auto& [name, command] : commands) {
    names.insert(name);
    if (command.changes_state) admin_only.insert(name);
    const int handlers =
        (command.run ? 1 : 0) + (command.run_async ? 1 : 0) + (command.run_subscribe ? 1 : 0);
    EXPECT_EQ(handlers, 1) << name << " must have exactly one handler";
  }
  EXPECT_EQ(names, (std::set<std::string>{"actions",   "attach",   "backup",  "check",   "devices",
                                          "drain",     "events",   "infer",   "inject",  "isolate",
                                          "job-start", "job-stop", "jobs",    "ping",    "reload",
                                          "retired",   "status",   "summary", "undrain", "watch"}));
  EXPECT_EQ(admin_only, (std::set<std::string>{"backup", "drain", "infer", "inject", "isolate",
                                               "job-start", "job-stop", "reload", "undrain"}));
  // A command's arguments reach its handler.
  auto pong = commands.at("ping").run({}, {});
  ASSERT_TRUE(pong.has_value());
  EXPECT_EQ((*pong)["pong"], true);
}

TEST_F(ControlApiTest, EventsAreFilteredBySeverityDeviceAndIdAndBadArgumentsAreNamed) {
  StoreEvents();
  auto all = Read(&ControlApi::Events, json::object());
  ASSERT_TRUE(all.has_value()) << all.error().message;
  ASSERT_EQ((*all)["events"].size(), 3u);
  EXPECT_EQ((*all)["events"][0]["summary"], "Xid 79 on device 1") << "oldest first";
  EXPECT_EQ((*all)["events"][1]["count"], 3);
  EXPECT_TRUE((*all)["events"][1]["device"].is_null());

  auto fatal = Read(&ControlApi::Events, {{"severity", "FATAL"}});
  ASSERT_TRUE(fatal.has_value());
  ASSERT_EQ((*fatal)["events"].size(), 1u);
  EXPECT_EQ((*fatal)["events"][0]["device"], 1);

  auto on_zero = Read(&ControlApi::Events, {{"device", 0}});
  ASSERT_TRUE(on_zero.has_value());
  ASSERT_EQ((*on_zero)["events"].size(), 1u);
  EXPECT_EQ((*on_zero)["events"][0]["severity"], "UCE");

  const std::int64_t first = (*all)["events"][0]["id"];
  auto after = Read(&ControlApi::Events, {{"after_id", first}, {"limit", 1}});
  ASSERT_TRUE(after.has_value());
  ASSERT_EQ((*after)["events"].size(), 1u);
  EXPECT_EQ((*after)["events"][0]["summary"], "Xid 48 on device 0") << "the newest `limit`";

  const std::int64_t last = (*all)["events"][2]["id"];
  auto chosen = Read(&ControlApi::Events, {{"ids", {first, last, 999999}}});
  ASSERT_TRUE(chosen.has_value());
  ASSERT_EQ((*chosen)["events"].size(), 2u) << "the rows named that exist";
  EXPECT_EQ((*chosen)["events"][0]["id"], first);
  EXPECT_EQ((*chosen)["events"][1]["id"], last);

  auto recent = Read(&ControlApi::Events, {{"since_seconds", 0.5}});
  ASSERT_TRUE(recent.has_value());
  EXPECT_EQ((*recent)["events"].size(), 1u);

  for (const auto& [args, message] : std::vector<std::pair<json, std::string>>{
           {{{"severity", "bad"}},
            "bad argument 'severity' for events: must be one of CE, UCNA, SRAO, SRAR, UCE, "
            "FATAL, INFO"},
           {{{"limit", 0}}, "bad argument 'limit' for events: must be an integer in 1..10000"},
           {{{"device", "one"}},
            "bad argument 'device' for events: must be an integer in 0..1048576"},
           {{{"sevrity", "CE"}},
            "unknown argument 'sevrity' for events (takes: after_id, device, ids, limit, "
            "severity, since_seconds)"},
           {{{"ids", {0}}},
            "bad argument 'ids' for events: must be a list of at most 256 integers in "
            "1..9223372036854775807"}}) {
    auto refused = Read(&ControlApi::Events, args);
    ASSERT_FALSE(refused.has_value()) << args.dump();
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(refused.error().message, message);
  }

  auto summary = api_->Summary(json::object());
  ASSERT_TRUE(summary.has_value());
  std::uint64_t errors = 0;
  for (const auto& row : (*summary)["rows"]) errors += row["errors"].get<std::uint64_t>();
  EXPECT_EQ(errors, 5u) << "an EDAC line's count is its errors";
}

TEST_F(ControlApiTest, RetiredPagesAreListedByDeviceWithAnUnknownDeviceShownAsNull) {
  StoreEvents();
  auto pages = Read(&ControlApi::Retired, json::object());
  ASSERT_TRUE(pages.has_value());
  ASSERT_EQ((*pages)["pages"].size(), 2u);
  bool gone_seen = false;
  for (const auto& page : (*pages)["pages"]) {
    if (page["uuid"] == "GPU-gone") {
      gone_seen = true;
      EXPECT_TRUE(page["device"].is_null()) << "a device this machine no longer has";
    } else {
      EXPECT_EQ(page["device"], 0);
      EXPECT_EQ(page["address"], "0x20000");
    }
  }
  EXPECT_TRUE(gone_seen);
  auto on_one = Read(&ControlApi::Retired, {{"device", 1}});
  ASSERT_TRUE(on_one.has_value());
  EXPECT_TRUE((*on_one)["pages"].empty());
}

TEST_F(ControlApiTest, DevicesAndCheckFollowEveryHoldOfDeviceHealth) {
  auto check = api_->Check(json::object());
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ((*check)["health"], "ok");
  EXPECT_TRUE((*check)["findings"].empty());
  EXPECT_EQ((*check)["scheduler"]["kind"], "none");

  ASSERT_TRUE(health_
                  ->DecideAndSave({.device = 1,
                                   .cause = HealthCause::kPolicy,
                                   .target = HealthState::kIsolated,
                                   .reason = "Xid 79: fallen off the bus",
                                   .rule = "fatal-device"})
                  .has_value());
  // The policy's action rows are the pipeline's to write, as here.
  ASSERT_TRUE(store_
                  ->RecordAction({.time = loop_.GetClock().Wall(),
                                  .action = "isolate-device",
                                  .device = 1,
                                  .rule = "fatal-device",
                                  .reason = "Xid 79: fallen off the bus",
                                  .result = "ok"})
                  .has_value());
  ASSERT_TRUE(health_
                  ->DecideAndSave({.device = 0,
                                   .cause = HealthCause::kLink,
                                   .target = HealthState::kDegraded,
                                   .reason = "NVLink 2 down"})
                  .has_value());

  auto devices = api_->Devices(json::object());
  ASSERT_TRUE(devices.has_value());
  ASSERT_EQ((*devices)["devices"].size(), 2u);
  const json& zero = (*devices)["devices"][0];
  const json& one = (*devices)["devices"][1];
  EXPECT_EQ(zero["state"], "degraded");
  EXPECT_EQ(zero["takes_new_work"], true);
  ASSERT_EQ(zero["held_by"].size(), 1u);
  EXPECT_EQ(zero["held_by"][0]["cause"], "link");
  EXPECT_EQ(one["state"], "isolated");
  EXPECT_EQ(one["takes_new_work"], false);
  EXPECT_EQ(one["reason"], "Xid 79: fallen off the bus");
  ASSERT_EQ(one["held_by"].size(), 1u);
  EXPECT_EQ(one["held_by"][0]["cause"], "policy");
  ASSERT_TRUE(one["recent_actions"].is_array());
  ASSERT_EQ(one["recent_actions"].size(), 1u);
  EXPECT_EQ(one["recent_actions"][0]["rule"], "fatal-device");
  EXPECT_FALSE(one.contains("store_error"));

  auto only = api_->Devices({{"device", 1}});
  ASSERT_TRUE(only.has_value());
  ASSERT_EQ((*only)["devices"].size(), 1u);
  EXPECT_EQ((*only)["devices"][0]["index"], 1);
  auto missing = api_->Devices({{"device", 7}});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message, "no device 7");

  check = api_->Check(json::object());
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ((*check)["health"], "problem");
  ASSERT_EQ((*check)["findings"].size(), 2u);
  EXPECT_EQ((*check)["findings"][0]["device"], 1) << "the worst finding first";
  EXPECT_EQ((*check)["findings"][0]["level"], "problem");
  EXPECT_EQ((*check)["findings"][1]["level"], "degraded");
  EXPECT_EQ((*check)["devices"]["by_state"]["isolated"], 1);
  EXPECT_EQ((*check)["devices"]["by_state"]["degraded"], 1);

  auto status = api_->Status(json::object());
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ((*status)["version"], "test") << "the daemon's own part";
  EXPECT_EQ((*status)["devices"]["by_health"]["isolated"], 1);
  EXPECT_EQ((*status)["devices"]["count"], 2);
}

TEST_F(ControlApiTest, IsolateDrainAndUndrainAnswerThroughTheirReplies) {
  auto drained = RunAsync("drain", {{"device", 0}, {"reason", "maintenance"}, {"deadline_ms", 0}});
  ASSERT_TRUE(drained.has_value()) << drained.error().message;
  EXPECT_EQ((*drained)["was"], "healthy");
  EXPECT_EQ((*drained)["deadline_ms"], 0);
  loop_.RunUntilIdle();
  EXPECT_NE((*runtime_->GetDevice(0))->Health(), HealthState::kHealthy);

  auto isolated = RunAsync("isolate", {{"device", 1}, {"reason", "bad fan"}});
  ASSERT_TRUE(isolated.has_value()) << isolated.error().message;
  EXPECT_EQ((*isolated)["state"], "isolated");
  EXPECT_EQ(health_->StatusOf(1).reason, "bad fan");

  auto undrained = RunAsync("undrain", {{"device", 1}});
  ASSERT_TRUE(undrained.has_value()) << undrained.error().message;
  EXPECT_EQ((*undrained)["state"], "healthy");
  EXPECT_EQ((*undrained)["self_test"]["passed"], true);
  EXPECT_EQ((*undrained)["forced"], false);

  // Arguments are read before anything changes.
  for (const auto& [command, args, message] :
       std::vector<std::tuple<std::string, json, std::string>>{
           {"isolate", json::object(), "isolate needs device"},
           {"drain",
            {{"device", 0}, {"force", true}},
            "unknown argument 'force' for drain (takes: deadline_ms, device, reason)"},
           {"undrain",
            {{"device", 0}, {"deadline_ms", 5}},
            "unknown argument 'deadline_ms' for undrain (takes: device, force, reason)"}}) {
    auto refused = RunAsync(command, args);
    ASSERT_FALSE(refused.has_value()) << command << " " << args.dump();
    EXPECT_EQ(refused.error().message, message);
  }
  auto no_device = RunAsync("isolate", {{"device", 5}});
  ASSERT_FALSE(no_device.has_value());
  EXPECT_EQ(health_->StatusOf(0).holds.size(), 1u) << "device 0 is still only drained";
}

TEST_F(ControlApiTest, AStoreThatCannotBeReadFailsTheViewsThatReadItAndNotTheOthers) {
  StoreEvents();
  ASSERT_TRUE(health_
                  ->DecideAndSave({.device = 1,
                                   .cause = HealthCause::kPolicy,
                                   .target = HealthState::kIsolated,
                                   .reason = "Xid 79",
                                   .rule = "fatal-device"})
                  .has_value());
  store_->SetReadFault([](std::string_view what) -> std::optional<Error> {
    return Error{ErrorCode::kIoError, std::string("disk I/O error reading ") + std::string(what)};
  });
  auto events = Read(&ControlApi::Events, json::object());
  ASSERT_FALSE(events.has_value());
  EXPECT_EQ(events.error().code, ErrorCode::kIoError);
  EXPECT_EQ(events.error().message, "disk I/O error reading events");
  auto summary = api_->Summary(json::object());
  ASSERT_FALSE(summary.has_value());
  EXPECT_EQ(summary.error().message, "disk I/O error reading event summary");
  auto actions = Read(&ControlApi::Actions, json::object());
  ASSERT_FALSE(actions.has_value());
  EXPECT_EQ(actions.error().message, "disk I/O error reading actions");
  auto retired = Read(&ControlApi::Retired, json::object());
  ASSERT_FALSE(retired.has_value());
  EXPECT_EQ(retired.error().message, "disk I/O error reading retired pages");
  auto watch = api_->Watch(json::object(), [](const json&) { return true; });
  ASSERT_FALSE(watch.has_value());
  EXPECT_EQ(watch.error().message, "disk I/O error reading events");

  // The devices' states are in memory: shown, with what the store could
  // not tell marked unknown rather than empty.
  auto devices = api_->Devices(json::object());
  ASSERT_TRUE(devices.has_value()) << devices.error().message;
  const json& one = (*devices)["devices"][1];
  EXPECT_EQ(one["state"], "isolated");
  EXPECT_TRUE(one["recent_events"].is_null());
  EXPECT_TRUE(one["recent_actions"].is_null());
  EXPECT_EQ(one["store_error"], "disk I/O error reading events");
  auto check = api_->Check(json::object());
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ((*check)["health"], "problem");
  auto status = api_->Status(json::object());
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ((*status)["events"]["total"], 5) << "the counts are kept in memory";

  store_->SetReadFault(nullptr);
  devices = api_->Devices({{"device", 1}});
  ASSERT_TRUE(devices.has_value());
  EXPECT_TRUE((*devices)["devices"][0]["recent_events"].is_array());
  EXPECT_FALSE((*devices)["devices"][0].contains("store_error"));
}

TEST_F(ControlApiTest, AttachAndJobCommandsRefuseBadArgumentsWithOneClearError) {
  auto no_signal =
      api_->Attach({{"pid", ::getpid()}, {"devices", {0}}, {"drain_signal", "HUPP"}},
                   PeerCredentials{.uid = ::getuid()}, [](const json&) { return true; });
  ASSERT_FALSE(no_signal.has_value());
  EXPECT_EQ(no_signal.error().message,
            "attach: drain_signal \"HUPP\" is not a signal (TERM, INT, USR1, 15, ...)");
  auto no_devices = api_->Attach({{"pid", ::getpid()}}, PeerCredentials{.uid = ::getuid()},
                                 [](const json&) { return true; });
  ASSERT_FALSE(no_devices.has_value());
  EXPECT_EQ(no_devices.error().message, "attach needs devices");

  auto kind = api_->StartJob({{"kind", "training"}});
  ASSERT_FALSE(kind.has_value());
  EXPECT_EQ(kind.error().message,
            "bad argument 'kind' for job-start: must be inference, llm or collective");
  auto policy = api_->StartJob({{"kind", "llm"}, {"name", "chat"}, {"preemption", "evict"}});
  ASSERT_FALSE(policy.has_value());
  EXPECT_EQ(policy.error().message,
            "bad argument 'preemption' for job-start: must be recompute or swap");
  auto stop = api_->StopJob({{"name", "none-such"}});
  ASSERT_FALSE(stop.has_value());
  auto jobs = api_->Jobs(json::object());
  ASSERT_TRUE(jobs.has_value());
  EXPECT_TRUE((*jobs)["jobs"].empty());
  EXPECT_EQ(jobs_->Count(), 0u) << "nothing was started by a refused command";
}

}  // namespace
}  // namespace rasd::daemon
