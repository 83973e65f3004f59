#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/jobs/decoder_model.h"
#include "rasd/jobs/paged_decoder.h"
#include "rasd/runtime/runtime.h"

namespace rasd::jobs {

// What a replica does with a running sequence when its KV cache is full
// (the sequence that joined last gives way):
//  - kRecompute: its blocks are freed; when it rejoins, its whole history
//    is prefilled again (compute for memory: nothing is held meanwhile);
//  - kSwap: its blocks are copied to host memory and freed; when it
//    rejoins (on any replica) they are copied back and only new tokens are
//    computed. Past the host budget, or when the copy fails, it recomputes.
enum class Preemption { kRecompute, kSwap };
std::string_view PreemptionName(Preemption preemption);
std::optional<Preemption> ParsePreemption(std::string_view name);

struct LlmOptions {
  std::string id = "llm";    // the job id: owner of its streams and memory
  std::vector<int> devices;  // one replica per device
  DecoderModel model;
  std::uint64_t kv_bytes_per_device = 4 << 20;
  std::uint32_t tokens_per_block = 16;
  std::uint32_t max_batch_sequences = 64;
  std::uint32_t max_batch_tokens = 2048;
  Preemption preemption = Preemption::kRecompute;
  // Host memory for swapped caches, over all replicas; 0: as much as the
  // KV caches of all replicas together.
  std::uint64_t swap_bytes = 0;
  // A step on a healthy device that takes longer counts as a failure.
  std::chrono::milliseconds step_timeout{5000};
  // A step that fails on poisoned memory waits this long for the report of
  // the poisoned address (the driver's error event) before it runs again.
  std::chrono::milliseconds poison_report_wait{500};
  // Admitted but not answered; beyond it Submit answers kUnavailable.
  std::size_t max_queued = 4096;
  // Failed steps of one replica in a row (other than poison it contained)
  // before its sequences move to other replicas.
  int max_step_failures = 3;
};

// A language-model service over a paged KV cache, replicated over devices,
// as LLM engines serve: each replica runs continuous batches (sequences join
// and leave between steps) on a PagedDecoder whose KV cache is one
// allocation of its device's memory pool, cut into blocks.
//
//  - Admission by free blocks: a waiting sequence joins the batch when its
//    whole history fits in the free blocks. When a step finds the cache
//    full, the sequence admitted last is preempted (recompute: its blocks
//    are freed, or swapped to the host, as the options say; it waits again
//    first in line, keeping its tokens).
//  - A memory fault costs the sequences on the faulty page only. A step
//    that reads a poisoned page fails (the driver reports the address, and
//    the service subscribes to those reports); the page's KV blocks leave
//    for good, the sequences that used them are recomputed on healthy
//    blocks, and the rest of the batch runs on as it was. ContainMemoryFault
//    is the same for a page the daemon retires.
//  - A device that stops admitting work (draining, isolated) or keeps
//    failing hands its sequences to other replicas, which recompute them:
//    nothing is lost, and each request is answered once.
//
// Thread-safe. Callbacks run on replica threads and must not block.
class LlmService {
 public:
  using Answer = Result<std::vector<int>>;
  using Callback = std::function<void(std::uint64_t request, Answer answer)>;

  static Result<std::unique_ptr<LlmService>> Create(runtime::Runtime& runtime, LlmOptions options);
  // Stops the replicas; requests not answered yet get kAborted.
  ~LlmService();
  LlmService(const LlmService&) = delete;
  LlmService& operator=(const LlmService&) = delete;

  // Admits a request: `max_new_tokens` tokens generated greedily after
  // `prompt`. kInvalidArgument for an empty prompt, a token outside the
  // vocabulary, or a total past the model's positions; kUnavailable when
  // max_queued requests are waiting.
  Result<std::uint64_t> Submit(std::vector<int> prompt, int max_new_tokens, Callback done);
  // Submit and wait.
  Answer Generate(std::vector<int> prompt, int max_new_tokens, std::chrono::milliseconds timeout);

  // The page holding `address` on `device` is faulty (retired by the
  // daemon, or poisoned): if it is under a replica's KV cache, its blocks
  // leave for good and the sequences on them are recomputed. True when the
  // page is this service's KV cache memory.
  bool ContainMemoryFault(int device, drivers::DeviceAddress address);

  // A copy of the KV cache's blocks and block tables of the replica on
  // `device` as of its last step (diagnostics, fault injection); unset
  // while it has no cache.
  std::optional<KvBlockPool> KvBlocks(int device) const;

  // A health change of a device: replicas look again now.
  void Reconsider();

  const std::string& Id() const { return options_.id; }

  struct ReplicaStats {
    int device = 0;
    bool serving = false;
    KvBlockPool::Stats blocks;
    std::size_t running = 0;  // sequences in the batch
    std::size_t peak_running = 0;  // the most in one batch so far
    std::size_t waiting = 0;  // assigned here, not in the batch (new or preempted)
    std::uint64_t steps = 0;
    std::uint64_t preempted = 0;   // sequences preempted for room
    std::uint64_t swapped_out = 0;  // of those, caches copied to the host
    std::uint64_t swapped_in = 0;   // caches copied back here from the host
    std::uint64_t recomputed = 0;  // sequences whose cache a memory fault took
    std::uint64_t moved_out = 0;   // sequences handed to other replicas
  };
  struct Stats {
    std::uint64_t admitted = 0;
    std::uint64_t served = 0;
    std::uint64_t failed = 0;    // answered with an error (stop)
    std::uint64_t rejected = 0;  // not admitted
    std::uint64_t tokens = 0;    // generated, answered or not
    std::size_t unplaced = 0;    // admitted, with no replica to run them yet
    std::uint64_t swap_bytes = 0;  // host memory holding swapped caches now
    std::vector<ReplicaStats> replicas;
  };
  Stats GetStats() const;

 private:
  struct Sequence {
    std::uint64_t id = 0;
    std::vector<int> prompt;
    std::vector<int> generated;
    int wanted = 0;
    Callback done;
    std::optional<PagedDecoder::SwappedKv> swapped;  // its cache, while on the host
    std::vector<int> History() const;
  };
  struct Replica;

  LlmService(runtime::Runtime& runtime, LlmOptions options);
  Status Start();
  bool AdmitsNewWork(int device) const;
  // Places sequences with the least-loaded admitting replica, or in the
  // unplaced list. Call with mutex_ held.
  void PlaceLocked(std::deque<Sequence> sequences, const Replica* not_here);
  void RunReplica(Replica& replica);
  // One step of the replica's batch; false when the replica gave up its
  // sequences. Called without mutex_.
  void StepOnce(Replica& replica, std::unique_lock<std::mutex>& lock);
  void OnDriverError(const drivers::DriverErrorEvent& event);
  // The replica's sequence `victim` gives way for room: swapped or
  // released as the options say, then first in line. Called with mutex_
  // held through `lock`, which it releases while copying.
  void PreemptLocked(Replica& replica, std::uint64_t victim, std::unique_lock<std::mutex>& lock);
  // Copies back the caches of the running sequences that have one on the
  // host; one that fails is recomputed. As above for the lock.
  void SwapInLocked(Replica& replica, std::unique_lock<std::mutex>& lock);

  runtime::Runtime& runtime_;
  LlmOptions options_;
  int subscription_ = -1;

  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::deque<Sequence> unplaced_;
  std::uint64_t next_id_ = 1;
  std::size_t outstanding_ = 0;
  std::uint64_t swap_budget_ = 0;
  bool stopping_ = false;
  Stats stats_;
};

}  // namespace rasd::jobs
