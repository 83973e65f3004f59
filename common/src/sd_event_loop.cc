// The EventLoop over libsystemd's sd-event. This is the one file of rasd
// that includes sd-event.h: everything else sees the EventLoop interface.

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#include "rasd/common/event_loop.h"
#include "rasd/common/unique_fd.h"

namespace rasd::common {
namespace {

std::uint64_t Micros(std::chrono::nanoseconds delay) {
  if (delay.count() <= 0) return 0;
  // Round up: a timer must not fire before its deadline.
  return static_cast<std::uint64_t>((delay.count() + 999) / 1000);
}

class SdTimer final : public Timer {
 public:
  SdTimer(sd_event* event, std::function<void()> on_fire) : on_fire_(std::move(on_fire)) {
    if (int rc = sd_event_add_time(event, &source_, CLOCK_MONOTONIC, 0, Micros(kDefaultSlack),
                                   &SdTimer::OnFire, this);
        rc < 0) {
      // Only ENOMEM gets here: a loop that cannot make timers cannot run
      // rasd's drains, recoveries or watchdog, and limping on would hide it.
      std::fprintf(stderr, "rasd: cannot create a timer: %s\n", std::strerror(-rc));
      std::abort();
    }
    sd_event_source_set_enabled(source_, SD_EVENT_OFF);
  }
  ~SdTimer() override { sd_event_source_disable_unref(source_); }

  void ArmAfter(std::chrono::nanoseconds delay) override {
    sd_event_source_set_time_relative(source_, Micros(delay));
    sd_event_source_set_enabled(source_, SD_EVENT_ONESHOT);
  }
  void Disarm() override { sd_event_source_set_enabled(source_, SD_EVENT_OFF); }
  // sd-event reads 0 as its own default (250 ms): the least it takes is 1 us.
  void SetSlack(std::chrono::nanoseconds slack) override {
    sd_event_source_set_time_accuracy(source_, std::max<std::uint64_t>(Micros(slack), 1));
  }
  bool Armed() const override {
    int enabled = SD_EVENT_OFF;
    (void)sd_event_source_get_enabled(source_, &enabled);
    return enabled != SD_EVENT_OFF;
  }

 private:
  static int OnFire(sd_event_source*, uint64_t, void* userdata) {
    // The callback may destroy this timer: copy nothing from it afterwards.
    auto* self = static_cast<SdTimer*>(userdata);
    auto on_fire = self->on_fire_;
    on_fire();
    return 0;
  }

  sd_event_source* source_ = nullptr;
  std::function<void()> on_fire_;
};

class SdFdWatch final : public FdWatch {
 public:
  explicit SdFdWatch(Callback on_ready) : on_ready_(std::move(on_ready)) {}
  ~SdFdWatch() override { sd_event_source_disable_unref(source_); }

  Status Start(sd_event* event, int fd, std::uint32_t events) {
    if (int rc = sd_event_add_io(event, &source_, fd, events, &SdFdWatch::OnReady, this); rc < 0) {
      return Fail(ErrnoError("watch descriptor", -rc));
    }
    return {};
  }
  void SetEvents(std::uint32_t events) override { sd_event_source_set_io_events(source_, events); }
  void SetEnabled(bool enabled) override {
    sd_event_source_set_enabled(source_, enabled ? SD_EVENT_ON : SD_EVENT_OFF);
  }

 private:
  static int OnReady(sd_event_source*, int, uint32_t revents, void* userdata) {
    auto* self = static_cast<SdFdWatch*>(userdata);
    auto on_ready = self->on_ready_;  // the callback may destroy the watch
    on_ready(revents);
    return 0;
  }

  sd_event_source* source_ = nullptr;
  Callback on_ready_;
};

class SdSignalWatch final : public SignalWatch {
 public:
  explicit SdSignalWatch(std::function<void()> on_signal) : on_signal_(std::move(on_signal)) {}
  ~SdSignalWatch() override { sd_event_source_disable_unref(source_); }

  Status Start(sd_event* event, int signal) {
    if (int rc = sd_event_add_signal(event, &source_, signal, &SdSignalWatch::OnSignal, this);
        rc < 0) {
      return Fail(ErrnoError("watch signal " + std::to_string(signal), -rc));
    }
    return {};
  }

 private:
  static int OnSignal(sd_event_source*, const struct signalfd_siginfo*, void* userdata) {
    auto* self = static_cast<SdSignalWatch*>(userdata);
    auto on_signal = self->on_signal_;
    on_signal();
    return 0;
  }

  sd_event_source* source_ = nullptr;
  std::function<void()> on_signal_;
};

class SdEventLoop final : public EventLoop {
 public:
  explicit SdEventLoop(std::shared_ptr<const Clock> clock) : clock_(std::move(clock)) {}
  ~SdEventLoop() override {
    post_watch_.reset();
    sd_event_unref(event_);
  }

  Status Start() {
    if (int rc = sd_event_new(&event_); rc < 0) return Fail(ErrnoError("sd_event_new", -rc));
    post_fd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!post_fd_) return Fail(ErrnoError("eventfd", errno));
    auto watch = WatchFd(post_fd_.Get(), EPOLLIN, [this](std::uint32_t) { RunPosted(); });
    if (!watch) return Fail(watch.error());
    post_watch_ = std::move(*watch);
    return {};
  }

  std::shared_ptr<const Clock> SharedClock() const override { return clock_; }

  std::unique_ptr<Timer> CreateTimer(std::function<void()> on_fire) override {
    return std::make_unique<SdTimer>(event_, std::move(on_fire));
  }

  Result<std::unique_ptr<FdWatch>> WatchFd(int fd, std::uint32_t events,
                                           FdWatch::Callback on_ready) override {
    auto watch = std::make_unique<SdFdWatch>(std::move(on_ready));
    if (auto started = watch->Start(event_, fd, events); !started) return Fail(started.error());
    return std::unique_ptr<FdWatch>(std::move(watch));
  }

  Result<std::unique_ptr<SignalWatch>> WatchSignal(int signal,
                                                   std::function<void()> on_signal) override {
    auto watch = std::make_unique<SdSignalWatch>(std::move(on_signal));
    if (auto started = watch->Start(event_, signal); !started) return Fail(started.error());
    return std::unique_ptr<SignalWatch>(std::move(watch));
  }

  void Post(std::function<void()> task) override {
    {
      std::lock_guard lock(posted_mutex_);
      posted_.push_back(std::move(task));
    }
    const std::uint64_t one = 1;
    (void)::write(post_fd_.Get(), &one, sizeof one);
  }

  int Run() override { return sd_event_loop(event_); }
  void Exit(int code) override { sd_event_exit(event_, code); }

 private:
  // Runs the tasks queued when it started; tasks they post wait for the
  // next round, so that a task that re-posts itself lets the fds in.
  void RunPosted() {
    std::uint64_t count = 0;
    (void)::read(post_fd_.Get(), &count, sizeof count);
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard lock(posted_mutex_);
      tasks.swap(posted_);
    }
    for (auto& task : tasks) task();
  }

  std::shared_ptr<const Clock> clock_;
  sd_event* event_ = nullptr;
  UniqueFd post_fd_;
  std::unique_ptr<FdWatch> post_watch_;
  std::mutex posted_mutex_;
  std::deque<std::function<void()>> posted_;
};

}  // namespace

Result<std::unique_ptr<EventLoop>> CreateSdEventLoop(std::shared_ptr<const Clock> clock) {
  auto loop = std::make_unique<SdEventLoop>(std::move(clock));
  if (auto started = loop->Start(); !started) return Fail(started.error());
  return std::unique_ptr<EventLoop>(std::move(loop));
}

}  // namespace rasd::common
