#include "actuator.h"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <nlohmann/json.hpp>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "arg_reader.h"
#include "rasd/common/logging.h"
#include "rasd/common/unique_fd.h"
#include "rasd/common/subprocess.h"
#include "rasd/common/unix_nanos.h"

namespace rasd::daemon {

std::string_view ActionResultName(ActionResult result) {
  switch (result) {
    case ActionResult::kOk:
      return "ok";
    case ActionResult::kFailed:
      return "failed";
    case ActionResult::kSkipped:
      return "skipped";
    case ActionResult::kDisabled:
      return "disabled";
    case ActionResult::kStarted:
      return "started";
  }
  return "unknown";
}

namespace {

// The event, for a hook, as RASD_* variables; values are data, never
// parsed by a shell (there is none).
std::vector<std::string> HookEnvironment(const ras::Action& action, const ras::RasEvent& event,
                                         std::optional<std::int64_t> event_id) {
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "RASD_SEVERITY=" + std::string(ras::SeverityName(event.severity)),
      "RASD_ORIGIN=" + event.origin,
      "RASD_SOURCE=" + event.source,
      fmt::format("RASD_COUNT={}", event.count),
      "RASD_SUMMARY=" + event.summary.substr(0, 1024),
      "RASD_RULE=" + action.rule,
      "RASD_REASON=" + action.reason,
  };
  if (event_id) env.push_back(fmt::format("RASD_EVENT_ID={}", *event_id));
  if (event.device) env.push_back(fmt::format("RASD_DEVICE={}", *event.device));
  if (event.address) env.push_back("RASD_ADDRESS=" + event.address->printed);
  if (event.pci_bdf) env.push_back("RASD_PCI_BDF=" + *event.pci_bdf);
  if (event.mc) env.push_back(fmt::format("RASD_MC={}", *event.mc));
  if (event.vendor_code) env.push_back(fmt::format("RASD_VENDOR_CODE={}", *event.vendor_code));
  return env;
}

}  // namespace

Actuator::Actuator(const common::HostEnv& host, ras::StateStore& store, runtime::Runtime& runtime,
                   DeviceHealth& health, NodeFault& node, Options options)
    : host_(host),
      store_(store),
      runtime_(runtime),
      health_(health),
      node_(node),
      options_(options) {}

Actuator::~Actuator() {
  std::unique_lock lock(mutex_);
  hooks_done_.wait(lock, [this] { return hooks_running_ == 0; });
}

void Actuator::SetOptions(Options options) { options_ = options; }

Status Actuator::Restore() {
  std::map<std::string, int> by_uuid;
  for (const auto& device : runtime_.Devices())
    by_uuid[DeviceUuid(runtime_, device->Index())] = device->Index();
  auto pages = store_.LoadRetiredPages();
  if (!pages) {
    return Fail(pages.error().code, "cannot read the retired pages: " + pages.error().message);
  }
  std::map<int, std::size_t> restored;
  for (const auto& page : *pages) {
    auto index = by_uuid.find(page.device_uuid);
    if (index == by_uuid.end()) continue;
    auto pool = runtime_.Pool(index->second);
    if (pool && (*pool)->Retire(page.address)) ++restored[index->second];
  }
  for (const auto& [device, count] : restored)
    RASD_LOG_INFO("device {}: {} retired page(s) taken out of the pool again", device, count);
  pages_restored_ = true;
  return {};
}

Status Actuator::EnsurePagesRestored() {
  if (pages_restored_) return {};
  return Restore();
}

std::map<std::string, std::uint64_t> Actuator::Counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

void Actuator::Count(const std::string& action, const std::string& result) {
  std::lock_guard lock(mutex_);
  ++counts_[action + " " + result];
}

ras::ActionRecord Actuator::Store(ras::ActionRecord record) {
  Count(record.action, record.result);
  pending_records_.push_back({record, pending_index_});
  return record;
}

ActionOutcome Actuator::Apply(const ras::Action& action, const ras::RasEvent& event,
                              std::size_t event_index) {
  pending_index_ = event_index;
  return Run(action, event, std::nullopt);
}

void Actuator::TakePending(ras::StoreBatch& batch) {
  for (auto& page : pending_pages_) batch.pages.push_back(std::move(page));
  pending_pages_.clear();
  for (auto& record : pending_records_) batch.actions.push_back(std::move(record));
  pending_records_.clear();
}

ras::ActionRecord Actuator::Execute(const ras::Action& action, const ras::RasEvent& event,
                                    std::optional<std::int64_t> event_id) {
  ActionOutcome outcome = Run(action, event, event_id);
  ras::StoreBatch batch;
  TakePending(batch);
  for (auto& row : batch.actions) {
    row.record.event_id = event_id;
    row.event_index.reset();
  }
  health_.TakePending(batch);
  if (batch.actions.empty() && batch.states.empty() && batch.pages.empty()) return outcome.record;
  if (auto stored = store_.Commit(batch); !stored) {
    // The action happened; failing to write it down must not undo it.
    RASD_LOG_ERROR("cannot store action {}: {}", outcome.record.action, stored.error().message);
  } else {
    health_.Committed();
    if (!stored->action_ids.empty() && outcome.record.action == batch.actions.front().record.action)
      outcome.record.id = stored->action_ids.front();
  }
  return outcome.record;
}

ActionOutcome Actuator::Run(const ras::Action& action, const ras::RasEvent& event,
                            std::optional<std::int64_t> event_id) {
  if (action.kind == ras::ActionKind::kRecord) {
    // The event itself is the record: a row per event would double the
    // store under a storm.
    Count("record", "ok");
    return {.record = {.event_id = event_id, .action = "record", .rule = action.rule,
                       .result = "ok"}};
  }
  Outcome outcome;
  // A withheld action (a record from before rasd's first start) is only
  // stored, as skipped: nothing is run for it.
  switch (action.withheld ? ras::ActionKind::kRecord : action.kind) {
    case ras::ActionKind::kRecord:
      if (action.withheld) {
        outcome = {ActionResult::kSkipped,
                   action.withheld_why.empty()
                       ? "not taken: logged before rasd's first start in this boot, and what it "
                         "acts on has passed"
                       : "not taken: " + action.withheld_why};
      }
      break;
    case ras::ActionKind::kRetirePage:
      outcome = RetirePage(action);
      break;
    case ras::ActionKind::kMarkAtRisk:
      outcome = MarkAtRisk(action);
      break;
    case ras::ActionKind::kKillConsumer:
      outcome = KillConsumer(action);
      break;
    case ras::ActionKind::kDegradeDevice:
      outcome = RaiseHealth(action, runtime::HealthState::kDegraded);
      break;
    case ras::ActionKind::kDrainDevice:
      outcome = RaiseHealth(action, runtime::HealthState::kDraining);
      break;
    case ras::ActionKind::kIsolateDevice:
      outcome = RaiseHealth(action, runtime::HealthState::kIsolated);
      break;
    case ras::ActionKind::kDrainNode:
      (void)node_.Declare(event.summary.empty() ? action.reason : event.summary);
      outcome =
          node_drainer_
              ? Outcome{ActionResult::kOk,
                        node_drainer_(event.summary.empty() ? action.reason : event.summary)}
              : Outcome{ActionResult::kSkipped,
                        "no scheduler is configured (scheduler.kind: none)"};
      break;
    case ras::ActionKind::kSoftOfflinePage:
      outcome = OfflineHostPage(action, /*hard=*/false);
      break;
    case ras::ActionKind::kHardOfflinePage:
      outcome = OfflineHostPage(action, /*hard=*/true);
      break;
    case ras::ActionKind::kRunHook:
      outcome = RunHook(action, event, event_id);
      break;
  }
  ras::ActionRecord record;
  record.event_id = event_id;
  record.time = host_.GetClock().Wall();
  record.action = std::string(ras::ActionKindName(action.kind));
  record.device = action.device;
  record.address = action.address;
  record.rule = action.rule;
  record.reason = action.reason;
  record.result = std::string(ActionResultName(outcome.result));
  record.detail = outcome.detail;
  const auto level =
      outcome.result == ActionResult::kFailed ? spdlog::level::err : spdlog::level::warn;
  // Each optional part formatted whole (GCC 12's -Wrestrict misreads
  // "literal" + std::string&& once Run is inlined at -O3).
  const std::string on_device = action.device ? fmt::format(" device {}", *action.device) : "";
  const std::string at_address =
      action.address ? fmt::format(" {}", ras::HexText(*action.address)) : "";
  const std::string detail = outcome.detail.empty() ? "" : fmt::format(": {}", outcome.detail);
  RASD_LOGGER_LOG(common::GetLogger("policy"), level, "{}{}{}: {} ({}; rule {}){}", record.action,
                  on_device, at_address, record.result, action.reason, action.rule, detail);
  return {.result = outcome.result,
          .health_change = outcome.health_change,
          .record = Store(std::move(record))};
}

Actuator::Outcome Actuator::RetirePage(const ras::Action& action) {
  const auto& address = action.address;
  if (!action.device || !address) return {ActionResult::kSkipped, "no device address in the event"};
  auto pool = runtime_.Pool(*action.device);
  if (!pool) return {ActionResult::kFailed, pool.error().message};
  // One retirement per page: a page reported again (a UCNA, then the SRAR
  // of the read that consumed it) keeps its first record and reason.
  if ((*pool)->IsRetired(*address)) {
    return {ActionResult::kSkipped, fmt::format("page holding 0x{:x} was retired already", *address)};
  }
  if (auto retired = (*pool)->Retire(*address); !retired) {
    if (retired.error().code == ErrorCode::kNotFound)
      return {ActionResult::kSkipped,
              fmt::format("0x{:x} is not in device {}'s pool", *address, *action.device)};
    return {ActionResult::kFailed, retired.error().message};
  }
  auto device = runtime_.GetDevice(*action.device);
  const std::uint64_t granularity =
      std::max<std::uint64_t>(1, (*device)->Properties().retire_granularity);
  const std::uint64_t page = *address / granularity * granularity;
  const ras::RetiredPageRecord saved_page{DeviceUuid(runtime_, *action.device), page, action.reason,
                                          host_.GetClock().Wall()};
  pending_pages_.push_back(saved_page);
  return {ActionResult::kOk, fmt::format("page 0x{:x} retired", page)};
}

Actuator::Outcome Actuator::KillConsumer(const ras::Action& action) {
  const auto& address = action.address;
  if (!address && action.pid && action.device) {
    // The record names the process, not the memory: only a workload rasd
    // follows (by pidfd) is a process rasd may kill.
    if (!consumer_killer_) return {ActionResult::kSkipped, "no workloads here to kill"};
    auto killed = consumer_killer_(*action.pid, *action.device, action.reason);
    if (!killed) return {ActionResult::kSkipped, killed.error().message};
    return {ActionResult::kOk, *killed};
  }
  if (!address && !action.pid && action.device && process_lister_ && consumer_killer_) {
    return KillOnlyProcessOnDevice(action);
  }
  if (!action.device || !address) {
    return {ActionResult::kSkipped,
            action.pid ? "the event names a process but no device"
                       : "the event names neither a device address nor a process"};
  }
  auto pool = runtime_.Pool(*action.device);
  if (!pool) return {ActionResult::kFailed, pool.error().message};
  const auto owner = (*pool)->OwnerOf(*address);
  if (!owner) return {ActionResult::kSkipped, "no live allocation holds that address"};
  if (owner->owner.empty()) return {ActionResult::kSkipped, "the allocation holding it has no owner job"};
  if (runtime_.ContainMemoryFault(owner->owner, *action.device, *address)) {
    // The job gives up the poisoned page's part of its work itself (the
    // LLM service: the KV blocks on it, and their sequences, recomputed).
    return {ActionResult::kOk,
            fmt::format("job {} contained it: the page of 0x{:x} on device {} is out of its use; "
                        "no stream aborted",
                        owner->owner, *address, *action.device)};
  }
  // A job is stopped as a whole, on every device it runs on; its owner
  // restarts it. Other jobs' streams, on those devices too, are untouched.
  const auto devices = runtime_.DevicesOf(owner->owner);
  const std::size_t aborted = runtime_.AbortOwner(
      owner->owner,
      fmt::format("consumed poisoned memory at 0x{:x} on device {}", *address, *action.device));
  return {ActionResult::kOk,
          fmt::format("job {} stopped: its {} stream(s) on device(s) {} aborted; no other job's",
                      owner->owner, aborted, fmt::join(devices, ","))};
}

Actuator::Outcome Actuator::KillOnlyProcessOnDevice(const ras::Action& action) {
  // Several processes on the GPU: any of them may have met the error, and
  // killing one on a guess could kill the wrong one. Only one is proof.
  auto listed = process_lister_(*action.device);
  if (!listed) {
    return {ActionResult::kSkipped,
            fmt::format("the event names no process, and the device's processes are not known: {}",
                        listed.error().message)};
  }
  if (listed->empty()) {
    return {ActionResult::kSkipped,
            "the event names no process, and NVML lists none computing on the device"};
  }
  if (listed->size() > 1) {
    return {ActionResult::kSkipped,
            fmt::format("the event names no process, and NVML lists {} computing on the device "
                        "(pids {}): which one met the error is not known, so none is killed",
                        listed->size(), fmt::join(*listed, ","))};
  }
  auto killed = consumer_killer_(listed->front(), *action.device, action.reason);
  if (!killed) {
    return {ActionResult::kSkipped,
            fmt::format("the only process NVML lists on the device: {}", killed.error().message)};
  }
  return {ActionResult::kOk,
          fmt::format("{} (the event named no process; it is the only one NVML lists on the "
                      "device)",
                      *killed)};
}

Actuator::Outcome Actuator::MarkAtRisk(const ras::Action& action) {
  const auto& address = action.address;
  if (!action.device || !address) return {ActionResult::kSkipped, "no device address in the event"};
  auto pool = runtime_.Pool(*action.device);
  if (!pool) return {ActionResult::kFailed, pool.error().message};
  const auto owner = (*pool)->OwnerOf(*address);
  if (!owner || owner->owner.empty()) return {ActionResult::kSkipped, "no job holds that address"};
  return {ActionResult::kOk, fmt::format("job {} holds the poisoned page", owner->owner)};
}

Actuator::Outcome Actuator::RaiseHealth(const ras::Action& action, runtime::HealthState state) {
  if (!action.device) return {ActionResult::kSkipped, "the event names no device"};
  // The policy's hold only grows; making things better is an operator's
  // call. A decision about a device already that bad still counts: it
  // stands when another cause lifts its own hold.
  auto decided = health_.Decide({.device = *action.device,
                                 .cause = HealthCause::kPolicy,
                                 .target = state,
                                 .reason = action.reason,
                                 .rule = action.rule});
  if (!decided) return {ActionResult::kFailed, decided.error().message};
  if (!decided->Changed())
    return {ActionResult::kOk, fmt::format("already {}", runtime::HealthStateName(decided->to))};
  return {ActionResult::kOk,
          fmt::format("{} -> {}", runtime::HealthStateName(decided->from),
                      runtime::HealthStateName(decided->to)),
          ActionOutcome::HealthChange{*action.device, decided->from, decided->to}};
}

bool Actuator::Acts(const ras::Action& action) const {
  if (action.withheld || action.kind == ras::ActionKind::kRecord) return false;
  const bool offline = action.kind == ras::ActionKind::kSoftOfflinePage ||
                       action.kind == ras::ActionKind::kHardOfflinePage;
  return !(offline && !options_.host_page_offline);
}

Actuator::Outcome Actuator::OfflineHostPage(const ras::Action& action, bool hard) {
  if (!options_.host_page_offline) return {ActionResult::kDisabled, "policy.host_page_offline is off"};
  const auto& address = action.address;
  if (!address || action.device) return {ActionResult::kSkipped, "no host physical address in the event"};
  const char* file = hard ? "/sys/devices/system/memory/hard_offline_page"
                          : "/sys/devices/system/memory/soft_offline_page";
  const std::string text = fmt::format("0x{:x}\n", *address & ~std::uint64_t{0xfff});
  if (auto written = host_.WriteFile(file, text); !written) {
    return {ActionResult::kFailed, written.error().message};
  }
  return {ActionResult::kOk, fmt::format("{} 0x{:x}", hard ? "hard-offlined" : "soft-offlined",
                            *address & ~std::uint64_t{0xfff})};
}

Actuator::Outcome Actuator::RunHook(const ras::Action& action, const ras::RasEvent& event,
                                    std::optional<std::int64_t> event_id) {
  if (action.hook.empty()) return {ActionResult::kSkipped, "the rule names no program"};
  {
    std::lock_guard lock(mutex_);
    if (hooks_running_ >= kMaxHooks)
      return {ActionResult::kSkipped, fmt::format("{} hooks are still running", hooks_running_)};
    ++hooks_running_;
  }
  auto env = HookEnvironment(action, event, event_id);
  if (suggester_) env.push_back("RASD_SUGGESTED_ACTION=" + suggester_(event));
  std::thread([this, argv = action.hook, env = std::move(env), timeout = options_.hook_timeout,
               rule = action.rule] {
    const common::ProgramResult result = common::RunProgram(argv, env, timeout);
    auto logger = common::GetLogger("policy");
    const char* outcome = common::ProgramOutcomeName(result.outcome);
    RASD_LOGGER_LOG(
        logger,
        result.outcome == common::ProgramOutcome::kOk ? spdlog::level::info : spdlog::level::err,
        "hook {} (rule {}): {}: {}{}", argv[0], rule, outcome, result.detail,
        result.output.empty() ? "" : "; output: " + result.output);
    std::lock_guard lock(mutex_);
    ++counts_[std::string("run-hook ") + outcome];
    --hooks_running_;
    hooks_done_.notify_all();
  }).detach();
  return {ActionResult::kStarted,
          fmt::format("{} (timeout {} ms)", action.hook.front(), options_.hook_timeout.count())};
}

}  // namespace rasd::daemon
