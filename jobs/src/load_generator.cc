#include "rasd/jobs/load_generator.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "rasd/common/real_time.h"

namespace rasd::jobs {
namespace {

// Within 1e-5 relative: a GPU's or NPU's kernels may sum in another order
// than the host's reference.
bool SameAsReference(const std::vector<float>& output, const std::vector<float>& want) {
  if (output.size() != want.size()) return false;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(output[i] - want[i]) <= 1e-5f * std::max(1.0f, std::fabs(want[i]))))
      return false;
  }
  return true;
}

}  // namespace

std::vector<float> LoadGenerator::InputFor(std::uint64_t n, int inputs) {
  std::mt19937 random(static_cast<std::uint32_t>(n * 2654435761u + 1));
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> input(static_cast<std::size_t>(inputs));
  for (auto& value : input) value = uniform(random);
  return input;
}

LoadGenerator::LoadGenerator(InferenceService& service, const MlpModel& model,
                             double requests_per_second, std::size_t latency_window)
    : service_(service),
      model_(model),
      rate_(std::max(requests_per_second, 1.0)),
      latency_window_(std::max<std::size_t>(latency_window, 1)) {
  shared_->latencies.assign(latency_window_, {});
  thread_ = std::thread([this] { Run(); });
}

LoadGenerator::~LoadGenerator() { Stop(); }

void LoadGenerator::Run() {
  const common::Clock& clock = service_.GetClock();
  const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(1.0 / rate_));
  // Inputs repeat every kDistinct requests, so that references are cheap.
  constexpr std::uint64_t kDistinct = 256;
  {
    std::lock_guard lock(shared_->mutex);
    for (std::uint64_t n = 0; n < kDistinct; ++n)
      shared_->references.push_back(model_.Reference(InputFor(n, model_.inputs)));
  }
  auto next = clock.Monotonic();
  std::uint64_t n = 0;
  while (!stop_.load()) {
    const auto now = clock.Monotonic();
    if (now < next) {
      std::this_thread::sleep_for(
          std::min<std::chrono::nanoseconds>(next - now, std::chrono::milliseconds(5)));
      continue;
    }
    next += period;
    if (now - next > std::chrono::milliseconds(100)) next = now;  // no burst after a stall
    const std::uint64_t number = n++;
    {
      std::lock_guard lock(shared_->mutex);
      ++shared_->sent;
      shared_->outstanding.insert(number);
    }
    const auto sent_at = clock.Monotonic();
    auto correction = [shared = shared_, number](std::uint64_t, InferenceService::Output output) {
      std::lock_guard lock(shared->mutex);
      ++shared->corrected;
      if (shared->wrong_numbers.erase(number) > 0) ++shared->wrong_corrected;
      const auto& want = shared->references[number % shared->references.size()];
      if (!output || !SameAsReference(*output, want)) ++shared->corrections_wrong;
    };
    auto submitted = service_.Submit(
        InputFor(number % kDistinct, model_.inputs),
        [shared = shared_, window = latency_window_, number, sent_at, &clock](
            std::uint64_t, InferenceService::Output output) {
          const auto answered_at = clock.Monotonic();
          const double latency =
              std::chrono::duration<double, std::milli>(answered_at - sent_at).count();
          std::lock_guard lock(shared->mutex);
          if (shared->outstanding.erase(number) == 0) {
            ++shared->duplicates;
            return;
          }
          ++shared->answered;
          if (!output) {
            ++shared->errors;
            return;
          }
          const auto& want = shared->references[number % shared->references.size()];
          if (!SameAsReference(*output, want)) {
            ++shared->wrong;
            if (shared->wrong_numbers.size() < Shared::kWrongTracked)
              shared->wrong_numbers.insert(number);
          }
          shared->latencies[shared->latencies_next] = {answered_at, latency};
          shared->latencies_next = (shared->latencies_next + 1) % window;
          shared->latencies_kept = std::min(shared->latencies_kept + 1, window);
        },
        std::move(correction));
    if (!submitted) {
      std::lock_guard lock(shared_->mutex);
      ++shared_->rejected;
      shared_->outstanding.erase(number);  // nothing will come
    }
  }
}

void LoadGenerator::Stop(std::chrono::milliseconds timeout) {
  const bool first = !stop_.exchange(true);
  if (thread_.joinable()) thread_.join();
  if (!first) return;
  // The caller's thread waits here itself, in real time, for the last answers.
  const auto deadline = common::Deadline::After(timeout);
  while (!deadline.Expired()) {
    {
      std::lock_guard lock(shared_->mutex);
      if (shared_->outstanding.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard lock(shared_->mutex);
  unanswered_at_stop_ = shared_->outstanding.size();
}

LoadGenerator::Stats LoadGenerator::GetStats(std::chrono::nanoseconds since) const {
  std::lock_guard lock(shared_->mutex);
  Stats stats;
  stats.sent = shared_->sent;
  stats.rejected = shared_->rejected;
  stats.wrong = shared_->wrong;
  stats.errors = shared_->errors;
  stats.duplicates = shared_->duplicates;
  stats.corrected = shared_->corrected;
  stats.wrong_corrected = shared_->wrong_corrected;
  stats.corrections_wrong = shared_->corrections_wrong;
  stats.unanswered = unanswered_at_stop_;
  stats.answered = shared_->answered;
  stats.outstanding = shared_->outstanding.size();
  std::vector<double> window;
  window.reserve(shared_->latencies_kept);
  for (std::size_t i = 0; i < shared_->latencies_kept; ++i) {
    const auto& [at, ms] = shared_->latencies[i];
    if (at >= since) window.push_back(ms);
  }
  stats.latency_samples = window.size();
  if (!window.empty()) {
    std::sort(window.begin(), window.end());
    stats.p50_ms = window[window.size() / 2];
    stats.p99_ms = window[std::min(window.size() - 1, window.size() * 99 / 100)];
  }
  return stats;
}

}  // namespace rasd::jobs
