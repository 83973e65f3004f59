#include "scheduler.h"

#include <algorithm>

#include <fmt/format.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

SchedulerLink::SchedulerLink(Options options)
    : options_(std::move(options)),
      slurm_(cluster::SlurmClient::Options{.scontrol = options_.scontrol,
                                           .sinfo = options_.sinfo,
                                           .environment = options_.environment,
                                           .timeout = options_.timeout}) {
  if (!options_.clock) options_.clock = std::make_shared<common::SystemClock>();
  // Every count is there from the start: a metric that appears only once
  // something happened cannot be alerted on with rate().
  for (const char* result : {"ok", "failed", "skipped", "guarded"}) counts_[result] = 0;
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

std::optional<std::string> SchedulerLink::Guarded() const {
  std::lock_guard lock(mutex_);
  return guarded_;
}

bool SchedulerLink::Confirming() const {
  std::lock_guard lock(mutex_);
  return confirming_;
}

std::map<std::string, std::uint64_t> SchedulerLink::Counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

bool SchedulerLink::DrainedByRasd() const {
  std::lock_guard lock(mutex_);
  return drained_by_rasd_;
}

std::chrono::seconds SchedulerLink::GuardWindow() const {
  return undone_ ? std::chrono::seconds(0) : options_.guard_window;
}

SchedulerLink::Outcome SchedulerLink::Carry(bool drain, const std::string& reason,
                                            std::chrono::seconds window, std::string* detail,
                                            std::optional<cluster::DrainGuardVerdict>* guard) {
  auto nodes = slurm_.Nodes();
  if (!nodes) {
    *detail = nodes.error().message;
    return Outcome::kFailed;
  }
  const auto now = options_.clock->Wall();
  if (const auto* own = cluster::FindNode(*nodes, options_.node)) {
    // A claim on this node that outlived its drain (rasd killed while
    // claiming) or is dated far off: cleared, so that the Comment people
    // read says nothing stale.
    if (const auto claimed_at = cluster::ParseClaim(own->comment)) {
      const auto age = now > *claimed_at ? now - *claimed_at : *claimed_at - now;
      if (age > cluster::kClaimLifetime) (void)slurm_.ClearClaim(options_.node, own->comment);
    }
  }
  using Kind = cluster::NodeActionDecision::Kind;
  const auto decision = cluster::DecideNodeAction(*nodes, options_.node, drain,
                                                  options_.max_drained_fraction, window, now);
  *guard = decision.guard;
  *detail = decision.detail;
  if (decision.kind == Kind::kDrain && options_.max_drained_fraction < 1.0) {
    return DrainWithClaim(*nodes, reason, window, detail, guard);
  }
  switch (decision.kind) {
    case Kind::kUnknownNode:
      *detail += " (scheduler.node)";
      return Outcome::kFailed;
    case Kind::kHeldByOthers:
    case Kind::kNothing:
      return Outcome::kSkipped;
    case Kind::kAlreadyDrained:
      return Outcome::kAlreadyRasds;
    case Kind::kGuarded:
      return Outcome::kGuarded;
    case Kind::kDrain:
      if (auto done = slurm_.Drain(options_.node, reason); !done) {
        *detail = done.error().message;
        return Outcome::kFailed;
      }
      return Outcome::kDone;
    case Kind::kResume:
      if (auto done = slurm_.Resume(options_.node); !done) {
        *detail = done.error().message;
        return Outcome::kFailed;
      }
      return Outcome::kDone;
  }
  return Outcome::kFailed;
}

SchedulerLink::Outcome SchedulerLink::DrainWithClaim(
    const std::vector<cluster::SlurmNode>& nodes, const std::string& reason,
    std::chrono::seconds window, std::string* detail,
    std::optional<cluster::DrainGuardVerdict>* guard) {
  auto claimed = slurm_.DrainWithClaim(
      nodes, options_.node, reason, options_.max_drained_fraction, window,
      [this] { return options_.clock->Wall(); },
      [this](std::chrono::milliseconds settle) {
        // Cut short by a stop, or by a resume asked meanwhile: the claim is
        // withdrawn and nothing drained.
        std::unique_lock lock(mutex_);
        return !changed_.wait_for(lock, settle, [this] { return stop_ || !want_drained_; });
      },
      options_.drain_settle);
  if (!claimed) {
    *detail = claimed.error().message;
    return Outcome::kFailed;
  }
  *detail = claimed->detail;
  using Kind = cluster::ClaimedDrain::Kind;
  switch (claimed->kind) {
    case Kind::kDrained:
      if (!claimed->claimed) {
        RASD_LOGGER_LOG(common::GetLogger("scheduler"), spdlog::level::warn, "slurm: {}",
                        claimed->detail);
      }
      return Outcome::kDone;
    case Kind::kGuarded:
      if (claimed->rank) {
        *guard = cluster::DrainGuardVerdict{.allowed = false,
                                            .drained_by_rasd = claimed->rank->drained_by_rasd,
                                            .nodes = claimed->rank->nodes,
                                            .why = claimed->rank->why};
      } else {
        *guard = claimed->decision.guard;
      }
      if (!*guard) *guard = cluster::DrainGuardVerdict{.allowed = false, .why = claimed->detail};
      return Outcome::kGuarded;
    case Kind::kChanged:
      switch (claimed->decision.kind) {
        case cluster::NodeActionDecision::Kind::kAlreadyDrained:
          return Outcome::kAlreadyRasds;
        case cluster::NodeActionDecision::Kind::kHeldByOthers:
        case cluster::NodeActionDecision::Kind::kNothing:
          return Outcome::kSkipped;
        default:
          return Outcome::kFailed;
      }
    case Kind::kStopped:
      return Outcome::kStopped;
  }
  return Outcome::kFailed;
}

bool SchedulerLink::ConfirmDrain(std::unique_lock<std::mutex>& lock) {
  if (options_.max_drained_fraction >= 1.0) return true;
  confirming_ = true;
  const bool stays = RankDrain(lock);
  confirming_ = false;
  return stays;
}

bool SchedulerLink::RankDrain(std::unique_lock<std::mutex>& lock) {
  auto logger = common::GetLogger("scheduler");
  std::chrono::milliseconds wait = options_.drain_settle;
  Result<cluster::DrainRank> rank = Fail(ErrorCode::kUnavailable, "not read");
  // A read that fails is tried again (three times, 2 s apart and more):
  // a drain left unranked is one the guard does not hold.
  for (int attempt = 0; attempt < 3; ++attempt, wait *= 2) {
    changed_.wait_for(lock, wait, [this] { return stop_; });
    if (stop_) return true;  // the drain stands; a restart ranks it again
    const std::chrono::seconds window = GuardWindow();
    lock.unlock();
    rank = slurm_.ConfirmOwnDrain(options_.node, options_.max_drained_fraction, window,
                                  options_.clock->Wall());
    lock.lock();
    if (rank) break;
  }
  if (!rank) {
    RASD_LOGGER_LOG(logger, spdlog::level::err,
                    "slurm: node {} drained, but its drain could not be ranked among rasd's "
                    "drains, or undone ({}): the drain stands",
                    options_.node, rank.error().message);
    return true;
  }
  if (rank->keep) {
    undone_ = false;
    return true;
  }
  ++counts_["guarded"];
  guarded_ = rank->why;
  undone_ = true;
  const auto hold =
      std::max<std::chrono::milliseconds>(options_.guard_window, options_.guard_recheck);
  hold_until_ = std::chrono::steady_clock::now() + hold;
  RASD_LOGGER_LOG(logger, spdlog::level::err,
                  "slurm: node {} resumed again: the blast-radius guard holds: {} "
                  "(scheduler.max_drained_fraction); not drained again for {:g} s, and then only "
                  "while rasd's drains standing are under the limit",
                  options_.node, rank->why, std::chrono::duration<double>(hold).count());
  return false;
}

void SchedulerLink::Run() {
  auto logger = common::GetLogger("scheduler");
  std::chrono::milliseconds backoff{250};
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (want_drained_ == drained_) {
      guarded_.reset();
      changed_.wait(lock);
      backoff = std::chrono::milliseconds(250);
      continue;
    }
    if (want_drained_ && hold_until_) {
      // Undone by its rank: one drain and undo per window at most.
      const auto now = std::chrono::steady_clock::now();
      if (now < *hold_until_) {
        changed_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(
                                    *hold_until_ - now, options_.guard_recheck));
        continue;
      }
      hold_until_.reset();
    }
    if (!want_drained_) spread_ = false;
    if (want_drained_ && !drained_ && !spread_ && options_.max_drained_fraction < 1.0) {
      // Once per drain wanted: the node's own share of the spread.
      spread_ = true;
      changed_.wait_for(lock, cluster::DrainSpreadDelay(options_.node, options_.drain_spread),
                        [this] { return stop_; });
      continue;
    }
    const bool drain = want_drained_;
    const std::string reason = reason_;
    const std::chrono::seconds window = GuardWindow();
    if (!drain) undone_ = false;
    lock.unlock();
    std::string detail;
    std::optional<cluster::DrainGuardVerdict> guard;
    const Outcome outcome = Carry(drain, reason, window, &detail, &guard);
    lock.lock();
    switch (outcome) {
      case Outcome::kGuarded:
        if (!guarded_) {
          ++counts_["guarded"];
          RASD_LOGGER_LOG(logger, spdlog::level::err,
                          "slurm: not draining node {}: the blast-radius guard holds: {} "
                          "(scheduler.max_drained_fraction); looking again every {:g} s; wanted: {}",
                          options_.node, guard->why,
                          std::chrono::duration<double>(options_.guard_recheck).count(),
                          cluster::DrainReason(reason));
        }
        guarded_ = guard->why;
        changed_.wait_for(lock, options_.guard_recheck);
        continue;
      case Outcome::kAlreadyRasds:
      case Outcome::kSkipped:
        ++counts_["skipped"];
        RASD_LOGGER_LOG(logger, spdlog::level::warn, "slurm: {}", detail);
        guarded_.reset();
        drained_ = drain;
        // A node found drained by rasd (nhc's, or rasd's before a restart)
        // is rasd's to resume; someone else's never is.
        drained_by_rasd_ = outcome == Outcome::kAlreadyRasds;
        backoff = std::chrono::milliseconds(250);
        if (drain && outcome == Outcome::kAlreadyRasds) {
          // Its drain may never have been ranked (a restart; a drain call
          // that timed out but took): it is now.
          if (!ConfirmDrain(lock)) {
            drained_ = false;
            drained_by_rasd_ = false;
          }
        }
        continue;
      case Outcome::kDone:
        if (drain && guarded_) {
          RASD_LOGGER_LOG(logger, spdlog::level::warn,
                          "slurm: the blast-radius guard lets the drain of {} go ahead now: {}",
                          options_.node, guard ? guard->why : "");
        }
        guarded_.reset();
        drained_ = drain;
        drained_by_rasd_ = drain;
        ++counts_["ok"];
        RASD_LOGGER_LOG(logger, spdlog::level::warn, "slurm: node {} {}{}", options_.node,
                        drain ? "drained: " : "resumed",
                        drain ? cluster::DrainReason(reason) : "");
        backoff = std::chrono::milliseconds(250);
        if (drain) {
          if (!ConfirmDrain(lock)) {
            drained_ = false;
            drained_by_rasd_ = false;
          }
        }
        continue;
      case Outcome::kStopped:
        continue;
      case Outcome::kFailed:
        break;
    }
    ++counts_["failed"];
    RASD_LOGGER_LOG(logger, spdlog::level::err, "slurm: {} of node {} failed: {}; retrying in {} ms",
                    drain ? "drain" : "resume", options_.node, detail, backoff.count());
    changed_.wait_for(lock, backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
  }
}

}  // namespace rasd::daemon
