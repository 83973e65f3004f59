#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/daemon/config.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::daemon {

// The device backends `runtime.driver` names, opened in order ("auto":
// cuda, then ascend). A vendor backend that is not available here (no
// library, no driver, no device) is logged and left out: the others serve.
// One backend is returned as itself (so `rasctl inject` still reaches the
// simulator); several, or none, as a CompositeDriver. Errors: a simulator
// that cannot be created (bad simulator.* values).
// `missing`, when given, gets "NAME: why" for each backend named outright
// (not found by "auto") that is not available: `rasctl check` reports them.
Result<std::unique_ptr<drivers::Driver>> OpenBackends(const Config& config,
                                                      std::vector<std::string>* missing = nullptr);

}  // namespace rasd::daemon
