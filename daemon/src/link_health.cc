#include "link_health.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "rasd/common/logging.h"

namespace rasd::daemon {

LinkHealth::LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, Actuator& actuator,
                       jobs::JobManager& jobs, Options options)
    : loop_(loop), runtime_(runtime), actuator_(actuator), jobs_(jobs), options_(options) {}

void LinkHealth::Observe(const std::map<int, std::vector<std::string>>& down_ports) {
  const auto now = loop_.Now();
  for (const auto& [device, ports] : down_ports) {
    auto gate = runtime_.GetDevice(device);
    if (!gate) continue;
    State& state = states_[device];
    const bool down = !ports.empty();
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
        RASD_LOG_ERROR("device {}: its RDMA link went down {} times within {} s: flapping; it "
                       "stays out of collectives until an operator's undrain",
                       device, state.downs.size(), options_.flap_window.count());
      }
      const std::string reason =
          fmt::format("RDMA link down ({}): out of collectives until it stays up {} s",
                      fmt::join(ports, ", "),
                      std::chrono::duration_cast<std::chrono::seconds>(options_.up_debounce).count());
      if ((*gate)->Health() == runtime::HealthState::kHealthy) {
        // Degraded at once even when the state cannot be saved (retried).
        (void)actuator_.SetDeviceState(device, runtime::HealthState::kDegraded, reason,
                                       "degrade-device", "link-down");
        state.degraded_by_us = true;
      }
      RASD_LOG_WARN("device {}: {}", device, reason);
      jobs_.Reconsider();
    } else if (!down && state.down) {
      state.down = false;
      if (state.held) continue;
      state.rejoin = loop_.CreateTimer([this, device] { Rejoin(device); });
      state.rejoin->ArmAfter(options_.up_debounce);
    }
  }
}

void LinkHealth::Rejoin(int device) {
  State& state = states_[device];
  auto fired = std::move(state.rejoin);  // freed when this callback returns
  if (state.down || state.held) return;
  auto gate = runtime_.GetDevice(device);
  if (!gate) return;
  (*gate)->SetLinksUsable(true);
  if (state.degraded_by_us && (*gate)->Health() == runtime::HealthState::kDegraded) {
    (void)actuator_.SetDeviceState(
        device, runtime::HealthState::kHealthy,
        fmt::format("RDMA links up for {} s",
                    std::chrono::duration_cast<std::chrono::seconds>(options_.up_debounce).count()),
        "undrain-device", "link-up");
  }
  state.degraded_by_us = false;
  RASD_LOG_INFO("device {}: its RDMA links stayed up: back in collectives", device);
  jobs_.Reconsider();
}

void LinkHealth::OnOperatorReturned(int device) {
  auto found = states_.find(device);
  if (found == states_.end()) return;
  State& state = found->second;
  state.held = false;
  state.downs.clear();
  state.degraded_by_us = false;
  if (!state.down) {
    if (auto gate = runtime_.GetDevice(device)) (*gate)->SetLinksUsable(true);
    jobs_.Reconsider();
  }
}

}  // namespace rasd::daemon
