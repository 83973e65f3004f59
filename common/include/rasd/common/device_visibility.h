#pragma once

#include <map>
#include <string>
#include <vector>

namespace rasd::common {

// One device of the host as a vendor runtime numbers it.
struct VisibleDevice {
  int index = -1;      // rasd's index
  std::string vendor;  // "nvidia", "huawei", "sim"
  std::string uuid;
};

// The environment that makes a vendor runtime see only the chosen devices,
// for `rasctl run` and the kubelet device plugin's Allocate alike:
// RASD_DEVICES always (rasd's indexes, ascending); CUDA_VISIBLE_DEVICES by
// UUID ("GPU-..." as the driver spells it) where the host has NVIDIA
// devices, empty when none of them was chosen, so that the others stay
// hidden; ASCEND_RT_VISIBLE_DEVICES by the chip's position among the host's
// Ascend devices. `all` is every device of the host, in index order. Pure.
std::map<std::string, std::string> VisibilityEnvironment(const std::vector<VisibleDevice>& all,
                                                         std::vector<int> chosen);

}  // namespace rasd::common
