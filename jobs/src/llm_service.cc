#include "rasd/jobs/llm_service.h"

#include <fmt/format.h>

#include <algorithm>

#include "rasd/common/logging.h"

namespace rasd::jobs {
namespace {

// How long an idle replica sleeps before it looks at its device again.
constexpr std::chrono::milliseconds kIdlePoll{20};

}  // namespace

std::string_view PreemptionName(Preemption preemption) {
  return preemption == Preemption::kSwap ? "swap" : "recompute";
}

std::optional<Preemption> ParsePreemption(std::string_view name) {
  if (name == "recompute") return Preemption::kRecompute;
  if (name == "swap") return Preemption::kSwap;
  return std::nullopt;
}

std::vector<int> LlmService::Sequence::History() const {
  std::vector<int> tokens = prompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  return tokens;
}

struct LlmService::Replica {
  int device = 0;
  std::uint64_t page_bytes = 4096;
  // Used by the replica's thread only, outside mutex_.
  std::unique_ptr<PagedDecoder> decoder;
  // Guarded by mutex_.
  drivers::DeviceAddress kv_base = 0;
  std::uint64_t kv_bytes = 0;
  std::deque<Sequence> waiting;
  std::map<std::uint64_t, Sequence> running;
  std::vector<std::uint64_t> admitted;               // running sequences, in the order they joined
  std::vector<drivers::DeviceAddress> faulty_pages;  // reported, not applied yet
  std::optional<KvBlockPool> blocks_view;            // the decoder's blocks after its last step
  int failures = 0;
  ReplicaStats stats;
  std::thread thread;
};

Result<std::unique_ptr<LlmService>> LlmService::Create(runtime::Runtime& runtime,
                                                       LlmOptions options) {
  if (options.devices.empty())
    return Fail(ErrorCode::kInvalidArgument, "an LLM service needs at least one device");
  std::unique_ptr<LlmService> service(new LlmService(runtime, std::move(options)));
  if (auto started = service->Start(); !started) return Fail(started.error());
  return service;
}

LlmService::LlmService(runtime::Runtime& runtime, LlmOptions options)
    : runtime_(runtime), options_(std::move(options)) {}

Status LlmService::Start() {
  for (const int device : options_.devices) {
    auto found = runtime_.GetDevice(device);
    if (!found) return Fail(found.error());
    auto replica = std::make_unique<Replica>();
    replica->device = device;
    replica->page_bytes = std::max<std::uint64_t>((*found)->Properties().retire_granularity, 1);
    replica->stats.device = device;
    replicas_.push_back(std::move(replica));
  }
  swap_budget_ = options_.swap_bytes > 0 ? options_.swap_bytes
                                         : options_.kv_bytes_per_device * options_.devices.size();
  subscription_ = runtime_.SubscribeErrors(
      [this](const drivers::DriverErrorEvent& event) { OnDriverError(event); });
  // The daemon's kill-consumer asks this before it stops the whole job.
  runtime_.SetMemoryFaultContainment(options_.id,
                                     [this](int device, drivers::DeviceAddress address) {
                                       return ContainMemoryFault(device, address);
                                     });
  for (auto& replica : replicas_) {
    Replica* raw = replica.get();
    raw->thread = std::thread([this, raw] { RunReplica(*raw); });
  }
  return {};
}

LlmService::~LlmService() {
  if (subscription_ >= 0) runtime_.Unsubscribe(subscription_);
  runtime_.SetMemoryFaultContainment(options_.id, nullptr);
  std::vector<Sequence> unanswered;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& replica : replicas_) {
    if (replica->thread.joinable()) replica->thread.join();
  }
  // The threads are gone: what they held is the service's to answer.
  for (auto& replica : replicas_) {
    for (auto& [id, sequence] : replica->running) unanswered.push_back(std::move(sequence));
    for (auto& sequence : replica->waiting) unanswered.push_back(std::move(sequence));
    replica->decoder.reset();
  }
  for (auto& sequence : unplaced_) unanswered.push_back(std::move(sequence));
  for (auto& sequence : unanswered) {
    if (sequence.done) sequence.done(sequence.id, Fail(ErrorCode::kAborted, "the service stopped"));
  }
}

Result<std::uint64_t> LlmService::Submit(std::vector<int> prompt, int max_new_tokens,
                                         Callback done) {
  const DecoderModel& model = options_.model;
  if (prompt.empty() || max_new_tokens <= 0) {
    return Fail(ErrorCode::kInvalidArgument, "a request needs a prompt and at least one token");
  }
  for (const int token : prompt) {
    if (token < 0 || token >= model.vocab) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("token {} is not in the vocabulary of {}", token, model.vocab));
    }
  }
  // The last generated token is never fed back: prompt + new - 1 positions.
  if (prompt.size() + static_cast<std::size_t>(max_new_tokens) - 1 >
      static_cast<std::size_t>(model.max_positions)) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("{} prompt tokens and {} new ones are past the model's {} positions",
                            prompt.size(), max_new_tokens, model.max_positions));
  }
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return Fail(ErrorCode::kUnavailable, "the service is stopping");
    if (outstanding_ >= options_.max_queued) {
      ++stats_.rejected;
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("overloaded: {} requests not answered yet", outstanding_));
    }
    id = next_id_++;
    ++outstanding_;
    ++stats_.admitted;
    std::deque<Sequence> one;
    one.push_back(Sequence{
        .id = id, .prompt = std::move(prompt), .wanted = max_new_tokens, .done = std::move(done)});
    PlaceLocked(std::move(one), nullptr);
  }
  work_.notify_all();
  return id;
}

LlmService::Answer LlmService::Generate(std::vector<int> prompt, int max_new_tokens,
                                        std::chrono::milliseconds timeout) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<Answer> answer;
  };
  auto shared = std::make_shared<Shared>();
  auto submitted =
      Submit(std::move(prompt), max_new_tokens, [shared](std::uint64_t, Answer answer) {
        std::lock_guard lock(shared->mutex);
        shared->answer = std::move(answer);
        shared->done.notify_all();
      });
  if (!submitted) return Fail(submitted.error());
  std::unique_lock lock(shared->mutex);
  if (!shared->done.wait_for(lock, timeout, [&] { return shared->answer.has_value(); })) {
    return Fail(ErrorCode::kTimeout, "no answer in time");
  }
  return std::move(*shared->answer);
}

bool LlmService::AdmitsNewWork(int device) const {
  auto found = runtime_.GetDevice(device);
  return found && runtime::TakesNewWork((*found)->Health());
}

void LlmService::PlaceLocked(std::deque<Sequence> sequences, const Replica* not_here) {
  for (auto& sequence : sequences) {
    Replica* best = nullptr;
    std::size_t best_load = 0;
    for (auto& replica : replicas_) {
      if (replica.get() == not_here || !AdmitsNewWork(replica->device)) continue;
      const std::size_t load = replica->running.size() + replica->waiting.size();
      if (best == nullptr || load < best_load) {
        best = replica.get();
        best_load = load;
      }
    }
    if (best == nullptr) {
      unplaced_.push_back(std::move(sequence));
    } else {
      best->waiting.push_back(std::move(sequence));
    }
  }
  work_.notify_all();
}

bool LlmService::ContainMemoryFault(int device, drivers::DeviceAddress address) {
  bool ours = false;
  {
    std::lock_guard lock(mutex_);
    for (auto& replica : replicas_) {
      if (replica->device != device || replica->kv_bytes == 0) continue;
      if (address < replica->kv_base || address >= replica->kv_base + replica->kv_bytes) continue;
      replica->faulty_pages.push_back(address & ~(replica->page_bytes - 1));
      ours = true;
    }
  }
  if (ours) work_.notify_all();
  return ours;
}

void LlmService::OnDriverError(const drivers::DriverErrorEvent& event) {
  // A read of poisoned memory names its address: the replica's failed step
  // waits for this to know which blocks to give up.
  if (event.kind == drivers::DriverErrorKind::kUncorrectedEcc && event.consumed && event.address) {
    (void)ContainMemoryFault(event.device, *event.address);
  }
}

void LlmService::Reconsider() { work_.notify_all(); }

void LlmService::RunReplica(Replica& replica) {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const bool admits = AdmitsNewWork(replica.device);
    const bool healthy = replica.decoder && replica.decoder->Usable() &&
                         replica.failures < options_.max_step_failures;
    if (!admits || (replica.decoder && !healthy)) {
      // Its sequences go to other replicas, which recompute them.
      std::deque<Sequence> moved;
      for (auto& [id, sequence] : replica.running) {
        if (replica.decoder) replica.decoder->Release(id);
        moved.push_back(std::move(sequence));
      }
      replica.running.clear();
      replica.admitted.clear();
      for (auto& sequence : replica.waiting) moved.push_back(std::move(sequence));
      replica.waiting.clear();
      if (!moved.empty()) {
        replica.stats.moved_out += moved.size();
        RASD_LOG_WARN("LLM service {}: device {} {}: its {} sequence(s) move to other replicas",
                      options_.id, replica.device, admits ? "keeps failing" : "takes no new work",
                      moved.size());
        PlaceLocked(std::move(moved), &replica);
      }
      if (replica.decoder && !healthy) {
        // A fresh decoder (new cache) once the device takes work again.
        auto old = std::move(replica.decoder);
        replica.kv_bytes = 0;
        replica.blocks_view.reset();
        lock.unlock();
        old.reset();
        lock.lock();
        replica.failures = 0;
      }
      work_.wait_for(lock, kIdlePoll);
      continue;
    }
    if (!replica.decoder) {
      lock.unlock();
      auto decoder = PagedDecoder::Create(runtime_, replica.device,
                                          {.model = options_.model,
                                           .owner = options_.id,
                                           .kv_bytes = options_.kv_bytes_per_device,
                                           .tokens_per_block = options_.tokens_per_block,
                                           .max_batch_sequences = options_.max_batch_sequences,
                                           .max_batch_tokens = options_.max_batch_tokens});
      lock.lock();
      if (!decoder) {
        RASD_LOG_WARN("LLM service {}: replica on device {} not ready: {}", options_.id,
                      replica.device, decoder.error().message);
        work_.wait_for(lock, kIdlePoll * 10);
        continue;
      }
      replica.decoder = std::move(*decoder);
      replica.kv_base = replica.decoder->KvPagesBase();
      replica.kv_bytes = replica.decoder->KvPagesBytes();
    }
    // Unplaced sequences, when this replica can take them.
    while (!unplaced_.empty()) {
      replica.waiting.push_back(std::move(unplaced_.front()));
      unplaced_.pop_front();
    }
    StepOnce(replica, lock);
  }
}

void LlmService::StepOnce(Replica& replica, std::unique_lock<std::mutex>& lock) {
  PagedDecoder& decoder = *replica.decoder;
  KvBlockPool& blocks = decoder.Blocks();
  // Faulty pages first: their blocks leave, their sequences recompute.
  for (const drivers::DeviceAddress page : replica.faulty_pages) {
    // The cache's blocks on the page leave for good. The page itself is
    // retired in the device's pool by the daemon's retire-page action,
    // which also saves it: the job does not retire memory on its own.
    const auto hit = blocks.RetirePage(page, replica.page_bytes);
    replica.stats.recomputed += hit.size();
    if (!hit.empty()) {
      RASD_LOG_WARN("LLM service {}: faulty page 0x{:x} on device {}: {} sequence(s) recomputed",
                    options_.id, page, replica.device, hit.size());
    }
  }
  replica.faulty_pages.clear();

  // Admission by free blocks, in arrival order. The sequences running
  // first: the blocks their uncached tokens and their next token still
  // need; a sequence joins only into what is left, so one admitted now
  // does not preempt another at the next step.
  std::uint64_t committed = 0;
  for (const auto& [id, sequence] : replica.running) {
    const std::uint64_t wants = blocks.BlocksFor(sequence.History().size() + 1);
    const std::uint64_t holds = blocks.BlockTable(id).size();
    committed += wants > holds ? wants - holds : 0;
  }
  while (!replica.waiting.empty() && replica.running.size() < options_.max_batch_sequences) {
    Sequence& next = replica.waiting.front();
    const std::uint64_t needed = blocks.BlocksFor(next.History().size() + 1);
    if (blocks.GetStats().free < committed + needed) break;
    committed += needed;
    const std::uint64_t id = next.id;
    replica.running.emplace(id, std::move(next));
    replica.waiting.pop_front();
    replica.admitted.push_back(id);
    replica.stats.peak_running = std::max(replica.stats.peak_running, replica.running.size());
  }
  if (replica.running.empty() && !replica.waiting.empty() &&
      !blocks.CanGrow(replica.waiting.front().id, replica.waiting.front().History().size() + 1)) {
    // Nothing else holds a block here, and the first in line still does
    // not fit: its history is more than this cache holds (faults retired
    // too much of it). Answered, not left waiting for ever.
    Sequence too_long = std::move(replica.waiting.front());
    replica.waiting.pop_front();
    if (too_long.swapped) stats_.swap_bytes -= too_long.swapped->bytes.size();
    ++stats_.failed;
    --outstanding_;
    lock.unlock();
    if (too_long.done) {
      too_long.done(too_long.id, Fail(ErrorCode::kOutOfMemory,
                                      fmt::format("{} tokens do not fit the KV cache on device {}",
                                                  too_long.History().size(), replica.device)));
    }
    lock.lock();
    return;
  }
  if (replica.running.empty()) {
    replica.stats.blocks = blocks.GetStats();
    work_.wait_for(lock, kIdlePoll);
    return;
  }
  SwapInLocked(replica, lock);
  // The batch, in the order the sequences joined, within the step's tokens.
  std::vector<PagedDecoder::Work> batch;
  std::uint64_t new_tokens = 0;
  for (const std::uint64_t id : replica.admitted) {
    const Sequence& sequence = replica.running.at(id);
    auto history = sequence.History();
    const std::uint64_t fresh = history.size() - blocks.Tokens(id);
    if (new_tokens + fresh > options_.max_batch_tokens && !batch.empty()) continue;
    new_tokens += fresh;
    batch.push_back({id, std::move(history)});
  }
  lock.unlock();
  auto next = decoder.Step(batch, options_.step_timeout);
  lock.lock();
  replica.stats.blocks = blocks.GetStats();
  replica.blocks_view = blocks;
  if (!next) {
    const ErrorCode code = next.error().code;
    if (code == ErrorCode::kOutOfMemory) {
      // The sequence that joined last gives way.
      const std::uint64_t victim = replica.admitted.back();
      replica.admitted.pop_back();
      PreemptLocked(replica, victim, lock);
      return;
    }
    if (code == ErrorCode::kDeviceFault) {
      // Poison consumed: its report names the page. Without one, a failure.
      if (work_.wait_for(lock, options_.poison_report_wait,
                         [&] { return !replica.faulty_pages.empty() || stopping_; })) {
        return;
      }
    }
    ++replica.failures;
    RASD_LOG_WARN("LLM service {}: step of {} sequence(s) on device {} failed ({}): {} in a row",
                  options_.id, batch.size(), replica.device, next.error().message,
                  replica.failures);
    return;
  }
  replica.failures = 0;
  ++replica.stats.steps;
  std::vector<Sequence> finished;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Sequence& sequence = replica.running.at(batch[i].sequence);
    sequence.generated.push_back((*next)[i]);
    ++stats_.tokens;
    if (static_cast<int>(sequence.generated.size()) < sequence.wanted) continue;
    blocks.Release(sequence.id);
    std::erase(replica.admitted, sequence.id);
    finished.push_back(std::move(sequence));
    replica.running.erase(batch[i].sequence);
  }
  replica.stats.blocks = blocks.GetStats();
  replica.blocks_view = blocks;
  if (finished.empty()) return;
  stats_.served += finished.size();
  outstanding_ -= finished.size();
  lock.unlock();
  for (auto& sequence : finished) {
    if (sequence.done) sequence.done(sequence.id, std::move(sequence.generated));
  }
  lock.lock();
}

void LlmService::PreemptLocked(Replica& replica, std::uint64_t victim,
                               std::unique_lock<std::mutex>& lock) {
  PagedDecoder& decoder = *replica.decoder;
  Sequence sequence = std::move(replica.running.at(victim));
  replica.running.erase(victim);
  ++replica.stats.preempted;
  if (options_.preemption == Preemption::kSwap) {
    const std::uint64_t bytes = decoder.Blocks().BlockTable(victim).size() * decoder.BlockBytes();
    // A sequence with nothing cached (a fault took it) has nothing to swap.
    if (bytes > 0 && stats_.swap_bytes + bytes <= swap_budget_) {
      stats_.swap_bytes += bytes;  // held for the copy, so that two replicas cannot overrun it
      lock.unlock();
      auto swapped = decoder.SwapOut(victim, options_.step_timeout);
      lock.lock();
      if (swapped) {
        sequence.swapped = std::move(*swapped);
        ++replica.stats.swapped_out;
      } else {
        stats_.swap_bytes -= bytes;
        RASD_LOG_WARN(
            "LLM service {}: swapping sequence {} out of device {} failed ({}): it is "
            "recomputed",
            options_.id, victim, replica.device, swapped.error().message);
        if (swapped.error().code == ErrorCode::kDeviceFault) {
          // Poison read: its report names the page, whose blocks must not
          // return to the free list before it is known (as after a step).
          work_.wait_for(lock, options_.poison_report_wait,
                         [&] { return !replica.faulty_pages.empty() || stopping_; });
        }
      }
    }
  }
  if (!sequence.swapped) decoder.Release(victim);
  replica.waiting.push_front(std::move(sequence));
}

void LlmService::SwapInLocked(Replica& replica, std::unique_lock<std::mutex>& lock) {
  for (const std::uint64_t id : replica.admitted) {
    // A decoder that lost its stream keeps the copies: the sequences move
    // to another replica with them.
    if (!replica.decoder->Usable()) return;
    Sequence& sequence = replica.running.at(id);
    if (!sequence.swapped) continue;
    PagedDecoder::SwappedKv swapped = std::move(*sequence.swapped);
    sequence.swapped.reset();
    stats_.swap_bytes -= swapped.bytes.size();
    // The replica's thread alone changes its running sequences: `sequence`
    // stays valid while the lock is let go.
    lock.unlock();
    const auto copied = replica.decoder->SwapIn(id, std::move(swapped), options_.step_timeout);
    lock.lock();
    if (copied) {
      ++replica.stats.swapped_in;
    } else {
      RASD_LOG_WARN(
          "LLM service {}: swapping sequence {} into device {} failed ({}): it is "
          "recomputed",
          options_.id, id, replica.device, copied.error().message);
    }
  }
}

std::optional<KvBlockPool> LlmService::KvBlocks(int device) const {
  std::lock_guard lock(mutex_);
  for (const auto& replica : replicas_) {
    if (replica->device == device) return replica->blocks_view;
  }
  return std::nullopt;
}

LlmService::Stats LlmService::GetStats() const {
  std::lock_guard lock(mutex_);
  Stats stats = stats_;
  stats.unplaced = unplaced_.size();
  for (const auto& replica : replicas_) {
    ReplicaStats row = replica->stats;
    row.serving = replica->decoder != nullptr && AdmitsNewWork(replica->device);
    row.running = replica->running.size();
    row.waiting = replica->waiting.size();
    stats.replicas.push_back(row);
  }
  return stats;
}

}  // namespace rasd::jobs
