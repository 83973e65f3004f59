#include "link_health.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "arg_reader.h"
#include "rasd/common/logging.h"

namespace rasd::daemon {

LinkHealth::LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
                       jobs::JobManager& jobs, ras::StateStore& store, RasPipeline& pipeline,
                       Options options)
    : loop_(loop),
      runtime_(runtime),
      health_(health),
      jobs_(jobs),
      store_(store),
      pipeline_(pipeline),
      policy_(options),
      deadline_(loop.CreateTimer([this] {
        Carry(policy_.Advance(loop_.Now()));
        ArmDeadline();
        if (unsaved_) pipeline_.CommitDecisions();
      })),
      settle_timer_(loop.CreateTimer([this] { EndSettle(); })) {
  pipeline_.SetLinkDecider(this);
}

LinkHealth::~LinkHealth() { pipeline_.SetLinkDecider(nullptr); }

namespace {
constexpr const char* kStoreKey = "link_health";
}  // namespace

void LinkHealth::Load() {
  auto saved = store_.LoadNodeValue(kStoreKey);
  if (!saved) {
    RASD_LOG_ERROR(
        "link health: cannot read the saved state ({}): started afresh (no device is kept out "
        "of collectives for its links until a poll finds them down)",
        saved.error().message);
    return;
  }
  if (!*saved) return;
  const auto value = nlohmann::json::parse(**saved, nullptr, false);
  if (value.is_discarded() || !value.is_object()) {
    RASD_LOG_ERROR(
        "link health: the saved state is unreadable: started afresh (no device is "
        "kept out of collectives for its links)");
    return;
  }
  for (const auto& device : runtime_.Devices()) {
    const auto& uuid = device->Properties().uuid;
    const auto row = value.find(uuid);
    if (row == value.end()) continue;
    ras::LinkPolicy::Saved state;
    bool out = false;  // out of collectives when rasd stopped
    // A damaged row cannot say whether the link had taken the device out:
    // out of collectives until its links prove themselves (the next poll
    // that finds them up starts the debounce), never a flapping hold, which
    // only an operator could end.
    auto damaged = [&](const std::string& why) {
      out = true;
      RASD_LOG_ERROR(
          "device {}: its saved link state is damaged ({}): out of collectives until "
          "its links have stayed up for the debounce",
          device->Index(), why);
    };
    if (!row->is_object()) {
      damaged("not an object");
    } else {
      ArgReader reader("link health row", *row);
      const auto held = reader.Bool("held");
      const auto degraded = reader.Bool("degraded_by_link");
      const nlohmann::json* links = reader.Raw("links");
      for (const auto& [key, unused] : row->items()) (void)reader.Raw(key);  // a later version's
      if (auto read = reader.Finish(); !read) {
        damaged(read.error().message);
      } else {
        state.held = held.value_or(false);
        out = degraded.value_or(false);
        // A state an older rasd saved without its holds: the link's Degraded
        // is the link's to lift again.
        if (out)
          (void)health_.ClaimRestoredHold(device->Index(), HealthCause::kLink,
                                          runtime::HealthState::kDegraded);
        if (links != nullptr && links->is_array()) {
          for (const auto& link : *links)
            if (link.is_string()) state.links.push_back(link.get<std::string>());
        }
      }
    }
    // The hold itself came back with the device's state (DeviceHealth).
    state.degraded = out || health_.Holds(device->Index(), HealthCause::kLink);
    if (policy_.Restore(device->Index(), state, out)) {
      device->SetLinksUsable(false);
      RASD_LOG_WARN("device {}: out of collectives since before the restart ({})",
                    device->Index(), state.held ? "its link was flapping" : "its link was down");
    }
  }
}

void LinkHealth::TakePending(ras::StoreBatch& batch) {
  if (!unsaved_) return;
  unsaved_ = false;
  nlohmann::json value = nlohmann::json::object();
  for (const auto& [device, saved] : policy_.ToSave()) {
    auto gate = runtime_.GetDevice(device);
    if (!gate) continue;
    value[(*gate)->Properties().uuid] = {
        {"held", saved.held}, {"degraded_by_link", saved.degraded}, {"links", saved.links}};
  }
  // A batch that cannot be stored keeps it, and is retried.
  batch.node_values.push_back({kStoreKey, value.dump()});
}

void LinkHealth::ArmDeadline() {
  const auto next = policy_.NextDeadline();
  if (!next) {
    deadline_->Disarm();
    return;
  }
  deadline_->ArmAfter(std::max(std::chrono::nanoseconds(0), *next - loop_.Now()));
}

void LinkHealth::SettleFrom(std::chrono::system_clock::time_point start) {
  if (settle_.count() == 0) return;
  const auto until = start + settle_;
  const auto now = loop_.GetClock().Wall();
  if (until <= now || (settle_until_ && until <= *settle_until_)) return;
  settle_until_ = until;
  settle_timer_->ArmAfter(until - now);
  RASD_LOG_INFO("links train: their states are decided in {:.0f} s",
                std::chrono::duration<double>(until - now).count());
}

std::optional<std::chrono::system_clock::time_point> LinkHealth::SettlingUntil() const {
  return settle_until_;
}

void LinkHealth::EndSettle() {
  const auto now = loop_.GetClock().Wall();
  if (settle_until_ && now < *settle_until_) {  // the wall clock was stepped back
    settle_timer_->ArmAfter(*settle_until_ - now);
    return;
  }
  settle_until_.reset();
  auto reports = std::move(settling_);
  settling_.clear();
  for (const auto& [source, report] : reports) Decide(report);
  if (unsaved_) pipeline_.CommitDecisions();
}

void LinkHealth::Decide(const ras::LinkReport& report) {
  if (settle_until_) {
    // Read, not acted on: what the links are when the window ends decides.
    settling_[report.source] = report;
    return;
  }
  ras::LinkReport known{.source = report.source, .unconfirmed = report.unconfirmed};
  for (const auto& [device, links] : report.down)
    if (runtime_.GetDevice(device)) known.down.emplace(device, links);
  Carry(policy_.Observe(known, loop_.Now()));
  ArmDeadline();
}

void LinkHealth::Carry(const std::vector<ras::LinkPolicy::Decision>& decisions) {
  using What = ras::LinkPolicy::Decision::What;
  bool reconsider = false;
  for (const auto& decision : decisions) {
    auto gate = runtime_.GetDevice(decision.device);
    if (!gate) continue;
    const int device = decision.device;
    switch (decision.what) {
      case What::kFlapping:
        RASD_LOG_ERROR(
            "device {}: its links went down too often: flapping; it stays out of "
            "collectives until an operator's undrain",
            device);
        [[fallthrough]];
      case What::kWentDown:
        (*gate)->SetLinksUsable(false);
        // Degraded at once; the batch saves it (and retries when it cannot).
        (void)health_.Decide({.device = device,
                              .cause = HealthCause::kLink,
                              .target = runtime::HealthState::kDegraded,
                              .reason = decision.reason,
                              .rule = "link-down"});
        RASD_LOG_WARN("device {}: {}", device, decision.reason);
        reconsider = true;
        break;
      case What::kLinksChanged:
        // Only the link's own hold is rewritten: one an operator lifted stays lifted.
        if (!health_.Holds(device, HealthCause::kLink)) break;
        (void)health_.Decide({.device = device,
                              .cause = HealthCause::kLink,
                              .target = runtime::HealthState::kDegraded,
                              .reason = decision.reason,
                              .rule = "link-down"});
        RASD_LOG_INFO("device {}: {}", device, decision.reason);
        break;
      case What::kRejoined:
        (*gate)->SetLinksUsable(true);
        // Only the link's own hold is lifted: a fault decided meanwhile (CE
        // errors past their threshold while the link was down) stands.
        if (health_.Holds(device, HealthCause::kLink)) {
          (void)health_.Decide({.device = device,
                                .cause = HealthCause::kLink,
                                .target = runtime::HealthState::kHealthy,
                                .reason = decision.reason,
                                .rule = "link-up"});
        }
        RASD_LOG_INFO("device {}: {}: back in collectives", device, decision.reason);
        reconsider = true;
        break;
    }
  }
  if (!decisions.empty()) unsaved_ = true;
  if (reconsider) jobs_.Reconsider();
}

std::optional<std::string> LinkHealth::Clears(int device) const {
  if (health_.StateOf(device) != runtime::HealthState::kDegraded) return std::nullopt;
  auto clears = policy_.Clears(device);
  if (!clears || clears->starts_with("an operator")) return clears;
  // Not the link's doing alone: another cause holds it Degraded too.
  if (!health_.Holds(device, HealthCause::kLink) ||
      health_.WorstExcept(device, HealthCause::kLink) != runtime::HealthState::kHealthy)
    return std::nullopt;
  return clears;
}

void LinkHealth::OnOperatorReturned(int device) {
  const bool usable = policy_.OperatorReturned(device);
  unsaved_ = true;
  pipeline_.CommitDecisions();
  if (usable) {
    if (auto gate = runtime_.GetDevice(device)) (*gate)->SetLinksUsable(true);
    jobs_.Reconsider();
  }
}

}  // namespace rasd::daemon
