#include "device_recovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "arg_reader.h"

#include "rasd/common/logging.h"
#include "rasd/common/unix_nanos.h"

namespace rasd::daemon {

const char* ReturnedByName(ReturnedBy how) {
  return how == ReturnedBy::kUndrain ? "undrain" : "auto-recover";
}
namespace {

constexpr std::size_t kKeptRecoveries = 64;
constexpr std::size_t kMaxWhy = 512;

// A boot id rasd could not read is no evidence of a reboot.
bool KnownBootId(const std::string& id) { return !id.empty() && id != "unknown"; }
constexpr std::chrono::seconds kRetryPeriod{1};

}  // namespace

std::string ClearsBy(runtime::HealthState state, ras::RecoveryAction action) {
  using ras::RecoveryAction;
  switch (state) {
    case runtime::HealthState::kHealthy:
      return "";
    case runtime::HealthState::kDegraded:
      return "an operator: rasctl undrain (self-test)";
    case runtime::HealthState::kDraining:
    case runtime::HealthState::kIsolated:
      break;
  }
  switch (action) {
    case RecoveryAction::kResetDevice:
      return "reset + self-test (policy.auto_recover does both; or rasctl undrain after a reset)";
    case RecoveryAction::kRebootNode:
      return "reboot of the node, then rasctl undrain (self-test)";
    case RecoveryAction::kHardwareInspection:
      return "repair or replacement, then rasctl undrain (self-test)";
    case RecoveryAction::kContactVendor:
      return "the vendor's support, then rasctl undrain (self-test)";
    case RecoveryAction::kNone:
    case RecoveryAction::kRestartApp:
      return "self-test: rasctl undrain";
  }
  return "rasctl undrain (self-test)";
}

DeviceRecovery::DeviceRecovery(common::EventLoop& loop, runtime::Runtime& runtime,
                               ras::StateStore* store, std::string boot_id)
    : loop_(loop), runtime_(runtime), store_(store), boot_id_(std::move(boot_id)) {}

DeviceRecovery::~DeviceRecovery() = default;

Result<DeviceRecovery::State> DeviceRecovery::ReadSavedState(const std::string& saved) {
  const auto spec = nlohmann::json::parse(saved, nullptr, false);
  if (!spec.is_object()) return Fail(ErrorCode::kCorruptData, "not a JSON object");
  State state;
  ArgReader fields("the saved recovery history", spec);
  const auto action = fields.Required(fields.String("action", 64), "action");
  // Longer texts than rasd writes are cut, not refused: the history matters more.
  if (auto why = fields.String("why", 1 << 20)) state.why = why->substr(0, kMaxWhy);
  if (auto boot_id = fields.String("boot_id", 128)) state.boot_id = *boot_id;
  state.open = fields.Bool("open").value_or(false);
  const nlohmann::json* recoveries = fields.Raw("recoveries");
  if (auto read = fields.Finish(); !read) return Fail(ErrorCode::kCorruptData, read.error().message);
  if (recoveries == nullptr || !recoveries->is_array())
    return Fail(ErrorCode::kCorruptData, "it has no list of recoveries");
  state.action = ras::ParseRecoveryAction(*action).value_or(ras::RecoveryAction::kNone);
  // The newest kKeptRecoveries, as saved; a damaged row may hold more.
  const std::size_t skip =
      recoveries->size() > kKeptRecoveries ? recoveries->size() - kKeptRecoveries : 0;
  for (std::size_t i = skip; i < recoveries->size(); ++i) {
    const nlohmann::json& entry = (*recoveries)[i];
    if (!entry.is_object()) return Fail(ErrorCode::kCorruptData, "a recovery is not an object");
    ArgReader recovery("a saved recovery", entry);
    const auto time = recovery.Required(
        recovery.Int("time", std::numeric_limits<std::int64_t>::min(),
                     std::numeric_limits<std::int64_t>::max()),
        "time");
    const auto how = recovery.String("how", 1 << 20);
    if (auto read = recovery.Finish(); !read)
      return Fail(ErrorCode::kCorruptData, read.error().message);
    state.recoveries.push_back(
        {common::FromUnixNanos(*time), how.value_or(std::string()).substr(0, 64)});
  }
  return state;
}

void DeviceRecovery::Load() {
  if (store_ == nullptr) return;
  auto records = store_->LoadDeviceRecoveries();
  if (!records) {
    RASD_LOG_ERROR("recovery history: cannot load: {}; every device starts without one",
                   records.error().message);
    return;
  }
  std::map<std::string, int> index_by_uuid;
  for (const auto& device : runtime_.Devices())
    index_by_uuid[device->Properties().uuid] = device->Index();
  for (const auto& record : *records) {
    const auto index = index_by_uuid.find(record.device_uuid);
    if (index == index_by_uuid.end()) continue;  // a device that is not here now
    auto state = ReadSavedState(record.spec);
    if (!state) {
      RASD_LOG_ERROR("recovery history of device {} ({}) is damaged ({}): started afresh",
                     index->second, record.device_uuid, state.error().message);
      continue;
    }
    const int device = index->second;
    if (state->open && state->action == ras::RecoveryAction::kRebootNode &&
        (!KnownBootId(state->boot_id) || !KnownBootId(boot_id_))) {
      RASD_LOG_WARN("device {}: a reboot was suggested, but the boot id is unknown (saved '{}', "
                    "now '{}'): no reboot is counted",
                    device, state->boot_id, boot_id_);
    }
    if (state->open && state->action == ras::RecoveryAction::kRebootNode &&
        KnownBootId(state->boot_id) && KnownBootId(boot_id_) && state->boot_id != boot_id_) {
      state->recoveries.push_back({loop_.GetClock().Wall(), "reboot"});
      state->open = false;
      RASD_LOG_INFO("device {}: the node was rebooted as suggested ({}): counted as a recovery",
                    device, state->why);
      state->action = ras::RecoveryAction::kNone;
      state->why.clear();
      states_[device] = std::move(*state);
      Save(device);
      continue;
    }
    states_[device] = std::move(*state);
  }
}

std::vector<std::chrono::system_clock::time_point> DeviceRecovery::Times(int device) const {
  std::vector<std::chrono::system_clock::time_point> times;
  if (auto found = states_.find(device); found != states_.end()) {
    for (const auto& recovery : found->second.recoveries) times.push_back(recovery.time);
  }
  return times;
}

ras::RecoverySuggestion DeviceRecovery::SuggestFor(const ras::RasEvent& event) const {
  return table_.Suggest(event, event.device ? Times(*event.device) : decltype(Times(0)){},
                        loop_.GetClock().Wall());
}

ras::RecoverySuggestion DeviceRecovery::OnEvent(const ras::RasEvent& event, bool sticks) {
  auto suggestion = SuggestFor(event);
  if (!sticks || !event.device) return suggestion;
  OnVerdict(*event.device, suggestion);
  return suggestion;
}

void DeviceRecovery::OnVerdict(int device, ras::RecoverySuggestion suggestion) {
  if (!ras::SticksToDevice(suggestion.action)) return;
  State& state = states_[device];
  if (suggestion.action < state.action) return;  // a stronger one stands
  if (suggestion.action == state.action && state.why == suggestion.why) return;
  state.action = suggestion.action;
  state.why = std::move(suggestion.why);
  state.boot_id = boot_id_;
  state.open = true;
  RASD_LOG_WARN("device {}: suggested {}: {}", device, ras::RecoveryActionName(state.action),
                state.why);
  Save(device);
}

void DeviceRecovery::OnRecovered(int device, ReturnedBy returned_by) {
  const std::string_view how = ReturnedByName(returned_by);
  State& state = states_[device];
  if (!state.open) {
    // Counted already (the reboot before this undrain), or no fault at all.
    if (state.action == ras::RecoveryAction::kNone) return;
  } else {
    state.recoveries.push_back({loop_.GetClock().Wall(), std::string(how)});
    if (state.recoveries.size() > kKeptRecoveries)
      state.recoveries.erase(state.recoveries.begin());
    RASD_LOG_INFO("device {}: recovered ({}), {} time(s) in all", device, how,
                  state.recoveries.size());
  }
  state.open = false;
  state.action = ras::RecoveryAction::kNone;
  state.why.clear();
  Save(device);
}

DeviceRecovery::View DeviceRecovery::For(int device) const {
  View view;
  auto found = states_.find(device);
  if (found != states_.end()) {
    view.action = found->second.action;
    view.why = found->second.why;
    view.recoveries = found->second.recoveries.size();
    const auto now = loop_.GetClock().Wall();
    view.recoveries_24h = static_cast<std::size_t>(std::count_if(
        found->second.recoveries.begin(), found->second.recoveries.end(),
        [&](const Recovery& recovery) {
          // As the escalation counts them: none from the future (a clock
          // stepped back).
          return recovery.time <= now && now - recovery.time <= std::chrono::hours(24);
        }));
  }
  if (auto gate = runtime_.GetDevice(device)) view.clears = ClearsBy((*gate)->Health(), view.action);
  return view;
}

std::map<int, ras::RecoveryAction> DeviceRecovery::Actions() const {
  std::map<int, ras::RecoveryAction> actions;
  for (const auto& device : runtime_.Devices()) {
    auto found = states_.find(device->Index());
    actions[device->Index()] =
        found == states_.end() ? ras::RecoveryAction::kNone : found->second.action;
  }
  return actions;
}

void DeviceRecovery::Save(int device) {
  if (store_ == nullptr) return;
  auto gate = runtime_.GetDevice(device);
  if (!gate) return;
  const State& state = states_[device];
  nlohmann::json recoveries = nlohmann::json::array();
  for (const auto& recovery : state.recoveries)
    recoveries.push_back({{"time", common::UnixNanos(recovery.time)}, {"how", recovery.how}});
  const nlohmann::json spec = {{"action", std::string(ras::RecoveryActionName(state.action))},
                               {"why", state.why},
                               {"boot_id", state.boot_id},
                               {"open", state.open},
                               {"recoveries", std::move(recoveries)}};
  if (auto saved = store_->SaveDeviceRecovery({(*gate)->Properties().uuid, spec.dump()}); !saved) {
    if (unsaved_.insert(device).second) {
      RASD_LOG_ERROR("device {}: cannot save its recovery history: {}; retrying every second",
                     device, saved.error().message);
    }
    if (!retry_) retry_ = loop_.CreateTimer([this] { RetryUnsaved(); });
    if (!retry_->Armed()) retry_->ArmAfter(kRetryPeriod);
    return;
  }
  unsaved_.erase(device);
}

void DeviceRecovery::RetryUnsaved() {
  const std::set<int> devices = unsaved_;
  for (int device : devices) Save(device);
  if (unsaved_.empty()) RASD_LOG_INFO("recovery history saved again");
}

}  // namespace rasd::daemon
