#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rasd/ras/ras_event.h"
#include "rasd/ras/severity.h"

namespace rasd::ras {

// What rasd may do about an event (docs/architecture.md, the taxonomy table).
enum class ActionKind : std::uint8_t {
  kRecord,           // store and count only
  kRetirePage,       // take the device page out of its pool for good
  kMarkAtRisk,       // the owner of a poisoned, not yet consumed page is told
  kKillConsumer,     // abort exactly the streams of the job owning the address
  kDegradeDevice,    // Degraded: serves on, watched
  kDrainDevice,      // Draining: no new work; admitted work finishes by a deadline
  kIsolateDevice,    // Isolated: no work at all, until an operator undrains it
  kDrainNode,        // tell the cluster scheduler
  kSoftOfflinePage,  // host page: migrate and offline (soft_offline_page)
  kHardOfflinePage,  // host page: offline now (hard_offline_page)
  kRunHook,          // run an operator's program with the event in its environment
};

// "record", "retire-page", "mark-at-risk", "kill-consumer", "degrade-device",
// "drain-device", "isolate-device", "drain-node", "soft-offline-page",
// "hard-offline-page", "run-hook": the config and wire names.
std::string_view ActionKindName(ActionKind kind);
std::optional<ActionKind> ParseActionKind(std::string_view name);

// What an event is about, for matching rules.
enum class ComponentKind : std::uint8_t {
  kHostMemory,    // a host physical address (EDAC, MCE/GHES with an address, memory-failure)
  kDeviceMemory,  // an accelerator and an address in its memory
  kDevice,        // an accelerator as a whole
  kPciDevice,     // a PCI function by BDF (AER), not an accelerator rasd runs
  kCpu,           // a machine check without an address
  kOther,
};
std::string_view ComponentKindName(ComponentKind kind);
std::optional<ComponentKind> ParseComponentKind(std::string_view name);
ComponentKind ComponentOf(const RasEvent& event);

// Counts errors in a sliding window: Add() says when the errors of the
// last `window` reach `limit` (N in W, exactly; N spread over much longer
// does not), and empties the window then, so an action is taken once and
// the count starts again. At most `limit` entries are kept: each event
// counts at least one error. Times are monotonic.
class WindowCounter {
 public:
  WindowCounter(std::uint64_t limit, std::chrono::nanoseconds window)
      : limit_(limit), window_(window) {}
  bool Add(std::uint64_t count, std::chrono::nanoseconds now);
  // Errors within the window ending at `now`.
  std::uint64_t Count(std::chrono::nanoseconds now) const;

 private:
  void Expire(std::chrono::nanoseconds now);
  std::uint64_t limit_;
  std::chrono::nanoseconds window_;
  // Oldest first; a vector, not a deque: a storm keeps one counter per
  // page, and an empty deque alone allocates half a kilobyte.
  std::vector<std::pair<std::chrono::nanoseconds, std::uint64_t>> entries_;
  std::uint64_t sum_ = 0;
};

struct Threshold {
  enum class Key : std::uint8_t { kPage, kDimm, kDevice };
  std::uint64_t count = 50;
  std::chrono::seconds window{std::chrono::hours(24)};
  Key key = Key::kPage;
  bool operator==(const Threshold&) const = default;
};

// One rule: every matcher that is set must match. The first matching rule
// decides. With a threshold, the actions are taken only when the rule's
// counter for the event's key (page, DIMM or device) reaches it; below it
// the event is recorded.
struct PolicyRule {
  std::string name;
  std::optional<std::string> origin;
  std::optional<Severity> severity;
  std::optional<ComponentKind> component;
  std::optional<int> vendor_code;
  std::optional<Threshold> threshold;
  // Signals that flap while the node comes up (links training, devices
  // enumerating): an event within this long of the node's boot is recorded
  // only, its actions withheld. 0: none.
  std::chrono::seconds boot_grace{0};
  std::vector<ActionKind> actions;
  std::vector<std::string> hook;  // argv of run-hook
  bool operator==(const PolicyRule&) const = default;
};

struct PolicyConfig {
  // Evaluated before the built-in rules, so a site can override any row.
  std::vector<PolicyRule> rules;
  // CE on one page of memory (host or device) before it is offlined or
  // retired; rasdaemon's default: 50 in 24 h.
  Threshold ce_page{50, std::chrono::hours(24), Threshold::Key::kPage};
  // Corrected errors on one device without an address before it is Degraded.
  Threshold ce_device{1000, std::chrono::hours(1), Threshold::Key::kDevice};
  // Page retirements on one device within `escalation_window`: this many
  // make it Degraded, and this many Isolated (and drained).
  std::uint64_t degrade_after_retirements = 8;
  std::uint64_t isolate_after_retirements = 64;
  std::chrono::seconds escalation_window{std::chrono::hours(24)};
  bool operator==(const PolicyConfig&) const = default;
};

// Records logged in this boot before rasd's first start in it
// (RasEvent::before_start: the kernel ring rasd found) describe a moment
// rasd did not see. An action decided for one is taken only where the state
// it acts on still holds now:
//  - record: always;
//  - retire-page, soft-offline-page, hard-offline-page: still acts (a page
//    that went bad is still bad; retiring or offlining it again is a no-op);
//  - drain-device, isolate-device: still acts for a FATAL record about a
//    device rasd runs (fallen off the bus, GSP or init failure: the device
//    stays gone until it is reset); record only for anything less (a UCE may
//    have been reset since, and one rasd did not see is no reason to stop
//    work that runs now);
//  - degrade-device, mark-at-risk, kill-consumer, drain-node, run-hook:
//    record only (a rate, an owner, a consumer, the scheduler's view of the
//    node and an operator's notice all belong to the moment that passed: the
//    job that owned the page then may not own it now, and draining a node
//    for an old host error would take it out for nothing).
enum class BeforeStartVerdict : std::uint8_t { kStillActs, kRecordOnly };
BeforeStartVerdict StillActsBeforeStart(ActionKind kind, const RasEvent& event);

// The built-in rules: docs/architecture.md's taxonomy table, row by row.
std::vector<PolicyRule> DefaultRules(const PolicyConfig& config);

struct Action {
  ActionKind kind = ActionKind::kRecord;
  std::optional<int> device;
  std::optional<std::uint64_t> address;  // the event's address, as decoded
  std::optional<std::int64_t> pid;       // the process the event names (Xid pid=)
  std::string rule;                      // the rule that decided
  std::string reason;                    // one line for people and the store
  std::vector<std::string> hook;
  // Decided but not to be taken: the event was logged before rasd's first
  // start in this boot and StillActsBeforeStart says the moment has passed.
  // The actuator stores it as skipped, so that `rasctl actions` shows what
  // a live record would have done.
  bool withheld = false;
  // Why, when it is not the before-start rule: a rule's boot grace.
  std::string withheld_why;
  bool operator==(const Action&) const = default;
};

// Decides what to do about each event: a pure function of the event, the
// counters it keeps, and the time it is given (monotonic), so decisions are
// tested with a simulated clock. Events from a previous boot (BERT,
// pstore) are only recorded: that hardware state is gone. For events logged
// before rasd's first start in this boot, the actions StillActsBeforeStart
// refuses come back `withheld`. Not thread-safe.
class PolicyEngine {
 public:
  explicit PolicyEngine(PolicyConfig config = {});

  std::vector<Action> Decide(const RasEvent& event, std::chrono::nanoseconds now);

  // New rules and thresholds (SIGHUP). Counters of rules that keep their
  // name and threshold carry on; the others start again.
  void Reconfigure(PolicyConfig config);
  // The errors pages had before this start (the store's page_errors): a
  // page's threshold counter starts from its errors, as of its last one,
  // the first time the page errs again. Rows whose last error is older
  // than the page threshold's window are ignored by the caller's query.
  // The errors are taken modulo the threshold, as the counter, which
  // empties when it acts, would hold them had they all been in its window;
  // errors spread wider than the window are counted as if within it (a
  // page retired a little early, never one kept past its threshold).
  void SetPageHistory(std::vector<PageErrorsRecord> pages);
  // When the node booted (wall time), for the rules' boot grace; unset: no
  // grace applies.
  void SetBootTime(std::chrono::system_clock::time_point boot) { boot_time_ = boot; }
  const PolicyConfig& Config() const { return config_; }
  const std::vector<PolicyRule>& Rules() const { return rules_; }

 private:
  // Decide() for a record of now.
  std::vector<Action> DecideLive(const RasEvent& event, std::chrono::nanoseconds now);
  const PolicyRule* Match(const RasEvent& event) const;
  // The counter a threshold rule keeps for the event's key: "rule|dev3";
  // for a page key, the key of the event's scope in page_buckets_.
  std::string BucketKey(const PolicyRule& rule, const RasEvent& event) const;
  // Adds `errors` to the rule's counter `key`: whether it reached the threshold.
  bool CountReaches(const PolicyRule& rule, const std::string& key, std::uint64_t errors,
                    std::chrono::nanoseconds now);
  // Page counters, by rule and scope, then by page: a storm counts each of
  // thousands of pages per batch, on a key that is a number.
  struct PageBuckets {
    std::string rule;
    Threshold threshold;
    std::string scope;  // PageScope()
    std::unordered_map<std::uint64_t, WindowCounter> pages;
  };
  static constexpr std::uint64_t kNoPage = ~std::uint64_t{0};  // an event without an address
  PageBuckets& PageBucketsOf(const PolicyRule& rule, const RasEvent& event);
  // Adds `errors` to `page`'s counter (a new one starts from its history).
  bool PageCountReaches(const PolicyRule& rule, PageBuckets& buckets, const RasEvent& event,
                        std::uint64_t page, std::uint64_t errors, std::chrono::nanoseconds now);
  // A page-threshold rule for an event of several pages: each page counts
  // on its own; a page that reaches the threshold gets the rule's actions
  // with its address, and one record action stands for those below it.
  void DecidePages(const PolicyRule& rule, const RasEvent& event, const std::string& what,
                   std::chrono::nanoseconds now, std::vector<Action>& actions);
  void Escalate(const RasEvent& event, std::chrono::nanoseconds now, std::vector<Action>& actions);

  PolicyConfig config_;
  std::optional<std::chrono::system_clock::time_point> boot_time_;
  std::vector<PolicyRule> rules_;  // the config's, then the built-in ones
  struct Bucket {
    Threshold threshold;
    WindowCounter counter;
  };
  std::unordered_map<std::string, Bucket> buckets_;            // by "rule|key"; not pages
  std::unordered_map<std::string, PageBuckets> page_buckets_;  // by "rule|scope"
  // SetPageHistory's rows not yet taken, by scope and page.
  std::map<std::pair<std::string, std::uint64_t>, PageErrorsRecord> page_history_;
  std::uint64_t decisions_ = 0;
  std::map<int, std::vector<std::chrono::nanoseconds>> retirements_;  // by device
};

}  // namespace rasd::ras
