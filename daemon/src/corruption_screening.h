#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_health.h"
#include "rasd/common/event_loop.h"
#include "rasd/runtime/runtime.h"
#include "rasd/runtime/screening.h"

namespace rasd::daemon {

// Finds a device that computes wrong without reporting an error (silent
// data corruption) and takes it out: the typed silent-corruption decision.
//
// Each device in service (Healthy or Degraded) is screened in turn with
// the known-answer screen (runtime::KnownAnswerScreen), one device at a
// time, on a worker thread. What screening may cost is a budget of the
// node's time, shared by the devices in service: each of N earns
// `budget` / N of the time that passes (1% over 4 devices: 9 s of an hour
// each) and each screening spends the device time it measured; a device is
// screened when it has earned its last screening's cost, so the budget is
// kept on average whatever a screening costs on this hardware. The node's,
// not each device's: a job spanning the devices (a collective steps at its
// slowest rank) waits out every screening of every one of them, and on a
// simulator the devices share the host's cores. Order: a suspect
// (one mismatch, not confirmed yet) first, then the longest unscreened, a
// device no job uses ahead of a busy one screened up to 2 s before it (idle
// gaps cost nobody anything; busy devices are not starved). A device not
// screened for `interval` is overdue (shown, never forced past the budget).
//
// A mismatch is evidence, not a verdict: `confirm` screenings with a wrong
// result within `window` make it one (a single flipped bit from a cosmic ray
// isolates nothing). The verdict isolates the device (HealthCause::
// kSilentCorruption) with a reason naming the kernel, its shape and how it
// was confirmed; before it does, the verdict listener hears how far back
// the device is to be distrusted, so that jobs roll back before the
// isolation moves them. That point is where the clean screenings before the
// first mismatch, taken together, would have shown the rate the mismatches
// measure with 99.9% probability (the start of the oldest one needed):
// results from before it are trusted. Where the remembered screenings run
// out first, nothing the device computed is.
//
// A screening that could not run (no memory, a device fault, a timeout)
// gives no verdict: those faults take their own paths. Loop thread only,
// but Views() (any thread). The runtime and health outlive it.
class CorruptionScreening {
 public:
  struct Options {
    double budget = 0.01;  // of the node's time, shared by the devices in service; 0: off
    std::chrono::seconds interval{600};
    std::uint64_t elements = 1 << 20;
    int confirm = 2;
    std::chrono::seconds window{3600};
    bool operator==(const Options&) const = default;
  };
  struct Verdict {
    int device = -1;
    std::string reason;
    // Results the device produced since this long before the verdict are
    // not to be trusted.
    std::chrono::nanoseconds distrust_for{0};
    std::vector<runtime::ScreeningMismatch> evidence;  // the confirming screenings' first
  };
  struct DeviceView {
    int device = 0;
    std::uint64_t screenings = 0;  // completed
    std::uint64_t kernels_checked = 0;
    std::uint64_t mismatches = 0;  // kernels with a wrong result
    std::uint64_t incomplete = 0;  // screenings that could not run
    std::uint64_t verdicts = 0;
    // Jobs' cross-checks of the device by kind ("inference"), and those it lost.
    std::map<std::string, std::uint64_t> cross_checks, cross_check_mismatches;
    bool screened = false;  // the fields below are a screening's
    std::chrono::system_clock::time_point last_at{};
    bool last_passed = false;
    std::string last_summary;
    bool suspect = false;  // a mismatch waits for confirmation
    bool overdue = false;  // in service and not screened within `interval`
    // Device time screening took, over the time since rasd started.
    double budget_used = 0;
  };

  CorruptionScreening(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
                      Options options);
  ~CorruptionScreening();  // waits for a screening in progress
  CorruptionScreening(const CorruptionScreening&) = delete;
  CorruptionScreening& operator=(const CorruptionScreening&) = delete;

  void Start();
  // From the next screening (config reload).
  void SetOptions(Options options);
  // Heard on the loop, before the verdict's decision; what it returns
  // (the work the device may have spoiled, in words) goes into the
  // decision's evidence.
  void SetVerdictListener(std::function<std::string(const Verdict&)> listener) {
    on_verdict_ = std::move(listener);
  }
  // A job's own cross-check of `device` (an answer re-run on other
  // replicas, kind "inference"): agreed, or outvoted by two that agreed,
  // with where it differed. An outvoted answer is evidence like a wrong
  // screening, and counts towards `confirm` with them. Loop thread.
  void ReportCrossCheck(int device, const std::string& kind, bool agreed,
                        runtime::ScreeningMismatch evidence);
  std::vector<DeviceView> Views() const;
  // No screening running (tests step simulated time only then).
  bool Settled() const { return !running_; }

 private:
  struct Round {
    std::chrono::nanoseconds started{0}, finished{0};
    std::uint64_t elements = 0;
    bool passed = false;
    std::uint64_t wrong_elements = 0;
  };
  struct DeviceState {
    DeviceView view;
    std::chrono::nanoseconds credit{0};
    std::chrono::nanoseconds last_cost{0};
    std::chrono::nanoseconds last_screened{0};  // monotonic; 0: never
    std::chrono::nanoseconds device_time{0};
    std::deque<std::chrono::nanoseconds> mismatch_times;  // within `window`
    std::vector<runtime::ScreeningMismatch> evidence;
    std::vector<bool> evidence_screened;  // each evidence's: a screening, else a cross-check
    std::deque<Round> rounds;  // the newest kKeptRounds
    std::string last_incomplete;  // why the last screening could not run; empty: it ran
  };
  void Tick();
  void Launch(int device);
  void Finish(int device, const runtime::ScreeningReport& report, std::chrono::nanoseconds started);
  void Judge(int device, DeviceState& state, std::chrono::nanoseconds now);
  // Drops the evidence older than the window.
  void Forget(DeviceState& state, std::chrono::nanoseconds now) const;
  std::chrono::nanoseconds DistrustFor(const DeviceState& state,
                                       std::chrono::nanoseconds now) const;
  void Publish();

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  DeviceHealth& health_;
  Options options_;
  std::shared_ptr<const runtime::KnownAnswerScreen> screen_;
  std::uint64_t screen_elements_ = 0;  // what screen_ was built for
  std::map<int, DeviceState> devices_;
  std::unique_ptr<common::Timer> timer_;
  std::chrono::nanoseconds started_at_{0}, last_tick_{0};
  bool running_ = false;
  std::thread worker_;
  std::function<std::string(const Verdict&)> on_verdict_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  mutable std::mutex views_mutex_;
  std::vector<DeviceView> views_;
};

}  // namespace rasd::daemon
