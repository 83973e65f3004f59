#include "node_verdict.h"

#include <algorithm>

namespace rasd::daemon {

std::string_view NodeHealthName(NodeHealth health) {
  switch (health) {
    case NodeHealth::kOk:
      return "ok";
    case NodeHealth::kDegraded:
      return "degraded";
    case NodeHealth::kProblem:
      return "problem";
  }
  return "problem";
}

NodeVerdict JudgeNode(const std::vector<DeviceCondition>& devices,
                      const std::optional<std::string>& node_fault,
                      const std::vector<std::string>& missing_backends) {
  NodeVerdict verdict;
  for (const auto& backend : missing_backends) {
    verdict.findings.push_back(NodeFinding{.level = NodeHealth::kProblem,
                                           .device = std::nullopt,
                                           .state = "backend-missing",
                                           .reason = backend});
  }
  if (node_fault) {
    verdict.findings.push_back(NodeFinding{.level = NodeHealth::kProblem,
                                           .device = std::nullopt,
                                           .state = "node-fault",
                                           .reason = *node_fault});
  }
  std::vector<DeviceCondition> sorted = devices;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  for (const auto& device : sorted) {
    if (device.state == runtime::HealthState::kHealthy) continue;
    verdict.findings.push_back(NodeFinding{
        .level = runtime::TakesNewWork(device.state) ? NodeHealth::kDegraded : NodeHealth::kProblem,
        .device = device.index,
        .state = std::string(runtime::HealthStateName(device.state)),
        .reason = device.reason});
  }
  std::stable_sort(verdict.findings.begin(), verdict.findings.end(),
                   [](const auto& a, const auto& b) {
                     return static_cast<int>(a.level) > static_cast<int>(b.level);
                   });
  for (const auto& finding : verdict.findings) {
    verdict.health = std::max(verdict.health, finding.level);
  }
  return verdict;
}

}  // namespace rasd::daemon
