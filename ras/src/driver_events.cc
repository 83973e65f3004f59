#include "rasd/ras/driver_events.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::ras {
namespace {

// Xid 154 is classed by the recovery action it carries, as its kernel line
// is by the words it prints (a reset or a reboot needed: FATAL); none, and
// drain P2P (quiesce, then the driver says more), are recorded.
Severity RecoveryActionSeverity(int action) {
  switch (action) {
    case 1:  // GPU reset
    case 2:  // node reboot
    case 4:  // drain and reset
    case 6:  // bus reset
    case 7:  // system reboot
      return Severity::kFatal;
    default:
      return Severity::kInfo;
  }
}

}  // namespace

RasEvent EventFromDriver(const drivers::DriverErrorEvent& event, std::string_view driver_name,
                         const CodeTable& codes) {
  RasEvent converted;
  converted.time = event.time;
  converted.time_is = RasEvent::TimeIs::kFailure;
  converted.source = "driver";
  converted.origin = std::string(driver_name);
  if (event.device >= 0) converted.device = event.device;
  if (!event.pci_bdf.empty()) converted.pci_bdf = event.pci_bdf;
  converted.count = std::max<std::uint64_t>(event.count, 1);
  if (event.address) converted.address = Address::Of(*event.address);
  converted.summary = event.message;
  switch (event.kind) {
    case drivers::DriverErrorKind::kCorrectedEcc:
      converted.severity = Severity::kCe;
      break;
    case drivers::DriverErrorKind::kUncorrectedEcc:
      // Device memory: not yet read is "retire the page, the owner is at
      // risk"; read by a kernel is "stop exactly that consumer".
      converted.severity = event.consumed          ? Severity::kSrar
                           : event.action_optional ? Severity::kSrao
                                                   : Severity::kUcna;
      break;
    case drivers::DriverErrorKind::kStickyFault:
      converted.severity = Severity::kUce;
      break;
    case drivers::DriverErrorKind::kLinkError:
      converted.severity = Severity::kUce;
      break;
    case drivers::DriverErrorKind::kLinkDown:
    case drivers::DriverErrorKind::kLinkUp:
      // Recorded: LinkHealth acts on the link's state (out of collectives,
      // Degraded, back after the debounce); the device's compute is fine,
      // so no rule isolates it for this.
      converted.severity = Severity::kInfo;
      break;
    case drivers::DriverErrorKind::kLinkCorrected:
      // Corrected by the link (a CRC retried, a replay): counts towards the
      // device's corrected-error threshold like any CE.
      converted.severity = Severity::kCe;
      break;
    case drivers::DriverErrorKind::kHang:
      // Work stopped completing: the device cannot serve, but it may come
      // back after a reset (UCE, not FATAL): drain, isolate, and let an
      // undrain's or auto-recovery's self-test decide.
      converted.severity = Severity::kUce;
      break;
    case drivers::DriverErrorKind::kFellOffBus:
      converted.severity = Severity::kFatal;
      break;
    case drivers::DriverErrorKind::kVendorCode: {
      // The same tables, and the same origins, as the kernel-log lines of
      // these drivers, so a site rule for "nvidia_xid" covers both paths.
      std::optional<Severity> classified;
      if (event.code_space == drivers::VendorCodeSpace::kNvidiaXid) {
        converted.origin = "nvidia_xid";
        if (event.vendor_code) classified = codes.Xid(*event.vendor_code);
        if (!classified && event.vendor_code == 154 && event.vendor_action) {
          classified = RecoveryActionSeverity(*event.vendor_action);
        }
      } else if (event.code_space == drivers::VendorCodeSpace::kAscend) {
        converted.origin = "ascend";
        if (event.vendor_code) classified = codes.Ascend(*event.vendor_code);
      }
      // A code no table knows is recorded, not acted on: acting on a guess
      // would isolate devices for application errors.
      converted.severity = classified.value_or(Severity::kInfo);
      converted.vendor_code = event.vendor_code;
      converted.vendor_action = event.vendor_action;
      break;
    }
  }
  converted.raw = fmt::format("{} device={} {}", drivers::DriverErrorKindName(event.kind),
                              event.device, event.message);
  if (event.link) {
    converted.raw +=
        fmt::format(" link={}:{}{}", drivers::LinkKindName(event.link->kind), event.link->index,
                    event.link->counter.empty() ? "" : ":" + event.link->counter);
  }
  return converted;
}

}  // namespace rasd::ras
