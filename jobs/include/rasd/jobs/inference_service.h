#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/jobs/cross_check.h"
#include "rasd/runtime/runtime.h"

namespace rasd::jobs {

// A 2-layer MLP with fixed, seeded weights: y = relu(x W1) W2, fp32,
// row-major, computed with the runtime's gemm and relu kernels.
struct MlpModel {
  int inputs = 64;
  int hidden = 128;
  int outputs = 16;
  std::uint64_t seed = 42;

  std::vector<float> W1() const;  // inputs x hidden
  std::vector<float> W2() const;  // hidden x outputs
  // The model on the host, summing in the order the simulator's gemm does
  // (over k, ascending): the reference tests compare against.
  std::vector<float> Reference(const std::vector<float>& input) const;
};

// The answers a replica gave since its last clean cross-check, run again on
// other replicas once its device was found computing wrong
// (InferenceService::ReviewAnswers): which of them were wrong, exactly.
struct AnswerReview {
  int device = 0;
  std::uint64_t reviewed = 0;        // run again and compared
  std::vector<std::uint64_t> wrong;  // of those, the requests whose answer differed, ascending
  std::uint64_t corrected = 0;       // of those, answered again to callers who asked
  // Not decided: no other replica to run them on (the service has none, or
  // the re-run failed max_attempts times), older than the answers kept, or
  // three replicas gave three different answers.
  std::uint64_t unreviewed = 0;
};

struct InferenceOptions {
  std::string id = "inference";  // the job id: owner of its streams and memory
  std::vector<int> devices;      // one replica per device
  MlpModel model;
  std::size_t max_batch = 32;
  // A replica starts a batch when it is full or its oldest request has
  // waited this long (continuous batching).
  std::chrono::microseconds max_wait{500};
  // How long a batch already running on a draining device may take before
  // it is abandoned and its requests re-run elsewhere.
  std::chrono::milliseconds drain_deadline{30000};
  // How long one batch may take on a healthy device before it counts as a
  // failure (a hung device).
  std::chrono::milliseconds batch_timeout{5000};
  // Admitted but not answered; beyond it Submit answers kUnavailable
  // ("overloaded") and counts the request as rejected.
  std::size_t max_queued = 4096;
  int max_attempts = 8;                // runs of one request before it is answered with an error
  // Silent data corruption: one answered request in this many runs again
  // on another replica, and on a third when the two disagree; the replica
  // the other two outvote is told of (on_cross_check). Answers are
  // compared bit for bit between devices of the same model (the same
  // kernels give the same bits), within 1e-5 relative otherwise. The
  // caller's answer is never held back for it. 0: off.
  std::uint32_t verify_one_in = 0;
  // Called on a replica thread for every device a cross-check compared;
  // must not block.
  std::function<void(const CrossCheck&)> on_cross_check;
  // Called on a replica thread when a ReviewAnswers has every answer back
  // (or given up on); must not block.
  std::function<void(const AnswerReview&)> on_review;
  // What batching, backoff and batch deadlines are measured on; null, the
  // system's clock. The replicas' threads wait in real time between looks
  // at it, so it must move on its own: never a simulated loop's clock.
  std::shared_ptr<const common::Clock> clock;
};

// An inference service replicated over devices. A router sends each
// request to the least-loaded replica whose device admits new work; each
// replica batches its queue continuously and runs the model on its
// device.
//
// Every admitted request is answered exactly once: with the model's output
// (the same bits whichever replica computed it), or with an error only when
// the service stops or a request failed max_attempts times. When a device
// stops admitting new work (Draining, Isolated), its queued requests move
// to other replicas; a batch that fails (device isolated or lost, streams
// aborted by kill-consumer, past the drain deadline) is re-run elsewhere;
// a replica whose streams were aborted restarts itself (new stream, weights
// uploaded again) once its device admits work. With no replica available,
// requests wait for one.
//
// Thread-safe. Callbacks run on replica threads and must not block.
class InferenceService {
 public:
  using Output = Result<std::vector<float>>;
  using Callback = std::function<void(std::uint64_t request, Output output)>;

  static Result<std::unique_ptr<InferenceService>> Create(runtime::Runtime& runtime,
                                                          InferenceOptions options);
  // Stops the replicas; requests not answered yet get kAborted.
  ~InferenceService();
  InferenceService(const InferenceService&) = delete;
  InferenceService& operator=(const InferenceService&) = delete;

  // Admits a request (`input` has model.inputs values). kInvalidArgument
  // for a wrong size, kUnavailable when max_queued requests are waiting.
  // `corrected`, when set, is called (on a replica thread, at most once)
  // with the right answer if the one given to `done` is later found wrong
  // (ReviewAnswers).
  Result<std::uint64_t> Submit(std::vector<float> input, Callback done,
                               Callback corrected = nullptr);
  // Submit and wait.
  Output Infer(std::vector<float> input, std::chrono::milliseconds timeout);

  // The drain deadline for work already running on `device` from now on
  // (an operator's `rasctl drain --deadline`); the option's value otherwise.
  void SetDrainDeadline(int device, std::chrono::milliseconds deadline);

  // Tells the service that a device's health changed (the daemon calls it
  // after every state change; replicas also look before each batch).
  void Reconsider();

  const std::string& Id() const { return options_.id; }
  const std::vector<int>& Devices() const { return options_.devices; }
  // The clock of InferenceOptions::clock; lives as long as the service.
  const common::Clock& GetClock() const { return *options_.clock; }

  struct ReplicaStats {
    int device = 0;
    std::size_t queued = 0;
    bool in_flight = false;
    std::uint64_t batches = 0;
    std::uint64_t served = 0;
    std::uint64_t restarts = 0;
  };
  struct Stats {
    std::uint64_t cross_checks = 0;   // sampled answers run again on another replica
    std::uint64_t disagreements = 0;  // of those, the second answer differed
    std::uint64_t outvoted = 0;       // a third replica sided with one of them
    std::uint64_t reviews = 0;        // ReviewAnswers calls
    std::uint64_t reviewed_wrong = 0;  // answers a review found wrong
    std::uint64_t admitted = 0;
    std::uint64_t served = 0;
    // Callers' requests only (not cross-checks' or reviews' re-runs):
    std::uint64_t requeued = 0;  // moved off a replica before it ran them
    std::uint64_t rerun = 0;     // run again after a failed batch
    std::uint64_t failed = 0;    // answered with an error (max_attempts, stop)
    std::uint64_t rejected = 0;  // not admitted
    std::size_t waiting = 0;     // admitted, with no replica to run them yet
    std::vector<ReplicaStats> replicas;
  };
  Stats GetStats() const;
  // Each replica keeps its newest kKeptAnswers answers (inputs and outputs,
  // about 400 bytes each with the default model) for ReviewAnswers.
  static constexpr std::size_t kKeptAnswers = 4096;
  // The requests `device`'s replica answered since a cross-check last
  // found its answers right (or since the start), oldest first: what a
  // device found computing wrong may have answered wrongly. At most
  // kKeptAnswers; `more` counts those beyond.
  struct Unchecked {
    std::vector<std::uint64_t> requests;
    std::uint64_t more = 0;
  };
  Unchecked AnsweredSinceLastCheck(int device) const;
  // `device` was found computing wrong, perhaps for the last `distrust_for`
  // (on the service's clock): every answer its replica gave in that time,
  // clean cross-checks or not (a sample that came out right says little of
  // its neighbours), is run again on other replicas and compared with the
  // one given; a caller who asked (Submit's `corrected`) gets the right
  // answer. An answer whose re-run differs is run a third time on yet
  // another replica when the service has one: the answer given is wrong
  // only when the third sides with the re-run (when it sides with the
  // answer given, the re-running device is the one outvoted, and
  // on_cross_check hears of it); with no third replica (none in service
  // when it is asked, or when its turn comes), the re-run is trusted over
  // the device found computing wrong. The outcome goes to
  // on_review; without one, the answers are still checked and corrected.
  // The device's kept answers are then forgotten (a second call reviews
  // only those given since); answers it gives after this join the review
  // until it stops admitting work (take it out of service right after).
  // Returns how many are being run again.
  std::uint64_t ReviewAnswers(
      int device, std::chrono::nanoseconds distrust_for = std::chrono::nanoseconds::max());

 private:
  // A sampled request's runs, for the cross-check: (device, answer).
  struct Verification {
    std::uint64_t request = 0;
    std::vector<std::pair<int, std::vector<float>>> answers;
  };
  // A ReviewAnswers in progress: the answers given, by request. Guarded by
  // mutex_.
  struct Review {
    AnswerReview outcome;
    std::map<std::uint64_t, std::vector<float>> given;
    std::uint64_t pending = 0;
  };
  struct Request {
    std::shared_ptr<Verification> check;  // an internal re-run, answered to nobody
    std::shared_ptr<Review> review;       // a reviewed answer's re-run
    Callback corrected;
    // A review's re-run runs neither on the device reviewed nor, for a
    // third opinion, on the replica whose re-run differed from the answer.
    std::array<int, 2> avoid_devices{-1, -1};
    // A review's first re-run when it differed from the answer given:
    // (device, answer), for the third replica to side with or not.
    std::optional<std::pair<int, std::vector<float>>> disputed;
    bool Avoids(int device) const {
      return avoid_devices[0] == device || avoid_devices[1] == device;
    }
    bool FromCaller() const { return !check && !review; }
    std::uint64_t id = 0;
    std::vector<float> input;
    Callback done;
    int attempts = 0;
    std::chrono::nanoseconds queued_at{0};  // on options_.clock
  };
  struct Replica;

  InferenceService(runtime::Runtime& runtime, InferenceOptions options);
  Status Start();
  // Places requests with the least-loaded admitting replica, or in the
  // backlog. Call with mutex_ held.
  void RouteLocked(std::deque<Request> requests);
  bool AdmitsNewWork(int device) const;
  // Admits new work and is not backing off after a failure: what routing
  // and the choice of a third opinion both ask of a replica.
  bool AcceptsWorkNow(const Replica& replica, std::chrono::nanoseconds now) const;
  void RunReplica(Replica& replica);
  Status PrepareReplica(Replica& replica);
  Status RunBatch(Replica& replica, std::vector<Request>& batch, bool draining);
  Status Wait(Replica& replica);
  void Answer(Request& request, Output output);
  // A re-run's answer from `device`: agree, ask a third replica, or vote.
  void CrossCheckAnswer(int device, Request& request, std::vector<float> output);
  // A review's re-run answered (or, without `output`, given up on): the
  // answer given was right, wrong, or needs a third opinion.
  void ReviewAnswer(int device, Request& request, const std::vector<float>* output);
  // Whether a replica other than on `a` and `b` accepts work now.
  bool AnotherReplicaAcceptsWork(int a, int b) const;
  // Sends a check to a replica none of its answers came from; false when
  // there is none. Call with mutex_ held.
  bool RouteCheckLocked(std::shared_ptr<Verification> check, std::vector<float> input);
  bool SameAnswer(int device_a, const std::vector<float>& a, int device_b,
                  const std::vector<float>& b) const;
  std::chrono::nanoseconds Now() const { return options_.clock->Monotonic(); }

  runtime::Runtime& runtime_;
  InferenceOptions options_;
  std::vector<float> w1_, w2_;

  mutable std::mutex mutex_;
  std::condition_variable work_;  // new requests, health changes, stop
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::deque<Request> backlog_;                               // no replica admits work
  // Third opinions no replica can give now (RouteLocked): a replica thread
  // decides them without one.
  std::vector<Request> orphaned_opinions_;
  std::map<int, std::chrono::milliseconds> drain_deadlines_;  // by device, overriding the option
  std::uint64_t next_id_ = 1;
  std::size_t next_replica_ = 0;
  std::size_t outstanding_ = 0;
  bool stopping_ = false;
  // Answers being handed to their callers (RunBatch keeps an answer before
  // its caller has it, so that a review begun in between covers it): a
  // correction found meanwhile waits in `deferred_corrections_` until the
  // caller has had the answer it corrects.
  std::set<std::uint64_t> delivering_;
  std::map<std::uint64_t, std::pair<Callback, std::vector<float>>> deferred_corrections_;
  Stats stats_;
};

}  // namespace rasd::jobs
