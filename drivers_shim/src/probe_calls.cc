#include "rasd/drivers_shim/probe_calls.h"

#include <algorithm>

namespace rasd::drivers {

ProbeCalls::ProbeCalls(Clock clock) : clock_(std::move(clock)) {}

ProbeCalls::Scope::Scope(ProbeCalls* calls, std::list<Entry>::iterator entry)
    : calls_(calls), entry_(entry) {}

ProbeCalls::Scope::Scope(Scope&& other) noexcept : calls_(other.calls_), entry_(other.entry_) {
  other.calls_ = nullptr;
}

ProbeCalls::Scope::~Scope() {
  if (calls_ == nullptr) return;
  std::lock_guard lock(calls_->mutex_);
  calls_->running_.erase(entry_);
}

ProbeCalls::Scope ProbeCalls::Begin(std::string device, std::string_view function) {
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  ++begun_;
  running_.push_back({std::move(device), std::string(function), now});
  return Scope(this, std::prev(running_.end()));
}

std::vector<ProbeCalls::Call> ProbeCalls::Running() const {
  const auto now = clock_();
  std::vector<Call> calls;
  {
    std::lock_guard lock(mutex_);
    for (const auto& entry : running_)
      calls.push_back({entry.device, entry.function, std::max(now - entry.since, {})});
  }
  std::stable_sort(calls.begin(), calls.end(),
                   [](const Call& a, const Call& b) { return a.running > b.running; });
  return calls;
}

std::uint64_t ProbeCalls::Begun() const {
  std::lock_guard lock(mutex_);
  return begun_;
}

}  // namespace rasd::drivers
