#include "device_health.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "arg_reader.h"
#include "rasd/common/logging.h"
#include "rasd/common/unix_nanos.h"

namespace rasd::daemon {

namespace {

constexpr HealthCause kCauses[] = {
    HealthCause::kPolicy,   HealthCause::kLink,
    HealthCause::kOperator, HealthCause::kSelfTest,
    HealthCause::kRecovery, HealthCause::kRestore,
    HealthCause::kProbe,    HealthCause::kSilentCorruption,
};

// The stored action for a change to `target` (the actions table's words).
std::string_view ActionFor(runtime::HealthState target) {
  switch (target) {
    case runtime::HealthState::kHealthy:
      return "undrain-device";
    case runtime::HealthState::kDegraded:
      return "degrade-device";
    case runtime::HealthState::kDraining:
      return "drain-device";
    case runtime::HealthState::kIsolated:
      return "isolate-device";
  }
  return "undrain-device";
}

}  // namespace

std::string_view HealthCauseName(HealthCause cause) {
  switch (cause) {
    case HealthCause::kPolicy:
      return "policy";
    case HealthCause::kLink:
      return "link";
    case HealthCause::kOperator:
      return "operator";
    case HealthCause::kSelfTest:
      return "self-test";
    case HealthCause::kRecovery:
      return "auto-recover";
    case HealthCause::kRestore:
      return "restore";
    case HealthCause::kProbe:
      return "probe";
    case HealthCause::kSilentCorruption:
      return "silent-corruption";
  }
  return "unknown";
}

std::optional<HealthCause> ParseHealthCause(std::string_view name) {
  for (HealthCause cause : kCauses)
    if (HealthCauseName(cause) == name) return cause;
  return std::nullopt;
}

std::string DeviceUuid(runtime::Runtime& runtime, int device) {
  auto found = runtime.GetDevice(device);
  if (!found) return fmt::format("index-{}", device);
  const auto& uuid = (*found)->Properties().uuid;
  return uuid.empty() ? fmt::format("index-{}", device) : uuid;
}

DeviceHealth::DeviceHealth(common::EventLoop& loop, runtime::Runtime& runtime,
                           ras::StateStore& store)
    : loop_(loop), runtime_(runtime), store_(store) {}

runtime::HealthState DeviceHealth::Effective(const Record& record) const {
  runtime::HealthState worst = runtime::HealthState::kHealthy;
  for (const auto& [cause, hold] : record.holds) worst = std::max(worst, hold.state);
  return worst;
}

runtime::HealthState DeviceHealth::StateOf(int device) const {
  auto found = records_.find(device);
  return found == records_.end() ? runtime::HealthState::kHealthy : Effective(found->second);
}

bool DeviceHealth::Holds(int device, HealthCause cause) const {
  auto found = records_.find(device);
  return found != records_.end() && found->second.holds.contains(cause);
}

runtime::HealthState DeviceHealth::WorstExcept(int device, HealthCause cause) const {
  runtime::HealthState worst = runtime::HealthState::kHealthy;
  auto found = records_.find(device);
  if (found == records_.end()) return worst;
  for (const auto& [holder, hold] : found->second.holds)
    if (holder != cause) worst = std::max(worst, hold.state);
  return worst;
}

DeviceStatus DeviceHealth::StatusOf(int device) const {
  DeviceStatus status;
  auto found = records_.find(device);
  if (found == records_.end()) return status;
  const Record& record = found->second;
  status.state = Effective(record);
  status.reason = record.reason;
  status.since = record.since;
  const HoldEntry* worst = nullptr;
  for (const auto& [cause, hold] : record.holds) {
    status.holds.push_back({cause, hold.state, hold.reason, hold.since});
    if (worst == nullptr || hold.state > worst->state ||
        (hold.state == worst->state && hold.order > worst->order)) {
      worst = &hold;
      status.cause = cause;
    }
  }
  if (worst != nullptr) status.reason = worst->reason;
  return status;
}

DeviceHealth::Subscription DeviceHealth::Subscribe(Subscriber subscriber) {
  const std::uint64_t id = next_subscriber_++;
  subscribers_->emplace(id, std::move(subscriber));
  std::weak_ptr<std::map<std::uint64_t, Subscriber>> list = subscribers_;
  return std::shared_ptr<void>(nullptr, [list, id](void*) {
    if (auto subscribers = list.lock()) subscribers->erase(id);
  });
}

void DeviceHealth::Publish(const DeviceStateChanged& change) {
  // A subscriber that decides in turn queues its change behind this one:
  // every subscriber hears the changes in the order they were made.
  queue_.push_back(change);
  if (publishing_) return;
  publishing_ = true;
  while (!queue_.empty()) {
    const DeviceStateChanged next = queue_.front();
    queue_.pop_front();
    // A subscriber may unsubscribe (itself or another): iterate the ids.
    std::vector<std::uint64_t> ids;
    for (const auto& [id, subscriber] : *subscribers_) ids.push_back(id);
    for (std::uint64_t id : ids) {
      auto found = subscribers_->find(id);
      if (found == subscribers_->end()) continue;
      Subscriber subscriber = found->second;
      subscriber(next);
    }
  }
  publishing_ = false;
}

void DeviceHealth::Apply(int device, Record& record) {
  runtime::HealthState gate = Effective(record);
  // An Isolated device under test admits the test: open that far, no further.
  if (record.testing && gate == runtime::HealthState::kIsolated && !record.isolated_during_test)
    gate = runtime::HealthState::kDraining;
  if (auto found = runtime_.GetDevice(device)) (*found)->SetHealth(gate);
}

Result<HealthOutcome> DeviceHealth::Decide(const HealthDecision& decision) {
  if (decision.cause == HealthCause::kSelfTest) {
    return Fail(ErrorCode::kInvalidArgument,
                "a self-test opens the gate (OpenForSelfTest); it holds no state");
  }
  auto found = runtime_.GetDevice(decision.device);
  if (!found) return Fail(ErrorCode::kNotFound, fmt::format("no device {}", decision.device));
  Record& record = records_[decision.device];
  const runtime::HealthState from = Effective(record);
  const auto now = loop_.GetClock().Wall();
  // A decision that keeps the device out of service, or any of the
  // policy's (it decided anew about this device), stands over the test's
  // outcome; a link's Degraded does not.
  if (record.testing && (decision.target >= runtime::HealthState::kDraining ||
                         decision.cause == HealthCause::kPolicy))
    record.overtaken = true;
  // A new isolation closes the gate at once, test or not; anything milder
  // leaves the test running.
  if (record.testing && decision.target == runtime::HealthState::kIsolated)
    record.isolated_during_test = true;
  if (decision.target == runtime::HealthState::kHealthy) {
    if (decision.cause == HealthCause::kOperator) {
      record.holds.clear();
    } else {
      record.holds.erase(decision.cause);
      if (decision.cause == HealthCause::kRecovery) record.holds.erase(HealthCause::kPolicy);
    }
  } else {
    HoldEntry& hold = record.holds[decision.cause];
    if (decision.target >= hold.state) {
      if (decision.target > hold.state) hold.since = now;
      hold.state = decision.target;
      hold.reason = decision.reason;
      hold.order = ++decisions_;
    }
  }
  const runtime::HealthState to = Effective(record);
  if (to != from || decision.target == runtime::HealthState::kHealthy) {
    record.reason = decision.reason;
    if (to != from) record.since = now;
  }
  unsaved_.insert(decision.device);
  // The policy's action row is the Actuator's. A link's decision that
  // changes nothing (another cause holds the device worse) is no action.
  const bool row = decision.cause != HealthCause::kPolicy &&
                   (to != from || decision.cause != HealthCause::kLink);
  if (row) {
    ras::ActionRecord action;
    action.time = now;
    action.action = std::string(ActionFor(decision.target));
    action.device = decision.device;
    action.rule =
        decision.rule.empty() ? std::string(HealthCauseName(decision.cause)) : decision.rule;
    action.reason = decision.reason;
    action.result = "ok";
    action.detail =
        fmt::format("{} -> {}{}", runtime::HealthStateName(from), runtime::HealthStateName(to),
                    decision.evidence.empty() ? "" : "; " + decision.evidence);
    RASD_LOGGER_LOG(common::GetLogger("policy"), spdlog::level::warn, "{} device {} ({}): {} ({})",
                    action.action, decision.device,
                    decision.cause == HealthCause::kOperator ? "by an operator" : action.rule,
                    action.detail, decision.reason);
    if (count_) count_(action.action, action.result);
    pending_actions_.push_back({std::move(action), std::nullopt});
  }
  Apply(decision.device, record);
  if (to != from) Publish({decision.device, from, to, decision.cause});
  return HealthOutcome{from, to};
}

Result<HealthOutcome> DeviceHealth::DecideAndSave(const HealthDecision& decision) {
  auto decided = Decide(decision);
  if (!decided) return decided;
  ras::StoreBatch batch;
  TakePending(batch);
  if (auto stored = store_.Commit(batch); !stored) {
    // The gate is set; only the record of it is missing. The rows wait for
    // the next batch.
    for (auto& action : batch.actions) pending_actions_.push_back(std::move(action));
    RASD_LOG_ERROR("device {}: cannot save its state {}: {}; retrying", decision.device,
                   runtime::HealthStateName(decided->to), stored.error().message);
    if (on_unsaved_) on_unsaved_();
    return Fail(ErrorCode::kIoError,
                fmt::format("device {} is {} now, but that could not be saved ({}); rasd retries "
                            "until it is, and a restart before then would forget it",
                            decision.device, runtime::HealthStateName(decided->to),
                            stored.error().message));
  }
  Committed();
  return decided;
}

void DeviceHealth::IsolateEveryDevice(const std::string& reason, const std::string& rule) {
  for (const auto& device : runtime_.Devices()) {
    // A failed save is logged and retried by DecideAndSave; the gate is shut.
    (void)DecideAndSave({.device = device->Index(),
                         .cause = HealthCause::kRestore,
                         .target = runtime::HealthState::kIsolated,
                         .reason = reason,
                         .rule = rule});
  }
}

bool DeviceHealth::ClaimRestoredHold(int device, HealthCause cause, runtime::HealthState state) {
  auto found = records_.find(device);
  if (found == records_.end() || !found->second.legacy_restore) return false;
  Record& record = found->second;
  auto restored = record.holds.find(HealthCause::kRestore);
  if (restored == record.holds.end() || restored->second.state != state) return false;
  record.holds[cause] = restored->second;
  record.holds.erase(restored);
  record.legacy_restore = false;
  unsaved_.insert(device);
  return true;
}

Status DeviceHealth::OpenForSelfTest(int device) {
  if (!runtime_.GetDevice(device))
    return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
  Record& record = records_[device];
  record.testing = true;
  record.overtaken = false;
  record.isolated_during_test = false;
  Apply(device, record);
  return {};
}

DeviceHealth::SelfTestWindow DeviceHealth::CloseSelfTest(int device) {
  auto found = records_.find(device);
  if (found == records_.end() || !found->second.testing) return {};
  Record& record = found->second;
  const SelfTestWindow window{record.overtaken};
  record.testing = false;
  record.overtaken = false;
  record.isolated_during_test = false;
  Apply(device, record);
  return window;
}

ras::DeviceStateRecord DeviceHealth::Row(int device) const {
  const DeviceStatus status = StatusOf(device);
  nlohmann::json holds = nlohmann::json::array();
  for (const auto& hold : status.holds) {
    holds.push_back({{"cause", HealthCauseName(hold.cause)},
                     {"state", runtime::HealthStateName(hold.state)},
                     {"reason", hold.reason},
                     {"since_ns", common::UnixNanos(hold.since)}});
  }
  return {DeviceUuid(runtime_, device), std::string(runtime::HealthStateName(status.state)),
          status.reason, status.since, holds.dump()};
}

void DeviceHealth::TakePending(ras::StoreBatch& batch) {
  for (int device : unsaved_) batch.states.push_back(Row(device));
  for (auto& action : pending_actions_) batch.actions.push_back(std::move(action));
  pending_actions_.clear();
}

namespace {

// The holds saved with a device's state; an error says why they cannot be
// read (the caller keeps the saved state as a hold of its own).
Result<std::map<HealthCause, DeviceStatus::Hold>> ParseHolds(const std::string& text) {
  const auto value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded() || !value.is_array())
    return Fail(ErrorCode::kCorruptData, "the holds are not a JSON list");
  std::map<HealthCause, DeviceStatus::Hold> holds;
  for (const auto& item : value) {
    if (!item.is_object()) return Fail(ErrorCode::kCorruptData, "a hold is not an object");
    ArgReader reader("device hold", item);
    const auto cause = reader.String("cause", 64);
    const auto state = reader.String("state", 64);
    const auto reason = reader.String("reason", 1 << 16);
    const auto since = reader.Int("since_ns", std::numeric_limits<std::int64_t>::min(),
                                  std::numeric_limits<std::int64_t>::max());
    for (const auto& [key, unused] : item.items()) (void)reader.Raw(key);  // a later version's
    if (auto read = reader.Finish(); !read)
      return Fail(ErrorCode::kCorruptData, read.error().message);
    const auto parsed_cause = cause ? ParseHealthCause(*cause) : std::nullopt;
    const auto parsed_state = state ? runtime::ParseHealthState(*state) : std::nullopt;
    if (!parsed_cause || !parsed_state || *parsed_cause == HealthCause::kSelfTest)
      return Fail(ErrorCode::kCorruptData, "a hold names an unknown cause or state");
    if (*parsed_state == runtime::HealthState::kHealthy) continue;
    holds[*parsed_cause] = {*parsed_cause, *parsed_state, reason.value_or(""),
                            common::FromUnixNanos(since.value_or(0))};
  }
  return holds;
}

}  // namespace

Status DeviceHealth::Restore() {
  std::map<std::string, int> by_uuid;
  for (const auto& device : runtime_.Devices())
    by_uuid[DeviceUuid(runtime_, device->Index())] = device->Index();
  auto states = store_.LoadDeviceStates();
  if (!states) {
    return Fail(states.error().code,
                "cannot read the saved device states: " + states.error().message);
  }
  for (const auto& saved : *states) {
    auto index = by_uuid.find(saved.device_uuid);
    auto state = runtime::ParseHealthState(saved.state);
    if (index == by_uuid.end() || !state) continue;  // a device this machine no longer has
    const int device = index->second;
    Record& record = records_[device];
    record.reason = saved.reason;
    record.since = saved.since;
    auto holds = saved.holds.empty() ? Result<std::map<HealthCause, DeviceStatus::Hold>>(
                                           Fail(ErrorCode::kNotFound, "saved without holds"))
                                     : ParseHolds(saved.holds);
    if (holds) {
      for (const auto& [cause, hold] : *holds)
        record.holds[cause] = {hold.state, hold.reason, hold.since, ++decisions_};
    }
    if (!holds || Effective(record) < *state) {
      // Without the holds that made it, the saved state stands on its own:
      // the safe reading, lifted by an operator's undrain.
      if (holds || holds.error().code != ErrorCode::kNotFound) {
        RASD_LOG_ERROR(
            "device {}: its saved holds cannot be read ({}): it stays {} until an "
            "operator's undrain",
            device, holds ? "they do not add up to its state" : holds.error().message, saved.state);
      }
      if (*state != runtime::HealthState::kHealthy) {
        record.holds[HealthCause::kRestore] = {*state, saved.reason, saved.since, ++decisions_};
        record.legacy_restore = !holds && holds.error().code == ErrorCode::kNotFound;
      }
    }
    Apply(device, record);
    if (Effective(record) != runtime::HealthState::kHealthy)
      Publish({device, runtime::HealthState::kHealthy, Effective(record), HealthCause::kRestore});
    if (*state != runtime::HealthState::kHealthy) {
      RASD_LOG_WARN("device {} is {} since {:%F %T}: {}", device, saved.state,
                    std::chrono::floor<std::chrono::seconds>(saved.since), saved.reason);
    }
  }
  return {};
}

}  // namespace rasd::daemon
