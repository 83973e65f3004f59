#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "actuator.h"
#include "control_server.h"
#include "corruption_screening.h"
#include "device_heartbeat.h"
#include "device_lifecycle.h"
#include "link_health.h"
#include "ras_pipeline.h"
#include "rasd/daemon/config.h"
#include "rasd/runtime/self_test.h"
#include "workloads.h"

namespace rasd::daemon {

// What a Config means for each component: the same mapping at start and
// at every reload, so that a key applied live is applied the same way.
ControlServer::Options ServerOptions(const Config& config);
Actuator::Options ActuatorOptions(const Config& config);
RasPipeline::Options PipelineOptions(const Config& config);
DeviceHeartbeat::Options HeartbeatOptions(const Config& config);
CorruptionScreening::Options ScreeningOptions(const Config& config);
// The share of a collective job's time its cross-checks may take
// (CollectiveOptions::cross_check_budget): a check stalls every rank's
// stream, and where a step takes half a millisecond, one every
// screening.sample_one_in steps would cost percents of the job.
inline constexpr double kCollectiveCheckShare = 0.0025;
Workloads::Options WorkloadOptions(const Config& config);
LinkHealth::Options LinkHealthOptions(const Config& config);
// The node's boot time from <host.root>/proc/uptime, for the rules' boot
// grace; nullopt (with the reason logged) when it cannot be read.
std::optional<std::chrono::system_clock::time_point> BootTime(const common::HostEnv& host);
DeviceLifecycle::Options LifecycleOptions(const Config& config,
                                          const runtime::SelfTestOptions& self_test);

// A configuration offered by a reload: read from `path` (none: the
// defaults), the command line's overrides applied, its admin group
// resolved. `errors` lists every problem, one line each; a candidate with
// errors must not be applied.
struct ReloadCandidate {
  Config config;
  std::optional<gid_t> admin_gid;
  std::vector<std::string> errors;
};
ReloadCandidate LoadReloadCandidate(const std::optional<std::filesystem::path>& path,
                                    const ConfigOverrides& overrides);

}  // namespace rasd::daemon
