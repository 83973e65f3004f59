#include "rasd/jobs/inference_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "rasd/common/logging.h"
#include "seeded_weights.h"

namespace rasd::jobs {
namespace {

using drivers::KernelArg;

// How long an idle replica sleeps before it looks at its device again.
constexpr std::chrono::milliseconds kIdlePoll{20};
// A replica whose batch failed (other than an abort) takes no work for this
// long: a faulty device the policy has not isolated yet must not eat every
// request's attempts.
constexpr std::chrono::milliseconds kFailureBackoff{200};

// A cross-check's or review's finding: where the outvoted answer first
// differs from the one two devices agree on.
std::string OutvotedDetail(std::uint64_t request, const std::vector<float>& wrong,
                           const std::vector<float>& right, int agreeing, int third) {
  std::size_t at = 0;
  while (at + 1 < wrong.size() && at + 1 < right.size() && wrong[at] == right[at]) ++at;
  if (wrong.empty() || right.empty())
    return fmt::format("request {}: an answer of {} values where devices {} and {} gave {}",
                       request, wrong.size(), agreeing, third, right.size());
  return fmt::format("request {}: output {} was {} where devices {} and {} gave {}", request, at,
                     wrong[at], agreeing, third, right[at]);
}

}  // namespace

std::vector<float> MlpModel::W1() const {
  return SeededWeights(static_cast<std::size_t>(inputs) * static_cast<std::size_t>(hidden), seed,
                       1.0f / static_cast<float>(inputs));
}

std::vector<float> MlpModel::W2() const {
  return SeededWeights(static_cast<std::size_t>(hidden) * static_cast<std::size_t>(outputs),
                       seed + 1, 1.0f / static_cast<float>(hidden));
}

std::vector<float> MlpModel::Reference(const std::vector<float>& input) const {
  const auto w1 = W1(), w2 = W2();
  std::vector<float> hidden_values(static_cast<std::size_t>(hidden), 0.0f);
  for (int p = 0; p < inputs; ++p) {
    for (int j = 0; j < hidden; ++j)
      hidden_values[static_cast<std::size_t>(j)] +=
          input[static_cast<std::size_t>(p)] *
          w1[static_cast<std::size_t>(p) * static_cast<std::size_t>(hidden) +
             static_cast<std::size_t>(j)];
  }
  for (auto& value : hidden_values) value = std::max(value, 0.0f);
  std::vector<float> output(static_cast<std::size_t>(outputs), 0.0f);
  for (int p = 0; p < hidden; ++p) {
    for (int j = 0; j < outputs; ++j)
      output[static_cast<std::size_t>(j)] +=
          hidden_values[static_cast<std::size_t>(p)] *
          w2[static_cast<std::size_t>(p) * static_cast<std::size_t>(outputs) +
             static_cast<std::size_t>(j)];
  }
  return output;
}

struct InferenceService::Replica {
  int device = 0;
  std::unique_ptr<runtime::Stream> stream;
  runtime::Allocation w1, w2, x, h, y;
  std::deque<Request> queue;
  // Host buffers of batches given up while their copies may still run (an
  // abort stops what has not started, not what has): freed only once the
  // stream is gone, which waits for the work it was running.
  std::vector<std::shared_ptr<std::vector<float>>> parked;
  bool in_flight = false;
  bool prepared = false;
  std::chrono::nanoseconds unavailable_until{0};  // on the service's clock
  // The newest kKeptAnswers answers, oldest first, with what a review needs
  // to run them again and tell the caller.
  struct KeptAnswer {
    std::uint64_t id = 0;
    std::chrono::nanoseconds answered_at{0};
    std::vector<float> input, output;
    Callback corrected;
  };
  std::deque<KeptAnswer> kept;
  // A cross-check found this replica's answer to this request right.
  std::uint64_t checked_through = 0;
  // Answers that left `kept` since the last review: how many, the newest's
  // request and time.
  std::uint64_t dropped = 0;
  std::uint64_t last_dropped = 0;
  std::chrono::nanoseconds last_dropped_at{0};
  // A review of this device's answers: those it gives after the review
  // began join it, until its device stops admitting work and the batch
  // then running is done (or the review finishes).
  std::shared_ptr<Review> open_review;
  ReplicaStats stats;
  std::thread thread;
};

InferenceService::InferenceService(runtime::Runtime& runtime, InferenceOptions options)
    : runtime_(runtime), options_(std::move(options)) {
  if (!options_.clock) options_.clock = std::make_shared<common::SystemClock>();
}

Result<std::unique_ptr<InferenceService>> InferenceService::Create(runtime::Runtime& runtime,
                                                                   InferenceOptions options) {
  if (options.devices.empty())
    return Fail(ErrorCode::kInvalidArgument, "an inference service needs at least one device");
  if (options.max_batch == 0 || options.max_batch > 4096)
    return Fail(ErrorCode::kInvalidArgument, "max_batch must be in 1..4096");
  const auto& model = options.model;
  if (model.inputs <= 0 || model.hidden <= 0 || model.outputs <= 0 || model.inputs > 65536 ||
      model.hidden > 65536 || model.outputs > 65536)
    return Fail(ErrorCode::kInvalidArgument, "model dimensions must be in 1..65536");
  for (int device : options.devices) {
    if (!runtime.GetDevice(device))
      return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
    if (std::count(options.devices.begin(), options.devices.end(), device) > 1)
      return Fail(ErrorCode::kInvalidArgument, fmt::format("device {} listed twice", device));
  }
  std::unique_ptr<InferenceService> service(new InferenceService(runtime, std::move(options)));
  if (auto started = service->Start(); !started) return Fail(started.error());
  return service;
}

Status InferenceService::Start() {
  w1_ = options_.model.W1();
  w2_ = options_.model.W2();
  for (int device : options_.devices) {
    auto replica = std::make_unique<Replica>();
    replica->device = device;
    replica->stats.device = device;
    replicas_.push_back(std::move(replica));
  }
  for (auto& replica : replicas_) {
    Replica* raw = replica.get();
    raw->thread = std::thread([this, raw] { RunReplica(*raw); });
  }
  return {};
}

InferenceService::~InferenceService() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& replica : replicas_) {
    if (replica->thread.joinable()) replica->thread.join();
  }
  // Whatever is left is answered: nothing admitted goes unanswered.
  std::deque<Request> left;
  {
    std::lock_guard lock(mutex_);
    left = std::move(backlog_);
    for (auto& request : orphaned_opinions_) left.push_back(std::move(request));
    orphaned_opinions_.clear();
    for (auto& replica : replicas_) {
      for (auto& request : replica->queue) left.push_back(std::move(request));
      replica->queue.clear();
    }
  }
  for (auto& request : left) {
    Answer(request, Fail(ErrorCode::kAborted, "the inference service stopped"));
  }
  for (auto& replica : replicas_) {
    if (replica->stream) (void)replica->stream->Synchronize(options_.batch_timeout);
    if (auto pool = runtime_.Pool(replica->device)) {
      for (auto* allocation : {&replica->w1, &replica->w2, &replica->x, &replica->h, &replica->y})
        if (*allocation) (void)(*pool)->Free(*allocation);
    }
    replica->stream.reset();
    replica->parked.clear();
  }
}

bool InferenceService::AdmitsNewWork(int device) const {
  auto found = runtime_.GetDevice(device);
  if (!found) return false;
  return runtime::TakesNewWork((*found)->Health());
}

bool InferenceService::AcceptsWorkNow(const Replica& replica, std::chrono::nanoseconds now) const {
  return AdmitsNewWork(replica.device) && replica.unavailable_until <= now;
}

void InferenceService::RouteLocked(std::deque<Request> requests) {
  const auto now = Now();
  for (auto& request : requests) {
    Replica* best = nullptr;
    std::size_t best_load = 0;
    // Ties go round-robin, so that an idle service spreads its requests.
    const std::size_t first = next_replica_++ % replicas_.size();
    for (std::size_t n = 0; n < replicas_.size(); ++n) {
      auto& replica = replicas_[(first + n) % replicas_.size()];
      if (!AcceptsWorkNow(*replica, now) || request.Avoids(replica->device)) continue;
      const std::size_t load =
          replica->queue.size() + (replica->in_flight ? options_.max_batch : 0);
      if (best == nullptr || load < best_load) {
        best = replica.get();
        best_load = load;
      }
    }
    request.queued_at = now;
    if (best == nullptr && request.disputed) {
      // A third opinion waits for no replica to come back: it is decided
      // without one (ReviewAnswer), on a replica thread, outside the lock.
      orphaned_opinions_.push_back(std::move(request));
    } else if (best == nullptr) {
      backlog_.push_back(std::move(request));
    } else {
      best->queue.push_back(std::move(request));
    }
  }
  work_.notify_all();
}

Result<std::uint64_t> InferenceService::Submit(std::vector<float> input, Callback done,
                                               Callback corrected) {
  if (input.size() != static_cast<std::size_t>(options_.model.inputs)) {
    return Fail(ErrorCode::kInvalidArgument, fmt::format("input has {} values; the model takes {}",
                                                         input.size(), options_.model.inputs));
  }
  std::lock_guard lock(mutex_);
  if (stopping_) return Fail(ErrorCode::kUnavailable, "the inference service is stopping");
  if (outstanding_ >= options_.max_queued) {
    ++stats_.rejected;
    return Fail(ErrorCode::kUnavailable,
                fmt::format("overloaded: {} requests are waiting already (max_queue)",
                            outstanding_));
  }
  Request request;
  request.id = next_id_++;
  request.input = std::move(input);
  request.done = std::move(done);
  request.corrected = std::move(corrected);
  const std::uint64_t id = request.id;
  ++outstanding_;
  ++stats_.admitted;
  std::deque<Request> one;
  one.push_back(std::move(request));
  RouteLocked(std::move(one));
  return id;
}

InferenceService::Output InferenceService::Infer(std::vector<float> input,
                                                 std::chrono::milliseconds timeout) {
  auto state = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  auto result = std::make_shared<std::optional<Output>>();
  auto submitted = Submit(std::move(input), [state, result](std::uint64_t, Output output) {
    std::lock_guard lock(state->first);
    *result = std::move(output);
    state->second.notify_all();
  });
  if (!submitted) return Fail(submitted.error());
  std::unique_lock lock(state->first);
  if (!state->second.wait_for(lock, timeout, [&] { return result->has_value(); })) {
    return Fail(ErrorCode::kTimeout, "no answer in time (the request is still admitted)");
  }
  return std::move(**result);
}

void InferenceService::Reconsider() { work_.notify_all(); }

void InferenceService::SetDrainDeadline(int device, std::chrono::milliseconds deadline) {
  {
    std::lock_guard lock(mutex_);
    drain_deadlines_[device] = deadline;
  }
  work_.notify_all();
}

void InferenceService::Answer(Request& request, Output output) {
  if (request.check) return;  // a cross-check's run: nobody waits for it, and it failed
  if (request.review) {
    ReviewAnswer(-1, request, nullptr);
    return;
  }
  if (request.done) request.done(request.id, std::move(output));
  request.done = nullptr;
  std::lock_guard lock(mutex_);
  --outstanding_;
}

bool InferenceService::SameAnswer(int device_a, const std::vector<float>& a, int device_b,
                                  const std::vector<float>& b) const {
  if (a.size() != b.size()) return false;
  auto model = [&](int device) {
    auto found = runtime_.GetDevice(device);
    return found ? (*found)->Properties().vendor + "/" + (*found)->Properties().name
                 : std::string();
  };
  if (model(device_a) == model(device_b))
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= 1e-5f * std::max(1.0f, std::fabs(a[i])))) return false;
  }
  return true;
}

bool InferenceService::RouteCheckLocked(std::shared_ptr<Verification> check,
                                        std::vector<float> input) {
  Replica* best = nullptr;
  std::size_t best_load = 0;
  const auto now = Now();
  for (auto& replica : replicas_) {
    bool answered = false;
    for (const auto& [device, answer] : check->answers) answered |= device == replica->device;
    if (answered || !AcceptsWorkNow(*replica, now)) continue;
    const std::size_t load = replica->queue.size() + (replica->in_flight ? options_.max_batch : 0);
    if (best == nullptr || load < best_load) {
      best = replica.get();
      best_load = load;
    }
  }
  if (best == nullptr) return false;
  Request request;
  request.check = std::move(check);
  request.id = request.check->request;
  request.input = std::move(input);
  request.queued_at = now;
  best->queue.push_back(std::move(request));
  work_.notify_all();
  return true;
}

void InferenceService::CrossCheckAnswer(int device, Request& request, std::vector<float> output) {
  auto& check = *request.check;
  check.answers.emplace_back(device, std::move(output));
  std::vector<CrossCheck> outcomes;
  auto mark_checked = [&](int checked) {
    for (auto& replica : replicas_) {
      if (replica->device != checked) continue;
      // Its answers up to the one checked are as good as that one, as far
      // as a sample can tell (a review looks at them all).
      replica->checked_through = std::max(replica->checked_through, check.request);
    }
  };
  {
    std::lock_guard lock(mutex_);
    const auto& [first_device, first] = check.answers[0];
    const auto& [second_device, second] = check.answers[1];
    if (check.answers.size() == 2) {
      if (SameAnswer(first_device, first, second_device, second)) {
        mark_checked(first_device);
        mark_checked(second_device);
        outcomes.push_back({first_device, true, check.request, ""});
        outcomes.push_back({second_device, true, check.request, ""});
      } else {
        ++stats_.disagreements;
        if (!RouteCheckLocked(request.check, request.input))
          RASD_LOG_WARN(
              "inference {}: devices {} and {} answered request {} differently and no "
              "third replica can say which is right",
              options_.id, first_device, second_device, check.request);
      }
    } else {
      const auto& [third_device, third] = check.answers[2];
      const bool with_first = SameAnswer(third_device, third, first_device, first);
      const bool with_second = SameAnswer(third_device, third, second_device, second);
      if (with_first != with_second) {
        const int outvoted = with_first ? second_device : first_device;
        const int agreeing = with_first ? first_device : second_device;
        const auto& wrong = with_first ? second : first;
        ++stats_.outvoted;
        mark_checked(agreeing);
        mark_checked(third_device);
        outcomes.push_back({agreeing, true, check.request, ""});
        outcomes.push_back({third_device, true, check.request, ""});
        outcomes.push_back({outvoted, false, check.request,
                            OutvotedDetail(check.request, wrong, third, agreeing, third_device)});
      } else {
        RASD_LOG_WARN("inference {}: three replicas gave request {} no majority answer",
                      options_.id, check.request);
      }
    }
  }
  if (options_.on_cross_check)
    for (const auto& outcome : outcomes) options_.on_cross_check(outcome);
}

std::uint64_t InferenceService::ReviewAnswers(int device, std::chrono::nanoseconds distrust_for) {
  auto review = std::make_shared<Review>();
  review->outcome.device = device;
  std::deque<Request> reruns;
  std::uint64_t rerun = 0;
  {
    std::lock_guard lock(mutex_);
    const auto now = Now();
    const auto since = distrust_for >= now ? std::chrono::nanoseconds::min() : now - distrust_for;
    const bool others = std::any_of(replicas_.begin(), replicas_.end(),
                                    [&](const auto& replica) { return replica->device != device; });
    bool matched = false;
    for (auto& replica : replicas_) {
      if (replica->device != device) continue;
      matched = true;
      if (replica->dropped > 0 && replica->last_dropped_at >= since)
        review->outcome.unreviewed += replica->dropped;  // at most that many
      for (auto& kept : replica->kept) {
        if (kept.answered_at < since) continue;
        if (!others) {
          ++review->outcome.unreviewed;  // no other replica to run it on
          continue;
        }
        Request request;
        request.review = review;
        request.id = kept.id;
        request.input = std::move(kept.input);
        request.corrected = std::move(kept.corrected);
        request.avoid_devices[0] = device;
        review->given.emplace(kept.id, std::move(kept.output));
        reruns.push_back(std::move(request));
      }
      replica->kept.clear();
      replica->dropped = 0;
      // What it answers from now on joins the review, until its device
      // stops admitting work (the verdict isolates it) and the batch then
      // running is done.
      if (!reruns.empty()) replica->open_review = review;
    }
    if (!matched) return 0;  // none of this service's answers came from there
    review->pending = reruns.size();
    rerun = reruns.size();
    ++stats_.reviews;
    if (!reruns.empty()) RouteLocked(std::move(reruns));
  }
  if (rerun == 0 && options_.on_review) options_.on_review(review->outcome);
  return rerun;
}

bool InferenceService::AnotherReplicaAcceptsWork(int a, int b) const {
  const auto now = Now();
  return std::any_of(replicas_.begin(), replicas_.end(), [&](const auto& replica) {
    return replica->device != a && replica->device != b && AcceptsWorkNow(*replica, now);
  });
}

void InferenceService::ReviewAnswer(int device, Request& request,
                                    const std::vector<float>* output) {
  Review& review = *request.review;
  const int reviewed = review.outcome.device;
  Callback corrected;
  std::optional<AnswerReview> finished;
  std::vector<CrossCheck> outcomes;
  const std::vector<float>* right = output;  // the answer a caller is corrected with
  {
    std::lock_guard lock(mutex_);
    const auto given = review.given.find(request.id);
    enum class Finding { kRight, kWrong, kUnknown } finding = Finding::kUnknown;
    if (given == review.given.end()) {
      finding = Finding::kUnknown;
    } else if (output == nullptr) {
      // Not run: a disputed answer is decided as with no third replica (the
      // re-run from a healthy device over the device found wrong).
      if (request.disputed) {
        finding = Finding::kWrong;
        right = &request.disputed->second;
      }
    } else if (!request.disputed) {
      if (SameAnswer(reviewed, given->second, device, *output)) {
        finding = Finding::kRight;
      } else if (AnotherReplicaAcceptsWork(reviewed, device)) {
        // One device against another: a third says which.
        Request third;
        third.review = request.review;
        third.id = request.id;
        third.input = request.input;
        third.corrected = std::move(request.corrected);
        third.avoid_devices = {reviewed, device};
        third.disputed.emplace(device, *output);
        std::deque<Request> one;
        one.push_back(std::move(third));
        RouteLocked(std::move(one));
        return;
      } else {
        finding = Finding::kWrong;  // the device found computing wrong against a healthy one
      }
    } else {
      const auto& [checker, first] = *request.disputed;
      const bool with_given = SameAnswer(device, *output, reviewed, given->second);
      const bool with_first = SameAnswer(device, *output, checker, first);
      if (with_first && !with_given) {
        finding = Finding::kWrong;
      } else if (with_given && !with_first) {
        finding = Finding::kRight;
        ++stats_.outvoted;
        outcomes.push_back({device, true, request.id, ""});
        outcomes.push_back({checker, false, request.id,
                            OutvotedDetail(request.id, first, *output, reviewed, device)});
      } else {
        RASD_LOG_WARN(
            "inference {}: devices {}, {} and {} gave request {} no majority answer in a review",
            options_.id, reviewed, checker, device, request.id);
      }
    }
    if (finding == Finding::kUnknown) {
      ++review.outcome.unreviewed;
    } else {
      ++review.outcome.reviewed;
    }
    if (finding == Finding::kWrong) {
      review.outcome.wrong.push_back(request.id);
      ++stats_.reviewed_wrong;
      if (request.corrected) {
        ++review.outcome.corrected;
        if (delivering_.count(request.id) != 0) {
          // Its caller has not had the answer yet: the correction follows it.
          deferred_corrections_[request.id] = {std::move(request.corrected), *right};
        } else {
          corrected = std::move(request.corrected);
        }
      }
    }
    request.corrected = nullptr;
    if (--review.pending == 0) {
      for (auto& replica : replicas_)
        if (replica->open_review.get() == &review) replica->open_review.reset();
      if (!stopping_) {
        std::sort(review.outcome.wrong.begin(), review.outcome.wrong.end());
        finished = review.outcome;
      }
    }
  }
  if (corrected) corrected(request.id, *right);
  if (options_.on_cross_check)
    for (const auto& outcome : outcomes) options_.on_cross_check(outcome);
  if (finished && options_.on_review) options_.on_review(*finished);
}

InferenceService::Unchecked InferenceService::AnsweredSinceLastCheck(int device) const {
  std::lock_guard lock(mutex_);
  Unchecked unchecked;
  for (const auto& replica : replicas_) {
    if (replica->device != device) continue;
    for (const auto& kept : replica->kept)
      if (kept.id > replica->checked_through) unchecked.requests.push_back(kept.id);
    if (replica->last_dropped > replica->checked_through) unchecked.more = replica->dropped;
  }
  return unchecked;
}

Status InferenceService::PrepareReplica(Replica& replica) {
  auto pool = runtime_.Pool(replica.device);
  if (!pool) return Fail(pool.error());
  if (replica.stream) {
    (void)replica.stream->Synchronize(std::chrono::milliseconds(100));
    for (auto* allocation : {&replica.w1, &replica.w2, &replica.x, &replica.h, &replica.y})
      if (*allocation) (void)(*pool)->Free(*allocation);
    replica.stream.reset();
    replica.parked.clear();
    ++replica.stats.restarts;
  }
  auto stream = runtime_.CreateStream(
      replica.device, {.owner = options_.id, .admission = runtime::Admission::kAdmittedJob});
  if (!stream) return Fail(stream.error());
  replica.stream = std::move(*stream);
  const auto& model = options_.model;
  const std::uint64_t batch = options_.max_batch;
  struct Buffer {
    runtime::Allocation* allocation;
    std::uint64_t floats;
  };
  for (const Buffer& buffer :
       {Buffer{&replica.w1, w1_.size()}, Buffer{&replica.w2, w2_.size()},
        Buffer{&replica.x, batch * static_cast<std::uint64_t>(model.inputs)},
        Buffer{&replica.h, batch * static_cast<std::uint64_t>(model.hidden)},
        Buffer{&replica.y, batch * static_cast<std::uint64_t>(model.outputs)}}) {
    auto allocation = (*pool)->Allocate(buffer.floats * sizeof(float), *replica.stream);
    if (!allocation) return Fail(allocation.error());
    *buffer.allocation = *allocation;
  }
  if (auto copied =
          replica.stream->CopyToDevice(replica.w1.address, w1_.data(), w1_.size() * sizeof(float));
      !copied)
    return copied;
  if (auto copied =
          replica.stream->CopyToDevice(replica.w2.address, w2_.data(), w2_.size() * sizeof(float));
      !copied)
    return copied;
  if (auto waited = Wait(replica); !waited) return waited;
  replica.prepared = true;
  return {};
}

Status InferenceService::Wait(Replica& replica) {
  // In slices: a device that starts draining gives the work drain_deadline
  // from then; a healthy one batch_timeout in all. Past either, the work is
  // abandoned (and re-run elsewhere by the caller).
  runtime::Stream& stream = *replica.stream;
  const auto started = Now();
  std::optional<std::chrono::nanoseconds> drain_seen;
  auto drain_deadline = [&] {
    std::lock_guard lock(mutex_);
    auto it = drain_deadlines_.find(replica.device);
    return it == drain_deadlines_.end() ? options_.drain_deadline : it->second;
  };
  while (true) {
    auto done = stream.Synchronize(std::chrono::milliseconds(10));
    if (done) return {};
    if (done.error().code != ErrorCode::kTimeout) return done;
    const auto now = Now();  // after a 10 ms stream wait
    if (!AdmitsNewWork(replica.device) && !drain_seen) drain_seen = now;
    if (now - started > options_.batch_timeout ||
        (drain_seen && now - *drain_seen > drain_deadline())) {
      (void)stream.Abort("abandoned: past its deadline");
      stream.GetDevice().NoteOpTimeout();
      return Fail(ErrorCode::kTimeout,
                  fmt::format("work on device {} past its deadline", replica.device));
    }
  }
}

Status InferenceService::RunBatch(Replica& replica, std::vector<Request>& batch, bool) {
  const auto& model = options_.model;
  const auto rows = static_cast<std::int64_t>(batch.size());
  auto x_buffer =
      std::make_shared<std::vector<float>>(batch.size() * static_cast<std::size_t>(model.inputs));
  auto y_buffer =
      std::make_shared<std::vector<float>>(batch.size() * static_cast<std::size_t>(model.outputs));
  std::vector<float>& x = *x_buffer;
  std::vector<float>& y = *y_buffer;
  for (std::size_t i = 0; i < batch.size(); ++i)
    std::copy(batch[i].input.begin(), batch[i].input.end(),
              x.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(model.inputs)));
  runtime::Stream& stream = *replica.stream;
  // Until the batch has completed, its copies may still read x or write y.
  struct ParkUnlessDone {
    Replica& replica;
    std::shared_ptr<std::vector<float>> x, y;
    bool done = false;
    ~ParkUnlessDone() {
      if (done) return;
      replica.parked.push_back(std::move(x));
      replica.parked.push_back(std::move(y));
    }
  } park{replica, x_buffer, y_buffer};
  const KernelArg first[] = {KernelArg::Int(rows),
                             KernelArg::Int(model.hidden),
                             KernelArg::Int(model.inputs),
                             KernelArg::Address(replica.x.address),
                             KernelArg::Address(replica.w1.address),
                             KernelArg::Address(replica.h.address)};
  const KernelArg relu[] = {KernelArg::Int(rows * model.hidden),
                            KernelArg::Address(replica.h.address),
                            KernelArg::Address(replica.h.address)};
  const KernelArg second[] = {KernelArg::Int(rows),
                              KernelArg::Int(model.outputs),
                              KernelArg::Int(model.hidden),
                              KernelArg::Address(replica.h.address),
                              KernelArg::Address(replica.w2.address),
                              KernelArg::Address(replica.y.address)};
  if (auto done = stream.CopyToDevice(replica.x.address, x.data(), x.size() * sizeof(float)); !done)
    return done;
  if (auto done = stream.Launch("gemm", first); !done) return done;
  if (auto done = stream.Launch("relu", relu); !done) return done;
  if (auto done = stream.Launch("gemm", second); !done) return done;
  if (auto done = stream.CopyToHost(y.data(), replica.y.address, y.size() * sizeof(float)); !done)
    return done;
  if (auto waited = Wait(replica); !waited) return waited;
  park.done = true;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto begin =
        y.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(model.outputs));
    std::vector<float> output(begin, begin + model.outputs);
    if (batch[i].check) {
      CrossCheckAnswer(replica.device, batch[i], std::move(output));
      continue;
    }
    if (batch[i].review) {
      ReviewAnswer(replica.device, batch[i], &output);
      continue;
    }
    const bool sampled = options_.verify_one_in > 0 && batch[i].id % options_.verify_one_in == 0;
    std::shared_ptr<Verification> check;
    if (sampled) {
      check = std::make_shared<Verification>();
      check->request = batch[i].id;
      check->answers.emplace_back(replica.device, output);
    }
    // Kept (or joined to a review) before the caller has it, so that a
    // review begun after the caller saw its answer always covers it.
    std::vector<float> given = output;
    const bool may_be_corrected = static_cast<bool>(batch[i].corrected);
    const std::uint64_t id = batch[i].id;
    {
      std::lock_guard lock(mutex_);
      if (may_be_corrected) delivering_.insert(id);
      if (check && RouteCheckLocked(check, batch[i].input)) ++stats_.cross_checks;
      if (replica.open_review) {
        Request rerun;
        rerun.review = replica.open_review;
        rerun.id = batch[i].id;
        rerun.input = std::move(batch[i].input);
        rerun.corrected = std::move(batch[i].corrected);
        rerun.avoid_devices[0] = replica.device;
        rerun.review->given.emplace(rerun.id, given);
        ++rerun.review->pending;
        std::deque<Request> one;
        one.push_back(std::move(rerun));
        RouteLocked(std::move(one));
      } else {
        replica.kept.push_back({batch[i].id, Now(), std::move(batch[i].input), std::move(given),
                                std::move(batch[i].corrected)});
      }
      if (replica.kept.size() > kKeptAnswers) {
        ++replica.dropped;
        replica.last_dropped = replica.kept.front().id;
        replica.last_dropped_at = replica.kept.front().answered_at;
        replica.kept.pop_front();
      }
    }
    Answer(batch[i], std::move(output));
    if (may_be_corrected) {
      std::optional<std::pair<Callback, std::vector<float>>> late;
      {
        std::lock_guard lock(mutex_);
        delivering_.erase(id);
        if (auto found = deferred_corrections_.find(id); found != deferred_corrections_.end()) {
          late = std::move(found->second);
          deferred_corrections_.erase(found);
        }
      }
      if (late) late->first(id, late->second);
    }
  }
  return {};
}

void InferenceService::RunReplica(Replica& replica) {
  // Load the model at once, as a serving replica does, rather than with
  // its first batch.
  if (AdmitsNewWork(replica.device)) {
    if (auto prepared = PrepareReplica(replica); !prepared) {
      RASD_LOG_WARN("inference {}: replica on device {} not ready: {}", options_.id, replica.device,
                   prepared.error().message);
    }
  }
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (!orphaned_opinions_.empty()) {
      std::vector<Request> orphans = std::move(orphaned_opinions_);
      orphaned_opinions_.clear();
      lock.unlock();
      for (auto& request : orphans) ReviewAnswer(-1, request, nullptr);
      lock.lock();
      continue;
    }
    const auto now = Now();
    if (!AcceptsWorkNow(replica, now)) {
      // Draining, isolated or backing off: its queue goes elsewhere.
      if (!replica.queue.empty()) {
        std::deque<Request> moved = std::move(replica.queue);
        replica.queue.clear();
        stats_.requeued += static_cast<std::uint64_t>(std::count_if(
            moved.begin(), moved.end(), [](const Request& r) { return r.FromCaller(); }));
        RouteLocked(std::move(moved));  // never back to itself: it admits nothing now
      }
      work_.wait_for(lock, kIdlePoll);
      continue;
    }
    if (replica.queue.empty() && !backlog_.empty()) {
      // What this replica may run: a review's re-run waits for another.
      for (auto it = backlog_.begin();
           it != backlog_.end() && replica.queue.size() < options_.max_batch;) {
        if (it->Avoids(replica.device)) {
          ++it;
          continue;
        }
        replica.queue.push_back(std::move(*it));
        it = backlog_.erase(it);
      }
    }
    if (replica.queue.empty()) {
      work_.wait_for(lock, kIdlePoll);
      continue;
    }
    // Continuous batching: full, or the oldest has waited max_wait.
    const auto deadline = replica.queue.front().queued_at + options_.max_wait;
    if (const auto left = deadline - Now();
        replica.queue.size() < options_.max_batch && left > std::chrono::nanoseconds(0)) {
      work_.wait_for(lock, left);
      continue;  // look at the device and the queue again
    }
    std::vector<Request> batch;
    while (!replica.queue.empty() && batch.size() < options_.max_batch) {
      batch.push_back(std::move(replica.queue.front()));
      replica.queue.pop_front();
    }
    replica.in_flight = true;
    lock.unlock();
    Status ran = replica.prepared && replica.stream && !replica.stream->Aborted()
                     ? Status{}
                     : PrepareReplica(replica);
    if (ran) ran = RunBatch(replica, batch, false);
    lock.lock();
    replica.in_flight = false;
    // Out of service, its last batch done: nothing more can join a review.
    if (!AdmitsNewWork(replica.device)) replica.open_review.reset();
    if (ran) {
      const auto answered = static_cast<std::uint64_t>(std::count_if(
          batch.begin(), batch.end(), [](const Request& request) { return request.FromCaller(); }));
      ++replica.stats.batches;
      replica.stats.served += answered;
      stats_.served += answered;
      continue;
    }
    // The batch failed: its requests run again elsewhere (or here, after a
    // restart, when the failure was an abort of this job's streams).
    const bool aborted = ran.error().code == ErrorCode::kAborted;
    replica.prepared = false;
    if (!aborted) replica.unavailable_until = Now() + kFailureBackoff;
    RASD_LOG_WARN("inference {}: batch of {} on device {} failed ({}); re-running it", options_.id,
                 batch.size(), replica.device, ran.error().message);
    std::deque<Request> again;
    std::vector<Request> failed;
    for (auto& request : batch) {
      if (request.check) continue;  // a cross-check is a sample: another comes
      if (++request.attempts >= options_.max_attempts) {
        failed.push_back(std::move(request));
      } else {
        again.push_back(std::move(request));
      }
    }
    auto from_callers = [](const auto& requests) {
      return static_cast<std::uint64_t>(std::count_if(
          requests.begin(), requests.end(), [](const Request& r) { return r.FromCaller(); }));
    };
    stats_.rerun += from_callers(again);
    stats_.failed += from_callers(failed);
    RouteLocked(std::move(again));
    if (!failed.empty()) {
      lock.unlock();
      for (auto& request : failed)
        Answer(request,
               Fail(ran.error().code, fmt::format("failed {} times: {}", options_.max_attempts,
                                                  ran.error().message)));
      lock.lock();
    }
  }
}

InferenceService::Stats InferenceService::GetStats() const {
  std::lock_guard lock(mutex_);
  Stats stats = stats_;
  stats.waiting = backlog_.size();
  for (const auto& replica : replicas_) {
    ReplicaStats entry = replica->stats;
    entry.queued = replica->queue.size();
    entry.in_flight = replica->in_flight;
    stats.replicas.push_back(entry);
  }
  return stats;
}

}  // namespace rasd::jobs
