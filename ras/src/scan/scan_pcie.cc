// PCIe AER records: "AER: ... error received / message received from"
// headers, "PCIe Bus Error: severity=..." lines and their detail lines, in
// the 3.x to 6.x wordings. The device an error is attributed to is the one
// the header names, else the one the first PCIe Bus Error line names (its
// "id=" decoded against its domain), else the reporting port.

#include "rasd/ras/kernel_log_scanner.h"
#include "scan_util.h"

namespace rasd::ras {

using scan::IsPciBdf;
using scan::WordAfter;

namespace {

struct PciLine {
  std::string_view device;  // the BDF the kernel printed before ": "
  std::string_view body;    // after "<driver> <bdf>: " and an optional "AER: "
};

std::optional<PciLine> SplitPciLine(std::string_view text) {
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos || space == 0) return std::nullopt;
  // "0000:50:00.0: PCIe Bus Error: ..." (no driver name, as 2.6.3x's
  // documentation shows it) or "<driver> <bdf>: ...".
  std::string_view rest =
      text[space - 1] == ':' && IsPciBdf(text.substr(0, space - 1)) ? text : text.substr(space + 1);
  const std::size_t colon_space = rest.find(": ");
  if (colon_space == std::string_view::npos) return std::nullopt;
  const std::string_view device = rest.substr(0, colon_space);
  if (!IsPciBdf(device)) return std::nullopt;
  std::string_view body = TrimView(rest.substr(colon_space + 2));
  if (StartsWith(body, "AER: ")) body = TrimView(body.substr(5));
  return PciLine{device, body};
}

Severity AerSeverity(std::string_view text) {
  if (Contains(text, "Non-Fatal")) return Severity::kUce;
  if (Contains(text, "(Fatal)")) return Severity::kFatal;
  if (Contains(text, "Corrected") || Contains(text, "Correctable")) return Severity::kCe;
  return Severity::kInfo;
}

// "id=00e5" names bus 0x00, device 0x1c, function 5 in `domain_of`'s domain.
std::optional<std::string> DecodeRequesterId(std::string_view id, std::string_view domain_of) {
  const auto value = ParseNumber(id.substr(0, 4), 16);
  if (!value || id.size() < 4) return std::nullopt;
  const std::string_view domain = domain_of.substr(0, domain_of.find(':'));
  return fmt::format("{}:{:02x}:{:02x}.{:x}", domain, (*value >> 8) & 0xff, (*value >> 3) & 0x1f,
                     *value & 0x7);
}

}  // namespace

// The first AER driver (2.6.19 to 2.6.3x) printed a box:
//   +------ PCI-Express Device Error -----+
//   Error Severity          : Uncorrected (Fatal)
//   Requester ID            : 0500
bool KernelLogScanner::ScanAerBox(const LogLine& line) {
  const std::string_view text = line.text;
  if (Contains(text, "PCI-Express Device Error")) {
    OpenAs(BlockKind::kAer, NewRecord("aer", line, Severity::kInfo));
    return true;
  }
  auto block = OpenBlock(BlockKind::kAer);
  if (!block || !(StartsWith(text, "Error Severity") || StartsWith(text, "Requester ID"))) return false;
  Attach(*block, line);
  const std::string_view value = TrimView(text.substr(std::min(text.size(), text.find(':') + 1)));
  if (StartsWith(text, "Error Severity")) {
    Raise(Record(*block), AerSeverity(value));
  } else if (!Record(*block).pci_bdf) {
    Record(*block).pci_bdf = DecodeRequesterId(value, "0000:");
  }
  return true;
}

bool KernelLogScanner::ScanAer(const LogLine& line) {
  const auto pci = SplitPciLine(line.text);
  if (!pci) return ScanAerBox(line);
  const std::string_view body = pci->body;
  const bool header =
      Contains(body, " error received: ") || Contains(body, " error message received from ");
  if (header) {
    const std::string_view source = Contains(body, "received from ")
                                        ? WordAfter(body, "received from ")
                                        : WordAfter(body, "received: ");
    auto block = OpenBlock(BlockKind::kAer);
    // "Multiple ... received" repeats the header of the event being reported.
    if (StartsWith(body, "Multiple ") && block) {
      Attach(*block, line);
      Raise(Record(*block), AerSeverity(body));
      return true;
    }
    const std::size_t index = NewRecord("aer", line, AerSeverity(body));
    if (IsPciBdf(source)) {
      Record(index).pci_bdf = std::string(source);
    } else if (StartsWith(source, "id=")) {
      if (auto decoded = DecodeRequesterId(source.substr(3), pci->device))
        aer_fallback_bdf_[index] = *decoded;
    }
    OpenAs(BlockKind::kAer, index);
    return true;
  }
  // A CXL device's errors are PCIe AER's, printed "CXL Bus Error" by kernels
  // whose AER names the bus.
  if (StartsWith(body, "PCIe Bus Error: severity=") ||
      StartsWith(body, "CXL Bus Error: severity=")) {
    std::optional<std::string> attributed;
    const std::string_view id = WordAfter(body, "id=", "( ,");
    if (!id.empty()) attributed = DecodeRequesterId(id, pci->device);
    if (!attributed) attributed = std::string(pci->device);
    auto block = OpenBlock(BlockKind::kAer);
    if (!block) {
      block = NewRecord("aer", line, AerSeverity(body));
      OpenAs(BlockKind::kAer, *block);
    } else {
      Attach(*block, line);
      Raise(Record(*block), AerSeverity(body));
    }
    if (!Record(*block).pci_bdf && !aer_fallback_bdf_.contains(*block))
      Record(*block).pci_bdf = attributed;
    if (!Record(*block).pci_bdf && aer_fallback_bdf_.contains(*block)) {
      // A header that named the device only by id: the Bus Error line says it better.
      Record(*block).pci_bdf = attributed;
      aer_fallback_bdf_.erase(*block);
    }
    return true;
  }
  if (StartsWith(body, "DPC: ")) {
    // drivers/pci/pcie/dpc.c: "containment event, status:0x1f01 source:0x0000",
    // "ERR_FATAL detected", "unmasked uncorrectable error detected"; the
    // capabilities line at probe is a notice.
    const std::string_view dpc = body.substr(5);
    Severity severity = Severity::kInfo;
    if (Contains(dpc, "ERR_FATAL")) {
      severity = Severity::kFatal;
    } else if (StartsWith(dpc, "containment event") || Contains(dpc, "ERR_NONFATAL") ||
               Contains(dpc, "uncorrectable error")) {
      severity = Severity::kUce;
    }
    if (severity == Severity::kInfo) {
      NewRecord("aer", line, Severity::kInfo, /*notice=*/true);
      return true;
    }
    if (auto block = OpenBlock(BlockKind::kAer)) {
      Attach(*block, line);
      Raise(Record(*block), severity);
      return true;
    }
    const std::size_t index = NewRecord("aer", line, severity);
    OpenAs(BlockKind::kAer, index);
    // 6.13 on: "containment event, status:0x200d, ERR_FATAL received from 0015:01:00.0".
    if (const std::string_view from = WordAfter(dpc, "received from "); IsPciBdf(from)) {
      Record(index).pci_bdf = std::string(from);
      return true;
    }
    const std::string_view source = WordAfter(dpc, "source:0x", " ,");
    const auto source_id = ParseNumber(source, 16);
    if (source_id && *source_id != 0) {
      aer_fallback_bdf_[index] = DecodeRequesterId(source, pci->device).value_or(std::string(pci->device));
    } else {
      Record(index).pci_bdf = std::string(pci->device);
    }
    OpenAs(BlockKind::kAer, index);
    return true;
  }
  // Detail lines belong to the open event, if any.
  const bool detail = StartsWith(body, "device [") || StartsWith(body, "[") ||
                      StartsWith(body, "TLP Header") || StartsWith(body, "can't find device") ||
                      StartsWith(body, "can't recover") || Contains(body, "link has been reset") ||
                      StartsWith(body, "device recovery") ||
                      StartsWith(body, "Error of this Agent");
  if (!detail) return false;
  if (auto block = OpenBlock(BlockKind::kAer)) {
    Attach(*block, line);
    return true;
  }
  return false;
}

}  // namespace rasd::ras
