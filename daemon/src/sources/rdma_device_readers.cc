#include "rdma_device_readers.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "rasd/common/logging.h"

namespace rasd::daemon {
namespace {

constexpr std::string_view kClassInfiniband = "/sys/class/infiniband/";

// The host as the readers see it: each file read is a ProbeCalls call
// named by the RDMA device and the file under it, and once the readers are
// gone a thread left behind reads nothing more (the HostEnv it wraps may be
// gone too).
class RecordingHost final : public common::HostEnv {
 public:
  RecordingHost(const common::HostEnv& inner, drivers::ProbeCalls& calls)
      : HostEnv(inner.Root(), inner.SharedClock()), inner_(inner), calls_(calls) {}

  void Stop() { stopped_ = true; }

  Result<std::string> ReadFile(std::string_view host_path, std::size_t max_bytes) const override {
    if (stopped_) return Fail(ErrorCode::kUnavailable, "the RDMA readers have stopped");
    std::string_view under = host_path;
    std::string device;
    if (under.substr(0, kClassInfiniband.size()) == kClassInfiniband) {
      under.remove_prefix(kClassInfiniband.size());
      const std::size_t slash = under.find('/');
      device = std::string(under.substr(0, slash));
      under = slash == std::string_view::npos ? std::string_view() : under.substr(slash + 1);
    }
    auto call = calls_.Begin(std::move(device), under);
    return inner_.ReadFile(host_path, max_bytes);
  }
  bool Exists(std::string_view host_path) const override {
    return !stopped_ && inner_.Exists(host_path);
  }

 private:
  const common::HostEnv& inner_;
  drivers::ProbeCalls& calls_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

// What the threads share with the readers: kept alive by each thread, so
// that one left behind never touches destroyed readers.
struct RdmaDeviceReaders::Shared {
  Shared(common::EventLoop& owner_loop, const common::HostEnv& inner,
         std::function<void()> on_finished)
      : loop(owner_loop),
        clock(owner_loop.SharedClock()),
        // On the loop's clock, so that the caller's deadline and the calls'
        // times are one time.
        calls([clock = owner_loop.SharedClock()] {
          return std::chrono::steady_clock::time_point(clock->Monotonic());
        }),
        host(inner, calls),
        finished(std::move(on_finished)) {}

  common::EventLoop& loop;
  std::shared_ptr<const common::Clock> clock;
  drivers::ProbeCalls calls;
  RecordingHost host;
  std::function<void()> finished;  // loop thread only; cleared by the destructor
  struct Slot {
    bool requested = false;  // a read is asked for and not begun
    bool busy = false;       // asked for or in progress
    std::chrono::nanoseconds asked{0};  // when, on the loop's clock
  };
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;                                                       // guarded by mutex
  std::map<std::string, Slot> slots;                                           // guarded by mutex
  std::map<std::string, std::optional<ras::InfinibandSnapshot::Device>> done;  // guarded by mutex
};

RdmaDeviceReaders::RdmaDeviceReaders(common::EventLoop& loop, const common::HostEnv& host,
                                     std::function<void()> finished)
    : shared_(std::make_shared<Shared>(loop, host, std::move(finished))) {}

RdmaDeviceReaders::~RdmaDeviceReaders() {
  std::set<std::string> busy;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopping = true;
    shared_->host.Stop();
    shared_->finished = nullptr;
    for (const auto& [name, slot] : shared_->slots)
      if (slot.busy) busy.insert(name);
    shared_->changed.notify_all();
  }
  for (auto& [name, thread] : threads_) {
    if (busy.count(name) != 0) {
      thread.detach();
      ++left_behind_;
    } else {
      thread.join();
    }
  }
  if (left_behind_ > 0) {
    RASD_LOG_WARN("RDMA: stopping with {} device read(s) that did not return: left behind",
                  left_behind_);
  }
}

bool RdmaDeviceReaders::Request(const std::string& name) {
  std::lock_guard lock(shared_->mutex);
  auto& slot = shared_->slots[name];
  if (slot.busy) return false;
  slot.busy = true;
  slot.requested = true;
  slot.asked = shared_->clock->Monotonic();
  if (threads_.count(name) == 0) threads_.emplace(name, std::thread(ReadDevice, shared_, name));
  shared_->changed.notify_all();
  return true;
}

bool RdmaDeviceReaders::WaitUntilIdle(std::chrono::milliseconds at_most) {
  std::unique_lock lock(shared_->mutex);
  return shared_->changed.wait_for(lock, at_most, [&] {
    return std::none_of(shared_->slots.begin(), shared_->slots.end(),
                        [](const auto& slot) { return slot.second.busy; });
  });
}

std::map<std::string, std::optional<ras::InfinibandSnapshot::Device>> RdmaDeviceReaders::Take() {
  std::lock_guard lock(shared_->mutex);
  return std::exchange(shared_->done, {});
}

std::map<std::string, drivers::ProbeCalls::Call> RdmaDeviceReaders::InFlightReads() const {
  std::map<std::string, drivers::ProbeCalls::Call> reads;
  {
    std::lock_guard lock(shared_->mutex);
    const auto now = shared_->clock->Monotonic();
    for (const auto& [name, slot] : shared_->slots) {
      if (slot.busy) reads[name] = {.device = name, .function = "", .running = now - slot.asked};
    }
  }
  for (const auto& call : shared_->calls.Running()) {  // the longest first
    auto read = reads.find(call.device);
    if (read != reads.end() && read->second.function.empty()) read->second.function = call.function;
  }
  return reads;
}

void RdmaDeviceReaders::ReadDevice(const std::shared_ptr<Shared>& shared, const std::string& name) {
  std::unique_lock lock(shared->mutex);
  auto& slot = shared->slots[name];  // a map's nodes stay where they are
  while (true) {
    shared->changed.wait(lock, [&] { return shared->stopping || slot.requested; });
    if (shared->stopping) return;
    slot.requested = false;
    lock.unlock();
    auto device = ras::ReadInfinibandDevice(shared->host, name);
    lock.lock();
    slot.busy = false;
    shared->changed.notify_all();
    if (shared->stopping) return;
    shared->done[name] = std::move(device);
    shared->loop.Post([shared] {
      if (shared->finished) shared->finished();
    });
  }
}

}  // namespace rasd::daemon
