#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/jobs/cross_check.h"
#include "rasd/runtime/communicator.h"
#include "rasd/runtime/runtime.h"

namespace rasd::jobs {

struct CollectiveOptions {
  std::string id = "collective";  // the job id: owner of its streams and memory
  std::vector<int> devices;       // one rank per device at the start
  std::uint64_t elements = 1 << 16;
  int steps = 200;
  int checkpoint_every = 10;
  // Below this many ranks the job waits for a device to come back instead
  // of shrinking further.
  int min_ranks = 1;
  // At a checkpoint, a device of the job that admits work again (repaired
  // and undrained) gets its rank back: the communicator re-forms upward
  // from the checkpoint just taken, so nothing is recomputed.
  bool grow_on_return = true;
  std::chrono::milliseconds step_timeout{5000};
  // Silent data corruption: every this many steps, one rank's part (the
  // ranks in turn) is computed again on the next rank's device before the
  // AllReduce, and on a third rank's when the two differ. The part the
  // other two outvote is replaced by theirs before the step goes on, and
  // its device is told of (on_cross_check). Parts are small integers in
  // fp32, so every correct device gives the same bits: compared exactly.
  // A ring AllReduce leaves every rank a copy of the same reduced chunks,
  // so comparing the ranks' results afterwards would agree on a wrong sum:
  // the parts are where a device's wrong arithmetic can be told apart.
  // 0: off; needs two ranks, three to name a device.
  std::uint32_t cross_check_every = 0;
  // The share of the job's time cross-checks may take: each check waits,
  // beyond cross_check_every steps, until the job has stepped for the last
  // check's time divided by this (a check stalls every rank's stream; where
  // steps are short, every cross_check_every steps would cost percents).
  // 0: no limit but cross_check_every.
  double cross_check_budget = 0;
  // Called on the job's thread for every device a cross-check compared;
  // must not block.
  std::function<void(const CrossCheck&)> on_cross_check;
  // What Progress's times are read from; null, the system's clock.
  std::shared_ptr<const common::Clock> clock;
};

// A data-parallel job: each step every rank computes its part locally
// (fill and axpy on its device) and an AllReduce sums the parts into the
// next state, which every rank then holds. The work is split into as many
// logical shards as the job started with ranks, spread over whatever ranks
// it has, and its values are small integers in fp32, so every sum is exact:
// the per-step checksums are the same bits whatever the number of ranks.
//
// A checkpoint (the state, on the host) is taken every checkpoint_every
// steps. When a step fails (a rank's device lost, the job's streams aborted
// by kill-consumer, a timeout) or a rank's device stops admitting work, the
// communicator is aborted on every rank, re-formed on the job's devices
// that admit work (shrinking; below min_ranks it waits for one to return),
// restored from the last checkpoint (a drain checkpoints first: it loses
// nothing) and continued. When a device returns to service, the job grows
// back onto it at the next checkpoint (grow_on_return). Thread-safe.
class CollectiveJob {
 public:
  static Result<std::unique_ptr<CollectiveJob>> Create(runtime::Runtime& runtime,
                                                       CollectiveOptions options);
  ~CollectiveJob();  // stops the job
  CollectiveJob(const CollectiveJob&) = delete;
  CollectiveJob& operator=(const CollectiveJob&) = delete;

  // Waits until the job finished (or failed); false on timeout.
  bool Wait(std::chrono::milliseconds timeout);
  void Stop();
  // Wakes a job waiting for devices (the daemon calls it on health changes).
  void Reconsider();
  // What the job computed in the last `distrust_for` (on its clock) may be
  // wrong: a device computed wrong without reporting an error (silent data
  // corruption). At its next step boundary the job re-forms from the newest
  // checkpoint it kept that was taken before then (from its start when it
  // kept none that old) and computes those steps again on the devices that
  // admit work, never `device` until it has been out of service and come
  // back (repaired, its self-test passed): its isolation may reach the job
  // after this does.
  void Distrust(int device, std::chrono::nanoseconds distrust_for);

  enum class State : std::uint8_t { kRunning, kReforming, kWaiting, kFinished, kFailed, kStopped };
  static std::string_view StateName(State state);

  struct Progress {
    State state = State::kRunning;
    int step = 0;                // steps completed
    std::vector<int> devices;    // ranks now
    std::uint64_t reforms = 0;   // communicators re-formed, either way
    std::uint64_t grown = 0;     // of those, re-formed upward (a device returned)
    std::uint64_t restores = 0;  // checkpoints restored
    std::string last_error;
    // Fault (first failed step seen, or drain noticed) to every rank of the
    // old communicator released, and to the next AllReduce done on the new
    // one, for the most recent recovery.
    std::chrono::nanoseconds last_release{0};
    std::chrono::nanoseconds last_recovery{0};
    // When those happened (the options' clock's Monotonic()), for measuring
    // from a fault's injection.
    std::chrono::nanoseconds released_at{0};
    std::chrono::nanoseconds recovered_at{0};
    // Every completed step is checked against the fault-free run as it
    // completes; a step later rolled back to a checkpoint does not count.
    std::uint64_t checksum_mismatches = 0;
    // Roll-backs for silent data corruption (Distrust), and the steps they
    // computed again in all.
    std::uint64_t distrust_rollbacks = 0;
    std::uint64_t steps_redone = 0;
    // Parts computed again (cross_check_every); of those, the two devices
    // differed; of those, a third outvoted the rank's own part, which was
    // replaced.
    std::uint64_t cross_checks = 0;
    std::uint64_t disagreements = 0;
    std::uint64_t parts_corrected = 0;
  };
  Progress GetProgress() const;
  // How many of the latest checksums are kept: memory stays bounded however
  // long the job runs, and every step is still checked (Progress).
  static constexpr std::size_t kChecksumWindow = 4096;
  // One checksum per completed step (the sum of the state's values), for
  // the latest kChecksumWindow steps, oldest first.
  std::vector<std::uint64_t> Checksums() const;
  // What a fault-free run gives, computed on the host: all steps, or the
  // first `count` (O(elements + count), so a long job can be checked as it
  // goes).
  static std::vector<std::uint64_t> ExpectedChecksums(const CollectiveOptions& options);
  static std::vector<std::uint64_t> ExpectedChecksums(const CollectiveOptions& options,
                                                      std::size_t count);

  const std::string& Id() const { return options_.id; }
  const std::vector<int>& Devices() const { return options_.devices; }

 private:
  CollectiveJob(runtime::Runtime& runtime, CollectiveOptions options);
  void Run();
  Status Form(const std::vector<int>& devices);
  void ReleaseBuffers();
  Status Step(int step);
  // One rank's part of `step` computed again on other ranks' devices and
  // compared (cross_check_every); after the parts' kernels, before the
  // AllReduce.
  Status CrossCheckPart(int step);
  // The host copies a cross-check compares, kept from one check to the next
  // (a check every few milliseconds would otherwise allocate and free
  // megabytes each time); parked and replaced when a copy timed out.
  std::vector<std::shared_ptr<std::vector<float>>> check_copies_;
  // Whether a cross-check is due before this step's AllReduce
  // (cross_check_every, cross_check_budget); job thread only.
  bool CrossCheckDue();
  std::uint32_t steps_since_check_ = 0;
  std::uint64_t checks_started_ = 0;  // the ranks take turns being checked, rank 1 first
  std::chrono::nanoseconds last_check_cost_{0}, last_check_end_{0};
  float RankConstant(int rank, int ranks, int step) const;
  Status Checkpoint(int step);
  Status Restore();
  std::vector<int> AdmittingDevices();
  void SetState(State state);

  runtime::Runtime& runtime_;
  CollectiveOptions options_;
  int shards_ = 0;

  std::unique_ptr<runtime::Communicator> communicator_;
  // Host buffers of copies given up on (a failed or aborted step) that may
  // still run: freed once the communicator's streams are gone.
  std::vector<std::shared_ptr<std::vector<float>>> parked_;
  struct RankBuffers {
    runtime::MemoryPool* pool = nullptr;
    runtime::Allocation state, part;
    runtime::Allocation check;  // a part computed again here (cross_check_every)
  };
  std::vector<RankBuffers> buffers_;

  std::vector<float> checkpoint_;
  int checkpoint_step_ = 0;
  // Older checkpoints, kept for a roll-back past the newest (Distrust):
  // the newest few and, within kHistoryBytes, a spread further back (when
  // full, the one closest in time to its older neighbour goes).
  struct KeptCheckpoint {
    int step = 0;
    std::chrono::nanoseconds taken_at{0};
    std::vector<float> state;
    std::uint64_t expected_sum = 0;
    std::uint64_t committed_mismatches = 0;
  };
  static constexpr std::uint64_t kHistoryBytes = 16ULL << 20;
  static constexpr std::size_t kNewestKept = 4;
  std::deque<KeptCheckpoint> history_;
  void KeepCheckpoint();
  // Moves the checkpoint back to the newest kept before `before`, or the
  // start. Returns the steps that will be computed again.
  int RollBackTo(std::chrono::nanoseconds before);
  std::vector<float> last_state_;  // after the last completed step, when it was not a checkpoint
  // Where each step's result is copied to the host. It trades storage with
  // last_state_ or checkpoint_ instead of allocating the state's size every
  // step (small allocations split the freed blocks between steps, and the
  // thread's arena grew); parked and replaced when a copy timed out.
  std::shared_ptr<std::vector<float>> step_copy_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Progress progress_;
  std::deque<std::uint64_t> checksums_;  // the latest kChecksumWindow steps
  // The fault-free run's checksum after the last completed step, and after
  // the checkpoint's step; mismatches since the checkpoint (undone by a
  // restore) apart from those before it.
  std::uint64_t expected_sum_ = 0;
  std::uint64_t expected_at_checkpoint_ = 0;
  std::uint64_t mismatches_since_checkpoint_ = 0;
  // The checkpoint moved to the last completed step. Call with mutex_ held.
  void MarkCheckpoint();
  bool stop_ = false;
  // Distrust's request, for the job's thread; 0: none.
  std::chrono::nanoseconds distrust_since_{0};
  bool distrust_pending_ = false;
  // Devices distrusted, and whether each has been seen out of service
  // since: one that admits work again after that is trusted again.
  std::map<int, bool> distrusted_;
  std::thread thread_;
};

}  // namespace rasd::jobs
