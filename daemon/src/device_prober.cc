#include "device_prober.h"

#include <condition_variable>
#include <mutex>
#include <string>

#include "rasd/common/logging.h"

namespace rasd::daemon {

// What the device threads share with the prober: kept alive by each thread,
// so that one left behind by a stop never touches a destroyed prober.
struct DeviceProber::Shared {
  drivers::ProbeCalls calls;
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;       // guarded by mutex
  std::vector<bool> finished;  // per thread; guarded by mutex
  std::uint64_t answered = 0;  // guarded by mutex
};

DeviceProber::DeviceProber(drivers::DeviceQueries& queries, std::vector<Device> devices,
                           Options options)
    : shared_(std::make_shared<Shared>()), options_(options) {
  for (auto& device : devices) {
    auto names = queries.Names(device.index);
    if (names.empty()) continue;
    const std::size_t slot = threads_.size();
    {
      std::lock_guard lock(shared_->mutex);
      shared_->finished.push_back(false);
    }
    threads_.emplace_back(ProbeDevice, shared_, &queries, device.index, device.name,
                          std::move(names), options_.interval, slot);
    devices_.push_back(std::move(device));
  }
}

DeviceProber::~DeviceProber() { Stop(); }

void DeviceProber::Stop() {
  if (threads_.empty()) return;
  std::unique_lock lock(shared_->mutex);
  shared_->stopping = true;
  shared_->changed.notify_all();
  shared_->changed.wait_for(lock, options_.stop_wait, [this] {
    for (const bool finished : shared_->finished) {
      if (!finished) return false;
    }
    return true;
  });
  std::vector<bool> finished = shared_->finished;
  lock.unlock();
  for (std::size_t slot = 0; slot < threads_.size(); ++slot) {
    if (finished[slot]) {
      threads_[slot].join();
    } else {
      threads_[slot].detach();
      ++left_behind_;
    }
  }
  if (left_behind_ > 0) {
    RASD_LOG_WARN("stopping with {} device quer{} that did not return: left behind", left_behind_,
                  left_behind_ == 1 ? "y" : "ies");
  }
  threads_.clear();
}

std::vector<drivers::ProbeCalls::Call> DeviceProber::RunningCalls() const {
  return shared_->calls.Running();
}

std::optional<int> DeviceProber::DeviceNamed(std::string_view name) const {
  for (const auto& device : devices_) {
    if (device.name == name) return device.index;
  }
  return std::nullopt;
}

std::uint64_t DeviceProber::Answered() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->answered;
}

void DeviceProber::ProbeDevice(const std::shared_ptr<Shared>& shared,
                               drivers::DeviceQueries* queries, int device,
                               const std::string& device_name,
                               const std::vector<std::string>& names,
                               std::chrono::milliseconds interval, std::size_t slot) {
  std::unique_lock lock(shared->mutex);
  while (!shared->stopping) {
    for (const auto& name : names) {
      lock.unlock();
      {
        // The answers are not evidence here: the driver's own reports (the
        // error listener) are. A query that returns says the driver answers.
        auto call = shared->calls.Begin(device_name, name);
        (void)queries->Run(device, name);
      }
      lock.lock();
      ++shared->answered;
      if (shared->stopping) break;
    }
    shared->changed.wait_for(lock, interval, [&] { return shared->stopping; });
  }
  shared->finished[slot] = true;
  shared->changed.notify_all();
}

}  // namespace rasd::daemon
