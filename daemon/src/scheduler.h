#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rasd::daemon {

// Tells the cluster's scheduler that this node can or cannot take work. rasd
// keeps no cluster state of its own: it asks the scheduler the cluster
// already runs. Slurm today (scontrol, argv, no shell); Kubernetes would
// cordon through the API server (docs/scheduler.md).
//
// Requests are carried out on a worker thread, so the event loop never
// waits for scontrol. Idempotent: asking for the state the node is already
// in (as far as rasd made it) runs nothing. A failed call is retried with
// backoff (0.25 s doubling to 30 s) while the request stands. Thread-safe.
class SchedulerLink {
 public:
  struct Options {
    std::string node;  // the scheduler's name for this host
    std::string scontrol = "/usr/bin/scontrol";
    std::vector<std::string> environment;      // e.g. SLURM_CONF=...
    std::chrono::milliseconds timeout{10000};  // per scontrol call
  };
  explicit SchedulerLink(Options options);
  ~SchedulerLink();
  SchedulerLink(const SchedulerLink&) = delete;
  SchedulerLink& operator=(const SchedulerLink&) = delete;

  // DRAIN with Reason="rasd: <reason>".
  void Drain(const std::string& reason);
  // RESUME, if rasd drained it.
  void Resume();
  bool Drained() const;
  // Calls by result (ok, failed) and requests that needed no call (skipped).
  std::map<std::string, std::uint64_t> Counts() const;
  const std::string& Node() const { return options_.node; }

 private:
  void Run();

  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool want_drained_ = false;
  std::string reason_;
  bool drained_ = false;  // what the scheduler was last told, successfully
  bool stop_ = false;
  std::map<std::string, std::uint64_t> counts_;
  std::thread worker_;
};

}  // namespace rasd::daemon
