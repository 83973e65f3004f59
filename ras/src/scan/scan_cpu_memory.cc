// GHES/CPER, MCE, EDAC and memory-failure records (the host's CPU and
// memory errors). Rules: shared/corpus/README.md.

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

}  // namespace

bool KernelLogScanner::ScanGhes(const LogLine& line) {
  const std::string_view text = line.text;
  if (StartsWith(text, "ERST:") || StartsWith(text, "HEST:") || StartsWith(text, "EINJ:") ||
      (StartsWith(text, "pstore:") && Contains(text, "erst"))) {
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
    // An unnumbered "[Hardware Error]" line outside a GHES block is an MCE decode.
    if (!StartsWith(rest, kHardwareError) || !Contains(rest, "Hardware error from APEI"))
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
  } else if (StartsWith(rest, "physical_address:") && !record.address) {
    record.address = ParsePrintedAddress(WordAfter(rest, "physical_address:"));
  } else if (StartsWith(rest, "device_id:") && !record.pci_bdf) {
    const std::string_view device = WordAfter(rest, "device_id:");
    if (IsPciBdf(device)) record.pci_bdf = std::string(device);
  }
  return true;
}

bool KernelLogScanner::ScanMce(const LogLine& line) {
  const std::string_view text = line.text;
  // Trace: "mce_record: CPU: 0, MCGc/s: ..., MC13: 8c00..., ADDR/MISC/SYND: 0000000123450000/..."
  if (Contains(text, "mce_record: ")) {
    const std::size_t index = NewRecord("mce", line, Severity::kInfo);
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
      NewRecord("mce", line, Severity::kInfo,
                /*notice=*/true);  // banks, CMCI storms, "not recovered"
      return true;
    }
  } else if (StartsWith(text, kHardwareError)) {
    // AMD's decoder: "[Hardware Error]: Corrected error, no action required." and friends.
    body = AfterMarker(text, kHardwareError);
    auto block = OpenBlock(BlockKind::kMce);
    const bool starts = StartsWith(body, "Corrected error") || StartsWith(body, "Uncorrected") ||
                        StartsWith(body, "Deferred error");
    if (starts || !block) {
      block =
          NewRecord("mce", line, StartsWith(body, "Corrected") ? Severity::kCe : Severity::kInfo);
      OpenAs(BlockKind::kMce, *block);
    } else {
      Attach(*block, line);
    }
    ScannedRecord& record = Record(*block);
    if (Contains(body, "_STATUS[")) {
      if (auto status = StatusAfter(body, "]: ")) record.severity = ClassifyMciStatus(*status);
    } else if (StartsWith(body, "Error Addr:") && !record.address) {
      record.address = ParsePrintedAddress(WordAfter(body, "Error Addr:"));
    }
    return true;
  } else if (StartsWith(text, "CPU ") && Contains(text, ": Machine Check Exception: ")) {
    body = text;  // 3.x kernels: no prefix
  } else if (StartsWith(text, "TSC ") && OpenBlock(BlockKind::kMce)) {
    body = text;
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
  if (StartsWith(body, "TSC ") && Contains(body, " ADDR ") && !Record(*block).address) {
    Record(*block).address = ParsePrintedAddress(WordAfter(body, " ADDR "));
  }
  return true;
}

bool KernelLogScanner::ScanEdac(const LogLine& line) {
  const std::string_view text = line.text;
  if (line_has_mc_event_ && Contains(text, "mc_event: ")) {
    const std::string_view body = text.substr(text.find("mc_event: ") + 10);
    Severity severity = Severity::kInfo;
    if (Contains(body, "Corrected error")) severity = Severity::kCe;
    if (Contains(body, "Uncorrected error")) severity = Severity::kUce;
    if (Contains(body, "Fatal error")) severity = Severity::kFatal;
    const std::size_t index = NewRecord("edac", line, severity);
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
  } else {
    // "EDAC amd64: ECC disabled in the BIOS ...": driver notices.
    NewRecord("edac", line, Severity::kInfo, /*notice=*/true);
    return true;
  }

  if (!driver.empty()) {
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
    if (key == BlockKind::kEdacMce) record.severity = severity;
    if (!record.mc) record.mc = mc;
    if (!record.address) record.address = address;
    record.count = count;
    CloseBlock(BlockKind::kEdacMce);
    return true;
  }
  const std::size_t index = NewRecord("edac", line, severity);
  Record(index).mc = mc;
  Record(index).address = address;
  Record(index).count = count;
  return true;
}

bool KernelLogScanner::ScanMemoryFailure(const LogLine& line) {
  const std::string_view text = line.text;
  if (StartsWith(text, "HardwareCorrupted:")) {
    const auto kilobytes = ParseNumber(TrimView(text.substr(18)));
    NewRecord("memory_failure", line, kilobytes.value_or(0) > 0 ? Severity::kUce : Severity::kInfo,
              kilobytes.value_or(0) == 0);
    return true;
  }
  std::string_view body;
  if (StartsWith(text, "Memory failure: ")) {
    body = text.substr(16);
  } else if (Contains(text, "memory_failure_event: ")) {
    body = text.substr(text.find("memory_failure_event: ") + 22);
    if (StartsWith(body, "pfn ")) body.remove_prefix(4);
  } else if (Contains(text, "due to hardware memory corruption")) {
    NewRecord("memory_failure", line, Severity::kSrar);  // "Killing <comm>:<pid> due to ..."
    return true;
  } else {
    return false;
  }
  Severity severity = Severity::kInfo;
  if (Contains(body, "already hardware poisoned") || Contains(body, "unhandlable page") ||
      Contains(body, ": Ignored")) {
    severity = Severity::kUce;
  } else if (Contains(body, ": Recovered") || Contains(body, ": Delayed")) {
    severity = Severity::kSrao;
  } else if (Contains(body, ": Failed") || Contains(body, "Killing") ||
             Contains(body, "Sending SIGBUS")) {
    severity = Severity::kSrar;
  }
  const std::size_t index = NewRecord("memory_failure", line, severity);
  Record(index).address = ParsePrintedAddress(body.substr(0, body.find(':')));
  return true;
}

}  // namespace rasd::ras
