#include "link_health.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "arg_reader.h"
#include "rasd/common/logging.h"

namespace rasd::daemon {

LinkHealth::LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
                       jobs::JobManager& jobs, ras::StateStore& store, Options options)
    : loop_(loop),
      runtime_(runtime),
      health_(health),
      jobs_(jobs),
      store_(store),
      options_(options) {}

namespace {
constexpr const char* kStoreKey = "link_health";
}  // namespace

void LinkHealth::Load() {
  auto saved = store_.LoadNodeValue(kStoreKey);
  if (!saved || !*saved) return;
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
    State& state = states_[device->Index()];
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
        if (links != nullptr && links->is_array()) {
          for (const auto& link : *links)
            if (link.is_string()) state.restored_links.push_back(link.get<std::string>());
        }
      }
    }
    if (state.held || out) {
      // Out until the links prove themselves again: the first poll that
      // finds them up starts the debounce (a held one waits for an operator).
      state.down = true;
      device->SetLinksUsable(false);
      RASD_LOG_WARN("device {}: out of collectives since before the restart ({})",
                    device->Index(), state.held ? "its link was flapping" : "its link was down");
    }
  }
}

void LinkHealth::Save() {
  nlohmann::json value = nlohmann::json::object();
  for (const auto& [device, state] : states_) {
    const bool ours = health_.Holds(device, HealthCause::kLink);
    if (!state.held && !ours) continue;
    auto gate = runtime_.GetDevice(device);
    if (!gate) continue;
    value[(*gate)->Properties().uuid] = {
        {"held", state.held}, {"degraded_by_link", ours}, {"links", AllDown(state)}};
  }
  if (auto saved = store_.SaveNodeValue(kStoreKey, value.dump()); !saved) {
    RASD_LOG_ERROR("link health: cannot save ({}): a restart now would forget it",
                   saved.error().message);
  }
}

namespace {
long long Seconds(std::chrono::milliseconds duration) {
  return std::chrono::duration_cast<std::chrono::seconds>(duration).count();
}
}  // namespace

std::vector<std::string> LinkHealth::AllDown(const State& state) const {
  std::vector<std::string> all;
  for (const auto& [source, links] : state.down_links)
    all.insert(all.end(), links.begin(), links.end());
  return all;
}

std::string LinkHealth::Reason(const State& state) const {
  std::vector<std::string> parts;
  for (const auto& [source, links] : state.down_links) {
    if (!links.empty())
      parts.push_back(fmt::format("{} link down ({})", source, fmt::join(links, ", ")));
  }
  const std::string what =
      parts.empty() ? std::string("link down") : fmt::format("{}", fmt::join(parts, "; "));
  if (state.held) {
    return fmt::format(
        "{}: flapping ({} downs within {} s): out of collectives until an operator's "
        "undrain",
        what, state.downs.size(), options_.flap_window.count());
  }
  return fmt::format("{}: out of collectives until it stays up {} s", what,
                     Seconds(options_.up_debounce));
}

void LinkHealth::Observe(std::string_view source,
                         const std::map<int, std::vector<std::string>>& down_links,
                         const std::map<int, std::vector<std::string>>& unconfirmed) {
  const auto now = loop_.Now();
  bool reconsider = false;
  for (const auto& [device, reported] : down_links) {
    auto gate = runtime_.GetDevice(device);
    if (!gate) continue;
    State& state = states_[device];
    std::vector<std::string> links = reported;
    if (auto maybe = unconfirmed.find(device); maybe != unconfirmed.end()) {
      for (const auto& link : maybe->second) {
        const bool was_down = std::find(state.restored_links.begin(), state.restored_links.end(),
                                        link) != state.restored_links.end();
        if (was_down && std::find(links.begin(), links.end(), link) == links.end())
          links.push_back(link);
      }
    }
    auto slot = state.down_links.find(source);
    if (slot == state.down_links.end())
      slot = state.down_links.emplace(std::string(source), std::vector<std::string>{}).first;
    const bool changed = slot->second != links;
    slot->second = links;
    const bool down = !AllDown(state).empty();
    const bool ours = health_.Holds(device, HealthCause::kLink);
    if (down && !state.down) {
      state.down = true;
      state.rejoin.reset();
      std::erase_if(state.downs, [&](auto at) {
        return now - at > std::chrono::nanoseconds(options_.flap_window);
      });
      state.downs.push_back(now);
      (*gate)->SetLinksUsable(false);
      if (!state.held && state.downs.size() >= options_.flap_limit) {
        state.held = true;
        RASD_LOG_ERROR(
            "device {}: its links went down {} times within {} s: flapping; it "
            "stays out of collectives until an operator's undrain",
            device, state.downs.size(), options_.flap_window.count());
      }
      const std::string reason = Reason(state);
      // Degraded at once even when the state cannot be saved (retried).
      (void)health_.DecideAndSave({.device = device,
                                   .cause = HealthCause::kLink,
                                   .target = runtime::HealthState::kDegraded,
                                   .reason = reason,
                                   .rule = "link-down"});
      RASD_LOG_WARN("device {}: {}", device, reason);
      Save();
      reconsider = true;
    } else if (down && changed && ours) {
      // Another link of the same device went down or came back: the reason
      // names the links down now.
      const std::string reason = Reason(state);
      (void)health_.DecideAndSave({.device = device,
                                   .cause = HealthCause::kLink,
                                   .target = runtime::HealthState::kDegraded,
                                   .reason = reason,
                                   .rule = "link-down"});
      RASD_LOG_INFO("device {}: {}", device, reason);
      Save();
    } else if (!down && state.down) {
      state.down = false;
      if (state.held) continue;
      state.armed_debounce = options_.up_debounce;
      state.rejoin = loop_.CreateTimer([this, device = device] { Rejoin(device); });
      state.rejoin->ArmAfter(state.armed_debounce);
    }
  }
  if (reconsider) jobs_.Reconsider();
}

void LinkHealth::Rejoin(int device) {
  State& state = states_[device];
  auto fired = std::move(state.rejoin);  // freed when this callback returns
  if (state.down || state.held) return;
  auto gate = runtime_.GetDevice(device);
  if (!gate) return;
  (*gate)->SetLinksUsable(true);
  // Only the link's own hold is lifted: a fault decided meanwhile (CE
  // errors past their threshold while the link was down) stands.
  if (health_.Holds(device, HealthCause::kLink)) {
    (void)health_.DecideAndSave(
        {.device = device,
         .cause = HealthCause::kLink,
         .target = runtime::HealthState::kHealthy,
         .reason = fmt::format("links up for {} s", Seconds(state.armed_debounce)),
         .rule = "link-up"});
  }
  state.restored_links.clear();
  Save();
  RASD_LOG_INFO("device {}: its links stayed up {} s: back in collectives", device,
                Seconds(state.armed_debounce));
  jobs_.Reconsider();
}

std::map<std::pair<int, std::string>, std::uint64_t> LinkHealth::DownLinks() const {
  std::map<std::pair<int, std::string>, std::uint64_t> down;
  for (const auto& [device, state] : states_) {
    for (const auto& [source, links] : state.down_links) down[{device, source}] = links.size();
  }
  return down;
}

std::optional<std::string> LinkHealth::Clears(int device) const {
  auto found = states_.find(device);
  if (found == states_.end()) return std::nullopt;
  const State& state = found->second;
  if (health_.StateOf(device) != runtime::HealthState::kDegraded) return std::nullopt;
  if (state.held) return "an operator: rasctl undrain (its links were flapping)";
  // Not the link's doing alone: another cause holds it Degraded too.
  if (!health_.Holds(device, HealthCause::kLink) ||
      health_.WorstExcept(device, HealthCause::kLink) != runtime::HealthState::kHealthy)
    return std::nullopt;
  if (state.rejoin) {
    return fmt::format("by itself: its links are up, it rejoins once they stayed up {} s",
                       Seconds(state.armed_debounce));
  }
  return fmt::format("by itself: once its links stay up {} s", Seconds(options_.up_debounce));
}

void LinkHealth::OnOperatorReturned(int device) {
  auto found = states_.find(device);
  if (found == states_.end()) return;
  State& state = found->second;
  state.held = false;
  state.downs.clear();
  state.restored_links.clear();
  Save();
  if (!state.down) {
    if (auto gate = runtime_.GetDevice(device)) (*gate)->SetLinksUsable(true);
    jobs_.Reconsider();
  }
}

}  // namespace rasd::daemon
