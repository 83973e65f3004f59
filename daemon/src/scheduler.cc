#include "scheduler.h"

#include <algorithm>

#include "rasd/common/logging.h"
#include "subprocess.h"

namespace rasd::daemon {

SchedulerLink::SchedulerLink(Options options) : options_(std::move(options)) {
  worker_ = std::thread([this] { Run(); });
}

SchedulerLink::~SchedulerLink() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void SchedulerLink::Drain(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (want_drained_ && drained_) {
      ++counts_["skipped"];  // already drained by rasd: no second call
      return;
    }
    want_drained_ = true;
    reason_ = reason;
  }
  changed_.notify_all();
}

void SchedulerLink::Resume() {
  {
    std::lock_guard lock(mutex_);
    if (!want_drained_ && !drained_) {
      ++counts_["skipped"];
      return;
    }
    want_drained_ = false;
  }
  changed_.notify_all();
}

bool SchedulerLink::Drained() const {
  std::lock_guard lock(mutex_);
  return want_drained_ || drained_;
}

std::map<std::string, std::uint64_t> SchedulerLink::Counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

void SchedulerLink::Run() {
  auto logger = common::GetLogger("scheduler");
  std::chrono::milliseconds backoff{250};
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (want_drained_ == drained_) {
      changed_.wait(lock);
      backoff = std::chrono::milliseconds(250);
      continue;
    }
    const bool drain = want_drained_;
    // Slurm keeps the reason short in its tables: one line, 200 bytes.
    std::string reason = "rasd: " + reason_;
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    if (reason.size() > 200) reason.resize(200);
    std::vector<std::string> argv = {options_.scontrol, "update", "NodeName=" + options_.node};
    if (drain) {
      argv.push_back("State=DRAIN");
      argv.push_back("Reason=" + reason);
    } else {
      argv.push_back("State=RESUME");
    }
    std::vector<std::string> environment = options_.environment;
    environment.push_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
    lock.unlock();
    const ProgramResult result = RunProgram(argv, environment, options_.timeout);
    lock.lock();
    if (result.result == "ok") {
      drained_ = drain;
      ++counts_["ok"];
      RASD_LOGGER_LOG(logger, spdlog::level::warn, "slurm: node {} {}{}", options_.node, drain ? "drained: " : "resumed",
                   drain ? reason : "");
      backoff = std::chrono::milliseconds(250);
      continue;
    }
    ++counts_["failed"];
    RASD_LOGGER_LOG(logger, spdlog::level::err, "slurm: scontrol update NodeName={} State={} failed ({}): {}; retrying in {} ms",
                  options_.node, drain ? "DRAIN" : "RESUME", result.detail, result.output,
                  backoff.count());
    changed_.wait_for(lock, backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
  }
}

}  // namespace rasd::daemon
