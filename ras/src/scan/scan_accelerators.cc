// Accelerator drivers: NVIDIA (NVRM Xid and the Xid-less fatal lines),
// amdgpu RAS, Huawei Ascend driver and runtime. Xid classes follow
// DESIGN.md and shared/corpus/README.md; the daemon's config tables will
// override them.

#include <array>
#include <cctype>
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

bool KernelLogScanner::ScanNvidia(const LogLine& line) {
  const std::string_view text = line.text;
  if (Contains(text, "GPU has fallen off the bus") && !StartsWith(text, "NVRM: ")) {
    NewRecord("nvidia_xid", line, Severity::kFatal);
    return true;
  }
  if (!StartsWith(text, "NVRM: ")) return false;
  const std::string_view body = TrimView(text.substr(6));
  if (StartsWith(body, "Xid (PCI:")) {
    const std::size_t close = body.find(')');
    if (close == std::string_view::npos) return false;
    const std::string_view bdf = body.substr(9, close - 9);
    std::string_view rest = TrimView(body.substr(close + 1));
    if (StartsWith(rest, ":")) rest = TrimView(rest.substr(1));
    const auto xid = ParseNumber(rest);
    if (!xid) return false;
    const std::string_view detail = rest.substr(std::min(rest.size(), rest.find(',') + 1));
    const std::size_t index =
        NewRecord("nvidia_xid", line, XidSeverity(*codes_, static_cast<int>(*xid), detail));
    ScannedRecord& record = Record(index);
    record.xid = static_cast<int>(*xid);
    record.pci_bdf = std::string(bdf);
    record.address = XidAddress(record.xid.value_or(0), detail);
    return true;
  }
  if (StartsWith(body, "GPU ") && Contains(body, "RmInitAdapter failed")) {
    const std::size_t index = NewRecord("nvidia_xid", line, Severity::kFatal);
    std::string_view bdf = WordAfter(body, "GPU ", " ");
    if (!bdf.empty() && bdf.back() == ':') bdf.remove_suffix(1);
    if (IsPciBdf(bdf)) Record(index).pci_bdf = std::string(bdf);
    return true;
  }
  if (StartsWith(body, "The NVIDIA GPU ")) {
    // The fallen-off-the-bus message spans three lines; the BDF is on the first.
    nvidia_pending_bdf_ = std::string(WordAfter(body, "The NVIDIA GPU "));
    return true;
  }
  if (Contains(body, "fallen off the bus")) {
    const std::size_t index = NewRecord("nvidia_xid", line, Severity::kFatal);
    if (!nvidia_pending_bdf_.empty()) Record(index).pci_bdf = nvidia_pending_bdf_;
    nvidia_pending_bdf_.clear();
    return true;
  }
  if (Contains(body, "installed in this system has")) return true;  // middle line of the above
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
  const BlockKey key = BlockKey::Amdgpu(bdf);
  Severity severity = Severity::kInfo;
  if (Contains(body, "uncorrectable hardware error") || Contains(body, "uncorrectable error")) {
    severity = Severity::kUce;
  } else if (Contains(body, "correctable hardware error") || Contains(body, "correctable error")) {
    severity = Severity::kCe;
  }
  if (severity != Severity::kInfo) {
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
  if (Contains(body, "ECC is active") || Contains(body, "RAS") || Contains(body, "ras ") ||
      Contains(body, "GPU reset")) {
    const std::size_t index = NewRecord("amdgpu", line, Severity::kInfo, /*notice=*/true);
    Record(index).pci_bdf = std::string(bdf);
    return true;
  }
  return false;
}

bool KernelLogScanner::ScanAscend(const LogLine& line) {
  const std::string_view text = line.text;
  const bool driver_line = StartsWith(text, "[ascend]");
  if (Contains(text, "lost heartbeat")) {
    NewRecord("ascend", line, Severity::kFatal);
    return true;
  }
  // Ascend runtime (CANN) error codes: six digits starting 507, classed by
  // the code table.
  for (std::size_t at = text.find("507"); at != std::string_view::npos;
       at = text.find("507", at + 1)) {
    const bool bounded =
        (at == 0 || !std::isdigit(static_cast<unsigned char>(text[at - 1]))) &&
        (at + 6 >= text.size() || !std::isdigit(static_cast<unsigned char>(text[at + 6])));
    const auto code = ParseNumber(text.substr(at, 6));
    if (!bounded || !code || *code < 507000 || *code > 507999) continue;
    if (auto severity = codes_->Ascend(static_cast<int>(*code))) {
      NewRecord("ascend", line, *severity);
      return true;
    }
  }
  if (driver_line || Contains(text, "[drv api]") || StartsWith(text, "npu-smi")) {
    const bool lost = Contains(text, "is not initialized") || Contains(text, "Device not exist");
    NewRecord("ascend", line, lost ? Severity::kFatal : Severity::kInfo, /*notice=*/!lost);
    return true;
  }
  return false;
}

}  // namespace rasd::ras
