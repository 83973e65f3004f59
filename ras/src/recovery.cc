#include "rasd/ras/recovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace rasd::ras {
namespace {

constexpr std::array<std::string_view, kRecoveryActionCount> kNames = {
    "none", "restart-app", "reset-device", "reboot-node", "hardware-inspection", "contact-vendor"};

using A = RecoveryAction;
using std::chrono::hours;

// NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
// column "Resolution Bucket (Immediate Action)", Ampere and later: IGNORE ->
// none, RESTART_APP -> restart-app, RESET_GPU -> reset-device, RESTART_BM ->
// reboot-node, CONTACT_SUPPORT -> contact-vendor. The escalation is the
// catalog's "Investigatory Action" where it names one, after two
// recoveries in 24 h: gpud escalates a reboot-type Xid to hardware
// inspection once it recurs after 2 reboots (its DefaultRebootThreshold).
RecoveryRow Xid(int code, A action, std::uint32_t after = 0, std::optional<A> to = std::nullopt,
                std::string source = "NVIDIA Xid catalog") {
  return RecoveryRow{.origin = "nvidia_xid",
                     .vendor_code = code,
                     .action = action,
                     .escalate_after = after,
                     .escalate_window = hours(24),
                     .escalate_to = to,
                     .source = std::move(source)};
}

// Huawei MindCluster's fault levels (ascend-device-plugin faultCode.json and
// faultCustomization.json; hiascend.com MindCluster fault-level docs):
// NotHandleFault -> none, RestartRequest/RestartBusiness -> restart-app,
// RestartNPU/FreeRestartNPU -> reset-device, SeparateNPU and
// ManuallySeparateNPU -> hardware-inspection.
// Codes as the driver reports them: DCMI's 32-bit fault codes keep their
// bits in the event's int (0x80E01801 is negative there).
RecoveryRow Ascend(std::uint32_t code, A action, std::uint32_t after = 0,
                   std::optional<A> to = std::nullopt,
                   std::string source = "MindCluster faultCode.json") {
  return RecoveryRow{.origin = "ascend",
                     .vendor_code = static_cast<int>(static_cast<std::int32_t>(code)),
                     .action = action,
                     .escalate_after = after,
                     .escalate_window = hours(24),
                     .escalate_to = to,
                     .source = std::move(source)};
}

RecoveryRow Class(Severity severity, std::optional<ComponentKind> component, A action,
                  std::uint32_t after = 0, std::optional<A> to = std::nullopt) {
  return RecoveryRow{.severity = severity,
                     .component = component,
                     .action = action,
                     .escalate_after = after,
                     .escalate_window = hours(24),
                     .escalate_to = to,
                     .source = "rasd severity classes (docs/architecture.md)"};
}

std::vector<RecoveryRow> DefaultRows() {
  std::vector<RecoveryRow> rows;
  // Application faults: the job failed, not the hardware.
  for (int code : {8, 13, 32, 68, 69}) rows.push_back(Xid(code, A::kRestartApp));
  // 31 repeating on one GPU: DCGM diagnostics, then field diagnostics.
  rows.push_back(Xid(31, A::kRestartApp, 2, A::kHardwareInspection,
                     "NVIDIA Xid catalog (WORKFLOW_XID_31)"));
  // 94: contained ECC error; the consumer dies, the GPU serves on (gpud
  // never escalates it: threshold 1000).
  rows.push_back(Xid(94, A::kRestartApp));
  for (int code : {38, 43, 45, 63, 92, 121}) rows.push_back(Xid(code, A::kNone));
  // Reset the GPU; if it keeps coming back, hardware.
  rows.push_back(Xid(48, A::kResetDevice, 2, A::kHardwareInspection,
                     "NVIDIA Xid catalog (WORKFLOW_XID_48: field diagnostics / RMA)"));
  rows.push_back(Xid(95, A::kResetDevice, 2, A::kHardwareInspection,
                     "NVIDIA Xid catalog; gpud escalates after 2 reboots"));
  rows.push_back(Xid(136, A::kResetDevice, 2, A::kHardwareInspection,
                     "NVIDIA Xid catalog (INVESTIGATE_LINK_SI)"));
  for (int code : {62, 64, 74, 109, 140, 143, 155})
    rows.push_back(Xid(code, A::kResetDevice, 2, A::kContactVendor));
  // GSP: reset; persisting, a power cycle of the node.
  for (int code : {119, 120})
    rows.push_back(Xid(code, A::kResetDevice, 2, A::kRebootNode,
                       "NVIDIA Xid catalog (persists after reset: power cycle)"));
  // Fallen off the bus: the node must be rebooted (RESTART_BM).
  rows.push_back(Xid(79, A::kRebootNode, 2, A::kHardwareInspection,
                     "NVIDIA Xid catalog (RESTART_BM); gpud escalates after 2 reboots"));
  for (int code : {61, 123}) rows.push_back(Xid(code, A::kContactVendor));

  // Ascend runtime codes (CANN's ACL error codes). No vendor action is
  // published for these three: 507053 is repaired in the process (torch_npu
  // restarts the device context), the other two are rasd's proposal.
  rows.push_back(Ascend(507053, A::kRestartApp, 0, std::nullopt, "rasd (torch_npu repairs in process)"));
  rows.push_back(Ascend(507054, A::kResetDevice, 2, A::kHardwareInspection, "rasd (no vendor action published)"));
  rows.push_back(Ascend(507010, A::kResetDevice, 2, A::kHardwareInspection, "rasd (no vendor action published)"));
  // DCMI fault codes.
  rows.push_back(Ascend(0x80E01801, A::kRestartApp, 2, A::kHardwareInspection,
                        "MindCluster: RestartBusiness; 2 in 24 h -> ManuallySeparateNPU"));
  for (std::uint32_t code : {0x80C98009u, 0x80CB8009u}) rows.push_back(Ascend(code, A::kRestartApp));
  for (std::uint32_t code : {0x80C98008u, 0x80CB8008u}) {
    rows.push_back(Ascend(code, A::kRestartApp, 2, A::kHardwareInspection,
                          "MindCluster: RestartRequest; 2 in 24 h -> ManuallySeparateNPU"));
  }
  rows.push_back(Ascend(0x80E18005, A::kResetDevice, 3, A::kHardwareInspection,
                        "MindCluster: RestartNPU; 3 in 24 h -> ManuallySeparateNPU"));
  rows.push_back(Ascend(0x8C084E00u, A::kResetDevice, 0, std::nullopt,
                        "MindCluster: FreeRestartNPU"));
  for (std::uint32_t code : {0x80E3A201u, 0x80E18402u, 0x80818C05u})
    rows.push_back(Ascend(code, A::kHardwareInspection, 0, std::nullopt, "MindCluster: SeparateNPU"));
  for (std::uint32_t code : {0x81078603u, 0x8C1F8608u, 0x80E01809u})
    rows.push_back(Ascend(code, A::kNone, 0, std::nullopt, "MindCluster: NotHandleFault"));

  // Classes, where no code says more. Device faults.
  rows.push_back(Class(Severity::kSrar, ComponentKind::kDeviceMemory, A::kRestartApp));
  rows.push_back(Class(Severity::kUce, ComponentKind::kDevice, A::kResetDevice, 2, A::kHardwareInspection));
  rows.push_back(Class(Severity::kUce, ComponentKind::kDeviceMemory, A::kResetDevice, 2,
                       A::kHardwareInspection));
  rows.push_back(Class(Severity::kFatal, ComponentKind::kDevice, A::kResetDevice, 2, A::kRebootNode));
  rows.push_back(Class(Severity::kFatal, ComponentKind::kDeviceMemory, A::kResetDevice, 2,
                       A::kRebootNode));
  // Host faults: a DIMM or a CPU is replaced, not reset.
  rows.push_back(Class(Severity::kUce, ComponentKind::kHostMemory, A::kHardwareInspection));
  rows.push_back(Class(Severity::kFatal, std::nullopt, A::kRebootNode, 2, A::kHardwareInspection));
  rows.push_back(Class(Severity::kUce, std::nullopt, A::kHardwareInspection));
  rows.push_back(Class(Severity::kSrar, std::nullopt, A::kRestartApp));
  // CE, UCNA, SRAO, INFO: the hardware corrected it or the page was taken out.
  rows.push_back(
      RecoveryRow{.action = A::kNone, .source = "rasd severity classes (docs/architecture.md)"});
  return rows;
}

bool Matches(const RecoveryRow& row, const RasEvent& event) {
  if (row.origin && *row.origin != event.origin) return false;
  if (row.vendor_code && row.vendor_code != event.vendor_code) return false;
  if (row.severity && *row.severity != event.severity) return false;
  if (row.component && *row.component != ComponentOf(event)) return false;
  return true;
}

int Specificity(const RecoveryRow& row) {
  return (row.vendor_code ? 8 : 0) + (row.origin ? 2 : 0) + (row.component ? 2 : 0) +
         (row.severity ? 1 : 0);
}

// nvmlDeviceGpuRecoveryAction_t (NVML's GPU_RECOVERY_ACTION_*; NVIDIA's
// "Error Recovery and Response Flags" says what each asks of the operator)
// on rasd's ladder. Drain P2P asks the workloads to stop peer traffic:
// restarting them is the nearest rung. An IMEX domain recovery or a bus
// reset needs the GPU out of service until done: a reset's rung.
std::optional<RecoverySuggestion> NvidiaRecoveryAction(int action) {
  struct Known {
    int value;
    RecoveryAction action;
    const char* name;
  };
  static constexpr Known kKnown[] = {
      {0, RecoveryAction::kNone, "NONE"},
      {1, RecoveryAction::kResetDevice, "GPU_RESET"},
      {2, RecoveryAction::kRebootNode, "NODE_REBOOT"},
      {3, RecoveryAction::kRestartApp, "DRAIN_P2P"},
      {4, RecoveryAction::kResetDevice, "DRAIN_AND_RESET"},
      {5, RecoveryAction::kResetDevice, "RECOVER_IMEX_DOMAIN"},
      {6, RecoveryAction::kResetDevice, "BUS_RESET"},
      {7, RecoveryAction::kRebootNode, "SYSTEM_REBOOT"},
  };
  for (const Known& known : kKnown) {
    if (known.value != action) continue;
    return RecoverySuggestion{
        .action = known.action,
        .why = fmt::format("{} (Xid 154: the driver's recovery action GPU_RECOVERY_ACTION_{})",
                           RecoveryActionName(known.action), known.name)};
  }
  return std::nullopt;  // a newer driver's action: the Xid's row
}

}  // namespace

std::string_view RecoveryActionName(RecoveryAction action) {
  return kNames[static_cast<std::size_t>(action)];
}

std::optional<RecoveryAction> ParseRecoveryAction(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<RecoveryAction>(i);
  }
  return std::nullopt;
}

const RecoveryTable& RecoveryTable::Default() {
  static const RecoveryTable table = WithOverrides({});
  return table;
}

RecoveryTable RecoveryTable::WithOverrides(std::vector<RecoveryRow> rows) {
  RecoveryTable table;
  table.site_ = std::move(rows);
  table.built_in_ = DefaultRows();
  return table;
}

const RecoveryRow& RecoveryTable::Match(const RasEvent& event) const {
  for (const auto& row : site_) {
    if (Matches(row, event)) return row;
  }
  const RecoveryRow* best = &built_in_.back();
  int best_score = -1;
  for (const auto& row : built_in_) {
    if (!Matches(row, event)) continue;
    if (const int score = Specificity(row); score > best_score) {
      best = &row;
      best_score = score;
    }
  }
  return *best;
}

RecoverySuggestion RecoveryTable::Suggest(
    const RasEvent& event, const std::vector<std::chrono::system_clock::time_point>& recoveries,
    std::chrono::system_clock::time_point now) const {
  // Xid 154 carries the driver's own recovery action: it is followed
  // unless a site row says otherwise.
  if (event.origin == "nvidia_xid" && event.vendor_code == 154 && event.vendor_action &&
      std::none_of(site_.begin(), site_.end(),
                   [&](const RecoveryRow& row) { return Matches(row, event); })) {
    if (auto suggestion = NvidiaRecoveryAction(*event.vendor_action)) return *suggestion;
  }
  const RecoveryRow& row = Match(event);
  RecoverySuggestion suggestion{.action = row.action};
  suggestion.why = fmt::format("{} ({})", RecoveryActionName(row.action), row.source);
  if (row.escalate_after == 0) return suggestion;
  const auto recent = static_cast<std::uint32_t>(
      std::count_if(recoveries.begin(), recoveries.end(), [&](const auto& time) {
        return time <= now && now - time <= row.escalate_window;
      }));
  if (recent < row.escalate_after) return suggestion;
  const RecoveryAction next =
      row.escalate_to.value_or(static_cast<RecoveryAction>(std::min<int>(
          static_cast<int>(row.action) + 1, kRecoveryActionCount - 1)));
  suggestion.action = std::max(next, row.action);
  suggestion.escalated = suggestion.action != row.action;
  const auto hours_window = std::chrono::duration_cast<std::chrono::hours>(row.escalate_window);
  suggestion.why = fmt::format("{}: {} recoveries of this device in {} h; {} ({})",
                               RecoveryActionName(suggestion.action), recent,
                               hours_window.count(), RecoveryActionName(row.action), row.source);
  return suggestion;
}

}  // namespace rasd::ras
