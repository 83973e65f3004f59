#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/ras/policy.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/severity.h"

namespace rasd::ras {

// What the operator (or rasd, where it can) should do next about a fault,
// mildest first: the order is the escalation ladder.
enum class RecoveryAction : std::uint8_t {
  kNone,                // nothing: the hardware corrected it, or it was the job's
  kRestartApp,          // the application that met it restarts; the device serves on
  kResetDevice,         // reset the device (no process may hold it), then self-test
  kRebootNode,          // reboot the node (the device or the OS is left inconsistent)
  kHardwareInspection,  // field diagnostics, reseat, replace: people and parts
  kContactVendor,       // the vendor's support with the logs
};
inline constexpr int kRecoveryActionCount = 6;

// "none", "restart-app", "reset-device", "reboot-node",
// "hardware-inspection", "contact-vendor": the config, wire and metric names.
std::string_view RecoveryActionName(RecoveryAction action);
std::optional<RecoveryAction> ParseRecoveryAction(std::string_view name);

// Whether a suggestion stays with the device until it is recovered: a
// reset, a reboot or a repair is about the device; none and restart-app are
// about the moment (the application).
constexpr bool SticksToDevice(RecoveryAction action) {
  return action >= RecoveryAction::kResetDevice;
}

// One row of the recovery table: every matcher that is set must match; the
// most specific row wins (a vendor code over a class, a class and component
// over a class alone). `escalate_after` recoveries of the same device
// (returns to service, resets, reboots) within `escalate_window` turn the
// action into `escalate_to` (default: the next rung).
struct RecoveryRow {
  std::optional<std::string> origin;  // "nvidia_xid", "ascend"
  std::optional<int> vendor_code;
  std::optional<Severity> severity;
  std::optional<ComponentKind> component;
  RecoveryAction action = RecoveryAction::kNone;
  std::uint32_t escalate_after = 0;  // 0: never escalates
  std::chrono::seconds escalate_window{std::chrono::hours(24)};
  std::optional<RecoveryAction> escalate_to;
  std::string source;  // where the row comes from, for people
  bool operator==(const RecoveryRow&) const = default;
};

struct RecoverySuggestion {
  RecoveryAction action = RecoveryAction::kNone;
  bool escalated = false;
  std::string why;  // one line: the row's action, and the escalation if any
};

// The recovery table: data, like the code tables. The built-in rows are
// the vendors' published tables (NVIDIA's Xid catalog, "Resolution Bucket
// (Immediate Action)"; Huawei MindCluster's fault levels) and the severity
// classes of docs/architecture.md; a site's rows (ras.recovery) go first. Immutable
// once built: safe to share between threads.
class RecoveryTable {
 public:
  static const RecoveryTable& Default();
  // The site's rows before the built-in ones.
  static RecoveryTable WithOverrides(std::vector<RecoveryRow> rows);

  // The row for an event: the site's first match, else the most specific
  // built-in match. Never null: the last row matches everything (none).
  const RecoveryRow& Match(const RasEvent& event) const;

  // What to suggest for `event` on a device recovered `recoveries` times
  // (times of its returns to service, resets and reboots) before `now`. Pure.
  RecoverySuggestion Suggest(const RasEvent& event,
                             const std::vector<std::chrono::system_clock::time_point>& recoveries,
                             std::chrono::system_clock::time_point now) const;

  const std::vector<RecoveryRow>& SiteRows() const { return site_; }
  const std::vector<RecoveryRow>& BuiltInRows() const { return built_in_; }
  bool operator==(const RecoveryTable&) const = default;

 private:
  std::vector<RecoveryRow> site_;
  std::vector<RecoveryRow> built_in_;
};

}  // namespace rasd::ras
