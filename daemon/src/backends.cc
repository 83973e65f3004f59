#include "backends.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "rasd/common/logging.h"
#include "rasd/drivers_shim/ascend_driver.h"
#include "rasd/drivers_shim/composite_driver.h"
#include "rasd/drivers_shim/cuda_driver.h"
#include "rasd/drivers_shim/sim_driver.h"

namespace rasd::daemon {

Result<std::unique_ptr<drivers::Driver>> OpenBackends(const Config& config,
                                                      std::vector<std::string>* missing) {
  std::vector<std::string> names;
  // Named outright, a missing backend is worth a warning; found missing by
  // "auto", it is what most hosts look like.
  std::set<std::string> asked_for;
  for (const auto& name : config.runtime.drivers) {
    if (name != "auto") asked_for.insert(name);
    const std::vector<std::string> expanded =
        name == "auto" ? std::vector<std::string>{"cuda", "ascend"} : std::vector{name};
    for (const auto& one : expanded) {
      if (std::find(names.begin(), names.end(), one) == names.end()) names.push_back(one);
    }
  }
  std::vector<std::unique_ptr<drivers::Driver>> opened;
  for (const auto& name : names) {
    Result<std::unique_ptr<drivers::Driver>> driver =
        Fail(ErrorCode::kInternal, "unknown backend " + name);
    if (name == "sim") {
      auto sim = drivers::SimDriver::Create(
          {.device_count = config.simulator.devices,
           .memory_bytes_per_device = config.simulator.memory_mib * 1024 * 1024});
      if (!sim) return Fail(sim.error());
      driver = std::unique_ptr<drivers::Driver>(std::move(*sim));
    } else if (name == "cuda") {
      driver = drivers::CudaDriver::Create({.library = config.runtime.cuda_library});
    } else if (name == "ascend") {
      driver = drivers::CreateAscendDriver({.acl_library = config.runtime.ascend_library,
                                            .dcmi_library = config.runtime.dcmi_library});
    }
    if (!driver) {
      // The usual case on a host without that vendor's hardware: say why
      // once and serve with the rest.
      RASD_LOG(asked_for.contains(name) ? spdlog::level::warn : spdlog::level::info,
                  "runtime: the {} backend is not available: {}", name, driver.error().message);
      if (missing != nullptr && asked_for.contains(name))
        missing->push_back(name + ": " + driver.error().message);
      continue;
    }
    auto devices = (*driver)->EnumerateDevices();
    RASD_LOG_INFO("runtime: {} backend with {} device(s)", name, devices ? devices->size() : 0);
    opened.push_back(std::move(*driver));
  }
  if (opened.size() == 1) return std::move(opened.front());
  if (opened.empty()) {
    RASD_LOG_WARN("runtime: no device backend is available; serving host errors only");
  }
  auto composite = drivers::CompositeDriver::Create(std::move(opened));
  if (!composite) return Fail(composite.error());
  return std::unique_ptr<drivers::Driver>(std::move(*composite));
}

}  // namespace rasd::daemon
