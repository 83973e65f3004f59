#include "rasd/jobs/llm_load.h"

#include <algorithm>

namespace rasd::jobs {
namespace {

constexpr std::size_t kLatencyWindow = 4096;

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(q * values.size()))];
}

}  // namespace

LlmLoad::LlmLoad(LlmService& service, DecoderModel model, double requests_per_second)
    : service_(service),
      model_(model),
      interval_(std::chrono::nanoseconds(
          static_cast<std::int64_t>(1e9 / std::max(requests_per_second, 0.001)))) {
  thread_ = std::thread([this] { Run(); });
}

LlmLoad::~LlmLoad() { Stop(std::chrono::seconds(5)); }

void LlmLoad::Stop(std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [this] { return pending_.empty(); });
  stats_.unanswered = pending_.size();
}

void LlmLoad::Run() {
  std::mt19937 random(17);
  auto next = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!stop_) {
    changed_.wait_until(lock, next, [this] { return stop_; });
    if (stop_) break;
    next += interval_;
    Pending request;
    request.prompt.resize(std::uniform_int_distribution<std::size_t>(4, 48)(random));
    for (int& token : request.prompt)
      token = std::uniform_int_distribution<int>(0, model_.vocab - 1)(random);
    request.wanted = std::uniform_int_distribution<int>(8, 32)(random);
    request.sent_at = std::chrono::steady_clock::now();
    const auto prompt = request.prompt;
    const int wanted = request.wanted;
    lock.unlock();
    auto submitted = service_.Submit(
        prompt, wanted,
        [this](std::uint64_t answered, LlmService::Answer answer) { Answered(answered, answer); });
    lock.lock();
    if (!submitted) {
      ++stats_.rejected;
      continue;
    }
    const std::uint64_t id = *submitted;
    ++stats_.sent;
    // An answer that came before this line found no pending entry: it was
    // counted then, as answered and checked against nothing.
    if (!answers_.contains(id)) pending_.emplace(id, std::move(request));
  }
}

void LlmLoad::Answered(std::uint64_t id, const LlmService::Answer& answer) {
  std::unique_lock lock(mutex_);
  if (++answers_[id] > 1) {
    ++stats_.duplicates;
    return;
  }
  if (answers_.size() > kLatencyWindow) answers_.erase(answers_.begin());
  ++stats_.answered;
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending request = std::move(it->second);
  pending_.erase(it);
  latencies_ms_.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - request.sent_at)
          .count());
  if (latencies_ms_.size() > kLatencyWindow) latencies_ms_.pop_front();
  if (!answer) {
    ++stats_.errors;
  } else if (answer->size() != static_cast<std::size_t>(request.wanted)) {
    ++stats_.wrong;
  } else if (id % 8 == 0) {
    lock.unlock();
    const bool right = *answer == model_.ReferenceGenerate(request.prompt, request.wanted);
    lock.lock();
    ++stats_.checked;
    if (!right) ++stats_.wrong;
  }
  changed_.notify_all();
}

LlmLoad::Stats LlmLoad::GetStats() const {
  std::lock_guard lock(mutex_);
  Stats stats = stats_;
  const std::vector<double> latencies(latencies_ms_.begin(), latencies_ms_.end());
  stats.p50_ms = Quantile(latencies, 0.5);
  stats.p99_ms = Quantile(latencies, 0.99);
  return stats;
}

}  // namespace rasd::jobs
