#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "rasd/ras/ras_event.h"
#include "rasd/ras/severity.h"

namespace rasd::ras {

// What a row of the fault rules does with a code that follows another on
// the same device (docs/architecture.md, "Fault rules").
enum class FaultRuleKind : std::uint8_t {
  // `codes` within `window` after another fault of the device (of
  // `after_codes`, or of `after_classes`; neither: any other code) are
  // printed because of it: recorded as part of it, no action of their own.
  kEcho,
  // `codes` within `window` after one of `after_codes` on the device are
  // what that code already says (the calls to a GPU that fell off the bus
  // time out): recorded as part of it, no action of their own.
  kSupersede,
  // The same code (of `codes`; none listed: any) on the device again within
  // `window` of the first, with the same recovery action (Xid 154: a new
  // verdict is news), naming the same process (or none) and the same page
  // (or none: a page's retirement keeps its address), both logged
  // before rasd started or both after: one stored event per window,
  // counting every repeat exactly; the first acts, the repeats are counted
  // by threshold rules and act only through them. A contained error (SRAR)
  // ends its consumer each time: never folded. A device returned to
  // service (ForgetDevice) starts afresh.
  kStorm,
  // `codes` within `window` after the node booted or the origin's driver
  // was loaded (NVIDIA's "NVRM: loading" banner, origin nvidia_driver) are
  // links training: recorded, with the actions their rule would take
  // withheld. The polled link states wait out the same window
  // (policy.link_settle_s, LinkHealth).
  kSettle,
};
// "echo", "supersede", "storm", "settle"
std::string_view FaultRuleKindName(FaultRuleKind kind);
std::optional<FaultRuleKind> ParseFaultRuleKind(std::string_view name);

// One row: data, like the code tables. A site's row with a built-in row's
// name replaces it; `enabled: false` removes it.
struct FaultRule {
  std::string name;
  FaultRuleKind kind = FaultRuleKind::kEcho;
  bool enabled = true;
  std::string origin = "nvidia_xid";  // the code space: the events' origin
  std::vector<int> codes;
  std::vector<int> after_codes;
  std::vector<Severity> after_classes;
  std::chrono::seconds window{30};
  bool operator==(const FaultRule&) const = default;
};

// The built-in rows, each from the vendor's published guidance:
//  - "echo-of-another-xid": Xid 43 and 45 within 30 s of another Xid of the
//    GPU (NVIDIA's Xid catalog: 45 "Not Solo: IGNORE (follow other Xid)";
//    43 is the driver stopping the channels of the application an earlier
//    Xid ended).
//  - "fallen-off-the-bus": within 300 s after Xid 79, the GSP timeouts (119,
//    120), the halted micro-controller (62), the recovery action it implies
//    (154) and the channels torn down (13, 31, 43, 45) are that fault.
//  - "xid-storm": any Xid repeated on one GPU within 60 s (a node printed
//    800,000 Xid 95 lines for 29 faults).
//  - "links-training": the NVLink Xids (74, 144-150) within 300 s of the
//    boot or a driver load (NVLinks are down while they train after every
//    boot; a rule that acted on it fired on 214 of 288 healthy nodes).
std::vector<FaultRule> DefaultFaultRules();
// The built-in rows with the site's over them (by name; disabled rows gone).
std::vector<FaultRule> MergeFaultRules(const std::vector<FaultRule>& site);

// Judges each event among those before it on its device, in the order
// given, by the events' own times (a kernel record's, when it was logged),
// so that a replay, and records logged before rasd started, are judged as
// they happened. A pure function of the events and the rows: no clock, no
// I/O. Not thread-safe; one owner (the RAS pipeline). Memory: a few entries
// per device and code, dropped once past the longest window.
class FaultRules {
 public:
  explicit FaultRules(std::vector<FaultRule> rows = DefaultFaultRules());
  // New rows (SIGHUP): what was seen stays; windows open carry on.
  void SetRows(std::vector<FaultRule> rows);
  const std::vector<FaultRule>& Rows() const { return rows_; }

  // Sets `event.context`. Events without a device (index or PCI address)
  // or a vendor code, and historical ones, are their own faults.
  void Judge(RasEvent& event);
  // The device is back in service (an undrain, an automatic recovery):
  // what comes next is a new fault, not an echo or a repeat of the old one.
  void ForgetDevice(int device);
  // When the node booted (wall time), for the settle rows; unset: only a
  // driver load starts their window.
  void SetBootTime(std::chrono::system_clock::time_point boot) { boot_ = boot; }

 private:
  struct Seen {
    std::chrono::system_clock::time_point time;
    int code = 0;
    Severity severity = Severity::kInfo;
  };
  struct Window {
    std::chrono::system_clock::time_point start;
    std::chrono::seconds length{0};
    std::uint64_t repeats = 0;
  };
  static std::optional<std::string> DeviceKey(const RasEvent& event);
  const Seen* Primary(const FaultRule& row, const std::string& device, const RasEvent& event) const;
  void Prune(std::chrono::system_clock::time_point now);

  // When the settle window of an origin began: the boot, or the latest load
  // of its driver seen.
  std::optional<std::chrono::system_clock::time_point> SettleStart(const std::string& origin) const;

  std::vector<FaultRule> rows_;
  std::optional<std::chrono::system_clock::time_point> boot_;
  std::map<std::string, std::chrono::system_clock::time_point> driver_loaded_;  // by code origin
  std::chrono::seconds longest_{0};
  // By origin and device: the faults of their own, oldest first.
  std::map<std::pair<std::string, std::string>, std::deque<Seen>> faults_;
  // The storm window open, by origin, device, code, the driver's recovery
  // action (Xid 154's; -1: none), the process named (-1: none), the page
  // the record names (all ones: none) and whether logged before rasd
  // started.
  using WindowKey =
      std::tuple<std::string, std::string, int, int, std::int64_t, std::uint64_t, bool>;
  std::map<WindowKey, Window> windows_;
  std::uint64_t judged_ = 0;
};

}  // namespace rasd::ras
