// GHES/CPER, MCE, EDAC and memory-failure records (the host's CPU and
// memory errors). Rules: tests/data/README.md.

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <optional>

#include "rasd/ras/kernel_log_scanner.h"
#include "scan_util.h"

namespace rasd::ras {

using scan::EdacPageOffsetAddress;
using scan::IsPciBdf;
using scan::WordAfter;

namespace {

constexpr std::string_view kHardwareError = "[Hardware Error]";

std::string_view AfterMarker(std::string_view text, std::string_view marker) {
  text.remove_prefix(marker.size());
  while (!text.empty() && (text.front() == ':' || text.front() == ' ')) text.remove_prefix(1);
  return text;
}

// `text` from `marker` on; empty when the marker is absent (a hostile or
// truncated line must not throw).
std::string_view FromMarker(std::string_view text, std::string_view marker) {
  const std::size_t at = text.find(marker);
  return at == std::string_view::npos ? std::string_view() : text.substr(at);
}

// The MCi_STATUS value after `marker` ("Bank 5: 8c00004000010092", "]: 0x98...").
std::optional<std::uint64_t> StatusAfter(std::string_view text, std::string_view marker) {
  std::string_view word = WordAfter(text, marker);
  if (StartsWith(word, "0x")) word.remove_prefix(2);
  auto value = ParseNumber(word, 16);
  if (!value) return std::nullopt;
  return static_cast<std::uint64_t>(*value);
}

Severity GhesSeverity(std::string_view word) {
  if (StartsWith(word, "corrected")) return Severity::kCe;
  if (StartsWith(word, "recoverable")) return Severity::kUce;
  if (StartsWith(word, "fatal")) return Severity::kFatal;
  return Severity::kInfo;
}

// The lines arch/x86/kernel/cpu/mce's print_mce and mce_panic write after
// "[Hardware Error]: " (AMD's decoder writes others: "CPU:0 (17:31:0) MC27_STATUS...").
bool IsPrintMceLine(std::string_view body) {
  return StartsWith(body, "CPU ") || StartsWith(body, "TSC ") || StartsWith(body, "RIP") ||
         StartsWith(body, "PROCESSOR ") || StartsWith(body, "Machine check") ||
         StartsWith(body, "Run the above") || StartsWith(body, "PPIN") ||
         StartsWith(body, "Some CPUs");
}

// Field names of a CPER section as drivers/firmware/efi/cper*.c and
// ghes.c print them (3.10 to 6.x, x86 and ARM): an unnumbered
// "[Hardware Error]" line that carries one belongs to a GHES/BERT block
// even when the block's header lines were cut off (the tail of a log).
bool IsCperField(std::string_view body) {
  if (StartsWith(body, "Error ") && Contains(body, ", type: ")) return true;
  static constexpr std::array<std::string_view, 23> kFields = {
      "event severity:", "fru_id:",         "fru_text:",
      "section_type:",   "error_status:",   "physical_address", "node:",
      "card:",           "module:",         "device_id:",      "vendor_id:",
      "class_code:",     "aer_",            "port_type:",      "command:",
      "slot:",           "secondary_bus:",  "MIDR:",           "Multiprocessor Affinity",
      "error_type:",     "error_info:",     "running state:",  "section length:"};
  for (std::string_view field : kFields) {
    if (StartsWith(body, field)) return true;
  }
  return false;
}

}  // namespace

bool KernelLogScanner::ScanGhes(const LogLine& line) {
  const std::string_view text = line.text;
  if (Contains(text, "Fatal hardware error")) {
    // ghes_panic / "GHES: Fatal hardware error but panic disabled".
    auto block = OpenBlock(BlockKey::Ghes({}));
    if (block) {
      Attach(*block, line);
      Raise(Record(*block), Severity::kFatal);
    } else {
      NewRecord("ghes", line, Severity::kFatal);
    }
    return true;
  }
  if (StartsWith(text, "GHES:") || StartsWith(text, "ERST:") || StartsWith(text, "HEST:") ||
      StartsWith(text, "EINJ:") || (StartsWith(text, "pstore:") && Contains(text, "erst"))) {
    NewRecord("ghes", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  if (StartsWith(text, "BERT:")) {
    const std::size_t index = NewRecord("ghes", line, Severity::kInfo, /*notice=*/true);
    if (Contains(text, "Error records from previous boot")) {
      Record(index).historical = true;
      Record(index).notice = false;
      OpenAs(BlockKey::Ghes({}), index);
    }
    return true;
  }
  // "{7}[Hardware Error]: ..." or, inside a BERT/unnumbered block, "[Hardware Error]: ...".
  BlockKey key = BlockKey::Ghes({});
  std::string_view rest = text;
  if (StartsWith(rest, "{")) {
    const std::size_t close = rest.find('}');
    if (close == std::string_view::npos || close > 8) return false;
    key = BlockKey::Ghes(rest.substr(1, close - 1));
    rest.remove_prefix(close + 1);
    if (!StartsWith(rest, kHardwareError)) return false;
  } else if (!StartsWith(rest, kHardwareError) || !OpenBlock(key)) {
    // An unnumbered "[Hardware Error]" line outside a GHES block is an MCE
    // decode, unless it carries a CPER field.
    if (!StartsWith(rest, kHardwareError) ||
        !(Contains(rest, "Hardware error from APEI") ||
          IsCperField(AfterMarker(rest, kHardwareError))))
      return false;
  }
  rest = AfterMarker(rest, kHardwareError);
  const std::string origin = line.producer == "ascend" ? "ascend" : "ghes";
  if (Contains(rest, "Hardware error from APEI")) {
    OpenAs(key, NewRecord(origin, line, Severity::kInfo));
    return true;
  }
  auto block = OpenBlock(key);
  if (!block) {
    block = NewRecord(origin, line, Severity::kInfo);
    OpenAs(key, *block);
  } else {
    Attach(*block, line);
  }
  ScannedRecord& record = Record(*block);
  if (StartsWith(rest, "event severity:")) {
    Raise(record, GhesSeverity(AfterMarker(rest, "event severity")));
  } else if (StartsWith(rest, "Error ") && Contains(rest, ", type: ")) {
    // "Error 0, type: recoverable": a section's severity, all a tail may keep.
    Raise(record, GhesSeverity(WordAfter(rest, ", type: ")));
  } else if (StartsWith(rest, "physical fault address:") && !record.address) {
    record.address = ParsePrintedAddress(WordAfter(rest, "physical fault address:"));  // ARM
  } else if (StartsWith(rest, "physical_address:") && !record.address) {
    record.address = ParsePrintedAddress(WordAfter(rest, "physical_address:"));
  } else if (StartsWith(rest, "device_id:") && !record.pci_bdf) {
    const std::string_view device = WordAfter(rest, "device_id:");
    if (IsPciBdf(device)) record.pci_bdf = std::string(device);
  }
  return true;
}

namespace {

// decode_error_status (drivers/edac/mce_amd.c): the first line of AMD's
// decode names the class.
Severity AmdErrorStatusSeverity(std::string_view body) {
  if (StartsWith(body, "System Fatal error")) return Severity::kFatal;
  if (StartsWith(body, "Uncorrected")) return Severity::kUce;
  if (StartsWith(body, "Deferred error")) return Severity::kUcna;
  if (StartsWith(body, "Corrected")) return Severity::kCe;
  return Severity::kInfo;
}

// An AMD MCA_STATUS: the architectural bits, and Deferred (bit 44), an
// uncorrected error the hardware left for its consumer (UC clear): no one
// has met it yet, so UCNA. On Intel bit 44 is part of the corrected count,
// so only AMD's decode lines are classed so.
Severity ClassifyAmdMcaStatus(std::uint64_t status) {
  const Severity architectural = ClassifyMciStatus(status);
  constexpr std::uint64_t kDeferred = std::uint64_t{1} << 44;
  if (architectural == Severity::kCe && (status & kDeferred) != 0) return Severity::kUcna;
  return architectural;
}

}  // namespace

bool KernelLogScanner::ScanMce(const LogLine& line) {
  const std::string_view text = line.text;
  if (ScanMcelogReport(line)) return true;
  // mce/intel.c: "CMCI storm detected: switching to poll mode" (3.x-6.x,
  // with or without "mce: CPU%d BANK%d "), "CMCI storm subsided".
  if (Contains(text, "CMCI storm")) {
    NewRecord("mce", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  // mce_panic: "Kernel panic - not syncing: Fatal machine check" and
  // "Machine check from unknown source".
  if ((Contains(text, "not syncing") || StartsWith(text, "Kernel panic")) &&
      (Contains(text, "achine check") || Contains(text, "Machine Check") ||
       Contains(text, "context corrupt"))) {
    auto block = OpenBlock(BlockKind::kMce);
    if (block) {
      Attach(*block, line);
      Raise(Record(*block), Severity::kFatal);
    } else {
      NewRecord("mce", line, Severity::kFatal);
    }
    return true;
  }
  // Trace: "mce_record: CPU: 0, MCGc/s: ..., MC13: 8c00..., ADDR/MISC/SYND: 0000000123450000/..."
  if (Contains(text, "mce_record: ") && !Contains(text, "status=")) {  // rasdaemon's has status=
    const std::size_t index =
        NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : "mce", line, Severity::kInfo);
    const std::string_view body = text.substr(text.find("mce_record: "));
    // The bank's status: "MC13: 8c00...", not "MCGc/s: ...".
    for (std::size_t bank = body.find(", MC"); bank != std::string_view::npos;
         bank = body.find(", MC", bank + 1)) {
      if (bank + 4 < body.size() && std::isdigit(static_cast<unsigned char>(body[bank + 4]))) {
        if (auto status = StatusAfter(body.substr(bank + 2), ": "))
          Record(index).severity = ClassifyMciStatus(*status);
        break;
      }
    }
    const std::string_view address = WordAfter(body, "ADDR/MISC/SYND: ", "/ ,");
    Record(index).address = ParsePrintedAddress(address);
    return true;
  }
  std::string_view body;
  bool prefixed = false;
  if (StartsWith(text, "mce: ")) {
    body = text.substr(5);
    if (StartsWith(body, kHardwareError)) {
      body = AfterMarker(body, kHardwareError);
      prefixed = true;
    } else {
      if (StartsWith(body, "Uncorrected hardware memory error in user-access at")) {
        const std::size_t index = NewRecord("mce", line, Severity::kSrar);
        Record(index).address = ParsePrintedAddress(WordAfter(body, " at "));
        return true;
      }
      if (StartsWith(body, "Memory error not recovered")) {
        NewRecord("mce", line, Severity::kSrar);  // the consumer gets SIGBUS (kill_me_now)
        return true;
      }
      NewRecord("mce", line, Severity::kInfo, /*notice=*/true);  // banks, CMCI storms
      return true;
    }
  } else if (StartsWith(text, kHardwareError) && IsPrintMceLine(AfterMarker(text, kHardwareError))) {
    // Kernels before 4.10 had no "mce: " prefix in front of print_mce's lines.
    body = AfterMarker(text, kHardwareError);
    prefixed = true;
  } else if (StartsWith(text, kHardwareError)) {
    // AMD's decoder: "[Hardware Error]: Corrected error, no action required." and friends.
    body = AfterMarker(text, kHardwareError);
    auto block = OpenBlock(BlockKind::kMce);
    const bool starts = StartsWith(body, "Corrected error") || StartsWith(body, "Uncorrected") ||
                        StartsWith(body, "Deferred error") ||
                        StartsWith(body, "System Fatal error");
    if (starts || !block) {
      block = NewRecord("mce", line, AmdErrorStatusSeverity(body));
      OpenAs(BlockKind::kMce, *block);
    } else {
      Attach(*block, line);
    }
    ScannedRecord& record = Record(*block);
    if (Contains(body, "_STATUS[")) {
      if (auto status = StatusAfter(body, "]: ")) record.severity = ClassifyAmdMcaStatus(*status);
    } else if (StartsWith(body, "Error Addr:") && !record.address) {
      record.address = ParsePrintedAddress(WordAfter(body, "Error Addr:"));
    }
    return true;
  } else if (StartsWith(text, "CPU ") && Contains(text, ": Machine Check Exception: ")) {
    body = text;  // 3.x kernels: no prefix
  } else if ((StartsWith(text, "TSC ") || StartsWith(text, "Bank ")) && OpenBlock(BlockKind::kMce)) {
    body = text;  // 2.4 to 3.x: "Bank 4: b604a00100000813 at 000000007e4f2f68"
  } else if (StartsWith(text, "sbridge: HANDLING MCE MEMORY ERROR")) {
    NewRecord("mce", line, Severity::kInfo, /*notice=*/true);
    return true;
  } else {
    return false;
  }

  if (body == "Machine check events logged") {
    NewRecord("mce", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  if (StartsWith(body, "CPU ") && Contains(body, "Machine Check")) {
    const std::size_t index = NewRecord("mce", line, Severity::kInfo);
    if (auto status = StatusAfter(FromMarker(body, "Bank"), ": ")) {
      Record(index).severity = ClassifyMciStatus(*status);
    }
    OpenAs(BlockKind::kMce, index);
    return true;
  }
  auto block = OpenBlock(BlockKind::kMce);
  if (!block) {
    if (!prefixed) return false;
    NewRecord("mce", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  Attach(*block, line);
  if (StartsWith(body, "Bank ")) {
    if (auto status = StatusAfter(body, ": ")) Raise(Record(*block), ClassifyMciStatus(*status));
    if (!Record(*block).address) Record(*block).address = ParsePrintedAddress(WordAfter(body, " at "));
  }
  if (StartsWith(body, "TSC ") && Contains(body, " ADDR ") && !Record(*block).address) {
    Record(*block).address = ParsePrintedAddress(WordAfter(body, " ADDR "));
  }
  return true;
}

// mcelog's report of one machine check (mcelog.c dump_mce, its daemon's
// syslog lines too):
//   Hardware event. This is not a software error.
//   MCE 0
//   CPU 14 BANK 3 TSC 3a4e5b2d79cf56
//   MISC 900004000400a8c ADDR 912c41000
//   ...
//   STATUS b200000000400005 MCGSTATUS 5
// The class comes from STATUS (the corpus' MCE rules); old versions start
// at "MCE n" without the first line.
bool KernelLogScanner::ScanMcelogReport(const LogLine& line) {
  const std::string_view text = line.text;
  auto block = OpenBlock(BlockKind::kMcelog);
  const bool mce_number = StartsWith(text, "MCE ") && text.size() > 4 && text.size() < 12 &&
                          std::all_of(text.begin() + 4, text.end(),
                                      [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (StartsWith(text, "Hardware event. This is not a software error") ||
      (mce_number && !block)) {
    OpenAs(BlockKind::kMcelog, NewRecord("mce", line, Severity::kInfo));
    return true;
  }
  if (!block) return false;
  ScannedRecord& record = Record(*block);
  if (mce_number && record.lines.size() > 2) {
    // The next machine check of the same dump.
    CloseBlock(BlockKind::kMcelog);
    OpenAs(BlockKind::kMcelog, NewRecord("mce", line, Severity::kInfo));
    return true;
  }
  Attach(*block, line);
  if (StartsWith(text, "STATUS ")) {
    if (auto status = ParseNumber(WordAfter(text, "STATUS "), 16))
      record.severity = ClassifyMciStatus(*status);
    CloseBlock(BlockKind::kMcelog);
  } else if (Contains(text, "ADDR ") && !record.address) {
    record.address = ParsePrintedAddress(WordAfter(text, "ADDR "));
  }
  return true;
}

namespace {

// The module an EDAC error line names. edac_mc.c's edac_raise_mc_error
// prints "<count> <type> <msg> on <label> (<location> page:... offset:...)":
// the label is the DIMM's (set by the driver or the firmware's SMBIOS
// table); where it is "any memory" or "unknown memory" (ghes_edac without
// labels), the location before the first per-error field says which module.
std::optional<std::string> EdacDimm(std::string_view rest) {
  const std::size_t on = rest.find(" on ");
  if (on == std::string_view::npos) return std::nullopt;
  std::string_view label = rest.substr(on + 4);
  const std::size_t open = label.find(" (");
  std::string_view location;
  if (open != std::string_view::npos) {
    location = label.substr(open + 2);
    label = label.substr(0, open);
  }
  label = TrimView(label);
  if (!label.empty() && label != "any memory" && label != "unknown memory")
    return std::string(label);
  // The per-error fields end the location (kernel 3.6+ order).
  std::size_t end = location.size();
  for (std::string_view field : {"bank:", "row:", "col:", "page:", "offset:", "grain:", ")"}) {
    const std::size_t at = location.find(field);
    if (at != std::string_view::npos) end = std::min(end, at);
  }
  location = TrimView(location.substr(0, end));
  if (location.empty()) return std::nullopt;
  return std::string(location);
}

}  // namespace

bool KernelLogScanner::ScanEdac(const LogLine& line) {
  const std::string_view text = line.text;
  if (line_has_mc_event_ && Contains(text, "mc_event: ")) {
    const std::string_view body = text.substr(text.find("mc_event: ") + 10);
    Severity severity = Severity::kInfo;
    if (Contains(body, "Corrected error")) severity = Severity::kCe;
    if (Contains(body, "Uncorrected error")) severity = Severity::kUce;
    if (Contains(body, "Fatal error")) severity = Severity::kFatal;
    const std::size_t index =
        NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : "edac", line, severity);
    ScannedRecord& record = Record(index);
    if (auto count = ParseNumber(body)) record.count = *count;
    if (auto mc = ParseNumber(WordAfter(body, "(mc:"))) record.mc = static_cast<int>(*mc);
    if (auto address = ParsePrintedAddress(WordAfter(body, "address:"))) {
      record.address = address;
    } else {
      record.address = EdacPageOffsetAddress(body);
    }
    return true;
  }
  if (!StartsWith(text, "EDAC ")) return false;
  std::string_view rest = text.substr(5);
  std::string_view driver;
  if (!StartsWith(rest, "MC")) {
    const std::size_t space = rest.find(' ');
    driver = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  }
  std::optional<int> mc;
  if (StartsWith(rest, "MC") && rest.size() > 2 &&
      std::isdigit(static_cast<unsigned char>(rest[2]))) {
    mc = static_cast<int>(ParseNumber(rest.substr(2)).value_or(0));
    const std::size_t colon = rest.find(':');
    rest = colon == std::string_view::npos ? std::string_view() : TrimView(rest.substr(colon + 1));
  } else if (StartsWith(driver, "DEVICE") || StartsWith(driver, "PCI")) {
    // edac_device.c: "EDAC DEVICE0: CE: <ctl> instance: 0 block: 0 count: 1 '...'";
    // edac_pci_sysfs.c: "EDAC PCI: Master Data Parity Error on 0000:00:1f.0".
    Severity severity = Severity::kInfo;
    if (StartsWith(rest, "CE:") || StartsWith(rest, "CE ")) severity = Severity::kCe;
    if (StartsWith(rest, "UE:") || StartsWith(rest, "UE ")) severity = Severity::kUce;
    if (StartsWith(driver, "PCI") && Contains(rest, "Parity Error")) severity = Severity::kUce;
    if (StartsWith(driver, "PCI") && Contains(rest, "System Error")) severity = Severity::kUce;
    const std::size_t index = NewRecord("edac", line, severity, severity == Severity::kInfo);
    const std::string_view device = WordAfter(rest, " on ");
    if (IsPciBdf(device)) Record(index).pci_bdf = std::string(device);
    return true;
  } else {
    // "EDAC amd64: ECC disabled in the BIOS ...": driver notices.
    NewRecord("edac", line, Severity::kInfo, /*notice=*/true);
    return true;
  }

  // A driver's own error line ("EDAC amd64 MC1: CE ERROR_ADDRESS= 0x...")
  // is a report like the core's; the rest of a driver's lines form the
  // sb_edac/skx_edac decode block.
  const bool report = StartsWith(rest, "CE ") || StartsWith(rest, "UE ") ||
                      (std::isdigit(static_cast<unsigned char>(rest.empty() ? 'x' : rest[0])) &&
                       (Contains(rest, " CE ") || Contains(rest, " UE ")));
  if (!driver.empty() && !report) {
    // The sb_edac/skx_edac decode block: HANDLING ..., CPU n: Machine Check Event, ADDR ...
    const BlockKey key = BlockKind::kEdacMce;
    if (StartsWith(rest, "HANDLING MCE MEMORY ERROR")) {
      const std::size_t index = NewRecord("edac", line, Severity::kInfo);
      Record(index).mc = mc;
      OpenAs(key, index);
      return true;
    }
    auto block = OpenBlock(key);
    if (!block) {
      block = NewRecord("edac", line, Severity::kInfo);
      Record(*block).mc = mc;
      OpenAs(key, *block);
    } else {
      Attach(*block, line);
    }
    ScannedRecord& record = Record(*block);
    if (Contains(rest, "Machine Check Event")) {
      if (auto status = StatusAfter(FromMarker(rest, "Bank"), ": ")) {
        record.severity = ClassifyMciStatus(*status);
      }
    } else if (StartsWith(rest, "ADDR ") && !record.address) {
      record.address = ParsePrintedAddress(WordAfter(rest, "ADDR "));
    }
    return true;
  }

  if (StartsWith(rest, "Giving out device") || StartsWith(rest, "Removed device") ||
      StartsWith(rest, "Ver:")) {
    const std::size_t index = NewRecord("edac", line, Severity::kInfo, /*notice=*/true);
    Record(index).mc = mc;
    const std::string_view device = WordAfter(rest, "DEV ");
    if (IsPciBdf(device)) Record(index).pci_bdf = std::string(device);
    return true;
  }
  // "1 CE memory read error on ..." / "4 CE error on ..." / "1 UE ..." /
  // pre-3.5 "CE row 1, channel 0, label ...: ... addr = 0x1fb6d78000".
  Severity severity = Severity::kInfo;
  std::uint64_t count = 1;
  std::string_view words = rest;
  if (auto number = ParseNumber(words)) {
    count = *number;
    words = TrimView(
        words.substr(words.find(' ') == std::string_view::npos ? words.size() : words.find(' ')));
  }
  if (StartsWith(words, "CE")) severity = Severity::kCe;
  if (StartsWith(words, "UE")) severity = Severity::kUce;
  std::optional<Address> address = EdacPageOffsetAddress(rest);
  if (!address) address = ParsePrintedAddress(WordAfter(rest, "addr = "));
  if (!address) address = ParsePrintedAddress(WordAfter(rest, "ERROR_ADDRESS="));
  if (severity == Severity::kInfo) {
    const std::size_t index = NewRecord("edac", line, Severity::kInfo, /*notice=*/true);
    Record(index).mc = mc;
    return true;
  }
  // The CE/UE line that ends a decode block decides the block's class.
  for (BlockKind key : {BlockKind::kEdacMce, BlockKind::kMce}) {
    auto block = OpenBlock(key);
    if (!block) continue;
    ScannedRecord& record = Record(*block);
    Attach(*block, line);
    // The CE/UE line decides, unless the block's printed status says UCNA
    // (an uncorrected error no consumer met: the corpus README's rule).
    if (key == BlockKind::kEdacMce &&
        !(record.severity == Severity::kUcna && severity == Severity::kUce))
      record.severity = severity;
    if (!record.mc) record.mc = mc;
    if (!record.address) record.address = address;
    record.dimm = EdacDimm(rest);
    record.count = count;
    CloseBlock(BlockKind::kEdacMce);
    return true;
  }
  const std::size_t index = NewRecord("edac", line, severity);
  Record(index).mc = mc;
  Record(index).dimm = EdacDimm(rest);
  Record(index).address = address;
  Record(index).count = count;
  return true;
}

namespace {

// mm/memory-failure.c's outcome words, 2.6.32 to 6.x: "<type> page
// recovery: <result>", "recovery action for <type>: <result>",
// "action_result=<result>" (rasdaemon), and the kill and state notices.
Severity MemoryFailureSeverity(std::string_view body) {
  if (Contains(body, "already hardware poisoned") || Contains(body, "unhandlable page") ||
      Contains(body, "Ignored") || Contains(body, "nknown page state") ||
      Contains(body, "outside kernel control")) {
    return Severity::kUce;
  }
  if (Contains(body, "Recovered") || Contains(body, "Delayed") ||
      Contains(body, "dropped without side effects")) {
    return Severity::kSrao;
  }
  if (Contains(body, "Failed") || Contains(body, "Killing") || Contains(body, "killing") ||
      Contains(body, "Sending SIGBUS") || Contains(body, "failed to unmap")) {
    return Severity::kSrar;
  }
  return Severity::kInfo;
}

// The process a kill notice names (mm/memory-failure.c kill_proc: "%#lx:
// Sending SIGBUS to %s:%d due to hardware memory corruption", older
// "Killing %s:%d due to ..."): the number after the last ':' of
// "<comm>:<pid>", a comm that may itself hold a ':'.
std::optional<std::int64_t> KilledPid(std::string_view text) {
  const std::size_t due = text.find(" due to hardware memory corruption");
  if (due == std::string_view::npos) return std::nullopt;
  const std::size_t colon = text.rfind(':', due);
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view digits = text.substr(colon + 1, due - colon - 1);
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      }))
    return std::nullopt;
  const auto pid = ParseNumber(digits);
  if (!pid || *pid == 0) return std::nullopt;
  return static_cast<std::int64_t>(*pid);
}

// The PFN a message names: "0x2025e7: ...", "pfn 0x...", "pfn=0x...".
std::optional<Address> MemoryFailurePfn(std::string_view body) {
  if (StartsWith(body, "0x")) return ParsePrintedAddress(body.substr(0, body.find(':')));
  if (auto pfn = ParsePrintedAddress(WordAfter(body, "pfn=", " ,:"))) return pfn;
  return ParsePrintedAddress(WordAfter(body, "pfn ", " ,:"));
}

}  // namespace

bool KernelLogScanner::ScanMemoryFailure(const LogLine& line) {
  const std::string_view text = line.text;
  if (StartsWith(text, "HardwareCorrupted:")) {
    const auto kilobytes = ParseNumber(TrimView(text.substr(18)));
    NewRecord("memory_failure", line, kilobytes.value_or(0) > 0 ? Severity::kUce : Severity::kInfo,
              kilobytes.value_or(0) == 0);
    return true;
  }
  std::string_view body;
  if (StartsWith(text, "Memory failure:")) {
    body = TrimView(text.substr(15));
  } else if (StartsWith(text, "MCE 0x") || StartsWith(text, "MCE: 0x")) {
    // Kernels before 4.15 had no "Memory failure: " prefix.
    body = TrimView(text.substr(text.find(' ') + 1));
  } else if (Contains(text, "memory_failure_event: ")) {
    body = text.substr(text.find("memory_failure_event: ") + 22);
  } else if (const std::size_t event = text.find("memory_failure_event ");
             event != std::string_view::npos && Contains(text, "pfn")) {
    // rasdaemon's own print: the event's name, a log level ("[ALERT]") in
    // newer releases, its timestamp, then the fields.
    body = text.substr(event + 21);
  } else if (StartsWith(text, "Soft offlining pfn") && Contains(text, "virtual address")) {
    // madvise_inject_error (mm/madvise.c): MADV_SOFT_OFFLINE asked for by a
    // process, a test's request, not an error; what soft offline then finds
    // is on its own lines.
    const std::size_t index = NewRecord("memory_failure", line, Severity::kInfo, /*notice=*/true);
    Record(index).address = MemoryFailurePfn(text);
    if (!Record(index).address)
      Record(index).address = ParsePrintedAddress(WordAfter(text, "pfn ", " "));
    return true;
  } else if (StartsWith(text, "__get_any_page: ") || StartsWith(text, "get_any_page: ")) {
    // Soft offline could not take the page (mm/memory-failure.c
    // get_any_page, "%s: %#lx: unknown ... page type"): a page with
    // corrected errors stays in use.
    const std::size_t index = NewRecord("memory_failure", line, Severity::kCe);
    Record(index).address = ParsePrintedAddress(WordAfter(text, ": ", ":"));
    return true;
  } else if (StartsWith(text, "Soft offlining pfn") || StartsWith(text, "soft offline: ") ||
             StartsWith(text, "soft_offline: ")) {
    // Soft offline moves a page that only had corrected errors; one it
    // finds already poisoned (soft_offline_page: "%#lx page already
    // poisoned") had an uncorrected error first.
    const Severity severity = Contains(text, "already poisoned") ? Severity::kUce : Severity::kCe;
    const std::size_t index = NewRecord("memory_failure", line, severity);
    std::string_view rest = text.substr(text.find(' ') + 1);
    if (StartsWith(rest, "offline: ")) rest.remove_prefix(9);
    Record(index).address = MemoryFailurePfn(rest);
    if (!Record(index).address)
      Record(index).address = ParsePrintedAddress(WordAfter(rest, "", " :"));
    return true;
  } else if (StartsWith(text, "Unpoison: ")) {
    // unpoison_memory: a page given back after an injected or soft offline.
    const std::size_t index = NewRecord("memory_failure", line, Severity::kInfo, /*notice=*/true);
    Record(index).address = ParsePrintedAddress(WordAfter(text, " page ", " ,:"));
    return true;
  } else if (StartsWith(text, "Injecting memory failure")) {
    const std::size_t index = NewRecord("memory_failure", line, Severity::kInfo, /*notice=*/true);
    Record(index).address = MemoryFailurePfn(text);
    return true;
  } else if (Contains(text, "due to hardware memory corruption") &&
             (!anchored_ || StartsWith(text, "MCE") || StartsWith(text, "Killing"))) {
    // "Killing <comm>:<pid> due to ..."
    Record(NewRecord("memory_failure", line, Severity::kSrar)).pid = KilledPid(text);
    return true;
  } else {
    return false;
  }
  const std::size_t index =
      NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : "memory_failure", line,
                MemoryFailureSeverity(body));
  Record(index).address = MemoryFailurePfn(body);
  Record(index).pid = KilledPid(body);
  return true;
}

}  // namespace rasd::ras
