#include "rasd/runtime/device.h"

#include <fmt/format.h>

#include <array>

namespace rasd::runtime {
namespace {

constexpr std::array<std::string_view, 4> kHealthNames = {"healthy", "degraded", "draining",
                                                          "isolated"};

}  // namespace

std::string_view HealthStateName(HealthState state) {
  return kHealthNames[static_cast<std::size_t>(state)];
}

std::optional<HealthState> ParseHealthState(std::string_view name) {
  for (std::size_t i = 0; i < kHealthNames.size(); ++i) {
    if (kHealthNames[i] == name) return static_cast<HealthState>(i);
  }
  return std::nullopt;
}

Device::Device(drivers::DeviceProperties properties) : properties_(std::move(properties)) {}

Status Device::CheckGate(Admission admission) const {
  const HealthState state = Health();
  switch (state) {
    case HealthState::kHealthy:
    case HealthState::kDegraded:
      return {};
    case HealthState::kDraining:
      if (admission == Admission::kAdmittedJob) return {};
      break;
    case HealthState::kIsolated:
      break;
  }
  return Fail(ErrorCode::kDeviceIsolated, fmt::format("device {} is {}: no new work",
                                                      properties_.index, HealthStateName(state)));
}

}  // namespace rasd::runtime
