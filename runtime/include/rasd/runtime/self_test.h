#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/runtime/runtime.h"

namespace rasd::runtime {

struct SelfTestOptions {
  // The pattern test writes and reads back up to this much of the pool's
  // free memory (all of it when smaller), in chunks.
  std::uint64_t pattern_bytes = 256ULL << 20;
  std::uint64_t chunk_bytes = 4ULL << 20;
  // Each step (a kernel and its copies, one chunk) must finish within this.
  std::chrono::milliseconds step_timeout{5000};
  // The load phase: this many streams at once, each running `load_rounds`
  // rounds of uploads, an axpy (a device-to-device copy where the backend
  // has no kernels) and a read-back over buffers of `load_bytes`, every
  // result compared exactly. A device that fails only when busy passes the
  // one-at-a-time checks; this is where it shows. 0 streams: no load phase.
  int load_streams = 4;
  int load_rounds = 16;
  std::uint64_t load_bytes = 64ULL << 10;
  // The screening phase: `screen_rounds` known-answer screenings
  // (KnownAnswerScreen) of `screen_elements` each, so that a device that
  // computes wrong without saying so does not come back while it still
  // does. Rounds multiply the chance of catching a low rate: one flip in R
  // outputs is missed by all of them with probability about
  // exp(-5 x elements x rounds x R). 0 rounds: no screening phase.
  std::uint64_t screen_elements = 1 << 20;
  int screen_rounds = 4;
};

struct SelfTestCheck {
  std::string name;  // "kernel gemm", "pattern 0x00000000-0x003fffff"
  bool passed = false;
  std::string detail;
};

struct SelfTestReport {
  bool passed = false;
  std::vector<SelfTestCheck> checks;
  std::uint64_t pattern_bytes_tested = 0;
  std::chrono::milliseconds duration{0};
  // "passed: 10 kernels, 256 MiB pattern" or the first failure.
  std::string Summary() const;
};

// Tells whether a device can be trusted with work again: every kernel of
// the registry the test knows (fill, axpy, add, mul, relu, gemm, softmax,
// reduce_sum, empty, sleep_us) runs on small inputs and matches a host
// reference, then the same device under load (several streams at once,
// results checked), then the known-answer screening for silent corruption
// (exact digests, several rounds), then a write/read-back of two patterns over the pool's
// free memory. Runs as an admitted job ("rasd-self-test"), so the device must be
// Draining or better; the caller opens the gate that far and decides what
// the result means. A sticky fault, a lost device or a poisoned page fails
// it. Never throws; a failure to even start is a failed report, not an
// error. The report's duration is measured on `clock`'s Monotonic().
SelfTestReport RunSelfTest(Runtime& runtime, int device, const SelfTestOptions& options,
                           const common::Clock& clock);
// As above, timed by the system clock.
SelfTestReport RunSelfTest(Runtime& runtime, int device, const SelfTestOptions& options = {});

}  // namespace rasd::runtime
