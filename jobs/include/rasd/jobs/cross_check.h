#pragma once

#include <cstdint>
#include <string>

namespace rasd::jobs {

// One cross-check of a device's result against the same work done on other
// devices (silent data corruption): it agreed with another device, or two
// other devices agreed with each other on another result (outvoted).
struct CrossCheck {
  enum class Job : std::uint8_t {
    kInference,   // a sampled request answered again on other replicas
    kCollective,  // a rank's part of a step computed again on other ranks' devices
  };
  int device = 0;
  bool agreed = true;
  std::uint64_t request = 0;  // kInference: the request
  std::string detail;         // for an outvoted result: where it differed
  Job job = Job::kInference;
  int step = 0;         // kCollective: the step (from 1)
  std::string kernels;  // kCollective: what computed the part ("fill", "fill, axpy")
};

}  // namespace rasd::jobs
