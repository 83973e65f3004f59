#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "rasd/jobs/llm_service.h"

namespace rasd::jobs {

// Sends generation requests to an LlmService at a steady rate, from a
// seeded generator (prompts of 4 to 48 tokens, 8 to 32 tokens to generate),
// and checks every answer: its length, and for every eighth request every
// token against the model's host reference (which recomputes the whole
// history per token: checking all would cost more than serving them).
// Counts what comes back, so that a fault's cost is a number: errors,
// wrong answers, a second answer to one request.
//
// Thread-safe. Stop (or the destructor) ends the sending and waits for the
// answers due.
class LlmLoad {
 public:
  LlmLoad(LlmService& service, DecoderModel model, double requests_per_second);
  ~LlmLoad();
  LlmLoad(const LlmLoad&) = delete;
  LlmLoad& operator=(const LlmLoad&) = delete;

  void Stop(std::chrono::milliseconds timeout);

  struct Stats {
    std::uint64_t sent = 0;
    std::uint64_t answered = 0;
    std::uint64_t checked = 0;      // answers compared with the reference token for token
    std::uint64_t wrong = 0;        // a wrong length, or a token other than the reference's
    std::uint64_t errors = 0;       // answered with an error
    std::uint64_t duplicates = 0;   // a second answer to one request (never expected)
    std::uint64_t rejected = 0;     // not admitted
    std::uint64_t unanswered = 0;   // still due at Stop's timeout
    double p50_ms = 0, p99_ms = 0;  // of the latest answers
  };
  Stats GetStats() const;

 private:
  struct Pending {
    std::vector<int> prompt;
    int wanted = 0;
    std::chrono::steady_clock::time_point sent_at;
  };
  void Run();
  void Answered(std::uint64_t id, const LlmService::Answer& answer);

  LlmService& service_;
  DecoderModel model_;
  std::chrono::nanoseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  std::map<std::uint64_t, Pending> pending_;
  std::map<std::uint64_t, int> answers_;  // answers per request id, of the latest ones
  std::deque<double> latencies_ms_;
  Stats stats_;
  std::thread thread_;
};

}  // namespace rasd::jobs
