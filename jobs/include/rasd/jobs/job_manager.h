#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/jobs/collective_job.h"
#include "rasd/jobs/inference_service.h"
#include "rasd/jobs/llm_load.h"
#include "rasd/jobs/llm_service.h"
#include "rasd/jobs/load_generator.h"
#include "rasd/runtime/runtime.h"

namespace rasd::jobs {

enum class JobKind : std::uint8_t { kInference, kCollective, kLlm };
std::string_view JobKindName(JobKind kind);
std::optional<JobKind> ParseJobKind(std::string_view name);

// What the config or `rasctl job start` asks for.
struct JobSpec {
  std::string name;
  JobKind kind = JobKind::kInference;
  std::vector<int> devices;  // empty: every device
  // Inference.
  std::size_t max_batch = 32;
  std::chrono::microseconds max_wait{500};
  double load_rps = 0;  // > 0: an in-process load generator sends this many requests a second
  // Requests admitted and not answered yet; beyond it new ones are refused
  // as overloaded (and counted), never dropped silently.
  std::size_t max_queue = 4096;
  // LLM (also max_batch: sequences in one step; max_queue; load_rps).
  std::uint64_t kv_bytes = 4 << 20;  // the KV cache on each device
  std::uint32_t tokens_per_block = 16;
  Preemption preemption = Preemption::kRecompute;
  // Collective.
  std::uint64_t elements = 1 << 16;
  int steps = 1000;
  int checkpoint_every = 10;
  int min_ranks = 1;
  bool grow_on_return = true;
  bool operator==(const JobSpec&) const = default;
};

// One job as `rasctl jobs` shows it.
struct JobReport {
  std::string name;
  JobKind kind = JobKind::kInference;
  std::vector<int> devices;  // where it runs now
  std::uint64_t overloaded = 0;  // inference: requests refused because max_queue were waiting
  std::string state;         // inference: serving, degraded (some replicas out), waiting;
                             // collective: CollectiveJob::StateName
  std::string progress;      // one line for people
  // Inference (the service's own counts, and its load generator's when it has one).
  std::uint64_t served = 0, requeued = 0, rerun = 0, lost = 0, waiting = 0;
  std::uint64_t load_sent = 0, load_wrong = 0;
  // Inference: answers the service found wrong later and answered again;
  // of the wrong ones, those answered again (LoadGenerator::Stats).
  std::uint64_t load_corrected = 0, load_wrong_corrected = 0, load_corrections_wrong = 0;
  double load_p50_ms = 0, load_p99_ms = 0;
  // LLM: the KV cache's blocks and the sequences, summed over replicas.
  std::uint64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_retired = 0;
  std::uint64_t sequences_running = 0, sequences_waiting = 0, sequences_preempted = 0,
                sequences_recomputed = 0, sequences_moved = 0, tokens = 0;
  std::uint64_t load_errors = 0, load_checked = 0;
  // LLM: each replica's cache and sequences.
  std::string preemption;  // LLM: recompute or swap
  std::vector<LlmService::ReplicaStats> llm_replicas;
  // Collective.
  int step = 0, steps = 0;
  std::uint64_t reforms = 0;
  std::uint64_t grown = 0;  // of the re-forms, those upward onto a returned device
  double last_release_seconds = 0;  // the latest re-form: failed step to every rank released
  bool checksums_match = true;      // every completed step equals the fault-free run
  std::uint64_t distrust_rollbacks = 0, steps_redone = 0;  // for silent data corruption
  // Parts cross-checked on other ranks' devices; differing; replaced by the
  // majority's (CollectiveOptions::cross_check_every).
  std::uint64_t parts_checked = 0, parts_differing = 0, parts_corrected = 0;
};

// Owns the jobs the daemon hosts on its runtime: inference services (with
// their optional load generators) and collective jobs. Thread-safe.
class JobManager {
 public:
  JobManager(runtime::Runtime& runtime, std::chrono::milliseconds drain_deadline);
  ~JobManager();  // stops every job
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // kAlreadyExists for a name in use, kInvalidArgument / kNotFound for a bad
  // spec (no such device, ...).
  Status Start(JobSpec spec);
  // kNotFound for an unknown name.
  Status Stop(std::string_view name);
  std::vector<JobReport> Report() const;
  std::size_t Count() const;
  // An operator's drain of `device` with its own deadline.
  void SetDrainDeadline(int device, std::chrono::milliseconds deadline);
  // A device's health changed: wake every job to look.
  void Reconsider();
  // `device` computed wrong without reporting an error for up to
  // `distrust_for`: every collective job that has it among its devices rolls
  // back to before then (CollectiveJob::Distrust). Returns the jobs told.
  std::vector<std::string> DistrustDevice(int device, std::chrono::nanoseconds distrust_for);
  // Inference jobs started from now on re-run one answered request in
  // `one_in` on another replica (InferenceOptions::verify_one_in; 0: off),
  // collective jobs compute one rank's part again every `one_in` steps
  // (CollectiveOptions::cross_check_every), and both tell `listener` (on a replica thread; it must
  // not block) of each device each comparison concerned. Set the listener before any job starts; it
  // outlives them.
  using CrossCheckListener = std::function<void(const std::string& job, const CrossCheck& check)>;
  // `collective_budget`: CollectiveOptions::cross_check_budget.
  void SetCrossChecks(std::uint32_t one_in, double collective_budget, CrossCheckListener listener);
  void SetCrossCheckSampling(std::uint32_t one_in, double collective_budget);
  // The requests each inference job's replica on `device` answered since a
  // cross-check last found it right, in words ("chat: requests 17, 21 (2)"),
  // one job per entry; empty when none.
  std::vector<std::string> AnsweredSinceLastCheck(int device) const;
  // `device` was found computing wrong for up to `distrust_for`: every
  // inference job runs the answers its replica there gave in that time
  // again elsewhere (InferenceService::ReviewAnswers); `listener` hears each
  // job's outcome on a replica thread (it must not block). Set it before
  // any job starts; it outlives them. Returns the answers being run again.
  using ReviewListener = std::function<void(const std::string& job, const AnswerReview& review)>;
  void SetReviewListener(ReviewListener listener);
  std::uint64_t ReviewAnswers(int device, std::chrono::nanoseconds distrust_for);
  // For inference requests from the control API: the service stays valid
  // while `keep` is held.
  std::shared_ptr<InferenceService> Inference(std::string_view name) const;
  // Where a memory fault injected into job `name` on `device` hurts least
  // and tells most: for an LLM job, a KV block in use (its sequences are
  // recomputed), or the one handed out next; unset for other jobs (any of
  // their allocations will do) and for an LLM replica with no cache yet.
  std::optional<drivers::DeviceAddress> MemoryFaultTarget(std::string_view name, int device) const;

 private:
  struct Job {
    JobSpec spec;
    std::shared_ptr<InferenceService> inference;
    std::unique_ptr<LoadGenerator> load;
    std::unique_ptr<CollectiveJob> collective;
    // The load is stopped first (no more sends), then the service goes
    // (declared after the load, it is destroyed before it): its threads
    // answer what is left into a load that is still there.
    std::unique_ptr<LlmLoad> llm_load;
    std::unique_ptr<LlmService> llm;
    CollectiveOptions collective_options;
  };
  JobReport ReportOf(const Job& job) const;

  runtime::Runtime& runtime_;
  std::chrono::milliseconds drain_deadline_;
  std::uint32_t cross_check_one_in_ = 0;  // guarded by mutex_
  double collective_check_budget_ = 0;    // guarded by mutex_
  CrossCheckListener cross_check_listener_;
  ReviewListener review_listener_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Job>, std::less<>> jobs_;
};

}  // namespace rasd::jobs
