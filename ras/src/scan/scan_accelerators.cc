// Accelerator drivers: NVIDIA (NVRM Xid and the Xid-less fatal lines),
// amdgpu RAS, Huawei Ascend driver and runtime. Xid classes follow
// docs/architecture.md and tests/data/README.md; the daemon's config tables
// (ras.codes.nvidia_xid, ras.codes.ascend) override them, also on reload.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <utility>

#include "rasd/ras/kernel_log_scanner.h"
#include "scan_util.h"

namespace rasd::ras {

using scan::IsPciBdf;
using scan::WordAfter;

namespace {

Severity XidSeverity(const CodeTable& codes, int xid, std::string_view text) {
  if (auto severity = codes.Xid(xid)) return *severity;
  switch (xid) {
    case 154:  // carries the driver's recovery action
      return (Contains(text, "Reset") || Contains(text, "Reboot")) ? Severity::kFatal
                                                                   : Severity::kInfo;
    default:
      break;
  }
  // NVLink and fabric Xids (144-150) say which they are.
  if (xid >= 140 && xid <= 150) {
    if (Contains(text, "Nonfatal")) return Severity::kCe;
    if (Contains(text, "Fatal")) return Severity::kFatal;
  }
  return Severity::kInfo;  // codes in no table: recorded, not acted on
}

// Xid 154 ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
// Required)"): the action it changed to, as nvmlDeviceGpuRecoveryAction_t
// numbers it (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and
// reset, 5 recover IMEX domain, 6 bus reset, 7 system reboot). The number
// where printed, else the words.
std::optional<int> XidRecoveryAction(std::string_view text) {
  const std::size_t to = text.rfind(" to ");
  if (to == std::string_view::npos) return std::nullopt;
  const std::string_view target = TrimView(text.substr(to + 4));
  const auto number = StartsWith(target, "0x") ? ParseNumber(target.substr(2), 16)
                                                : ParseNumber(target);
  if (number && *number <= 64) return static_cast<int>(*number);
  if (Contains(target, "Drain") && Contains(target, "Reset")) return 4;
  if (Contains(target, "Drain")) return 3;
  if (Contains(target, "Bus Reset")) return 6;
  if (Contains(target, "System Reboot")) return 7;
  if (Contains(target, "Reboot")) return 2;
  if (Contains(target, "IMEX")) return 5;
  if (Contains(target, "Reset")) return 1;
  if (Contains(target, "None")) return 0;
  return std::nullopt;
}

// The GPU address a message carries: Xid 31's faulting virtual address
// ("faulted @ 0x73ac_1c000000"), Xid 48's physAddr, Xid 64's page number
// in parentheses.
std::optional<Address> XidAddress(int xid, std::string_view text) {
  switch (xid) {
    case 31:
      return ParsePrintedAddress(WordAfter(text, "@ ", " ,"));
    case 48:
      return ParsePrintedAddress(WordAfter(text, "physAddr", " ,="));
    case 64: {
      const std::size_t open = text.rfind("(0x");
      if (open == std::string_view::npos) return std::nullopt;
      const std::size_t close = text.find(')', open);
      if (close == std::string_view::npos) return std::nullopt;
      return ParsePrintedAddress(text.substr(open + 1, close - open - 1));
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

namespace {

// NVSwitch SXids as the Fabric Manager guide (DU-09883-001, appendix D)
// classes them, for a line that prints no word of its own (the "Data
// {...}" line of an event): fatal to a partition or to the fabric;
// corrected in hardware (single-bit ECC, TX replay); to be ignored (22013,
// a MINION link DLREQ interrupt).
bool SxidIsFatal(int sxid) {
  static constexpr int kFatal[] = {
      11001, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12020, 12022, 12024, 12025,
      12026, 12027, 12030, 12031, 12032, 14017, 15001, 15006, 15009, 15010, 15012, 15013,
      19047, 19048, 19054, 19056, 19058, 19060, 19061, 19063, 19064, 19066, 19067, 19069,
      19070, 20034, 22003, 22011, 22012, 24004, 24005, 24006, 24007, 10003};
  if (sxid >= 23001 && sxid <= 23017) return true;
  return std::find(std::begin(kFatal), std::end(kFatal), sxid) != std::end(kFatal);
}

bool SxidIsCorrected(int sxid) {
  static constexpr int kCorrected[] = {11012, 11021, 11022, 11023, 12021, 12023, 15008,
                                       15011, 19049, 19055, 19057, 19059, 19062, 19065,
                                       19068, 19071, 24001, 24002, 24003, 20001};
  return std::find(std::begin(kCorrected), std::end(kCorrected), sxid) != std::end(kCorrected);
}

Severity SxidCatalogueSeverity(int sxid) {
  if (sxid == 22013) return Severity::kInfo;
  if (SxidIsFatal(sxid)) return Severity::kFatal;
  if (SxidIsCorrected(sxid)) return Severity::kCe;
  return Severity::kUce;
}

// The GSP firmware or the GPU's boot failing (kernel_gsp.c,
// kernel_gsp_tu102.c, osinit.c): the GPU is unusable until reset.
bool IsGspFailure(std::string_view body) {
  return (Contains(body, "eartbeat timed out") && !Contains(body, "not timed out")) ||
         Contains(body, "Back to back GSP RPC timeout") || Contains(body, "marked for reset") ||
         Contains(body, "failed to wait for GFW") || Contains(body, "Cannot initialize GSP") ||
         Contains(body, "Rate limiting GSP RPC error prints") || Contains(body, "PMU has halted");
}

}  // namespace

// nvidia-nvswitch (src/common/nvswitch, NVSWITCH_PRINT_SXID):
// "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32
// ...", then "..., Severity 1 Engine instance ..." and "..., Data {...}" for
// the same event. The printed word decides (Fatal, Non-fatal,
// Correctable; Severity 1 fatal, 0 not); the Data line alone takes the
// catalogue's class.
bool KernelLogScanner::ScanNvswitch(const LogLine& line) {
  const std::string_view text = line.text;
  const std::size_t at = text.find("SXid (PCI:");
  const std::size_t close = text.find(')', at);
  if (close == std::string_view::npos) return false;
  const std::string_view bdf = text.substr(at + 10, close - at - 10);
  std::string_view rest = TrimView(text.substr(close + 1));
  if (StartsWith(rest, ":")) rest = TrimView(rest.substr(1));
  const auto sxid = ParseNumber(rest.substr(0, rest.find(',')));
  if (!sxid || !IsPciBdf(bdf)) return false;
  const int code = static_cast<int>(*sxid);
  const std::string_view detail = TrimView(rest.substr(std::min(rest.size(), rest.find(',') + 1)));
  Severity severity = SxidCatalogueSeverity(code);
  if (StartsWith(detail, "Fatal") || StartsWith(detail, "Severity 1")) {
    severity = Severity::kFatal;
  } else if (StartsWith(detail, "Correctable")) {
    severity = Severity::kCe;
  } else if ((StartsWith(detail, "Non-fatal") || StartsWith(detail, "Severity 0")) &&
             severity == Severity::kFatal) {
    severity = Severity::kUce;  // the driver says the fabric survives it
  }
  const std::string event = fmt::format("{}/{}", bdf, code);
  const std::size_t index = JoinDeviceRecord(BlockKey::Device(BlockKind::kNvswitch, event),
                                             "nvswitch", line, severity, /*notice=*/false, bdf);
  Record(index).xid = code;
  return true;
}

// `nvidia-smi -q`'s memory sections: "ECC Errors" (Volatile, Aggregate),
// "Retired Pages", "Remapped Rows", "key : value" rows under them. Any
// corrected count above 0 is CE, any uncorrected one UCE, a failed remap
// (no spare row left) FATAL.
bool KernelLogScanner::ScanNvidiaSmiQuery(const LogLine& line) {
  const std::string_view text = line.text;
  const bool heading = text == "ECC Errors" || text == "Retired Pages" || text == "Retired pages" ||
                       text == "Remapped Rows";
  auto block = OpenBlock(BlockKind::kNvidiaSmi);
  if (heading) {
    if (block) {
      Attach(*block, line);
    } else {
      OpenAs(BlockKind::kNvidiaSmi,
             NewRecord("nvidia_xid", line, Severity::kInfo, /*notice=*/true));
    }
    return true;
  }
  if (!block) return false;
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    // A sub-heading ("Volatile", "Bank Remap Availability Histogram").
    const bool words_only = std::all_of(text.begin(), text.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == ' ' || c == '-';
    });
    if (words_only && !text.empty() && text.size() < 48) {
      Attach(*block, line);
      return true;
    }
    CloseBlock(BlockKind::kNvidiaSmi);
    return false;
  }
  const std::string_view key = TrimView(text.substr(0, colon));
  const std::string_view value = TrimView(text.substr(colon + 1));
  const bool one_value = value.find(' ') == std::string_view::npos || Contains(value, "bank");
  if (key.empty() || key.size() > 48 || !one_value) {
    CloseBlock(BlockKind::kNvidiaSmi);
    return false;
  }
  Attach(*block, line);
  ScannedRecord& record = Record(*block);
  auto raise = [&record](Severity severity) {
    if (severity <= record.severity) return;
    record.severity = severity;
    record.notice = false;
  };
  const auto count = ParseNumber(value);
  const bool uncorrected = Contains(key, "Uncorrectable") || Contains(key, "Double Bit");
  const bool corrected =
      !uncorrected && (Contains(key, "Correctable") || Contains(key, "Single Bit"));
  if (count && *count > 0 && uncorrected) raise(Severity::kUce);
  if (count && *count > 0 && corrected) raise(Severity::kCe);
  if (value == "Yes" && Contains(key, "Remapping Failure")) raise(Severity::kFatal);
  if (value == "Yes" && Contains(key, "Threshold Exceeded")) raise(Severity::kUce);
  return true;
}

// Fabric Manager's log of the SXids the switches reported (its error
// handler: "detected NVSwitch fatal error %d on fid %d on NVSwitch pci bus
// id %s physical id %d port %d", and "non-fatal error"). The bus id is
// printed with the 8-digit domain of NVML, kept as printed.
bool KernelLogScanner::ScanFabricManagerError(const LogLine& line) {
  const std::string_view text = line.text;
  const std::size_t at = text.find("detected NVSwitch ");
  std::string_view rest = text.substr(at + 18);
  Severity severity = Severity::kUce;
  if (StartsWith(rest, "fatal error ")) {
    severity = Severity::kFatal;
  } else if (!StartsWith(rest, "non-fatal error ")) {
    return false;
  }
  const auto sxid = ParseNumber(WordAfter(rest, "error "));
  if (!sxid) return false;
  const std::size_t index = NewRecord("nvswitch", line, severity);
  Record(index).xid = static_cast<int>(*sxid);
  const std::string_view bus = WordAfter(rest, "pci bus id ");
  const std::size_t colon = bus.find(':');
  if (colon == 8 && IsPciBdf(bus.substr(4))) Record(index).pci_bdf = std::string(bus);
  return true;
}

bool KernelLogScanner::ScanNvidia(const LogLine& line) {
  const std::string_view text = line.text;
  if (Contains(text, "SXid (PCI:")) return ScanNvswitch(line);
  if (Contains(text, "detected NVSwitch ")) return ScanFabricManagerError(line);
  if (ScanNvidiaSmiQuery(line)) return true;
  // In a live record the words must be the driver's own, not quoted data.
  if (Contains(text, "GPU has fallen off the bus") && !StartsWith(text, "NVRM: ") &&
      (!anchored_ || StartsWith(text, "nvidia") || StartsWith(text, "GPU "))) {
    NewRecord("nvidia_xid", line, Severity::kFatal);
    return true;
  }
  if (!StartsWith(text, "NVRM: ")) return false;
  const std::string_view body = TrimView(text.substr(6));
  // nv.c's "NVRM: loading %s" with the driver's version string ("NVIDIA
  // UNIX x86_64 Kernel Module  550.54.15 ...", or "... Open Kernel Module
  // for x86_64 ..."): the driver was (re)loaded, and its GPUs' links train
  // again (the fault rules' settle rows).
  if (StartsWith(body, "loading NVIDIA UNIX")) {
    NewRecord("nvidia_driver", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  if (StartsWith(body, "Xid (")) {
    // "Xid (PCI:0000:3b:00): 79, ..."; drivers before 346 print "Xid (0000:03:00): 13, ...".
    const std::size_t close = body.find(')');
    if (close == std::string_view::npos) return false;
    const std::size_t open = StartsWith(body, "Xid (PCI:") ? 9 : 5;
    const std::string_view bdf = body.substr(open, close - open);
    std::string_view rest = TrimView(body.substr(close + 1));
    if (StartsWith(rest, ":")) rest = TrimView(rest.substr(1));
    const auto xid = ParseNumber(rest);
    if (!xid) return false;
    const std::string_view detail = rest.substr(std::min(rest.size(), rest.find(',') + 1));
    const Severity severity = XidSeverity(*codes_, static_cast<int>(*xid), detail);
    std::size_t index = 0;
    // The Xid of a GSP failure printed just before names its GPU and code.
    if (auto gsp = OpenBlock(BlockKind::kGsp); gsp && !Record(*gsp).xid) {
      index = *gsp;
      CloseBlock(BlockKind::kGsp);
      Attach(index, line);
      Raise(Record(index), severity);
    } else {
      index = NewRecord("nvidia_xid", line, severity);
    }
    ScannedRecord& record = Record(index);
    record.xid = static_cast<int>(*xid);
    record.pci_bdf = std::string(bdf);
    record.address = XidAddress(record.xid.value_or(0), detail);
    if (record.xid == 154) record.vendor_action = XidRecoveryAction(detail);
    // "pid=13705, name=python": the process that met the error ("pid='<unknown>'"
    // names none).
    if (const std::size_t at = detail.find("pid="); at != std::string_view::npos) {
      std::string_view digits = detail.substr(at + 4);
      digits = digits.substr(0, digits.find_first_not_of("0123456789"));
      if (const auto pid = ParseNumber(digits); pid && *pid > 0 && *pid <= 4'194'304)
        record.pid = static_cast<std::int64_t>(*pid);
    }
    return true;
  }
  if (StartsWith(body, "GPU ") && Contains(body, "RmInitAdapter failed")) {
    // After "Cannot initialize GSP firmware RM" it names that failure's GPU.
    auto gsp = OpenBlock(BlockKind::kGsp);
    const std::size_t index = gsp ? *gsp : NewRecord("nvidia_xid", line, Severity::kFatal);
    if (gsp) Attach(index, line);
    std::string_view bdf = WordAfter(body, "GPU ", " ");
    if (!bdf.empty() && bdf.back() == ':') bdf.remove_suffix(1);
    if (IsPciBdf(bdf) && !Record(index).pci_bdf) Record(index).pci_bdf = std::string(bdf);
    return true;
  }
  if (StartsWith(body, "The NVIDIA GPU ")) {
    // The fallen-off-the-bus message spans three lines; the BDF is on the first.
    nvidia_pending_bdf_ = std::string(WordAfter(body, "The NVIDIA GPU "));
    return true;
  }
  if (Contains(body, "fallen off the bus")) {
    const std::size_t index = NewRecord("nvidia_xid", line, Severity::kFatal);
    std::string_view named = WordAfter(body, "GPU ", " ");  // "GPU 0000:3b:00.0: GPU has fallen..."
    if (!named.empty() && named.back() == ':') named.remove_suffix(1);
    if (IsPciBdf(named)) Record(index).pci_bdf = std::string(named);
    if (!nvidia_pending_bdf_.empty()) Record(index).pci_bdf = nvidia_pending_bdf_;
    nvidia_pending_bdf_.clear();
    return true;
  }
  if (Contains(body, "installed in this system has")) return true;  // middle line of the above
  std::string_view named = WordAfter(body, "GPU at PCI:");
  if (named.empty()) named = WordAfter(body, "GPU ", " ");
  if (!named.empty() && named.back() == ':') named.remove_suffix(1);
  if (IsGspFailure(body)) {
    // The dumps that follow (core dump, RPC history, failed checks) and
    // the Xid the driver raises for it belong to this record.
    auto open = OpenBlock(BlockKind::kGsp);
    const std::size_t index = open ? *open : NewRecord("nvidia_xid", line, Severity::kFatal);
    if (open) {
      Attach(index, line);
      Raise(Record(index), Severity::kFatal);
    }
    if (IsPciBdf(named) && !Record(index).pci_bdf) Record(index).pci_bdf = std::string(named);
    OpenAs(BlockKind::kGsp, index);
    return true;
  }
  if (auto open = OpenBlock(BlockKind::kGsp)) {
    Attach(*open, line);
    return true;
  }
  const std::size_t index = NewRecord("nvidia_xid", line, Severity::kInfo, /*notice=*/true);
  if (StartsWith(body, "GPU at PCI:")) {
    std::string_view bdf = WordAfter(body, "GPU at PCI:");
    if (!bdf.empty() && bdf.back() == ':') bdf.remove_suffix(1);
    Record(index).pci_bdf = std::string(bdf);
  }
  return true;
}

bool KernelLogScanner::ScanAmdgpu(const LogLine& line) {
  const std::string_view text = line.text;
  // amd-smi static --ras: configuration, not errors.
  static constexpr std::array<std::string_view, 7> kAmdSmiRas = {
      "EEPROM_VERSION:",    "BAD_PAGE_THRESHOLD", "PARITY_SCHEMA:", "SINGLE_BIT_SCHEMA:",
      "DOUBLE_BIT_SCHEMA:", "POISON_SCHEMA:",     "ECC_BLOCK_STATE"};
  for (std::string_view key : kAmdSmiRas) {
    if (StartsWith(text, key)) {
      auto block = OpenBlock(BlockKind::kAmdSmi);
      if (block) {
        Attach(*block, line);
      } else {
        OpenAs(BlockKind::kAmdSmi, NewRecord("amdgpu", line, Severity::kInfo, /*notice=*/true));
      }
      return true;
    }
  }
  if (StartsWith(text, "[drm:") && Contains(text, "*ERROR*")) return ScanAmdgpuDrmError(line);
  if (!StartsWith(text, "amdgpu ")) return false;
  std::string_view bdf = WordAfter(text, "amdgpu ", " ");
  if (!bdf.empty() && bdf.back() == ':') bdf.remove_suffix(1);
  if (!IsPciBdf(bdf)) return false;
  const std::size_t colon = text.find(": ");
  if (colon == std::string_view::npos) return false;
  std::string_view body = TrimView(text.substr(colon + 2));
  if (StartsWith(body, "amdgpu: ")) body.remove_prefix(8);
  if (StartsWith(body, "{"))
    body.remove_prefix(std::min(body.size(), body.find('}') + 1));  // MI300 event id
  if (StartsWith(body, "[Hardware Error]")) {
    body.remove_prefix(16);
    while (!body.empty() && (body.front() == ':' || body.front() == ' ')) body.remove_prefix(1);
  }
  const BlockKey key = BlockKey::Amdgpu(bdf);
  const BlockKey aca_key{BlockKind::kAca, key.sub};
  if (StartsWith(body, "Accelerator Check Architecture") || StartsWith(body, "aca entry[") ||
      StartsWith(body, "ACA[")) {
    return ScanAcaDump(line, body, bdf);
  }
  Severity severity = Severity::kInfo;
  if (Contains(body, "uncorrectable hardware error") || Contains(body, "uncorrectable error") ||
      Contains(body, "deferred hardware error")) {
    // Deferred errors are uncorrected data left poisoned for its consumer.
    severity = Severity::kUce;
  } else if (Contains(body, "correctable hardware error") || Contains(body, "correctable error")) {
    severity = Severity::kCe;
  } else if (Contains(body, "poison is consumed") || Contains(body, "exceed threshold") ||
             Contains(body, "exceeds threshold")) {
    // Consumed poison resets the GPU; a bad-page table over its threshold
    // keeps the GPU from initialising.
    severity = Severity::kFatal;
  }
  if (severity != Severity::kInfo) {
    // An ACA dump printed just before, for the same device, is this event's.
    if (auto dump = OpenBlock(aca_key)) {
      Attach(*dump, line);
      Record(*dump).severity = severity;
      Record(*dump).notice = false;
      CloseBlock(aca_key);
      OpenAs(key, *dump);
      return true;
    }
    const std::size_t index = NewRecord("amdgpu", line, severity);
    Record(index).pci_bdf = std::string(bdf);
    OpenAs(key, index);
    return true;
  }
  if (Contains(body, "GPU reset begin") || Contains(body, "GPU reset")) {
    // A full reset after an uncorrectable error: the device could not go on.
    if (auto block = OpenBlock(key); block && Record(*block).severity >= Severity::kUce) {
      Attach(*block, line);
      Record(*block).severity = Severity::kFatal;
      return true;
    }
  }
  if (ScanAmdgpuRecovery(line, body, bdf)) return true;
  if (Contains(body, "ECC is active") || Contains(body, "RAS") || Contains(body, "ras ") ||
      Contains(body, "GPU reset")) {
    const std::size_t index = NewRecord("amdgpu", line, Severity::kInfo, /*notice=*/true);
    Record(index).pci_bdf = std::string(bdf);
    return true;
  }
  return false;
}

namespace {

// A scheduler timeout (amdgpu_job_timedout): "ring gfx_0.0.0 timeout,
// signaled seq=..., emitted seq=...", also "..., but soft recovered".
bool IsRingTimeout(std::string_view body) {
  return (StartsWith(body, "ring ") && Contains(body, " timeout")) ||
         Contains(body, "job timeout") ||
         (StartsWith(body, "Ring ") && Contains(body, "reset failure"));
}

// The recovery and init paths' words for a GPU the driver could not bring
// back (amdgpu_device_gpu_recover, amdgpu_do_asic_reset, amdgpu_device_init,
// the SMU reading all ones from a device gone from the bus).
bool IsGpuLost(std::string_view body) {
  return (StartsWith(body, "GPU reset(") && Contains(body, "failed")) ||
         Contains(body, "GPU Recovery Failed") || Contains(body, "GPU reset end with ret") ||
         Contains(body, "ASIC reset failed") || Contains(body, "Fatal error during GPU init") ||
         Contains(body, "ip_init failed") || Contains(body, "ip_resume failed") ||
         Contains(body, "resume of IP block") || Contains(body, "device unplugged") ||
         Contains(body, "SMU is in hanged state") || Contains(body, "response:0xFFFFFFFF") ||
         Contains(body, "device inaccessible");
}

}  // namespace

// amdgpu's DRM_ERROR lines carry no device: "[drm:amdgpu_job_timedout
// [amdgpu]] *ERROR* ring sdma0 timeout, ...". A timeout waits for the
// reset line that names its device.
bool KernelLogScanner::ScanAmdgpuDrmError(const LogLine& line) {
  const std::string_view text = line.text;
  if (!Contains(text, "amdgpu")) return false;
  const std::string_view body = TrimView(text.substr(text.find("*ERROR*") + 7));
  const BlockKey unnamed{BlockKind::kAmdgpuHang, 0};
  if (IsRingTimeout(body)) {
    JoinDeviceRecord(unnamed, "amdgpu", line, Severity::kUce, /*notice=*/false, {});
    return true;
  }
  if (auto open = OpenBlock(unnamed)) {
    Attach(*open, line);
    return true;
  }
  if (Contains(body, "failed") || Contains(body, "Failed")) {
    NewRecord("amdgpu", line, Severity::kUce);  // an IP block that did not start
    return true;
  }
  return false;
}

// A ring timeout and the reset it leads to are one record: UCE while the
// reset brings the GPU back, FATAL when it fails or the GPU is lost.
bool KernelLogScanner::ScanAmdgpuRecovery(const LogLine& line, std::string_view body,
                                          std::string_view bdf) {
  const BlockKey hang{BlockKind::kAmdgpuHang, BlockKey::Amdgpu(bdf).sub};
  const BlockKey unnamed{BlockKind::kAmdgpuHang, 0};
  // A timeout printed without the device: this is the device.
  if (auto pending = OpenBlock(unnamed)) {
    CloseBlock(unnamed);
    if (!Record(*pending).pci_bdf) Record(*pending).pci_bdf = std::string(bdf);
    OpenAs(hang, *pending);
  }
  const bool lost = IsGpuLost(body);
  if (IsRingTimeout(body) || lost) {
    JoinDeviceRecord(hang, "amdgpu", line, lost ? Severity::kFatal : Severity::kUce,
                     /*notice=*/false, bdf);
    return true;
  }
  if (auto open = OpenBlock(hang)) {
    Attach(*open, line);  // the reset's progress, the process it names
    return true;
  }
  return false;
}

namespace {

// An AMD MCA_STATUS value: Val 63, UC 61, PCC 57, Deferred 44, Poison 43.
Severity ClassifyAmdMcaStatus(std::uint64_t status) {
  const auto bit = [status](int n) { return ((status >> n) & 1U) != 0; };
  if (!bit(63)) return Severity::kInfo;
  if (bit(61)) return bit(57) ? Severity::kFatal : Severity::kUce;
  if (bit(44) || bit(43)) return Severity::kUce;  // deferred or poisoned: data still bad
  return Severity::kCe;
}

}  // namespace

// amdgpu's ACA bank dump (amdgpu_aca.c): "{N}[Hardware Error]: Accelerator
// Check Architecture events logged", then "aca entry[00].STATUS=0x..."
// (6.9) or "ACA[01/02].STATUS=0x..." (6.10 on) per register. The dump
// takes the class of the amdgpu event it belongs to (the same device's
// event line, printed after it or just before); alone, its STATUS decides.
bool KernelLogScanner::ScanAcaDump(const LogLine& line, std::string_view body,
                                   std::string_view bdf) {
  const BlockKey key = BlockKey::Amdgpu(bdf);
  const BlockKey aca_key{BlockKind::kAca, key.sub};
  auto dump = OpenBlock(aca_key);
  bool own = true;  // no event line has claimed the dump yet
  if (dump) {
    Attach(*dump, line);
  } else if (auto event = OpenBlock(key); event && !Record(*event).notice) {
    dump = event;  // the event came first: the dump only adds to it
    own = false;
    Attach(*dump, line);
  } else {
    dump = NewRecord("amdgpu", line, Severity::kInfo, /*notice=*/true);
    Record(*dump).pci_bdf = std::string(bdf);
    OpenAs(aca_key, *dump);
  }
  ScannedRecord& record = Record(*dump);
  const std::size_t dot = body.find("].");
  if (dot == std::string_view::npos) return true;
  const std::string_view reg = body.substr(dot + 2);
  const auto value = [&reg]() -> std::optional<std::uint64_t> {
    std::string_view digits = reg.substr(std::min(reg.size(), reg.find('=') + 1));
    if (StartsWith(digits, "0x")) digits.remove_prefix(2);
    return ParseNumber(digits, 16);
  }();
  if (!value) return true;
  if (StartsWith(reg, "STATUS=") && own) {
    // Only a dump no event has claimed classes itself.
    const Severity severity = ClassifyAmdMcaStatus(*value);
    if (severity > record.severity) {
      record.severity = severity;
      record.notice = severity == Severity::kInfo;
    }
  } else if (StartsWith(reg, "ADDR=") && *value != 0 && !record.address) {
    record.address = Address::Of(*value);
  }
  return true;
}

namespace {

// npu-smi's Health column: OK, Warning (minor alarm), Alarm (major),
// Critical (the chip is unusable).
std::optional<Severity> NpuHealth(std::string_view word) {
  if (word == "OK") return Severity::kInfo;
  if (word == "Warning") return Severity::kCe;
  if (word == "Alarm") return Severity::kUce;
  if (word == "Critical") return Severity::kFatal;
  return std::nullopt;
}

// The first two cells of a table row "| 0     910B3 | OK | ...".
std::pair<std::string_view, std::string_view> FirstCells(std::string_view row) {
  row.remove_prefix(1);
  const std::size_t bar = row.find('|');
  const std::string_view first = TrimView(row.substr(0, bar));
  if (bar == std::string_view::npos) return {first, {}};
  const std::string_view rest = row.substr(bar + 1);
  return {first, TrimView(rest.substr(0, rest.find('|')))};
}

}  // namespace

// `npu-smi info`: per NPU a row with its Health, then a row with its Bus-Id.
// The table's class is its worst chip's; the address is that chip's (or
// the only chip's).
bool KernelLogScanner::ScanNpuSmiTable(const LogLine& line) {
  const std::string_view text = line.text;
  if (Contains(text, "npu-smi") && Contains(text, "Version")) {
    const std::size_t index = NewRecord("ascend", line, Severity::kInfo, /*notice=*/true);
    OpenAs(BlockKind::kNpuSmi, index);
    npu_row_health_.reset();
    npu_chips_ = 0;
    return true;
  }
  auto block = ContinueTable(BlockKind::kNpuSmi, line);
  if (!block) return false;
  if (!StartsWith(text, "|")) return true;
  ScannedRecord& record = Record(*block);
  const auto [first, second] = FirstCells(text);
  if (auto health = NpuHealth(second); health && !first.empty() && std::isdigit(static_cast<unsigned char>(first[0]))) {
    npu_row_health_ = health;
    ++npu_chips_;
    return true;
  }
  if (npu_row_health_ && IsPciBdf(second)) {
    const Severity health = *npu_row_health_;
    npu_row_health_.reset();
    AddTableDevice(record, health, second, npu_chips_);
  }
  return true;
}

std::optional<std::size_t> KernelLogScanner::ContinueTable(BlockKind kind, const LogLine& line) {
  auto block = OpenBlock(kind);
  if (!block) return std::nullopt;
  if (!StartsWith(line.text, "|") && !StartsWith(line.text, "+")) {
    CloseBlock(kind);
    return std::nullopt;
  }
  Attach(*block, line);
  return block;
}

void KernelLogScanner::AddTableDevice(ScannedRecord& record, Severity health, std::string_view bdf,
                                      std::size_t devices) {
  if (health > record.severity || (devices == 1 && !record.pci_bdf)) {
    record.pci_bdf = std::string(bdf);
  } else if (devices > 1 && record.severity == Severity::kInfo) {
    record.pci_bdf.reset();  // several healthy devices: none is the table's
  }
  if (health > record.severity) {
    record.severity = health;
    record.notice = false;
  }
}

namespace {

// The first CANN runtime code in `text` (six digits, 507000 to 507999, not
// part of a longer number) that `codes` classes, with its class.
std::optional<std::pair<int, Severity>> CannRuntimeCode(std::string_view text,
                                                        const CodeTable& codes) {
  for (std::size_t at = text.find("507"); at != std::string_view::npos;
       at = text.find("507", at + 1)) {
    const bool bounded =
        (at == 0 || !std::isdigit(static_cast<unsigned char>(text[at - 1]))) &&
        (at + 6 >= text.size() || !std::isdigit(static_cast<unsigned char>(text[at + 6])));
    const auto code = ParseNumber(text.substr(at, 6));
    if (!bounded || !code || *code < 507000 || *code > 507999) continue;
    if (auto severity = codes.Ascend(static_cast<int>(*code)))
      return std::pair{static_cast<int>(*code), *severity};
  }
  return std::nullopt;
}

// What CANN's error message beside a runtime code says failed. Its messages
// read "Title(CODE): text" or "CODE: text" (the runtime's message catalog).
enum class CannCause : std::uint8_t {
  kNone,         // no message, or one that does not say (an inner error)
  kApplication,  // the caller's own error: an argument, its memory, its software
  kDeviceLost,   // the device stopped answering
};

CannCause CauseOfCannMessage(std::string_view text) {
  // E39009 "Inner_Error_Device_Status_Abnormal", whose possible cause is
  // "Heartbeats are missing on the device".
  for (std::string_view word : {"E39009", "Device_Status_Abnormal", "Heartbeats are missing"})
    if (Contains(text, word)) return CannCause::kDeviceLost;
  // EL0003 "Invalid_Argument" (a device id the process may not use);
  // EL0004 "Memory_Allocation_Failure" ("available memory is
  // insufficient"); EE1002, a stream synchronize past the timeout the
  // caller set. Not EE1001, though also "Invalid_Argument": the runtime
  // reports it for its own null context after a device failed to set up.
  // Nor E30006 (the operator package failed to verify), whose causes
  // include a device ECC error.
  for (std::string_view word : {"EL0003", "EL0004", "Memory_Allocation_Failure", "EE1002"})
    if (Contains(text, word)) return CannCause::kApplication;
  return CannCause::kNone;
}

// Whether an application's error can explain `code`: a task the device ran
// (an AI core, vector core, AI CPU or FFTS+ exception or timeout, a model
// that failed to run) or a device it could not set up. Huawei's AI Core
// troubleshooting treats these as software unless a device RAS event or
// ECC error corroborates them. The codes that name the hardware cannot be:
// the heartbeat lost (507010), device memory and HBM ECC errors
// (507053 on), the driver's internal error and the host-device link
// (507899 on).
bool ApplicationCanExplain(int code) { return code >= 507000 && code <= 507052 && code != 507010; }

}  // namespace

// One CANN runtime failure prints its code, then CANN's error message with
// the cause, then a traceback that repeats the code: one record, whose class
// is the code's unless the message names the application's own error (then
// INFO, as an application's Xid 13 is) or the device lost (then FATAL).
bool KernelLogScanner::ScanCannFailure(const LogLine& line) {
  const std::string_view text = line.text;
  const CannCause cause = CauseOfCannMessage(text);
  const auto code = CannRuntimeCode(text, *codes_);
  const auto judge = [&](std::size_t index) {
    ScannedRecord& record = Record(index);
    if (cause == CannCause::kDeviceLost) {
      Raise(record, Severity::kFatal);
      cann_device_lost_ = true;
    } else if (cause == CannCause::kApplication && ApplicationCanExplain(cann_code_) &&
               !cann_device_lost_) {
      // The device lost, in any message of the failure, is the stronger word.
      record.severity = Severity::kInfo;
    }
  };
  // CANN's traceback lines end "[FUNC:...][FILE:...][LINE:...]".
  const bool traceback = Contains(text, "[FUNC:");
  // Another code is another failure (a cascade of them is a record each).
  const bool same_failure = !code || code->first == cann_code_;
  if (auto open = OpenBlock(BlockKind::kCann);
      open && same_failure && (cause != CannCause::kNone || code || traceback)) {
    Attach(*open, line);
    judge(*open);
    return true;
  }
  if (code) {
    const std::size_t index = NewRecord("ascend", line, code->second);
    cann_code_ = code->first;
    cann_device_lost_ = false;
    OpenAs(BlockKind::kCann, index);
    judge(index);
    return true;
  }
  if (cause == CannCause::kDeviceLost) {
    NewRecord("ascend", line, Severity::kFatal);
    return true;
  }
  return false;
}

bool KernelLogScanner::ScanAscend(const LogLine& line) {
  const std::string_view text = line.text;
  const bool driver_line = StartsWith(text, "[ascend]");
  // A live kernel record is the Ascend driver's only when it says so.
  if (anchored_ && !driver_line && !StartsWith(text, "[drv api]")) return false;
  if (ScanNpuSmiTable(line)) return true;
  if (Contains(text, "system exception code [")) {
    // The device black box (history.log): "system exception code
    // [0x68020002]: ModuleName [DRIVER],ExceptionReason[DEVICE HBL
    // EXCEPTION]": HBL is the heartbeat lost.
    const bool heartbeat = Contains(text, "HBL") || Contains(text, "HEARTBEAT");
    NewRecord("ascend", line, heartbeat ? Severity::kFatal : Severity::kUce);
    return true;
  }
  if (Contains(text, "lost heartbeat") || Contains(text, "loses the heartbeat") ||
      Contains(text, "Device_Absent")) {
    // CANN's EL0001 "Device_Absent/Abnormal": the device is gone like a lost
    // heartbeat. ("The task scheduler loses the heartbeat" is torch_npu's
    // text for 507010.)
    NewRecord("ascend", line, Severity::kFatal);
    return true;
  }
  if (ScanCannFailure(line)) return true;
  if (driver_line || Contains(text, "[drv api]") || StartsWith(text, "npu-smi")) {
    const bool lost = Contains(text, "is not initialized") || Contains(text, "Device not exist");
    NewRecord("ascend", line, lost ? Severity::kFatal : Severity::kInfo, /*notice=*/!lost);
    return true;
  }
  return false;
}

}  // namespace rasd::ras
