#include "rasd/ras/link_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace rasd::ras {

namespace {
long long Seconds(std::chrono::milliseconds duration) {
  return std::chrono::duration_cast<std::chrono::seconds>(duration).count();
}
}  // namespace

std::vector<std::string> LinkPolicy::AllDown(const State& state) const {
  std::vector<std::string> all;
  for (const auto& [source, links] : state.down_links)
    all.insert(all.end(), links.begin(), links.end());
  return all;
}

std::string LinkPolicy::Reason(const State& state) const {
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

bool LinkPolicy::Restore(int device, const Saved& saved, bool out) {
  State& state = states_[device];
  state.held = saved.held;
  state.degraded = saved.degraded;
  state.restored_links = saved.links;
  if (!saved.held && !out) return false;
  // Out until the links prove themselves again: the first observation that
  // finds them up starts the debounce (a held one waits for an operator).
  state.down = true;
  return true;
}

std::vector<LinkPolicy::Decision> LinkPolicy::Observe(std::string_view source,
                                                      const LinksByDevice& down_links,
                                                      const LinksByDevice& unconfirmed, Clock now) {
  std::vector<Decision> decisions;
  for (const auto& [device, reported] : down_links) {
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
    if (down && !state.down) {
      state.down = true;
      state.rejoin_at.reset();
      std::erase_if(state.downs, [&](Clock at) {
        return now - at > std::chrono::nanoseconds(options_.flap_window);
      });
      state.downs.push_back(now);
      Decision::What what = Decision::What::kWentDown;
      if (!state.held && state.downs.size() >= options_.flap_limit) {
        state.held = true;
        what = Decision::What::kFlapping;
      }
      state.degraded = true;
      decisions.push_back({device, what, false, Reason(state)});
    } else if (down && changed && state.degraded) {
      // Another link of the same device went down or came back: the reason
      // names the links down now.
      decisions.push_back({device, Decision::What::kLinksChanged, false, Reason(state)});
    } else if (!down && state.down) {
      state.down = false;
      if (state.held) continue;
      state.armed_debounce = options_.up_debounce;
      state.rejoin_at = now + std::chrono::nanoseconds(state.armed_debounce);
    }
  }
  return decisions;
}

std::vector<LinkPolicy::Decision> LinkPolicy::Advance(Clock now) {
  std::vector<Decision> decisions;
  for (auto& [device, state] : states_) {
    if (!state.rejoin_at || *state.rejoin_at > now) continue;
    state.rejoin_at.reset();
    if (state.down || state.held) continue;
    state.degraded = false;
    state.restored_links.clear();
    decisions.push_back({device, Decision::What::kRejoined, true,
                         fmt::format("links up for {} s", Seconds(state.armed_debounce))});
  }
  return decisions;
}

std::optional<LinkPolicy::Clock> LinkPolicy::NextDeadline() const {
  std::optional<Clock> next;
  for (const auto& [device, state] : states_) {
    if (state.rejoin_at && (!next || *state.rejoin_at < *next)) next = state.rejoin_at;
  }
  return next;
}

bool LinkPolicy::OperatorReturned(int device) {
  auto found = states_.find(device);
  if (found == states_.end()) return true;
  State& state = found->second;
  state.held = false;
  state.downs.clear();
  state.degraded = false;
  state.restored_links.clear();
  return !state.down;
}

bool LinkPolicy::Holds(int device) const {
  auto found = states_.find(device);
  return found != states_.end() && found->second.degraded;
}

std::optional<std::string> LinkPolicy::Clears(int device) const {
  auto found = states_.find(device);
  if (found == states_.end()) return std::nullopt;
  const State& state = found->second;
  if (state.held) return "an operator: rasctl undrain (its links were flapping)";
  if (!state.degraded) return std::nullopt;
  if (state.rejoin_at) {
    return fmt::format("by itself: its links are up, it rejoins once they stayed up {} s",
                       Seconds(state.armed_debounce));
  }
  return fmt::format("by itself: once its links stay up {} s", Seconds(options_.up_debounce));
}

std::map<int, LinkPolicy::Saved> LinkPolicy::ToSave() const {
  std::map<int, Saved> saved;
  for (const auto& [device, state] : states_) {
    if (!state.held && !state.degraded) continue;
    saved[device] = {state.held, state.degraded, AllDown(state)};
  }
  return saved;
}

std::map<std::pair<int, std::string>, std::uint64_t> LinkPolicy::DownLinks() const {
  std::map<std::pair<int, std::string>, std::uint64_t> down;
  for (const auto& [device, state] : states_) {
    for (const auto& [source, links] : state.down_links) down[{device, source}] = links.size();
  }
  return down;
}

}  // namespace rasd::ras
