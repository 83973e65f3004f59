#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/runtime/device.h"

namespace rasd::daemon {

// One health verdict for the whole node, for node agents (`rasctl check`:
// node-problem-detector, a Slurm HealthCheckProgram, a kubelet probe).
//
//   problem:  the node cannot serve as it should: a device is draining or
//             isolated, a fault of the node itself asked for a node drain,
//             or a device backend named in the config is not available
//             (its devices are unwatched and unusable);
//   degraded: a device is degraded (it still takes work; its errors are
//             watched);
//   ok:       every device is healthy.
//
// "unknown" is not rasd's to say: it is what a client reports when rasd
// does not answer.
enum class NodeHealth { kOk, kDegraded, kProblem };
std::string_view NodeHealthName(NodeHealth health);

struct DeviceCondition {
  int index = -1;
  runtime::HealthState state = runtime::HealthState::kHealthy;
  std::string reason;  // why it is in that state ("" when healthy)
};

struct NodeFinding {
  NodeHealth level = NodeHealth::kProblem;
  std::optional<int> device;  // unset: the node itself
  std::string state;          // the device's state name, "node-fault" or "backend-missing"
  std::string reason;
};

struct NodeVerdict {
  NodeHealth health = NodeHealth::kOk;
  // Problems first, then warnings; within each, by device index, the
  // node's own fault first.
  std::vector<NodeFinding> findings;
};

// Pure.
NodeVerdict JudgeNode(const std::vector<DeviceCondition>& devices,
                      const std::optional<std::string>& node_fault,
                      const std::vector<std::string>& missing_backends = {});

}  // namespace rasd::daemon
