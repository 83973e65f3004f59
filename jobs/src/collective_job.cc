#include "rasd/jobs/collective_job.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include "rasd/common/logging.h"

namespace rasd::jobs {
namespace {

using drivers::KernelArg;

// Consecutive failed steps or re-forms before the job gives up.
constexpr int kMaxFailures = 50;
constexpr std::chrono::milliseconds kRetryPause{20};

// What shard j adds in step s: a small integer, -2 to 2, summing to 0 over
// any 5 consecutive steps, so that the state stays within a few units of
// where it started and float arithmetic on it stays exact however many
// steps run. (Constants that only grew took values past 2^24 after about
// 2M steps, where float sums stop being exact: a 30-minute soak reported
// checksum mismatches that were rounding, not faults.)
float ShardConstant(int shard, int step) {
  return static_cast<float>((step + 3 * shard) % 5 - 2);
}

std::vector<float> InitialState(std::uint64_t elements) {
  std::vector<float> state(elements);
  for (std::uint64_t i = 0; i < elements; ++i) state[i] = static_cast<float>(i % 97);
  return state;
}

// The sum of the (integer, possibly negative) elements, modulo 2^64.
std::uint64_t Checksum(const std::vector<float>& state) {
  std::uint64_t sum = 0;
  for (float value : state) sum += static_cast<std::uint64_t>(static_cast<std::int64_t>(value));
  return sum;
}

// What every element gains in `step`, as a checksum moves: modulo 2^64.
std::uint64_t StepGain(int shards, int step, std::uint64_t elements) {
  std::int64_t added = 0;
  for (int shard = 0; shard < shards; ++shard)
    added += static_cast<std::int64_t>(ShardConstant(shard, step));
  return static_cast<std::uint64_t>(added) * elements;
}

}  // namespace

std::string_view CollectiveJob::StateName(State state) {
  switch (state) {
    case State::kRunning:
      return "running";
    case State::kReforming:
      return "reforming";
    case State::kWaiting:
      return "waiting";
    case State::kFinished:
      return "finished";
    case State::kFailed:
      return "failed";
    case State::kStopped:
      return "stopped";
  }
  return "unknown";
}

std::vector<std::uint64_t> CollectiveJob::ExpectedChecksums(const CollectiveOptions& options) {
  return ExpectedChecksums(options, static_cast<std::size_t>(options.steps));
}

std::vector<std::uint64_t> CollectiveJob::ExpectedChecksums(const CollectiveOptions& options,
                                                            std::size_t count) {
  // Every element gains the same integer each step, so the checksum moves
  // by elements x that integer: no need to replay the state.
  std::uint64_t sum = Checksum(InitialState(options.elements));
  const int shards = static_cast<int>(options.devices.size());
  std::vector<std::uint64_t> checksums;
  count = std::min(count, static_cast<std::size_t>(std::max(options.steps, 0)));
  checksums.reserve(count);
  for (std::size_t step = 0; step < count; ++step) {
    sum += StepGain(shards, static_cast<int>(step), options.elements);
    checksums.push_back(sum);
  }
  return checksums;
}

CollectiveJob::CollectiveJob(runtime::Runtime& runtime, CollectiveOptions options)
    : runtime_(runtime), options_(std::move(options)) {
  if (!options_.clock) options_.clock = std::make_shared<common::SystemClock>();
}

Result<std::unique_ptr<CollectiveJob>> CollectiveJob::Create(runtime::Runtime& runtime,
                                                             CollectiveOptions options) {
  if (options.devices.empty())
    return Fail(ErrorCode::kInvalidArgument, "a collective job needs at least one device");
  if (options.elements == 0 || options.elements > (1ULL << 26))
    return Fail(ErrorCode::kInvalidArgument, "elements must be in 1..2^26");
  if (options.steps < 1 || options.checkpoint_every < 1)
    return Fail(ErrorCode::kInvalidArgument, "steps and checkpoint_every must be at least 1");
  if (options.min_ranks < 1 || options.min_ranks > static_cast<int>(options.devices.size()))
    return Fail(ErrorCode::kInvalidArgument, "min_ranks must be in 1..the number of devices");
  for (int device : options.devices) {
    if (!runtime.GetDevice(device))
      return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
  }
  std::unique_ptr<CollectiveJob> job(new CollectiveJob(runtime, std::move(options)));
  job->shards_ = static_cast<int>(job->options_.devices.size());
  job->thread_ = std::thread([raw = job.get()] { raw->Run(); });
  return job;
}

CollectiveJob::~CollectiveJob() {
  Stop();
  if (thread_.joinable()) thread_.join();
  if (communicator_) {
    communicator_->Abort("job destroyed");
    (void)communicator_->Synchronize(std::chrono::milliseconds(100));
  }
  ReleaseBuffers();
  communicator_.reset();
  parked_.clear();
}

void CollectiveJob::Stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
}

void CollectiveJob::Reconsider() { changed_.notify_all(); }

void CollectiveJob::Distrust(int device, std::chrono::nanoseconds distrust_for) {
  {
    std::lock_guard lock(mutex_);
    distrusted_[device] = false;
    const auto since = options_.clock->Monotonic() - distrust_for;
    // Two verdicts: the earlier point covers both.
    distrust_since_ = distrust_pending_ ? std::min(distrust_since_, since) : since;
    distrust_pending_ = true;
  }
  changed_.notify_all();
}

void CollectiveJob::KeepCheckpoint() {
  const std::uint64_t each = std::max<std::uint64_t>(options_.elements * sizeof(float), 1);
  const std::size_t limit = std::max<std::size_t>(kNewestKept + 2, kHistoryBytes / each);
  // Room is made before the new one goes in, and the new one takes the
  // storage of the one dropped (no allocation of the state's size).
  std::vector<float> state;
  while (history_.size() >= limit) {
    // Among the older ones (not the oldest, not the newest few counting the
    // one coming), the one taken closest after its predecessor: what is
    // left spreads back in time.
    std::size_t drop = 1;
    auto closest = std::chrono::nanoseconds::max();
    for (std::size_t i = 1; i + kNewestKept <= history_.size(); ++i) {
      const auto gap = history_[i].taken_at - history_[i - 1].taken_at;
      if (gap < closest) {
        closest = gap;
        drop = i;
      }
    }
    state = std::move(history_[drop].state);
    history_.erase(history_.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  state.assign(checkpoint_.begin(), checkpoint_.end());
  history_.push_back({checkpoint_step_, options_.clock->Monotonic(), std::move(state), 0, 0});
  std::lock_guard lock(mutex_);
  history_.back().expected_sum = expected_at_checkpoint_;
  history_.back().committed_mismatches = progress_.checksum_mismatches;
}

int CollectiveJob::RollBackTo(std::chrono::nanoseconds before) {
  while (!history_.empty() && history_.back().taken_at >= before) history_.pop_back();
  int redone = 0;
  std::lock_guard lock(mutex_);
  const int from = progress_.step;
  if (history_.empty()) {
    checkpoint_ = InitialState(options_.elements);
    checkpoint_step_ = 0;
    expected_at_checkpoint_ = Checksum(checkpoint_);
    progress_.checksum_mismatches = 0;
  } else {
    const auto& kept = history_.back();
    checkpoint_ = kept.state;
    checkpoint_step_ = kept.step;
    expected_at_checkpoint_ = kept.expected_sum;
    progress_.checksum_mismatches = kept.committed_mismatches;
  }
  last_state_.clear();
  mismatches_since_checkpoint_ = 0;
  redone = std::max(0, from - checkpoint_step_);
  ++progress_.distrust_rollbacks;
  progress_.steps_redone += static_cast<std::uint64_t>(redone);
  return redone;
}

bool CollectiveJob::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] {
    return progress_.state == State::kFinished || progress_.state == State::kFailed ||
           progress_.state == State::kStopped;
  });
}

CollectiveJob::Progress CollectiveJob::GetProgress() const {
  std::lock_guard lock(mutex_);
  Progress progress = progress_;
  progress.checksum_mismatches += mismatches_since_checkpoint_;  // live until a restore
  return progress;
}

std::vector<std::uint64_t> CollectiveJob::Checksums() const {
  std::lock_guard lock(mutex_);
  return {checksums_.begin(), checksums_.end()};
}

void CollectiveJob::MarkCheckpoint() {
  expected_at_checkpoint_ = expected_sum_;
  progress_.checksum_mismatches += mismatches_since_checkpoint_;
  mismatches_since_checkpoint_ = 0;
}

void CollectiveJob::SetState(State state) {
  {
    std::lock_guard lock(mutex_);
    progress_.state = state;
  }
  changed_.notify_all();
}

std::vector<int> CollectiveJob::AdmittingDevices() {
  std::vector<int> devices;
  for (int device : options_.devices) {
    auto found = runtime_.GetDevice(device);
    if (!found) continue;
    // A rank needs the device's compute and its links: a device whose RDMA
    // port is down leaves the collective and serves on otherwise.
    const bool admits = runtime::TakesNewWork((*found)->Health()) && (*found)->LinksUsable();
    {
      std::lock_guard lock(mutex_);
      if (auto distrusted = distrusted_.find(device); distrusted != distrusted_.end()) {
        if (!admits) {
          distrusted->second = true;  // out of service: it comes back checked
          continue;
        }
        if (!distrusted->second) continue;  // not out yet: still the same device
        distrusted_.erase(distrusted);
      }
    }
    if (admits) devices.push_back(device);
  }
  return devices;
}

void CollectiveJob::ReleaseBuffers() {
  for (auto& rank : buffers_) {
    for (auto* allocation : {&rank.state, &rank.part, &rank.check})
      if (*allocation) (void)rank.pool->Free(*allocation);
  }
  buffers_.clear();
}

Status CollectiveJob::Form(const std::vector<int>& devices) {
  if (communicator_) {
    (void)communicator_->Synchronize(std::chrono::milliseconds(100));
    ReleaseBuffers();
    communicator_.reset();
    parked_.clear();
  }
  auto communicator = runtime::Communicator::Create(
      runtime_, devices, {.owner = options_.id, .admission = runtime::Admission::kAdmittedJob});
  if (!communicator) return Fail(communicator.error());
  communicator_ = std::move(*communicator);
  const std::uint64_t bytes = options_.elements * sizeof(float);
  for (int rank = 0; rank < communicator_->Size(); ++rank) {
    auto pool = runtime_.Pool(communicator_->DeviceOf(rank));
    if (!pool) return Fail(pool.error());
    RankBuffers buffers{*pool, {}, {}, {}};
    std::vector<runtime::Allocation*> wanted = {&buffers.state, &buffers.part};
    if (options_.cross_check_every > 0 && communicator_->Size() >= 2)
      wanted.push_back(&buffers.check);
    for (auto* allocation : wanted) {
      auto allocated = (*pool)->Allocate(bytes, communicator_->RankStream(rank));
      if (!allocated) {
        buffers_.push_back(buffers);
        return Fail(allocated.error());
      }
      *allocation = *allocated;
    }
    buffers_.push_back(buffers);
  }
  std::lock_guard lock(mutex_);
  progress_.devices = devices;
  return {};
}

Status CollectiveJob::Restore() {
  // The copies read their own snapshot: a failed restore's copies may run
  // on after a later step has replaced the checkpoint.
  auto source = std::make_shared<std::vector<float>>(checkpoint_);
  for (int rank = 0; rank < communicator_->Size(); ++rank) {
    if (auto copied = communicator_->RankStream(rank).CopyToDevice(
            buffers_[static_cast<std::size_t>(rank)].state.address, source->data(),
            source->size() * sizeof(float));
        !copied) {
      parked_.push_back(std::move(source));
      return copied;
    }
  }
  if (auto done = communicator_->Synchronize(options_.step_timeout); !done) {
    parked_.push_back(std::move(source));
    return done;
  }
  std::lock_guard lock(mutex_);
  // The steps after the checkpoint are undone: their checksums, and what
  // their checks found, go with them.
  const auto undone = static_cast<std::size_t>(std::max(0, progress_.step - checkpoint_step_));
  checksums_.resize(checksums_.size() - std::min(undone, checksums_.size()));
  expected_sum_ = expected_at_checkpoint_;
  mismatches_since_checkpoint_ = 0;
  progress_.step = checkpoint_step_;
  return {};
}

Status CollectiveJob::Step(int step) {
  const int ranks = communicator_->Size();
  const auto count = static_cast<std::int64_t>(options_.elements);
  std::vector<drivers::DeviceAddress> parts;
  for (int rank = 0; rank < ranks; ++rank) {
    const float constant = RankConstant(rank, ranks, step);
    const auto& buffers = buffers_[static_cast<std::size_t>(rank)];
    runtime::Stream& stream = communicator_->RankStream(rank);
    const KernelArg fill[] = {KernelArg::Address(buffers.part.address), KernelArg::Int(count),
                              KernelArg::Float(constant)};
    if (auto done = stream.Launch("fill", fill); !done) return done;
    if (rank == 0) {
      const KernelArg axpy[] = {KernelArg::Int(count), KernelArg::Float(1.0f),
                                KernelArg::Address(buffers.state.address),
                                KernelArg::Address(buffers.part.address)};
      if (auto done = stream.Launch("axpy", axpy); !done) return done;
    }
    parts.push_back(buffers.part.address);
  }
  if (ranks >= 2 && CrossCheckDue()) {
    const auto started = options_.clock->Monotonic();
    if (auto checked = CrossCheckPart(step); !checked) return checked;
    last_check_end_ = options_.clock->Monotonic();
    last_check_cost_ = last_check_end_ - started;
  }
  if (auto reduced = communicator_->AllReduce(parts, options_.elements); !reduced) return reduced;
  if (auto done = communicator_->Synchronize(options_.step_timeout); !done) return done;
  // The reduced parts are the new state everywhere.
  for (auto& buffers : buffers_) std::swap(buffers.state, buffers.part);
  if (!step_copy_) step_copy_ = std::make_shared<std::vector<float>>();
  std::vector<float>& host = *step_copy_;
  host.resize(options_.elements);
  if (auto copied = communicator_->RankStream(0).CopyToHost(host.data(), buffers_[0].state.address,
                                                            host.size() * sizeof(float));
      !copied)
    return copied;
  if (auto done = communicator_->Synchronize(options_.step_timeout); !done) {
    parked_.push_back(std::move(step_copy_));  // the copy may still be writing it
    return done;
  }
  {
    std::lock_guard lock(mutex_);
    const std::uint64_t checksum = Checksum(host);
    expected_sum_ += StepGain(shards_, step, options_.elements);
    if (checksum != expected_sum_) ++mismatches_since_checkpoint_;
    checksums_.push_back(checksum);
    if (checksums_.size() > kChecksumWindow) checksums_.pop_front();
    progress_.step = step + 1;
  }
  if ((step + 1) % options_.checkpoint_every == 0) {
    std::swap(checkpoint_, host);
    checkpoint_step_ = step + 1;
    {
      std::lock_guard lock(mutex_);
      MarkCheckpoint();
    }
    KeepCheckpoint();
  } else {
    std::swap(last_state_, host);
  }
  return {};
}

float CollectiveJob::RankConstant(int rank, int ranks, int step) const {
  // This rank's shards: those with shard % ranks == rank; shard 0 (rank 0)
  // carries the state forward.
  float constant = 0;
  for (int shard = rank; shard < shards_; shard += ranks) constant += ShardConstant(shard, step);
  return constant;
}

bool CollectiveJob::CrossCheckDue() {
  if (options_.cross_check_every == 0 || ++steps_since_check_ < options_.cross_check_every)
    return false;
  if (options_.cross_check_budget > 0) {
    const auto stepped = options_.clock->Monotonic() - last_check_end_;
    if (static_cast<double>(stepped.count()) * options_.cross_check_budget <
        static_cast<double>(last_check_cost_.count()))
      return false;
  }
  steps_since_check_ = 0;
  return true;
}

Status CollectiveJob::CrossCheckPart(int step) {
  const int ranks = communicator_->Size();
  const auto count = static_cast<std::int64_t>(options_.elements);
  const int subject = static_cast<int>(++checks_started_ % static_cast<std::uint64_t>(ranks));
  const bool carries_state = subject == 0;
  const float constant = RankConstant(subject, ranks, step);
  auto buffers_of = [&](int rank) -> RankBuffers& {
    return buffers_[static_cast<std::size_t>(rank)];
  };
  // Copies land in host buffers a timed-out copy may still write: parked.
  std::size_t used = 0;
  auto fetch = [&](int rank, drivers::DeviceAddress address) -> Result<std::vector<float>*> {
    if (check_copies_.size() <= used) check_copies_.resize(used + 1);
    auto& slot = check_copies_[used++];
    if (!slot || slot->size() != options_.elements)
      slot = std::make_shared<std::vector<float>>(options_.elements);
    auto& host = *slot;
    if (auto copied = communicator_->RankStream(rank).CopyToHost(host.data(), address,
                                                                 host.size() * sizeof(float));
        !copied)
      return Fail(copied.error());
    return &host;
  };
  // The subject's part computed on `rank`'s device, from that rank's copy
  // of the state (every rank holds the same one).
  auto recompute = [&](int rank) -> Result<std::vector<float>*> {
    RankBuffers& buffers = buffers_of(rank);
    runtime::Stream& stream = communicator_->RankStream(rank);
    const KernelArg fill[] = {KernelArg::Address(buffers.check.address), KernelArg::Int(count),
                              KernelArg::Float(constant)};
    if (auto done = stream.Launch("fill", fill); !done) return Fail(done.error());
    if (carries_state) {
      const KernelArg axpy[] = {KernelArg::Int(count), KernelArg::Float(1.0f),
                                KernelArg::Address(buffers.state.address),
                                KernelArg::Address(buffers.check.address)};
      if (auto done = stream.Launch("axpy", axpy); !done) return Fail(done.error());
    }
    return fetch(rank, buffers.check.address);
  };
  auto wait = [&]() -> Status {
    if (auto done = communicator_->Synchronize(options_.step_timeout); !done) {
      for (auto& copy : check_copies_)
        if (copy) parked_.push_back(std::move(copy));
      check_copies_.clear();
      return done;
    }
    return {};
  };
  const int checker = (subject + 1) % ranks;
  auto own = fetch(subject, buffers_of(subject).part.address);
  if (!own) return Fail(own.error());
  auto again = recompute(checker);
  if (!again) return Fail(again.error());
  if (auto done = wait(); !done) return done;
  auto vote = VoteOnCopies(**own, **again);
  const int third = (subject + 2) % ranks;
  std::vector<float>* decider = nullptr;
  if (vote.outcome == CopiesVote::Outcome::kUndecided && ranks >= 3) {
    auto computed = recompute(third);
    if (!computed) return Fail(computed.error());
    if (auto done = wait(); !done) return done;
    decider = *computed;
    vote = VoteOnCopies(**own, **again, *decider);
  }

  const std::string kernels = carries_state ? "fill, axpy" : "fill";
  std::vector<CrossCheck> outcomes;
  auto outcome = [&](int rank, bool agreed, std::string detail) {
    CrossCheck check{.device = communicator_->DeviceOf(rank), .agreed = agreed};
    check.detail = std::move(detail);
    check.job = CrossCheck::Job::kCollective;
    check.step = step + 1;
    check.kernels = kernels;
    outcomes.push_back(std::move(check));
  };
  const bool disagreed = vote.outcome != CopiesVote::Outcome::kAgreed;
  bool corrected = false;
  switch (vote.outcome) {
    case CopiesVote::Outcome::kAgreed:
      outcome(subject, true, "");
      outcome(checker, true, "");
      break;
    case CopiesVote::Outcome::kUndecided:
      RASD_LOG_WARN(
          "collective {}: step {}: devices {} and {} computed rank {}'s part differently and no "
          "third rank can say which is right",
          options_.id, step + 1, communicator_->DeviceOf(subject), communicator_->DeviceOf(checker),
          subject);
      break;
    case CopiesVote::Outcome::kNoMajority:
      RASD_LOG_WARN("collective {}: step {}: three ranks computed rank {}'s part three ways",
                    options_.id, step + 1, subject);
      break;
    case CopiesVote::Outcome::kFirstOutvoted:
    case CopiesVote::Outcome::kSecondOutvoted: {
      const bool own_outvoted = vote.outcome == CopiesVote::Outcome::kFirstOutvoted;
      const int outvoted = own_outvoted ? subject : checker;
      const int agreeing = own_outvoted ? checker : subject;
      const std::vector<float>& wrong = own_outvoted ? **own : **again;
      const std::size_t first = vote.first_differing;
      outcome(agreeing, true, "");
      outcome(third, true, "");
      outcome(outvoted, false,
              fmt::format("step {}: rank {}'s part ({}), element {} was {} where devices {} and {} "
                          "gave {}; {} of {} elements differ",
                          step + 1, subject, kernels, first, wrong[first],
                          communicator_->DeviceOf(agreeing), communicator_->DeviceOf(third),
                          (*decider)[first], vote.differing, wrong.size()));
      if (own_outvoted) {
        // The step goes on with the part the majority computed.
        if (auto copied = communicator_->RankStream(subject).CopyToDevice(
                buffers_of(subject).part.address, decider->data(), decider->size() * sizeof(float));
            !copied)
          return copied;
        if (auto done = wait(); !done) return done;
        corrected = true;
      }
      break;
    }
  }
  {
    std::lock_guard lock(mutex_);
    ++progress_.cross_checks;
    if (disagreed) ++progress_.disagreements;
    if (corrected) ++progress_.parts_corrected;
  }
  if (options_.on_cross_check)
    for (const auto& check : outcomes) options_.on_cross_check(check);
  return {};
}

void CollectiveJob::Run() {
  checkpoint_ = InitialState(options_.elements);
  checkpoint_step_ = 0;
  {
    std::lock_guard lock(mutex_);
    expected_sum_ = expected_at_checkpoint_ = Checksum(checkpoint_);
  }
  int step = 0;
  int failures = 0;
  bool formed = false;
  // A recovery in progress, since: a flag and a time rather than an
  // optional, which GCC 12 misreads as maybe uninitialized.
  bool recovering = false;
  bool growing = false;  // re-forming upward onto a returned device
  std::chrono::nanoseconds fault_at{0};
  std::string reason;
  auto stopped = [this] {
    std::lock_guard lock(mutex_);
    return stop_;
  };
  while (!stopped() && step < options_.steps) {
    if (!formed) {
      const auto devices = AdmittingDevices();
      if (static_cast<int>(devices.size()) < options_.min_ranks) {
        SetState(State::kWaiting);
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, kRetryPause * 5);
        continue;
      }
      SetState(recovering ? State::kReforming : State::kRunning);
      Status ready = Form(devices);
      if (ready) ready = Restore();
      if (!ready) {
        reason = ready.error().message;
        if (++failures >= kMaxFailures) break;
        std::this_thread::sleep_for(kRetryPause);
        continue;
      }
      formed = true;
      step = checkpoint_step_;
      if (recovering || growing) {
        std::lock_guard lock(mutex_);
        ++progress_.reforms;
        ++progress_.restores;
        if (growing) ++progress_.grown;
      }
      if (growing) {
        RASD_LOG_INFO("collective {}: grew back to {} ranks at step {}", options_.id,
                     communicator_->Size(), step);
        growing = false;
      }
      SetState(State::kRunning);
    }
    // A device of the job computed wrong without saying so: what it may
    // have touched is computed again, from before it began.
    std::optional<std::chrono::nanoseconds> distrusted;
    {
      std::lock_guard lock(mutex_);
      if (distrust_pending_) distrusted = distrust_since_;
      distrust_pending_ = false;
    }
    if (distrusted) {
      const int redone = RollBackTo(*distrusted);
      RASD_LOG_WARN(
          "collective {}: steps after {} may hold silently corrupted results; re-forming from "
          "that checkpoint ({} step(s) computed again)",
          options_.id, checkpoint_step_, redone);
      communicator_->Abort("silent data corruption: rolling back");
      formed = false;
      continue;
    }
    // A device of the job admits work again: at a checkpoint (nothing to
    // recompute), re-form upward onto it.
    if (options_.grow_on_return && !recovering && step == checkpoint_step_ && step > 0 &&
        communicator_->Size() < static_cast<int>(options_.devices.size())) {
      if (static_cast<int>(AdmittingDevices().size()) > communicator_->Size()) {
        communicator_->Abort("growing back onto a returned device");
        formed = false;
        growing = true;
        continue;
      }
    }
    // A rank whose device stopped admitting work (drained, isolated): leave
    // it at a step boundary, keeping the state just computed.
    const auto admitting = AdmittingDevices();
    bool all_admit = true;
    for (int rank = 0; rank < communicator_->Size(); ++rank) {
      if (std::find(admitting.begin(), admitting.end(), communicator_->DeviceOf(rank)) ==
          admitting.end())
        all_admit = false;
    }
    Status done = all_admit ? Step(step) : Status{};
    if (all_admit && done) {
      ++step;
      failures = 0;
      if (recovering) {
        std::lock_guard lock(mutex_);
        progress_.recovered_at = options_.clock->Monotonic();
        progress_.last_recovery = progress_.recovered_at - fault_at;
        recovering = false;
      }
      continue;
    }
    const auto detected = options_.clock->Monotonic();
    if (!recovering) {
      recovering = true;
      fault_at = detected;
    }
    if (!all_admit) {
      // Nothing failed: the state after `step` steps is good. Keep it.
      if (!last_state_.empty() && checkpoint_step_ != step) {
        checkpoint_ = last_state_;
        checkpoint_step_ = step;
        std::lock_guard lock(mutex_);
        MarkCheckpoint();
      }
      reason = "a rank's device stopped admitting work";
    } else {
      reason = done.error().message;
      ++failures;
    }
    communicator_->Abort(reason);
    {
      std::lock_guard lock(mutex_);
      progress_.released_at = options_.clock->Monotonic();
      progress_.last_release = progress_.released_at - detected;
      progress_.last_error = reason;
    }
    RASD_LOG_WARN("collective {}: step {}: {}; re-forming from the checkpoint of step {}",
                 options_.id, step + 1, reason, checkpoint_step_);
    formed = false;
    if (failures >= kMaxFailures) break;
    // Re-form at once after a first failure; pause when failures repeat
    // (a faulty device the policy has not isolated yet).
    if (!all_admit || failures <= 1) continue;
    std::this_thread::sleep_for(kRetryPause);
  }
  std::lock_guard lock(mutex_);
  if (stop_ && step < options_.steps) {
    progress_.state = State::kStopped;
  } else if (step >= options_.steps) {
    progress_.state = State::kFinished;
  } else {
    progress_.state = State::kFailed;
    progress_.last_error = reason;
  }
  changed_.notify_all();
}

}  // namespace rasd::jobs
