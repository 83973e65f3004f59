#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rasd/ras/address.h"
#include "rasd/ras/severity.h"

namespace rasd::ras {

struct ScannedRecord;

// The pages of a coalesced event that the store lists; the rest are counted.
constexpr std::size_t kMaxStoredPages = 64;

// Errors on one page (its base address) within a storm-coalesced event.
struct PageErrors {
  std::uint64_t page = 0;
  std::uint64_t errors = 0;
  bool operator==(const PageErrors&) const = default;
};

// The errors one page has had since rasd first stored one for it (the
// page_errors table: one row per page, whatever the events' retention).
struct PageErrorsRecord {
  std::string scope;  // PageScope(): "dev3", a PCI function, "mc0" or "host"
  std::uint64_t page = 0;
  std::uint64_t errors = 0;
  std::chrono::system_clock::time_point first;
  std::chrono::system_clock::time_point last;
};

// How the fault rules (fault_rules.h) judged an event among those before
// it on the same device. Set by FaultRules::Judge; the policy and the store
// read the fields, never the text.
struct FaultContext {
  enum class Kind : std::uint8_t {
    kOwn,         // a fault of its own
    kEcho,        // printed because of an earlier fault of its device: part of it
    kSuperseded,  // an earlier code of its device says more: part of that fault
    kRepeat,      // the same code again within its storm window: counted, not a new fault
    kSettling,    // a link code while links train after a boot or a driver load: recorded
  };
  Kind kind = Kind::kOwn;
  std::string rule;  // the fault rule's name; empty for kOwn outside any storm window
  std::string why;   // one line for people: "echo of Xid 79 on device 2 0.4 s before"
  // Under a storm rule: when the window this event opened (kOwn) or
  // repeats in (kRepeat) began; the store's row of the window's first
  // event grows by the repeats.
  std::optional<std::chrono::system_clock::time_point> window_start;
  std::chrono::seconds window{0};  // the window's length, with window_start
  bool operator==(const FaultContext&) const = default;
};

// "own", "echo", "superseded", "repeat", "settling": the metric's label.
std::string_view FaultContextKindName(FaultContext::Kind kind);

// One hardware-error report after decoding, before any action. Sources fill
// it; the store, the exporters and the policy read it. A plain value.
struct RasEvent {
  std::chrono::system_clock::time_point time;
  // What `time` is: when the device failed (a driver's report, read as it
  // happens), or when a record was logged, which may be long before rasd
  // read it (a kernel log, a sysfs counter). Not stored.
  enum class TimeIs : std::uint8_t { kLogged, kFailure };
  TimeIs time_is = TimeIs::kLogged;
  std::string source;  // kmsg | edac_sysfs | infiniband_sysfs | driver | bert | pstore | tracefs
  std::string origin;  // edac | mce | ghes | aer | memory_failure | nvidia_xid | ... | sim
  Severity severity = Severity::kInfo;
  std::optional<int> device;  // runtime device index, for accelerator events
  std::optional<int> mc;      // memory controller
  // The memory module the record names (EDAC's DIMM label, or its
  // location where the label says none), for host memory errors.
  std::optional<std::string> dimm;
  std::optional<std::string> pci_bdf;
  // Where the error was; for an event coalesced over several pages, the
  // first record's.
  std::optional<Address> address;
  // A storm-coalesced event of more than one page: every page its records
  // named, each with its errors, in first-seen order (the counts add up to
  // `count`). Empty for an event of one page or none (`address` says it).
  std::vector<PageErrors> pages;
  // Pages beyond `pages` that a stored event no longer lists (the store
  // keeps the first kMaxStoredPages); their errors are `count` less the
  // listed pages' errors.
  std::uint64_t pages_not_listed = 0;
  std::optional<int> vendor_code;  // Xid number, Ascend code
  // The record's own recovery instruction in its vendor's numbering (Xid
  // 154: nvmlDeviceGpuRecoveryAction_t); the recovery table follows it. Not
  // stored.
  std::optional<int> vendor_action;
  // The process the source names as the one that met the error (an Xid's
  // pid=): kill-consumer's target where no device address names one. Not
  // stored.
  std::optional<std::int64_t> pid;
  std::uint64_t count = 1;         // errors this event stands for
  bool historical = false;         // from a previous boot (BERT, pstore)
  // Logged in this boot before rasd's first start in it: the kernel's ring
  // as rasd found it then (see KmsgSource). Acted on only where the state
  // it describes still holds (StillActsBeforeStart in policy.h).
  bool before_start = false;
  std::string summary;             // one line for people
  std::string raw;                 // the record as the source read it
  // The fault rules' judgement (FaultRules::Judge); not stored: its action
  // row (rule and reason) is.
  FaultContext context;
};

// The minute an event is coalesced in (truncated towards the epoch).
std::int64_t MinuteOf(const RasEvent& event);
std::int64_t MinuteOf(std::chrono::system_clock::time_point time);
// Whether the event is the first of a fault rule's storm window (its row
// takes the window's repeats).
bool OpensWindow(const RasEvent& event);
// Whether two events are of one component, as CoalesceStorm merges them:
// all but the time, the count, the texts and the address's value (the
// fault rules' judgement included).
bool SameComponent(const RasEvent& a, const RasEvent& b);

// Under a storm (a batch of more than `threshold` events) the events of one
// component within the same minute are merged into one with the summed
// count, so the store grows with the variety of errors, not their number;
// counts stay exact. The component is everything but the time, the count,
// the texts and the address's value: the source, origin, severity, device,
// controller, DIMM, PCI function, vendor code and action, whether there is
// an address at all, and the boot flags. The pages the merged records named
// are kept in `pages` with their errors, so that page thresholds still count
// each page. Smaller batches pass unchanged. Order: first occurrence.
std::vector<RasEvent> CoalesceStorm(std::vector<RasEvent> events, std::size_t threshold);

// Whose memory an event's pages are, as page thresholds and the store's
// page_errors key them: "dev<N>" for a runtime device, else its PCI
// function, else "mc<N>" for a memory controller, else "host".
std::string PageScope(const RasEvent& event);

// A scanned kernel-log record as an event of `source`. The overload for an
// rvalue moves the record's text into the event instead of copying it.
RasEvent EventFromRecord(const ScannedRecord& record, std::string source,
                         std::chrono::system_clock::time_point time);
RasEvent EventFromRecord(ScannedRecord&& record, std::string source,
                         std::chrono::system_clock::time_point time);

}  // namespace rasd::ras
