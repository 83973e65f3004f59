#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
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

// Copies of one result computed on different devices, compared bit for bit
// (for results every correct device computes exactly, as the collective's
// parts): whether they agree, and which one the other two outvote.
struct CopiesVote {
  enum class Outcome : std::uint8_t {
    kAgreed,          // the first two are the same
    kUndecided,       // the first two differ and there is no third
    kNoMajority,      // the third sides with both or neither
    kFirstOutvoted,   // the second and third are the same, the first differs
    kSecondOutvoted,  // the first and third are the same, the second differs
  };
  Outcome outcome = Outcome::kAgreed;
  // When a copy is outvoted: how many of its elements differ from the
  // majority's, and the first of them.
  std::size_t differing = 0;
  std::size_t first_differing = 0;
};
// Copies of different sizes differ. `third` is empty when none was
// computed (the first two agreed, or no third device could).
CopiesVote VoteOnCopies(std::span<const float> first, std::span<const float> second,
                        std::span<const float> third = {});

}  // namespace rasd::jobs
