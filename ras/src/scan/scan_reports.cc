// Reports other tools print about RAS events: rasdaemon (journal lines,
// `ras-mc-ctl --errors` sections, its trace output), mcelog's client
// summary, and dumps of the EDAC sysfs counters (path:value, path and value
// on separate lines, check_mk's <<<edac>>> section, ls listings).

#include <array>

#include "rasd/ras/kernel_log_scanner.h"
#include "scan_util.h"

namespace rasd::ras {

using scan::IsPciBdf;
using scan::WordAfter;

namespace {

constexpr std::string_view kEdacSysfs = "/sys/devices/system/edac/mc";

bool IsDigitAt(std::string_view text, std::size_t i) {
  return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
}

// "mc#0csrow#2" or "/mc/mc1" -> 0 / 1.
std::optional<int> ControllerIn(std::string_view text) {
  for (std::string_view marker : {"/mc/mc", "mc#"}) {
    const std::size_t at = text.find(marker);
    if (at != std::string_view::npos && IsDigitAt(text, at + marker.size())) {
      return static_cast<int>(*ParseNumber(text.substr(at + marker.size())));
    }
  }
  return std::nullopt;
}

// The class a report row names. "Corrected error: Advisory Non-Fatal" is
// corrected: the class word comes first.
Severity WordSeverity(std::string_view text) {
  if (Contains(text, "Corrected")) return Severity::kCe;
  if (Contains(text, "Non-Fatal") || Contains(text, "Uncorrected")) return Severity::kUce;
  if (Contains(text, "Fatal")) return Severity::kFatal;
  return Severity::kInfo;
}

// The lines of mcelog's client summary.
bool IsMcelogLine(std::string_view text) {
  return StartsWith(text, "SOCKET ") || Contains(text, "memory errors:") ||
         Contains(text, " total") || Contains(text, " in 24h") || StartsWith(text, "Per page");
}

}  // namespace

bool KernelLogScanner::ScanRasdaemon(const LogLine& line) {
  const std::string_view text = line.text;
  if (line.producer == "rasdaemon" || StartsWith(text, "rasdaemon:")) {
    NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  if (Contains(text, "mce_erst_record: ") ||
      (Contains(text, "mce_record: ") && Contains(text, "status="))) {
    const std::size_t index = NewRecord("rasdaemon", line, Severity::kInfo);
    std::string_view status = WordAfter(text, "status=");
    if (StartsWith(status, "0x")) status.remove_prefix(2);
    if (auto value = ParseNumber(status, 16)) Record(index).severity = ClassifyMciStatus(*value);
    Record(index).address = ParsePrintedAddress(WordAfter(text, "addr="));
    return true;
  }
  static constexpr std::array<std::string_view, 7> kSections = {
      "Memory controller events:", "PCIe AER events:", "MCE events:",
      "Memory failure events:",    "Extlog records:",  "Devlink events:",
      "Disk errors SMART events:"};
  for (std::string_view section : kSections) {
    if (text == section) {
      section_ = std::string(section);
      OpenAs(BlockKind::kReport, NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true));
      return true;
    }
  }
  if (text == "Memory errors") {  // mcelog --client
    section_ = "mcelog";
    OpenAs(BlockKind::kReport, NewRecord("mce", line, Severity::kInfo, /*notice=*/true));
    return true;
  }
  if (section_.empty()) return false;
  auto block = OpenBlock(BlockKind::kReport);
  const bool mcelog = StartsWith(section_, "mcelog");
  // A line that is not part of the report ends it.
  if (!block || (mcelog ? !IsMcelogLine(text) : !IsDigitAt(text, 0))) {
    section_.clear();
    return false;
  }
  Attach(*block, line);
  ScannedRecord& record = Record(*block);
  if (mcelog) {
    if (text == "corrected memory errors:") section_ = "mcelog:CE";
    if (text == "uncorrected memory errors:") section_ = "mcelog:UE";
    const bool count_line =
        text.size() > 6 && text.substr(text.size() - 6) == " total";  // "11 total"
    if (count_line && ParseNumber(text).value_or(0) > 0) {
      record.notice = false;
      Raise(record, section_ == "mcelog:UE" ? Severity::kUce : Severity::kCe);
    }
    // "208c00000: total 11 seen ..." (per-page statistics).
    if (Contains(text, ": total ") && !record.address)
      record.address = ParsePrintedAddress(text.substr(0, text.find(':')));
    return true;
  }
  record.notice = false;
  Raise(record, section_ == "MCE events:" && Contains(text, "status=0x")
                    ? ClassifyMciStatus(ParseNumber(WordAfter(text, "status=0x"), 16).value_or(0))
                    : WordSeverity(text));
  if (auto mc = ControllerIn(text)) named_mcs_[*block].push_back(*mc);
  if (!record.address) {
    if (auto hex = ParsePrintedAddress(WordAfter(text, "addr=", " ,"))) {
      record.address = hex;
    } else if (auto decimal = ParseNumber(WordAfter(text, "addr "))) {
      record.address =
          Address::Of(*decimal);  // ras-mc-ctl prints memory-controller addresses in decimal
    }
  }
  if (section_ == "PCIe AER events:" && !record.pci_bdf) {
    // "1 2020-04-16 22:09:48 +0000 0000:0b:00.0 Corrected error: ..."
    std::string_view rest = text;
    for (int field = 0; field < 4 && !rest.empty(); ++field)
      rest = TrimView(rest.substr(std::min(rest.size(), rest.find(' '))));
    const std::string_view device = rest.substr(0, rest.find(' '));
    if (IsPciBdf(device)) record.pci_bdf = std::string(device);
  }
  return true;
}

bool KernelLogScanner::ScanSysfs(const LogLine& line) {
  const std::string_view text = line.text;
  if (text == "<<<edac>>>") {
    checkmk_section_ = true;
    OpenAs(BlockKind::kSysfs, NewRecord("sysfs", line, Severity::kInfo));
    return true;
  }
  const bool path_line = Contains(text, kEdacSysfs);
  auto block = OpenBlock(BlockKind::kSysfs);
  if (!path_line) {
    if (!block) return false;
    if (checkmk_section_ && StartsWith(text, "mc")) {
      // "mc1 csrow0 32768 Registered-DDR3 22 0 S4ECD4ED": ce and ue are columns 5 and 6.
      std::array<std::string_view, 7> columns{};
      std::string_view rest = text;
      for (auto& column : columns) {
        rest = TrimView(rest);
        column = rest.substr(0, rest.find(' '));
        rest = rest.substr(std::min(rest.size(), rest.find(' ')));
      }
      const auto mc = ParseNumber(columns[0].substr(2));
      if (!mc) return true;
      named_mcs_[*block].push_back(static_cast<int>(*mc));
      const auto ce = ParseNumber(columns[4]).value_or(0);
      const auto ue = ParseNumber(columns[5]).value_or(0);
      if (ce > 0 || ue > 0) nonzero_mcs_[*block].push_back(static_cast<int>(*mc));
      if (ce > 0) Raise(Record(*block), Severity::kCe);
      if (ue > 0) Raise(Record(*block), Severity::kUce);
      Attach(*block, line);
      return true;
    }
    if (!sysfs_pending_path_.empty() && IsDigitAt(text, 0)) {
      // The value of the path printed on the line before.
      const std::string path = std::move(sysfs_pending_path_);
      sysfs_pending_path_.clear();
      const auto value = ParseNumber(text).value_or(0);
      if (value > 0) {
        if (auto mc = ControllerIn(path)) nonzero_mcs_[*block].push_back(*mc);
        Raise(Record(*block), Contains(path, "ue_count") ? Severity::kUce : Severity::kCe);
      }
      Attach(*block, line);
      return true;
    }
    Attach(*block, line);  // ls output and the like
    return true;
  }
  if (!block) {
    block = NewRecord("sysfs", line, Severity::kInfo);
    OpenAs(BlockKind::kSysfs, *block);
  } else {
    Attach(*block, line);
  }
  const std::size_t at = text.find(kEdacSysfs);
  const std::string_view path = text.substr(at, text.find_first_of(" \t", at) - at);
  if (auto mc = ControllerIn(path)) named_mcs_[*block].push_back(*mc);
  // "path:value" (grep) or "path" with the value on the next line.
  const std::size_t colon = path.rfind(':');
  if (colon != std::string_view::npos && colon > at) {
    const auto value = ParseNumber(path.substr(colon + 1)).value_or(0);
    if (value > 0) {
      if (auto mc = ControllerIn(path)) nonzero_mcs_[*block].push_back(*mc);
      Raise(Record(*block), Contains(path, "ue_count") ? Severity::kUce : Severity::kCe);
    }
  } else if (Contains(path, "_count")) {
    sysfs_pending_path_ = std::string(path);
  }
  return true;
}

}  // namespace rasd::ras
