#include "rasd/common/simulated_event_loop.h"

#include <poll.h>
#include <sys/epoll.h>

#include <cerrno>

namespace rasd::common {

// Handles refer to their state by id, so that a callback may destroy any
// handle (its own included) while the loop iterates.
class SimulatedEventLoop::SimTimer final : public Timer {
 public:
  SimTimer(SimulatedEventLoop& loop, std::uint64_t id) : loop_(loop), id_(id) {}
  ~SimTimer() override { loop_.timers_.erase(id_); }
  void ArmAfter(std::chrono::nanoseconds delay) override {
    auto& state = loop_.timers_.at(id_);
    state.deadline = loop_.clock_->Monotonic() + std::max(delay, std::chrono::nanoseconds(0));
    state.armed = true;
    state.sequence = ++loop_.arm_sequence_;
  }
  void Disarm() override { loop_.timers_.at(id_).armed = false; }
  bool Armed() const override { return loop_.timers_.at(id_).armed; }
  // Simulated timers fire at their deadline exactly.
  void SetSlack(std::chrono::nanoseconds) override {}

 private:
  SimulatedEventLoop& loop_;
  std::uint64_t id_;
};

class SimulatedEventLoop::SimFdWatch final : public FdWatch {
 public:
  SimFdWatch(SimulatedEventLoop& loop, std::uint64_t id) : loop_(loop), id_(id) {}
  ~SimFdWatch() override { loop_.watches_.erase(id_); }
  void SetEvents(std::uint32_t events) override { loop_.watches_.at(id_).events = events; }
  void SetEnabled(bool enabled) override { loop_.watches_.at(id_).enabled = enabled; }

 private:
  SimulatedEventLoop& loop_;
  std::uint64_t id_;
};

class SimulatedEventLoop::SimSignalWatch final : public SignalWatch {
 public:
  SimSignalWatch(SimulatedEventLoop& loop, int signal) : loop_(loop), signal_(signal) {}
  ~SimSignalWatch() override { loop_.signals_.erase(signal_); }

 private:
  SimulatedEventLoop& loop_;
  int signal_;
};

SimulatedEventLoop::SimulatedEventLoop() : clock_(std::make_shared<ManualClock>()) {}

SimulatedEventLoop::~SimulatedEventLoop() = default;

std::unique_ptr<Timer> SimulatedEventLoop::CreateTimer(std::function<void()> on_fire) {
  const std::uint64_t id = next_id_++;
  timers_[id].on_fire = std::move(on_fire);
  return std::make_unique<SimTimer>(*this, id);
}

Result<std::unique_ptr<FdWatch>> SimulatedEventLoop::WatchFd(int fd, std::uint32_t events,
                                                             FdWatch::Callback on_ready) {
  if (fd < 0) return Fail(ErrorCode::kInvalidArgument, "watch descriptor: negative fd");
  const std::uint64_t id = next_id_++;
  watches_[id] = WatchState{fd, events, true, std::move(on_ready)};
  return std::unique_ptr<FdWatch>(std::make_unique<SimFdWatch>(*this, id));
}

Result<std::unique_ptr<SignalWatch>> SimulatedEventLoop::WatchSignal(
    int signal, std::function<void()> on_signal) {
  if (signals_.contains(signal))
    return Fail(ErrorCode::kAlreadyExists, "signal " + std::to_string(signal) + " is watched");
  signals_[signal] = std::move(on_signal);
  return std::unique_ptr<SignalWatch>(std::make_unique<SimSignalWatch>(*this, signal));
}

void SimulatedEventLoop::Post(std::function<void()> task) {
  std::lock_guard lock(posted_mutex_);
  posted_.push_back(std::move(task));
}

void SimulatedEventLoop::Exit(int code) {
  exited_ = true;
  exit_code_ = code;
}

bool SimulatedEventLoop::Raise(int signal) {
  auto found = signals_.find(signal);
  if (found == signals_.end()) return false;
  auto on_signal = found->second;
  ++dispatched_;
  on_signal();
  return true;
}

std::size_t SimulatedEventLoop::RunPostedOnce() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard lock(posted_mutex_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) {
    ++dispatched_;
    task();
  }
  return tasks.size();
}

std::size_t SimulatedEventLoop::PollFdsOnce(int timeout_ms) {
  std::vector<std::uint64_t> ids;
  std::vector<pollfd> fds;
  for (const auto& [id, watch] : watches_) {
    if (!watch.enabled) continue;
    short events = 0;
    if (watch.events & EPOLLIN) events |= POLLIN;
    if (watch.events & EPOLLOUT) events |= POLLOUT;
    ids.push_back(id);
    fds.push_back(pollfd{watch.fd, events, 0});
  }
  if (fds.empty()) return 0;
  int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready <= 0) return 0;
  std::size_t ran = 0;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto watch = watches_.find(ids[i]);
    if (watch == watches_.end() || !watch->second.enabled) continue;  // an earlier callback
    std::uint32_t revents = 0;
    if (fds[i].revents & POLLIN) revents |= EPOLLIN;
    if (fds[i].revents & POLLOUT) revents |= EPOLLOUT;
    if (fds[i].revents & POLLHUP) revents |= EPOLLHUP;
    if (fds[i].revents & (POLLERR | POLLNVAL)) revents |= EPOLLERR;
    auto on_ready = watch->second.on_ready;
    ++dispatched_;
    ++ran;
    on_ready(revents);
  }
  return ran;
}

SimulatedEventLoop::TimerState* SimulatedEventLoop::NextTimer() {
  TimerState* next = nullptr;
  for (auto& [id, timer] : timers_) {
    if (!timer.armed) continue;
    if (next == nullptr || timer.deadline < next->deadline ||
        (timer.deadline == next->deadline && timer.sequence < next->sequence)) {
      next = &timer;
    }
  }
  return next;
}

std::size_t SimulatedEventLoop::FireDueTimersOnce() {
  std::size_t ran = 0;
  const auto now = clock_->Monotonic();
  for (TimerState* next = NextTimer(); next != nullptr && next->deadline <= now;
       next = NextTimer()) {
    next->armed = false;  // one-shot: disarmed before its callback may re-arm it
    auto on_fire = next->on_fire;
    ++dispatched_;
    ++ran;
    on_fire();
    if (exited_) break;
  }
  return ran;
}

std::size_t SimulatedEventLoop::RunUntilIdle() {
  std::size_t total = 0;
  for (int round = 0; round < 1'000'000; ++round) {
    const std::size_t ran = RunPostedOnce() + PollFdsOnce(0) + FireDueTimersOnce();
    total += ran;
    if (ran == 0 || exited_) break;
  }
  return total;
}

void SimulatedEventLoop::AdvanceBy(std::chrono::nanoseconds by) {
  const auto end = clock_->Monotonic() + by;
  RunUntilIdle();
  for (TimerState* next = NextTimer(); next != nullptr && next->deadline <= end && !exited_;
       next = NextTimer()) {
    if (next->deadline > clock_->Monotonic()) clock_->Advance(next->deadline - clock_->Monotonic());
    RunUntilIdle();
  }
  if (end > clock_->Monotonic()) clock_->Advance(end - clock_->Monotonic());
  RunUntilIdle();
}

std::size_t SimulatedEventLoop::ArmedTimers() const {
  std::size_t armed = 0;
  for (const auto& [id, timer] : timers_) armed += timer.armed ? 1 : 0;
  return armed;
}

int SimulatedEventLoop::Run() {
  while (!exited_) {
    RunUntilIdle();
    if (exited_) break;
    if (TimerState* next = NextTimer()) {
      if (next->deadline > clock_->Monotonic())
        clock_->Advance(next->deadline - clock_->Monotonic());
      continue;
    }
    bool posted = false;
    {
      std::lock_guard lock(posted_mutex_);
      posted = !posted_.empty();
    }
    if (posted) continue;
    if (watches_.empty()) return -1;  // nothing could ever wake the loop
    // Another thread may Post(): wake now and then to look.
    (void)PollFdsOnce(10);
  }
  return exit_code_;
}

}  // namespace rasd::common
