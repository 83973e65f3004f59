#include "device_state_changes.h"

namespace rasd::daemon {

DeviceStateChanges::DeviceStateChanges(const runtime::Runtime& runtime) : runtime_(runtime) {
  for (const auto& device : runtime_.Devices()) seen_[device->Index()] = device->Health();
}

std::vector<DeviceStateChanges::Change> DeviceStateChanges::Take() {
  std::vector<Change> changes;
  for (const auto& device : runtime_.Devices()) {
    const runtime::HealthState now = device->Health();
    runtime::HealthState& before = seen_[device->Index()];
    if (now == before) continue;
    changes.push_back({device->Index(), before, now});
    before = now;
  }
  return changes;
}

}  // namespace rasd::daemon
