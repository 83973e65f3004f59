#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "rasd/jobs/inference_service.h"

namespace rasd::jobs {

// Sends requests to an inference service at a steady rate, as the demo, the
// tests and the benchmark's clients: request n's input is derived from n,
// each answer is checked against the model's host reference, and latencies
// are kept for percentiles. Stops (and waits for every answer, up to a
// timeout) when destroyed or Stop()ped.
//
// Memory does not grow with the requests sent (it runs inside rasd for as
// long as the daemon does): it keeps the numbers of the requests still
// outstanding (at most what the service admits, InferenceOptions::
// max_queued) and the latencies of the latest `latency_window` answers, in
// a ring allocated and written once at construction, so that its memory is
// all resident from the start rather than growing for the first minutes;
// everything else is a counter.
//
// Thread safety: GetStats() and Stop() may be called from any thread.
class LoadGenerator {
 public:
  // How many of the latest answers the latency percentiles are over: 1 MiB
  // at 16 bytes an answer, about 5 minutes at 200 requests/s.
  static constexpr std::size_t kLatencyWindow = 1 << 16;

  LoadGenerator(InferenceService& service, const MlpModel& model, double requests_per_second,
                std::size_t latency_window = kLatencyWindow);
  ~LoadGenerator();
  LoadGenerator(const LoadGenerator&) = delete;
  LoadGenerator& operator=(const LoadGenerator&) = delete;

  // Stops sending and waits up to `timeout` for the answers still due.
  void Stop(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  struct Stats {
    std::uint64_t sent = 0;
    std::uint64_t answered = 0;
    std::uint64_t wrong = 0;          // an output other than the reference
    // Answers the service later found wrong and answered again (it asks
    // for them: Submit's `corrected`); of the wrong ones, those answered
    // again; corrections that were not the reference either.
    std::uint64_t corrected = 0, wrong_corrected = 0, corrections_wrong = 0;
    std::uint64_t errors = 0;         // answered with an error
    std::uint64_t duplicates = 0;     // a second answer to one request (never expected)
    std::uint64_t rejected = 0;       // not admitted
    std::uint64_t unanswered = 0;     // still due at Stop's timeout
    std::uint64_t outstanding = 0;    // sent, and neither answered nor rejected yet
    std::size_t latency_samples = 0;  // answers the percentiles are over
    double p50_ms = 0, p99_ms = 0;
  };
  // Latency percentiles over the answers since `since` (the service's
  // clock, InferenceService::GetClock), of the latest `latency_window`.
  Stats GetStats(std::chrono::nanoseconds since = std::chrono::nanoseconds(0)) const;

  static std::vector<float> InputFor(std::uint64_t n, int inputs);

 private:
  void Run();

  InferenceService& service_;
  MlpModel model_;
  double rate_;
  std::size_t latency_window_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  // Shared with the callbacks, which may outlive this object when answers
  // come after Stop's timeout.
  struct Shared {
    std::mutex mutex;
    std::uint64_t sent = 0, rejected = 0, wrong = 0, errors = 0, duplicates = 0;
    std::uint64_t answered = 0;
    std::uint64_t corrected = 0, wrong_corrected = 0, corrections_wrong = 0;
    // Request numbers answered wrong and not corrected yet, up to
    // kWrongTracked (a device wrong for long would grow it without end).
    static constexpr std::size_t kWrongTracked = 1 << 16;
    std::unordered_set<std::uint64_t> wrong_numbers;
    std::unordered_set<std::uint64_t> outstanding;  // request numbers sent and not answered
    // The latest latency_window_ answers' latencies (ms): a ring of
    // latency_window_ entries, the next to write at latencies_next, the
    // first latencies_kept of them written.
    std::vector<std::pair<std::chrono::nanoseconds, double>> latencies;  // (answered at, ms)
    std::size_t latencies_next = 0;
    std::size_t latencies_kept = 0;
    std::vector<std::vector<float>> references;  // outputs of the repeating inputs
  };
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::uint64_t unanswered_at_stop_ = 0;
};

}  // namespace rasd::jobs
