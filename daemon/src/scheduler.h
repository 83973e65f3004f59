#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rasd/cluster/slurm.h"
#include "rasd/common/host_env.h"

namespace rasd::daemon {

// Tells the cluster's scheduler that this node can or cannot take work. rasd
// keeps no cluster state of its own: it asks the scheduler the cluster
// already runs. Slurm today (scontrol and sinfo, argv, no shell); Kubernetes
// would cordon through the API server (docs/scheduler.md).
//
// Requests are carried out on a worker thread, so the event loop never
// waits for Slurm. Idempotent: asking for the state the node is already
// in (as far as rasd made it) runs nothing. A failed call is retried with
// backoff (0.25 s doubling to 30 s) while the request stands.
//
// Before every call the worker asks Slurm for every node (sinfo --json):
//  - a node Slurm does not list (a typo, `ALL`) or a list Slurm could not
//    give is a failed call, retried;
//  - a node held by someone else (any reason not rasd's: an
//    administrator's drain, DOWN, FAIL) is never drained over nor resumed:
//    the request is logged and counted as skipped;
//  - a node rasd drained already (its reason starts "rasd:") is not drained
//    again, so its reason and time stay those of the first drain;
//  - the blast-radius guard: rasd does not drain while too many nodes were
//    drained by rasd already (cluster::CheckDrainGuard). Peers that read
//    the cluster at once all see room, so a drain the guard allows is
//    claimed first (cluster::SlurmClient::DrainWithClaim: a claim in the
//    node's Comment, drain_settle, and a drain only where the claims of all
//    peers, ordered alike on every node, leave room). A drain done is
//    confirmed after it too, should clocks or a Comment of someone else's
//    defeat the claim: drain_settle later the worker reads the cluster again and undoes its
//    drain where cluster::RankOwnDrain puts it past the limit (the same
//    order on every node: by the time Slurm recorded each drain, then the
//    name). A guarded drain is logged once, counted once ("guarded"), and
//    looked at again every guard_recheck while it stands, so it goes ahead
//    once the cluster has recovered; a drain undone is not tried again
//    within guard_window (one drain and undo per window at most), and then
//    only while the rasd drains standing, however old, are under the limit.
//    A node found drained by rasd already (a restart, a drain call that
//    timed out but took) is ranked too. With the guard on, a new drain
//    first waits the node's share of drain_spread, so that peers failing at
//    once mostly find each other's drains before theirs and hold back
//    without draining.
// Thread-safe.
class SchedulerLink {
 public:
  struct Options {
    std::string node;  // the scheduler's name for this host
    std::string scontrol = "/usr/bin/scontrol";
    std::string sinfo = "/usr/bin/sinfo";
    std::vector<std::string> environment;      // e.g. SLURM_CONF=...
    std::chrono::milliseconds timeout{10000};  // per call
    double max_drained_fraction = 0.5;         // 1: no guard
    std::chrono::seconds guard_window{300};    // 0: every drain by rasd counts
    std::chrono::milliseconds guard_recheck{30000};
    // How long after a drain it is ranked (cluster::kDrainSettle).
    std::chrono::milliseconds drain_settle = cluster::kDrainSettle;
    // Peers failing at once spread their first drain over this
    // (cluster::kDrainSpread; cluster::DrainSpreadDelay): 0, none.
    std::chrono::milliseconds drain_spread{0};
    // Wall time for the guard's window: the daemon's clock; null, the system's.
    std::shared_ptr<const common::Clock> clock;
  };
  explicit SchedulerLink(Options options);
  ~SchedulerLink();
  SchedulerLink(const SchedulerLink&) = delete;
  SchedulerLink& operator=(const SchedulerLink&) = delete;

  // DRAIN with Reason="rasd: <reason>".
  void Drain(const std::string& reason);
  // RESUME, if rasd drained it.
  void Resume();
  // Drained, or a drain is wanted (and may be guarded or failing).
  bool Drained() const;
  // What Slurm was last told by rasd: the node is drained by rasd now.
  bool DrainedByRasd() const;
  // The guard holds a drain back now: its sentence, else unset.
  std::optional<std::string> Guarded() const;
  // A drain done is being ranked among rasd's drains (it may be undone).
  bool Confirming() const;
  // Calls by result (ok, failed), requests that needed no call (skipped),
  // and drains the guard held back (guarded, once per held drain).
  std::map<std::string, std::uint64_t> Counts() const;
  const std::string& Node() const { return options_.node; }

 private:
  void Run();
  // One drain or resume, with the node's state looked at first. Called
  // without the lock. `guard` is set when the blast-radius guard held it.
  enum class Outcome { kDone, kAlreadyRasds, kSkipped, kGuarded, kFailed, kStopped };
  Outcome Carry(bool drain, const std::string& reason, std::chrono::seconds window,
                std::string* detail, std::optional<cluster::DrainGuardVerdict>* guard);
  // A drain the guard allows as the cluster stands: claimed first
  // (cluster::SlurmClient::DrainWithClaim), so that peers failing at once
  // agree on who drains before any does. Called without the lock.
  Outcome DrainWithClaim(const std::vector<cluster::SlurmNode>& nodes, const std::string& reason,
                         std::chrono::seconds window, std::string* detail,
                         std::optional<cluster::DrainGuardVerdict>* guard);
  // The guard's window now: none (every rasd drain standing counts) for a
  // node whose drain was undone by its rank, so that the nodes held back
  // by a mass event do not all drain once the kept drains age out of it.
  std::chrono::seconds GuardWindow() const;  // under the lock
  // After a drain: waits drain_settle, ranks it and undoes it past the
  // limit. True when it stands. Called with `lock` held; releases it while
  // asking Slurm.
  bool ConfirmDrain(std::unique_lock<std::mutex>& lock);
  bool RankDrain(std::unique_lock<std::mutex>& lock);  // ConfirmDrain's work

  Options options_;
  cluster::SlurmClient slurm_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool want_drained_ = false;
  std::string reason_;
  bool drained_ = false;  // the request carried out last (drain or resume)
  bool spread_ = false;   // the drain wanted now has waited its spread
  bool drained_by_rasd_ = false;  // Slurm shows the node drained by rasd
  std::optional<std::string> guarded_;
  // A drain undone by its rank is not tried again before this.
  std::optional<std::chrono::steady_clock::time_point> hold_until_;
  bool confirming_ = false;  // inside ConfirmDrain
  bool undone_ = false;      // a drain undone by its rank, until a drain stays or a resume is asked
  bool stop_ = false;
  std::map<std::string, std::uint64_t> counts_;
  std::thread worker_;
};

}  // namespace rasd::daemon
