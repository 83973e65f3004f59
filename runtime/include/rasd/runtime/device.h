#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::runtime {

// Health of a device as the policy engine decides it. Only an operator
// (or policy.auto_recover, after a reset and a self-test) returns an
// Isolated device to service.
enum class HealthState : std::uint8_t {
  kHealthy,   // takes any work
  kDegraded,  // takes any work; errors are elevated and watched
  kDraining,  // takes work only from jobs already admitted to it
  kIsolated,  // takes no work
};

std::string_view HealthStateName(HealthState state);

// Whether a device in `state` takes new work: a new job, a new outside
// workload, a request routed to it. A draining device is leaving (only
// what it already runs may finish there) and an isolated one takes none.
constexpr bool TakesNewWork(HealthState state) {
  return state == HealthState::kHealthy || state == HealthState::kDegraded;
}
std::optional<HealthState> ParseHealthState(std::string_view name);

// Who is asking to put work on a device: a job that is already running there
// may finish while the device drains; a new one may not.
enum class Admission : std::uint8_t { kNewWork, kAdmittedJob };

// One device and its health gate. The gate is a single atomic so that every
// launch, copy and allocation can check it with one load on the hot path.
// Thread-safe. The Device lives as long as the Runtime that owns it.
class Device {
 public:
  explicit Device(drivers::DeviceProperties properties);

  const drivers::DeviceProperties& Properties() const { return properties_; }
  int Index() const { return properties_.index; }

  HealthState Health() const { return health_.load(std::memory_order_acquire); }
  void SetHealth(HealthState state) { health_.store(state, std::memory_order_release); }

  // ok when work of this kind may start; kDeviceIsolated otherwise, with the
  // device and its state in the message.
  Status CheckGate(Admission admission) const;

  // The runtime's own evidence that the device stopped completing work: a
  // count of waits on its streams (a job's synchronize with a deadline) that
  // ran out of time. Liveness reads it; it never decides anything alone, since
  // a job may give a long kernel too short a deadline.
  void NoteOpTimeout() { op_timeouts_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t OpTimeouts() const { return op_timeouts_.load(std::memory_order_relaxed); }

  // Whether the device's links to other nodes (the RDMA ports it uses) are
  // up and stable: a collective job takes a rank there only then. Its
  // compute is another matter (the health gate): a device whose link is down
  // still serves work that stays on the node.
  bool LinksUsable() const { return links_usable_.load(std::memory_order_acquire); }
  void SetLinksUsable(bool usable) { links_usable_.store(usable, std::memory_order_release); }

 private:
  drivers::DeviceProperties properties_;
  std::atomic<HealthState> health_{HealthState::kHealthy};
  std::atomic<std::uint64_t> op_timeouts_{0};
  std::atomic<bool> links_usable_{true};
};

}  // namespace rasd::runtime
