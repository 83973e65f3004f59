#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"

namespace rasd::cluster {

// Every drain rasd (or `rasctl check --format nhc`) asks of Slurm carries
// this prefix in its reason, as NHC's carry "NHC:". It is how rasd tells its
// own drains from an administrator's: it resumes only the former, and the
// blast-radius guard counts only the former.
inline constexpr std::string_view kReasonPrefix = "rasd:";

// One node as Slurm reports it.
struct SlurmNode {
  std::string name;
  std::string state;    // base state, lower case: idle, allocated, mixed, down, ...
  bool drain = false;   // the DRAIN flag: draining or drained
  std::string reason;   // empty when none
  std::string comment;  // the node's Comment: where a drain is claimed (ParseClaim)
  // When the reason was set; unset when Slurm does not say.
  std::optional<std::chrono::system_clock::time_point> reason_changed_at;
};

// Drained (or draining) with a reason that rasd wrote.
bool DrainedByRasd(const SlurmNode& node);

// Out of service for someone else's reason: an administrator's drain, DOWN
// or FAIL, or Slurm's own ("Not responding"). Slurm clears a node's reason
// when it returns to service, so any reason not rasd's means the node is
// someone else's to return: rasd neither drains over it (which would
// replace the reason) nor resumes it.
bool HeldByOthers(const SlurmNode& node);

// The node named `name` in `nodes`, or null.
const SlurmNode* FindNode(const std::vector<SlurmNode>& nodes, std::string_view name);

// "rasd: <reason>" on one line, at most 200 bytes (Slurm keeps reasons
// short in its tables): what rasd writes as a drain reason.
std::string DrainReason(std::string_view reason);

// The nodes of `sinfo --json`, each once (sinfo lists a node in several
// partitions once per partition on older releases). Reads Slurm 22.05's
// shape (state a string, state_flags a list, reason_changed_at a number)
// and the later one (state a list of flags, numbers as {"set","number"}).
// Errors: kCorruptData when the text is not that JSON; kUnavailable when
// sinfo says it could not ask slurmctld (22.05 exits 0 then, with an empty
// node list and its errors beside it).
Result<std::vector<SlurmNode>> ParseSinfoJson(std::string_view text);

// How many nodes rasd may have drained at once: `max_fraction` of them,
// rounded down, and at least one (a node may always take itself out when
// no other rasd has). Pure.
std::size_t DrainLimit(std::size_t nodes, double max_fraction);

// The blast-radius guard: whether one more node may be drained by rasd
// while `nodes` stand as they do. Counts the nodes other than `self` that
// rasd drained (within `window` of `now` when the window is not zero: an
// old drain has been looked at by people already) and refuses once they
// are DrainLimit. Read before a drain, it cannot hold alone: peers that
// read at once all see room. RankOwnDrain, after the drain, settles that.
// Pure.
struct DrainGuardVerdict {
  bool allowed = true;
  std::size_t drained_by_rasd = 0;  // not counting `self`
  std::size_t nodes = 0;
  std::string why;  // a sentence for the log: the counts and the limit
};
DrainGuardVerdict CheckDrainGuard(const std::vector<SlurmNode>& nodes, std::string_view self,
                                  double max_fraction, std::chrono::seconds window,
                                  std::chrono::system_clock::time_point now);

// Whether this node's own drain stays, read after it (and after every
// peer's drain of the same second can be seen: Slurm records a reason's
// time in whole seconds). The drains by rasd within `window` (this one
// always counted; the window ends at this drain's time as Slurm recorded
// it, so that this node's own clock does not matter) are ordered by the
// time Slurm recorded, then by node name, an untimed drain last; the
// first DrainLimit stay and the rest undo theirs. Every peer reading the cluster orders the same
// drains the same way, and a drain among the first is never undone, so peers that drained at once
// agree on who stays without talking to each other. Pure.
struct DrainRank {
  bool keep = true;
  std::size_t rank = 0;    // this node's place, from 0
  std::size_t drains = 0;  // drains by rasd within the window, this one included
  std::size_t limit = 0;
  std::size_t nodes = 0;
  std::string why;  // a sentence for the log
};
DrainRank RankOwnDrain(const std::vector<SlurmNode>& nodes, std::string_view self,
                       double max_fraction, std::chrono::seconds window,
                       std::chrono::system_clock::time_point now);

// What rasd does at Slurm about its own node `self` when it wants it
// drained (`drain`) or back: drain only a node nobody else holds and only
// as the guard allows (a `max_fraction` of 1 or more: no guard); resume only
// a node rasd drained. The daemon's scheduler link and `rasctl check
// --format nhc` decide alike through this. Pure.
struct NodeActionDecision {
  enum class Kind {
    kDrain,           // drain it now
    kResume,          // resume it now: rasd drained it
    kAlreadyDrained,  // drained by rasd already: left as it is
    kHeldByOthers,    // out of service for someone else: left as it is
    kGuarded,         // the blast-radius guard holds the drain
    kNothing,         // in service and not drained by rasd: nothing to resume
    kUnknownNode,     // Slurm lists no such node
  };
  Kind kind = Kind::kNothing;
  std::string detail;  // a sentence about the node, for the log (empty for kDrain, kResume)
  std::optional<DrainGuardVerdict> guard;  // when the guard was asked
};
NodeActionDecision DecideNodeAction(const std::vector<SlurmNode>& nodes, std::string_view self,
                                    bool drain, double max_fraction, std::chrono::seconds window,
                                    std::chrono::system_clock::time_point now);

// How long after its drain returned a node reads the cluster again to rank
// its drain: past the second Slurm recorded it in, by real time, so that a
// peer's drain Slurm recorded in the same second is in the list.
inline constexpr std::chrono::milliseconds kDrainSettle{2000};

// How far apart peers that fail at once make their first drain call: each
// node waits its own share of this (DrainSpreadDelay) before reading the
// cluster, so that most see the drains before theirs and hold back without
// draining. The ranking after each drain still decides; the spread only
// keeps the nodes drained while they are ranked near the limit.
inline constexpr std::chrono::milliseconds kDrainSpread{4000};

// Node `node`'s share of `spread`: the same on every call, spread evenly
// over the names (FNV-1a of the name), so peers need not agree on anything.
std::chrono::milliseconds DrainSpreadDelay(std::string_view node, std::chrono::milliseconds spread);

// The claim before a drain. Each node that wants to drain writes a claim
// into its own node's Comment ("rasd-claim <unix ms> <tag>", the tag the
// writing process's own), waits kDrainSettle,
// reads every node and drains only when its claim ranks within the room
// the limit leaves beside rasd's drains standing; then it clears the claim.
// Peers that fail at once read the same claims and order them alike (the
// time in the claim, then the node name), so they agree on who drains
// before any of them does: no drain past the limit, and none undone.
//
// Why it holds: every claimant reads at least kDrainSettle after its own
// write returned, and ranks its own claim no earlier than kClaimWriteLimit
// before that return (a slow write is ranked later by its writer, while
// peers see the earlier time written: both err on the side of draining
// less). So a claim ranked before another was in Slurm by the time the
// other read, as long as the nodes' clocks agree to within kDrainSettle
// minus kClaimWriteLimit. Where they do not, the ranking after the drain
// (RankOwnDrain) still undoes a drain past the limit. A claimant that took
// longer than kClaimLifetime minus kClaimMargin from its claim to its drain
// (a paused process) may be counted stale by peers: it withdraws instead.
//
// Comment is free text for people: a node whose Comment holds someone
// else's words is not claimed over; it drains only while the drains
// standing and every live claim leave room, and its drain is ranked after.
// A claim is cleared only while Slurm still shows that exact claim, so a
// note written meanwhile stays.
inline constexpr std::string_view kClaimPrefix = "rasd-claim ";
// A claim older than this (or this far ahead of the reader's clock) is one
// whose node died while claiming: it counts for nobody.
inline constexpr std::chrono::seconds kClaimLifetime{30};
inline constexpr std::chrono::seconds kClaimMargin{10};
inline constexpr std::chrono::milliseconds kClaimWriteLimit{1000};
static_assert(kClaimWriteLimit < kDrainSettle);

// "rasd-claim <unix ms> <tag>" (no tag: "rasd-claim <unix ms>"). A tag is
// up to 32 of [A-Za-z0-9._-]; others are dropped.
std::string ClaimComment(std::chrono::system_clock::time_point at, std::string_view tag = {});
// The time in a claim; unset when `comment` is not one (empty, someone
// else's words, a damaged number or tag).
std::optional<std::chrono::system_clock::time_point> ParseClaim(std::string_view comment);
// This process's claim tag: its pid and a random part, fixed for its life.
const std::string& OwnClaimTag();

// Whether this node's claim `own_claim` (the exact Comment it wrote), read
// kDrainSettle after it was written, lets it drain. Claims count only from
// nodes not out of service already (a node drained by rasd counts as a
// drain standing instead, however its Comment reads) and within
// kClaimLifetime of `now`; drains standing count as CheckDrainGuard counts
// them. This node's claim is ranked at `own_rank_time` when later than the
// time written in it (a slow write). The node drains when the drains
// standing plus the claims ordered before its own are under DrainLimit. A
// Comment on `self` other than `own_claim` (another process's claim, a
// note) is not this node's claim. Pure.
struct ClaimRank {
  bool allowed = false;
  bool own_claim_seen = false;      // false: Slurm does not show this node's claim
  std::size_t rank = 0;             // among the live claims, from 0
  std::size_t claims = 0;           // live claims, this one included
  std::size_t drained_by_rasd = 0;  // drains standing, not counting `self`
  std::size_t limit = 0;
  std::size_t nodes = 0;
  std::string why;  // a sentence for the log
};
ClaimRank RankOwnClaim(const std::vector<SlurmNode>& nodes, std::string_view self,
                       std::string_view own_claim, double max_fraction, std::chrono::seconds window,
                       std::chrono::system_clock::time_point now,
                       std::chrono::system_clock::time_point own_rank_time = {});
// Drains standing (within the window, not `self`) plus every live claim of
// another node: what a node that cannot claim counts before it drains.
std::size_t DrainsAndClaimsOfOthers(const std::vector<SlurmNode>& nodes, std::string_view self,
                                    std::chrono::seconds window,
                                    std::chrono::system_clock::time_point now);

// What DrainWithClaim did.
struct ClaimedDrain {
  enum class Kind {
    kDrained,  // drained (claimed, or without a claim: see `claimed`)
    kGuarded,  // the claims and drains standing leave no room: not drained
    kChanged,  // meanwhile the node is no longer one to drain: `decision` says why
    kStopped,  // the wait was cut short: not drained, claim withdrawn
  };
  Kind kind = Kind::kStopped;
  bool claimed = false;  // the drain went through a claim
  std::string detail;    // a sentence for the log (the ranking, or why no claim)
  std::optional<ClaimRank> rank;
  NodeActionDecision decision;  // for kChanged
};

// Runs Slurm's client commands (argv, no shell) with their configuration
// from the environment given. Each call blocks up to the timeout. Stateless
// apart from its options: safe from any thread.
class SlurmClient {
 public:
  struct Options {
    std::string scontrol = "/usr/bin/scontrol";
    std::string sinfo = "/usr/bin/sinfo";
    std::vector<std::string> environment;  // e.g. SLURM_CONF=...; PATH is added
    std::chrono::milliseconds timeout{10000};
  };
  explicit SlurmClient(Options options) : options_(std::move(options)) {}

  // Every node of the cluster. Errors: kUnavailable (sinfo failed or could
  // not reach slurmctld, with its message), kCorruptData.
  Result<std::vector<SlurmNode>> Nodes() const;
  // DRAIN with DrainReason(reason).
  Status Drain(const std::string& node, std::string_view reason) const;
  Status Resume(const std::string& node) const;

  // After this node's drain and the settle wait (kDrainSettle): reads the
  // nodes and, where RankOwnDrain says the drain does not stay, resumes the
  // node (only while its drain is still rasd's). Errors: those of Nodes()
  // and Resume(); the drain then stands.
  Result<DrainRank> ConfirmOwnDrain(const std::string& node, double max_fraction,
                                    std::chrono::seconds window,
                                    std::chrono::system_clock::time_point now) const;

  // Claims the drain of `node` (as `nodes_before`, read just now, show
  // it), waits `settle` (at least kClaimWriteLimit) through `wait` (which
  // returns false when the caller no longer wants the drain, or stops),
  // then drains `node` with DrainReason(reason) if RankOwnClaim allows,
  // and withdraws the claim either way. `wall` gives the time written in
  // the claim and the reader's now; durations are measured on the steady
  // clock. A node whose Comment is someone else's is drained without a
  // claim, while DrainsAndClaimsOfOthers is under the limit. Errors: those
  // of Nodes() and the scontrol calls, and kUnavailable when Slurm does not
  // show the claim or the claim aged past kClaimLifetime minus kClaimMargin
  // before the drain; the claim is withdrawn and nothing drained.
  Result<ClaimedDrain> DrainWithClaim(
      const std::vector<SlurmNode>& nodes_before, const std::string& node, std::string_view reason,
      double max_fraction, std::chrono::seconds window,
      const std::function<std::chrono::system_clock::time_point()>& wall,
      const std::function<bool(std::chrono::milliseconds)>& wait,
      std::chrono::milliseconds settle = kDrainSettle) const;
  // Comment="", when Slurm still shows `claim` as the node's Comment (read
  // first): withdraws a claim and nothing else.
  Status ClearClaim(const std::string& node, std::string_view claim) const;

  // The environment that carries the caller's SLURM_CONF (if any).
  static std::vector<std::string> EnvironmentFromCaller();

 private:
  Status Update(const std::vector<std::string>& arguments) const;
  Options options_;
};

}  // namespace rasd::cluster
