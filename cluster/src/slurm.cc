#include "rasd/cluster/slurm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "rasd/common/default_paths.h"
#include "rasd/common/subprocess.h"

namespace rasd::cluster {
namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// A number as 22.05 writes it (42) or as later releases do
// ({"set": true, "infinite": false, "number": 42}); unset otherwise.
std::optional<std::int64_t> SlurmNumber(const nlohmann::json& value) {
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_object() && value.value("set", true) && !value.value("infinite", false) &&
      value.contains("number") && value["number"].is_number_integer()) {
    return value["number"].get<std::int64_t>();
  }
  return std::nullopt;
}

// A program's complaint on one line: its lines joined with "; ".
std::string OneLineMessage(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::string line;
  for (const char c : text) {
    if (c == '\n') {
      line += "; ";
    } else {
      line += c;
    }
  }
  return line;
}

// The states Slurm lists as flags beside the base state.
bool IsBaseState(const std::string& state) {
  static const std::set<std::string> kBase = {"idle",      "allocated", "mixed",  "down",
                                              "error",     "future",    "unknown", "completing"};
  return kBase.contains(state);
}

}  // namespace

bool DrainedByRasd(const SlurmNode& node) {
  return node.drain && node.reason.starts_with(kReasonPrefix);
}

bool HeldByOthers(const SlurmNode& node) {
  return !node.reason.empty() && !node.reason.starts_with(kReasonPrefix);
}

const SlurmNode* FindNode(const std::vector<SlurmNode>& nodes, std::string_view name) {
  for (const auto& node : nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

std::string DrainReason(std::string_view reason) {
  std::string text = std::string(kReasonPrefix) + " ";
  for (const char c : reason) {
    text += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  }
  if (text.size() > 200) text.resize(200);
  return text;
}

Result<std::vector<SlurmNode>> ParseSinfoJson(std::string_view text) {
  nlohmann::json document;
  // sinfo's JSON is a few levels deep; output nested far deeper is not
  // sinfo's, and building it would cost memory for nothing.
  constexpr int kMaxDepth = 32;
  bool too_deep = false;
  try {
    document = nlohmann::json::parse(
        text, [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxDepth) too_deep = true;
          return !too_deep;
        });
  } catch (const nlohmann::json::exception& error) {
    return Fail(ErrorCode::kCorruptData, fmt::format("sinfo --json: not JSON: {}", error.what()));
  }
  if (too_deep) {
    return Fail(ErrorCode::kCorruptData,
                fmt::format("sinfo --json: nested deeper than {} levels: not sinfo's output",
                            kMaxDepth));
  }
  // sinfo answers with errors and no nodes (and exits 0) when slurmctld is
  // down: a list it could not fetch is no list.
  if (document.is_object() && document.contains("errors") && document["errors"].is_array() &&
      !document["errors"].empty()) {
    std::string errors;
    for (const auto& error : document["errors"]) {
      if (error.is_object() && error.contains("error") && error["error"].is_string()) {
        errors += (errors.empty() ? "" : "; ") + error["error"].get<std::string>();
      } else {
        errors += (errors.empty() ? "" : "; ") + error.dump();
      }
    }
    return Fail(ErrorCode::kUnavailable, "sinfo --json reports errors: " + errors);
  }
  if (!document.is_object() || !document.contains("nodes") || !document["nodes"].is_array()) {
    return Fail(ErrorCode::kCorruptData, "sinfo --json: no node list");
  }
  std::vector<SlurmNode> nodes;
  std::set<std::string> seen;
  for (const auto& entry : document["nodes"]) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) continue;
    SlurmNode node;
    node.name = entry["name"].get<std::string>();
    if (!seen.insert(node.name).second) continue;
    std::vector<std::string> flags;
    if (entry.contains("state") && entry["state"].is_string()) {
      node.state = Lower(entry["state"].get<std::string>());
    } else if (entry.contains("state") && entry["state"].is_array()) {
      for (const auto& part : entry["state"]) {
        if (!part.is_string()) continue;
        const std::string name = Lower(part.get<std::string>());
        if (node.state.empty() && IsBaseState(name)) {
          node.state = name;
        } else {
          flags.push_back(name);
        }
      }
    }
    if (entry.contains("state_flags") && entry["state_flags"].is_array()) {
      for (const auto& part : entry["state_flags"])
        if (part.is_string()) flags.push_back(Lower(part.get<std::string>()));
    }
    node.drain = std::find(flags.begin(), flags.end(), "drain") != flags.end();
    if (entry.contains("reason") && entry["reason"].is_string())
      node.reason = entry["reason"].get<std::string>();
    if (entry.contains("comment") && entry["comment"].is_string())
      node.comment = entry["comment"].get<std::string>();
    if (entry.contains("reason_changed_at")) {
      if (const auto seconds = SlurmNumber(entry["reason_changed_at"]); seconds && *seconds > 0) {
        node.reason_changed_at =
            std::chrono::system_clock::time_point(std::chrono::seconds(*seconds));
      }
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

std::size_t DrainLimit(std::size_t nodes, double max_fraction) {
  const double limit = std::floor(max_fraction * static_cast<double>(nodes));
  return std::max<std::size_t>(1, limit <= 0 ? 0 : static_cast<std::size_t>(limit));
}

namespace {

// Drained by rasd, and within the window (an untimed drain always is).
bool CountsAgainstTheGuard(const SlurmNode& node, std::chrono::seconds window,
                           std::chrono::system_clock::time_point now) {
  if (!DrainedByRasd(node)) return false;
  // A drain whose time Slurm does not give counts: the guard errs on the
  // side of draining less.
  return window.count() == 0 || !node.reason_changed_at || now - *node.reason_changed_at <= window;
}

std::string Within(std::chrono::seconds window) {
  return window.count() > 0 ? fmt::format(" within the last {} s", window.count()) : "";
}

}  // namespace

DrainGuardVerdict CheckDrainGuard(const std::vector<SlurmNode>& nodes, std::string_view self,
                                  double max_fraction, std::chrono::seconds window,
                                  std::chrono::system_clock::time_point now) {
  DrainGuardVerdict verdict;
  verdict.nodes = nodes.size();
  for (const auto& node : nodes) {
    if (node.name != self && CountsAgainstTheGuard(node, window, now)) ++verdict.drained_by_rasd;
  }
  const double fraction = verdict.nodes == 0 ? 0.0
                                             : static_cast<double>(verdict.drained_by_rasd) /
                                                   static_cast<double>(verdict.nodes);
  verdict.allowed = verdict.drained_by_rasd < DrainLimit(verdict.nodes, max_fraction);
  verdict.why = fmt::format("{} of {} node(s) drained by rasd{} ({:.0f}%; the limit is {:.0f}%)",
                            verdict.drained_by_rasd, verdict.nodes, Within(window), fraction * 100,
                            max_fraction * 100);
  return verdict;
}

std::chrono::milliseconds DrainSpreadDelay(std::string_view node,
                                           std::chrono::milliseconds spread) {
  if (spread.count() <= 0) return std::chrono::milliseconds(0);
  std::uint64_t hash = 14695981039346656037ULL;
  for (const unsigned char c : node) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(hash % static_cast<std::uint64_t>(spread.count())));
}

DrainRank RankOwnDrain(const std::vector<SlurmNode>& nodes, std::string_view self,
                       double max_fraction, std::chrono::seconds window,
                       std::chrono::system_clock::time_point now) {
  const SlurmNode* own = FindNode(nodes, self);
  DrainRank rank;
  rank.nodes = nodes.size();
  rank.limit = DrainLimit(nodes.size(), max_fraction);
  if (own == nullptr || !DrainedByRasd(*own)) {
    // Not drained by rasd (any more): nothing of this node's to undo.
    rank.why = fmt::format("node {} is not drained by rasd", self);
    return rank;
  }
  // The window on Slurm's clock where it gives one (this drain's time), so
  // that a node whose own clock is off still counts its peers.
  if (own->reason_changed_at) now = *own->reason_changed_at;
  using Key = std::tuple<bool, std::chrono::system_clock::time_point, std::string_view>;
  std::vector<Key> drains;  // (untimed, when, name): an untimed drain last
  for (const auto& node : nodes) {
    if (node.name != self && !CountsAgainstTheGuard(node, window, now)) continue;
    drains.emplace_back(!node.reason_changed_at.has_value(),
                        node.reason_changed_at.value_or(std::chrono::system_clock::time_point{}),
                        node.name);
  }
  std::sort(drains.begin(), drains.end());
  rank.drains = drains.size();
  const auto mine = std::find_if(drains.begin(), drains.end(),
                                 [&](const Key& key) { return std::get<2>(key) == self; });
  rank.rank = static_cast<std::size_t>(mine - drains.begin());
  rank.keep = rank.rank < rank.limit;
  rank.why = fmt::format(
      "{} of {} node(s) drained by rasd{}, the limit is {} ({:.0f}%); by the time Slurm recorded "
      "each, this node's drain is number {}: {}",
      rank.drains, rank.nodes, Within(window), rank.limit, max_fraction * 100, rank.rank + 1,
      rank.keep ? "it stays" : "undone");
  return rank;
}

namespace {

bool IsTagCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

constexpr std::size_t kMaxTag = 32;

// A live claim of `node`'s (not out of service already, within the
// lifetime), or unset.
std::optional<std::chrono::system_clock::time_point> LiveClaim(
    const SlurmNode& node, std::chrono::system_clock::time_point now) {
  if (node.drain || HeldByOthers(node)) return std::nullopt;
  const auto at = ParseClaim(node.comment);
  if (!at) return std::nullopt;
  const auto age = now > *at ? now - *at : *at - now;
  if (age > kClaimLifetime) return std::nullopt;
  return at;
}

}  // namespace

std::string ClaimComment(std::chrono::system_clock::time_point at, std::string_view tag) {
  std::string clean;
  for (const char c : tag) {
    if (IsTagCharacter(c) && clean.size() < kMaxTag) clean += c;
  }
  return fmt::format(
      "{}{}{}{}", kClaimPrefix,
      std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count(),
      clean.empty() ? "" : " ", clean);
}

std::optional<std::chrono::system_clock::time_point> ParseClaim(std::string_view comment) {
  if (!comment.starts_with(kClaimPrefix)) return std::nullopt;
  std::string_view digits = comment.substr(kClaimPrefix.size());
  if (const auto space = digits.find(' '); space != std::string_view::npos) {
    const std::string_view tag = digits.substr(space + 1);
    if (tag.empty() || tag.size() > kMaxTag ||
        !std::all_of(tag.begin(), tag.end(), IsTagCharacter)) {
      return std::nullopt;
    }
    digits = digits.substr(0, space);
  }
  // Unix milliseconds: 13 digits until the year 2286; more is not a claim.
  if (digits.empty() || digits.size() > 15) return std::nullopt;
  std::int64_t ms = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    ms = ms * 10 + (c - '0');
  }
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

const std::string& OwnClaimTag() {
  static const std::string tag = [] {
    std::random_device random;
    return fmt::format("{}-{:08x}", ::getpid(), random());
  }();
  return tag;
}

ClaimRank RankOwnClaim(const std::vector<SlurmNode>& nodes, std::string_view self,
                       std::string_view own_claim, double max_fraction, std::chrono::seconds window,
                       std::chrono::system_clock::time_point now,
                       std::chrono::system_clock::time_point own_rank_time) {
  ClaimRank rank;
  rank.nodes = nodes.size();
  rank.limit = DrainLimit(nodes.size(), max_fraction);
  using Key = std::pair<std::chrono::system_clock::time_point, std::string_view>;
  std::vector<Key> claims;
  for (const auto& node : nodes) {
    if (node.name != self && CountsAgainstTheGuard(node, window, now)) {
      ++rank.drained_by_rasd;
      continue;
    }
    // A node out of service already (drained by anyone, down) takes no
    // room by its claim: it is counted as a drain, or is someone else's.
    auto at = LiveClaim(node, now);
    if (!at) continue;
    if (node.name == self) {
      if (node.comment != own_claim) continue;  // another process's claim, or a note
      at = std::max(*at, own_rank_time);
    }
    claims.emplace_back(*at, node.name);
  }
  std::sort(claims.begin(), claims.end());
  rank.claims = claims.size();
  const auto mine = std::find_if(claims.begin(), claims.end(),
                                 [&](const Key& key) { return key.second == self; });
  rank.own_claim_seen = mine != claims.end();
  if (!rank.own_claim_seen) {
    rank.why = fmt::format("Slurm does not show node {}'s claim ('{}')", self, own_claim);
    return rank;
  }
  rank.rank = static_cast<std::size_t>(mine - claims.begin());
  rank.allowed = rank.drained_by_rasd + rank.rank < rank.limit;
  rank.why = fmt::format(
      "{} of {} node(s) drained by rasd{} and {} claim(s) to drain, the limit is {} ({:.0f}%); "
      "this node's claim is number {}: {}",
      rank.drained_by_rasd, rank.nodes, Within(window), rank.claims, rank.limit, max_fraction * 100,
      rank.rank + 1, rank.allowed ? "it drains" : "it holds back");
  return rank;
}

std::size_t DrainsAndClaimsOfOthers(const std::vector<SlurmNode>& nodes, std::string_view self,
                                    std::chrono::seconds window,
                                    std::chrono::system_clock::time_point now) {
  std::size_t taken = 0;
  for (const auto& node : nodes) {
    if (node.name == self) continue;
    if (CountsAgainstTheGuard(node, window, now) || LiveClaim(node, now)) ++taken;
  }
  return taken;
}

Result<ClaimedDrain> SlurmClient::DrainWithClaim(
    const std::vector<SlurmNode>& nodes_before, const std::string& node, std::string_view reason,
    double max_fraction, std::chrono::seconds window,
    const std::function<std::chrono::system_clock::time_point()>& wall,
    const std::function<bool(std::chrono::milliseconds)>& wait,
    std::chrono::milliseconds settle) const {
  ClaimedDrain outcome;
  const SlurmNode* own = FindNode(nodes_before, node);
  if (own == nullptr)
    return Fail(ErrorCode::kNotFound, fmt::format("Slurm lists no node '{}'", node));
  if (!own->comment.empty() && !ParseClaim(own->comment)) {
    // Someone's note on the node: not overwritten by a claim. Without a
    // claim of its own the node counts every peer's claim as taken room.
    const std::size_t taken = DrainsAndClaimsOfOthers(nodes_before, node, window, wall());
    const std::size_t limit = DrainLimit(nodes_before.size(), max_fraction);
    if (taken >= limit) {
      outcome.kind = ClaimedDrain::Kind::kGuarded;
      outcome.detail = fmt::format(
          "{} of {} node(s) drained by rasd{} or claiming a drain, the limit is {} ({:.0f}%); "
          "node {} cannot claim (its Comment is someone else's): it holds back",
          taken, nodes_before.size(), Within(window), limit, max_fraction * 100, node);
      return outcome;
    }
    if (auto drained = Drain(node, reason); !drained) return Fail(drained.error());
    outcome.kind = ClaimedDrain::Kind::kDrained;
    outcome.detail = fmt::format(
        "node {} drained without a claim: its Comment is someone else's ('{}'); its drain is "
        "ranked after it instead",
        node, own->comment);
    return outcome;
  }
  settle = std::max<std::chrono::milliseconds>(settle, kClaimWriteLimit);
  const auto claimed_at = wall();
  const std::string claim = ClaimComment(claimed_at, OwnClaimTag());
  const auto write_started = std::chrono::steady_clock::now();
  // Withdraws the claim while Slurm still shows it; a failure leaves it to
  // expire (kClaimLifetime).
  const auto withdraw = [&] { (void)ClearClaim(node, claim); };
  if (auto written = Update({"NodeName=" + node, "Comment=" + claim}); !written) {
    withdraw();  // the write may have taken although scontrol said not
    return Fail(written.error());
  }
  // A slow write is ranked by this node as if made kClaimWriteLimit before
  // it returned: later than peers see it, so both count it conservatively.
  const auto write_took = std::chrono::steady_clock::now() - write_started;
  const auto own_rank_time =
      claimed_at + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                       std::max<std::chrono::steady_clock::duration>(
                           write_took - kClaimWriteLimit, std::chrono::steady_clock::duration{}));
  if (!wait(settle)) {
    withdraw();
    outcome.kind = ClaimedDrain::Kind::kStopped;
    return outcome;
  }
  auto nodes = Nodes();
  if (!nodes) {
    withdraw();
    return Fail(nodes.error());
  }
  const auto now = wall();
  outcome.decision = DecideNodeAction(*nodes, node, true, max_fraction, window, now);
  if (outcome.decision.kind != NodeActionDecision::Kind::kDrain) {
    withdraw();
    outcome.kind = outcome.decision.kind == NodeActionDecision::Kind::kGuarded
                       ? ClaimedDrain::Kind::kGuarded
                       : ClaimedDrain::Kind::kChanged;
    outcome.detail = outcome.decision.detail;
    return outcome;
  }
  const ClaimRank rank =
      RankOwnClaim(*nodes, node, claim, max_fraction, window, now, own_rank_time);
  outcome.rank = rank;
  outcome.detail = rank.why;
  if (!rank.own_claim_seen) {
    withdraw();
    return Fail(ErrorCode::kUnavailable,
                fmt::format("{} after {} ms: not drained", rank.why, settle.count()));
  }
  if (!rank.allowed) {
    withdraw();
    outcome.kind = ClaimedDrain::Kind::kGuarded;
    return outcome;
  }
  // Peers count a claim older than its lifetime as stale: one this old may
  // have been left out of their reads.
  if (std::chrono::steady_clock::now() - write_started > kClaimLifetime - kClaimMargin) {
    withdraw();
    return Fail(ErrorCode::kUnavailable,
                fmt::format("the claim to drain node {} is too old to drain on (over {} s since "
                            "it was written): withdrawn, to be claimed again",
                            node, (kClaimLifetime - kClaimMargin).count()));
  }
  // The drain first, then the claim cleared: a peer reading in between
  // counts this node once, as a drain.
  auto drained = Drain(node, reason);
  withdraw();
  if (!drained) return Fail(drained.error());
  outcome.kind = ClaimedDrain::Kind::kDrained;
  outcome.claimed = true;
  return outcome;
}

Status SlurmClient::ClearClaim(const std::string& node, std::string_view claim) const {
  auto nodes = Nodes();
  if (!nodes) return Fail(nodes.error());
  const SlurmNode* own = FindNode(*nodes, node);
  if (own == nullptr || own->comment != claim) return {};  // not ours (any more): left as it is
  return Update({"NodeName=" + node, "Comment="});
}

Result<DrainRank> SlurmClient::ConfirmOwnDrain(const std::string& node, double max_fraction,
                                               std::chrono::seconds window,
                                               std::chrono::system_clock::time_point now) const {
  auto nodes = Nodes();
  if (!nodes) return Fail(nodes.error());
  DrainRank rank = RankOwnDrain(*nodes, node, max_fraction, window, now);
  if (rank.keep) return rank;
  // Read again just before the resume: an operator's drain set meanwhile
  // (another reason) is never cleared. The window between this read and
  // the resume stays.
  const SlurmNode* before = FindNode(*nodes, node);
  auto again = Nodes();
  if (!again) return Fail(again.error());
  const SlurmNode* now_node = FindNode(*again, node);
  if (now_node == nullptr || !DrainedByRasd(*now_node) || now_node->reason != before->reason ||
      now_node->reason_changed_at != before->reason_changed_at) {
    rank.keep = true;
    rank.why = fmt::format("node {} changed while its drain was ranked (now '{}'): left as it is",
                           node, now_node == nullptr ? "not listed" : now_node->reason);
    return rank;
  }
  if (auto resumed = Resume(node); !resumed) return Fail(resumed.error());
  return rank;
}

std::vector<std::string> SlurmClient::EnvironmentFromCaller() {
  std::vector<std::string> environment;
  if (auto conf = common::GetEnv("SLURM_CONF")) environment.push_back("SLURM_CONF=" + *conf);
  return environment;
}

Result<std::vector<SlurmNode>> SlurmClient::Nodes() const {
  std::vector<std::string> environment = options_.environment;
  environment.push_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
  // A node's JSON is 1.5 KiB (22.05, measured): 32 MiB is room for 20,000
  // nodes.
  const auto result = common::RunProgram(
      {options_.sinfo, "--json"}, environment,
      {.timeout = options_.timeout, .output_limit = 32u << 20, .separate_errors = true});
  if (result.outcome != common::ProgramOutcome::kOk) {
    const std::string message = OneLineMessage(result.errors.empty() ? result.output : result.errors);
    return Fail(ErrorCode::kUnavailable, fmt::format("{} --json: {}{}", options_.sinfo,
                                                     result.detail,
                                                     message.empty() ? "" : ": " + message));
  }
  return ParseSinfoJson(result.output);
}

Status SlurmClient::Update(const std::vector<std::string>& arguments) const {
  std::vector<std::string> argv = {options_.scontrol, "update"};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  std::vector<std::string> environment = options_.environment;
  environment.push_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
  const auto result = common::RunProgram(argv, environment, options_.timeout);
  if (result.outcome == common::ProgramOutcome::kOk) return {};
  const std::string message = OneLineMessage(result.output);
  return Fail(ErrorCode::kUnavailable,
              fmt::format("scontrol update {}: {}{}", fmt::join(arguments, " "), result.detail,
                          message.empty() ? "" : ": " + message));
}

Status SlurmClient::Drain(const std::string& node, std::string_view reason) const {
  return Update({"NodeName=" + node, "State=DRAIN", "Reason=" + DrainReason(reason)});
}

Status SlurmClient::Resume(const std::string& node) const {
  return Update({"NodeName=" + node, "State=RESUME"});
}

NodeActionDecision DecideNodeAction(const std::vector<SlurmNode>& nodes, std::string_view self,
                                    bool drain, double max_fraction, std::chrono::seconds window,
                                    std::chrono::system_clock::time_point now) {
  using Kind = NodeActionDecision::Kind;
  const SlurmNode* node = FindNode(nodes, self);
  if (node == nullptr) return {Kind::kUnknownNode, fmt::format("Slurm lists no node '{}'", self)};
  if (drain && DrainedByRasd(*node)) {
    return {Kind::kAlreadyDrained,
            fmt::format("node {} is drained by rasd already: {}", self, node->reason)};
  }
  if (HeldByOthers(*node)) {
    return {Kind::kHeldByOthers,
            fmt::format("node {} is out of service for someone else ({}, reason '{}'): {}", self,
                        node->drain ? "drained" : node->state, node->reason,
                        drain ? "left as it is" : "not resumed")};
  }
  if (!drain) {
    if (!DrainedByRasd(*node)) {
      return {Kind::kNothing, fmt::format("node {} is not drained by rasd (now {}): nothing to "
                                          "resume",
                                          self, node->state)};
    }
    return {Kind::kResume, ""};
  }
  if (max_fraction < 1.0) {
    auto guard = CheckDrainGuard(nodes, self, max_fraction, window, now);
    if (!guard.allowed) return {Kind::kGuarded, guard.why, guard};
    return {Kind::kDrain, "", guard};
  }
  return {Kind::kDrain, ""};
}

}  // namespace rasd::cluster
