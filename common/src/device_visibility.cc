#include "rasd/common/device_visibility.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::common {

std::map<std::string, std::string> VisibilityEnvironment(const std::vector<VisibleDevice>& all,
                                                         std::vector<int> chosen) {
  std::sort(chosen.begin(), chosen.end());
  std::map<std::string, std::string> environment;
  environment["RASD_DEVICES"] = fmt::format("{}", fmt::join(chosen, ","));
  std::vector<std::string> cuda, ascend;
  bool host_has_cuda = false, host_has_ascend = false;
  int ascend_position = 0;
  for (const auto& device : all) {
    const bool is_chosen = std::binary_search(chosen.begin(), chosen.end(), device.index);
    if (device.vendor == "nvidia") {
      host_has_cuda = true;
      std::string uuid = device.uuid;
      if (!uuid.empty() && !uuid.starts_with("GPU-") && !uuid.starts_with("MIG-"))
        uuid = "GPU-" + uuid;
      if (is_chosen) cuda.push_back(uuid);
    } else if (device.vendor == "huawei") {
      host_has_ascend = true;
      if (is_chosen) ascend.push_back(std::to_string(ascend_position));
      ++ascend_position;
    }
  }
  if (host_has_cuda) environment["CUDA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(cuda, ","));
  if (host_has_ascend) {
    environment["ASCEND_RT_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(ascend, ","));
  }
  return environment;
}

}  // namespace rasd::common
