#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/runtime/runtime.h"

namespace rasd::runtime {

struct ScreeningOptions {
  // Output elements of each elementwise kernel in one screening; gemm,
  // softmax and reduce_sum take shapes of about the same work. One
  // screening checks about five times this many output elements, so a
  // device flipping one bit in R of its outputs fails it with probability
  // about 1 - exp(-5 x elements x R).
  std::uint64_t elements = 1 << 20;
  // Each step (copies and a kernel) must finish within this.
  std::chrono::milliseconds step_timeout{5000};
};

// One kernel whose result was not the known answer.
struct ScreeningMismatch {
  std::string kernel;  // "add"
  std::string shape;   // "n=1048576"
  std::string detail;  // "element 4711: 3.0000005 instead of 3 (digest 0x.. instead of 0x..)"
  std::uint64_t wrong_elements = 1;  // how many of its outputs were wrong (at least one)
};

struct ScreeningReport {
  // Every check ran to its comparison. False when a copy, an allocation or
  // a launch failed or timed out: no verdict on the device's arithmetic
  // (its other faults take their own paths), `error` says why.
  bool completed = false;
  std::string error;
  std::vector<std::string> kernels;  // compared, in order
  std::vector<ScreeningMismatch> mismatches;
  std::uint64_t elements_checked = 0;  // output elements compared
  std::uint64_t wrong_elements = 0;    // of those, wrong (over every kernel)
  // From the screening's first copy to its last result, on the clock given:
  // what it cost the device (and what a budget counts).
  std::chrono::nanoseconds device_time{0};
  bool Passed() const { return completed && mismatches.empty(); }
  // "passed: 8 kernels, 5.3M elements, 21 ms", "add n=1048576: element ..."
  std::string Summary() const;
};

// Known-answer tests of a device's arithmetic, for a device that computes
// wrong without reporting an error (silent data corruption). Each kernel
// the screen knows runs on fixed inputs of small integers, for which every
// correct device gives the same bits whatever order it adds in; the result
// is reduced on the host to a 64-bit digest, compared with the digest
// computed once on the host when the screen is built. The digest changes
// with any change of any output word, so one flipped bit anywhere fails the
// kernel. softmax cannot be exact across devices (exp differs in its last
// bits): its results are compared within 1e-6 relative, which misses a
// flip in the lowest three bits of a mantissa and nothing larger.
//
// Kernels the screen has no test for (kv_store, paged_attention and any
// backend's own) are listed by Unscreened(), never passed silently.
//
// Built once (host work: inputs and digests, O(elements)); immutable after,
// so one screen may run on several threads and devices at once. Run()
// blocks its caller for the screening (milliseconds at the defaults on the
// simulator); it runs as an admitted job ("rasd-screen") on a stream of its
// own, allocating about 4 x elements x 4 bytes from the device's pool and
// freeing it before it returns. Never throws.
class KnownAnswerScreen {
 public:
  // `kernels`: what the device's registry has; the screen tests those it
  // knows.
  static std::shared_ptr<const KnownAnswerScreen> Build(const std::vector<std::string>& kernels,
                                                        const ScreeningOptions& options = {});
  ~KnownAnswerScreen();
  KnownAnswerScreen(const KnownAnswerScreen&) = delete;
  KnownAnswerScreen& operator=(const KnownAnswerScreen&) = delete;

  ScreeningReport Run(Runtime& runtime, int device, const common::Clock& clock) const;

  const std::vector<std::string>& Screened() const;
  const std::vector<std::string>& Unscreened() const;
  const ScreeningOptions& Options() const;

  struct Data;

 private:
  explicit KnownAnswerScreen(std::unique_ptr<Data> data);
  std::unique_ptr<Data> data_;
};

// The 64-bit digest the screen compares: any change of any one 32-bit word
// changes it (each step is a bijection of the running value).
std::uint64_t WordDigest(const float* values, std::size_t count);

}  // namespace rasd::runtime
