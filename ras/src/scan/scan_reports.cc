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
  if (Contains(text, "(Fatal)")) return Severity::kFatal;  // "Uncorrected (Fatal)"
  if (Contains(text, "Corrected") || Contains(text, "corrected error") ||
      Contains(text, "Correctable"))
    return Severity::kCe;
  if (Contains(text, "Non-Fatal") || Contains(text, "non fatal") || Contains(text, "Uncorrected") ||
      Contains(text, "Uncorrectable") || Contains(text, "recoverable"))
    return Severity::kUce;
  if (Contains(text, "Fatal") || Contains(text, "fatal")) return Severity::kFatal;
  return Severity::kInfo;
}

// The first "dddd:bb:dd.f" word of `text`.
std::optional<std::string> FirstBdf(std::string_view text) {
  while (!text.empty()) {
    text = TrimView(text);
    std::size_t end = 0;
    while (end < text.size() && text[end] != ' ' && text[end] != ',') ++end;
    if (IsPciBdf(text.substr(0, end))) return std::string(text.substr(0, end));
    text.remove_prefix(std::min(text.size(), end + 1));
  }
  return std::nullopt;
}

// Trace events that have no kernel log line of their own, as trace_pipe
// (include/ras/ras_event.h's TP_printk) or rasdaemon print them.
struct TraceEvent {
  std::string_view marker;
  const char* origin;
};
// (ARM and non-standard records: scan_platform.cc.)
constexpr std::array<TraceEvent, 2> kTraceEvents = {{
    {"aer_event: ", "aer"},
    {"extlog_mem_event: ", "mce"},
}};

// The value of a "status=" field ("status=0x8c00...", "status= bd80..."),
// not of "mcgstatus=".
std::optional<std::uint64_t> McaStatusIn(std::string_view text) {
  for (std::size_t at = text.find("status="); at != std::string_view::npos;
       at = text.find("status=", at + 1)) {
    if (at > 0 && std::isalpha(static_cast<unsigned char>(text[at - 1]))) continue;
    std::string_view value = WordAfter(text.substr(at), "status=", " ,");
    if (StartsWith(value, "0x")) value.remove_prefix(2);
    if (auto parsed = ParseNumber(value, 16)) return static_cast<std::uint64_t>(*parsed);
  }
  return std::nullopt;
}

// "112 2023-05-31 10:06:19 -0400 ...": a row of `ras-mc-ctl --errors`.
bool IsErrorsRow(std::string_view text) {
  std::size_t digits = 0;
  while (IsDigitAt(text, digits)) ++digits;
  if (digits == 0 || digits >= text.size() || text[digits] != ' ') return false;
  const std::string_view rest = text.substr(digits + 1);
  return rest.size() > 20 && IsDigitAt(rest, 0) && rest[4] == '-' && rest[7] == '-' &&
         rest[10] == ' ' && rest[13] == ':' && rest[16] == ':';
}

// The --errors section a row belongs to, by its fields.
std::string SectionOfRow(std::string_view row) {
  if (Contains(row, "status=") || Contains(row, " mci ") || Contains(row, "bank=") ||
      Contains(row, "MEMORY CONTROLLER") || Contains(row, "Transaction:"))
    return "MCE events:";
  if (Contains(row, "pfn=")) return "Memory failure events:";
  if (Contains(row, "nr_sector=")) return "Disk errors:";
  if (FirstBdf(row)) return "PCIe AER events:";
  return "Memory controller events:";
}

// "Label  CE  UE" heading `ras-mc-ctl --error-count`.
bool IsErrorCountHeading(std::string_view text) {
  if (!TrimView(text).starts_with("Label")) return false;
  std::array<std::string_view, 3> words{};
  for (auto& word : words) {
    text = TrimView(text);
    word = text.substr(0, text.find_first_of(" \t"));
    text.remove_prefix(word.size());
  }
  return words[0] == "Label" && words[1] == "CE" && words[2] == "UE" && TrimView(text).empty();
}

// A report's section heading: "Memory controller events:", "PCIe AER
// events summary:", "MCE records summary:", "Disk errors summary:".
bool IsSectionHeading(std::string_view text) {
  if (text.empty() || IsDigitAt(text, 0) || text.back() != ':') return false;
  return text.ends_with(" events:") || text.ends_with(" records:") ||
         text.ends_with(" summary:");
}

// The lines of mcelog's client summary.
bool IsMcelogLine(std::string_view text) {
  return StartsWith(text, "SOCKET ") || StartsWith(text, "DMI_") || Contains(text, "memory errors:") ||
         Contains(text, " total") || Contains(text, " in 24h") || StartsWith(text, "Per page");
}

}  // namespace

bool KernelLogScanner::ScanRasdaemon(const LogLine& line) {
  const std::string_view text = line.text;
  // Every trace event's marker ends so: one search turns most lines away.
  const bool trace_event = Contains(text, "_event: ");
  for (const auto& event : kTraceEvents) {
    if (!trace_event) break;
    const std::size_t at = text.find(event.marker);
    if (at == std::string_view::npos) continue;
    const std::string_view body = text.substr(at + event.marker.size());
    const std::size_t index =
        NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : event.origin, line,
                  WordSeverity(body));
    ScannedRecord& record = Record(index);
    if (event.marker == "aer_event: ") record.pci_bdf = FirstBdf(body);
    for (std::string_view marker : {"physical addr: ", "phy_addr: ", "address: ", "addr="}) {
      if (auto address = ParsePrintedAddress(WordAfter(body, marker, " ,()"))) {
        record.address = address;
        break;
      }
    }
    return true;
  }
  if (StartsWith(text, "ras-mc-ctl:")) {  // --status
    NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  if (line.producer == "rasdaemon" || StartsWith(text, "rasdaemon:")) {
    NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true);
    return true;
  }
  if (Contains(text, "_record: ") &&
      (Contains(text, "mce_erst_record: ") ||
       (Contains(text, "mce_record: ") && Contains(text, "status=")))) {
    const std::size_t index = NewRecord("rasdaemon", line, Severity::kInfo);
    std::string_view status = WordAfter(text, "status=");
    if (StartsWith(status, "0x")) status.remove_prefix(2);
    if (auto value = ParseNumber(status, 16)) Record(index).severity = ClassifyMciStatus(*value);
    // rasdaemon 0.8.4 on writes the level first: [CRIT] for an uncorrected
    // or deferred bank. A deferred error's status has UC clear, so the
    // status alone reads as corrected; it is UCNA.
    if (Contains(text, "[CRIT]") && Record(index).severity == Severity::kCe)
      Record(index).severity = Severity::kUcna;
    Record(index).address = ParsePrintedAddress(WordAfter(text, "addr="));
    return true;
  }
  static constexpr std::array<std::string_view, 8> kSections = {
      "Memory controller events:", "PCIe AER events:", "MCE events:",
      "Memory failure events:",    "Extlog records:",  "Devlink events:",
      "Disk errors SMART events:", "Disk errors:"};
  for (std::string_view section : kSections) {
    if (text == section) {
      section_ = std::string(section);
      OpenAs(BlockKind::kReport, NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true));
      return true;
    }
  }
  if (IsSectionHeading(text) || IsErrorCountHeading(text)) {
    // A heading of the same report continues its record.
    auto block = OpenBlock(BlockKind::kReport);
    section_ = IsErrorCountHeading(text) ? "error-count" : std::string(text);
    if (block && Record(*block).origin == "rasdaemon") {
      Attach(*block, line);
    } else {
      OpenAs(BlockKind::kReport, NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true));
    }
    return true;
  }
  if (text == "Memory errors") {  // mcelog --client
    section_ = "mcelog";
    OpenAs(BlockKind::kReport, NewRecord("mce", line, Severity::kInfo, /*notice=*/true));
    return true;
  }
  auto block = section_.empty() ? std::nullopt : OpenBlock(BlockKind::kReport);
  bool attached = false;
  if (!block && IsErrorsRow(text)) {
    // A row of `ras-mc-ctl --errors` whose section heading was not kept:
    // the row's fields say which section it is from.
    section_ = SectionOfRow(text);
    block = NewRecord("rasdaemon", line, Severity::kInfo, /*notice=*/true);
    OpenAs(BlockKind::kReport, *block);
    attached = true;
  }
  if (section_.empty()) return false;
  const bool mcelog = StartsWith(section_, "mcelog");
  if (block && section_ == "error-count") return ScanErrorCountRow(line, *block);
  const bool summary = section_.ends_with(" summary:");
  const bool mce = StartsWith(section_, "MCE ");
  const bool row = IsDigitAt(text, 0) ||
                   (summary && (StartsWith(text, "Corrected") || StartsWith(text, "Uncorrected") ||
                                StartsWith(text, "Fatal") || StartsWith(text, "Non-Fatal")));
  // An MCE row wrapped by its publisher goes on with "key=value" fields.
  // So does a CXL row, which rasdaemon's own examples wrap with a backslash.
  const bool continuation =
      (mce && !row && (Contains(text, "=") || Contains(text, ": 0x"))) ||
      (StartsWith(section_, "CXL") && !row && (Contains(text, "=") || Contains(text, ": ")));
  // A line that is not part of the report ends it.
  if (!block || (mcelog ? !IsMcelogLine(text) : !(row || continuation))) {
    section_.clear();
    return false;
  }
  if (!attached) Attach(*block, line);
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
  if (StartsWith(section_, "Memory failure events")) {
    // "1 2023-... +0800 error: pfn=0x2025e7, page_type=..., action_result=Delayed"
    Raise(record, Contains(text, "Recovered") || Contains(text, "Delayed") ? Severity::kSrao
                  : Contains(text, "Failed")                              ? Severity::kSrar
                  : Contains(text, "Ignored")                             ? Severity::kUce
                                                                          : Severity::kInfo);
    if (!record.address) record.address = ParsePrintedAddress(WordAfter(text, "pfn=", " ,"));
    return true;
  }
  if (mce) {
    // The class is the status' (the corpus' MCE rules), wherever the row carries it.
    if (auto status = McaStatusIn(text)) Raise(record, ClassifyMciStatus(*status));
  } else if (auto platform = PlatformRowSeverity(section_, text)) {
    Raise(record, *platform);
    if (!record.address) record.address = PlatformRowAddress(section_, text);
    if (const std::string_view device = PlatformRowDevice(section_, text);
        !record.pci_bdf && !device.empty())
      record.pci_bdf = std::string(device);
  } else {
    Raise(record, WordSeverity(text));
  }
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

// A row of `ras-mc-ctl --error-count`: "<label> <CE> <UE>".
bool KernelLogScanner::ScanErrorCountRow(const LogLine& line, std::size_t block) {
  std::string_view rest = line.text;
  std::array<std::string_view, 4> words{};
  std::size_t count = 0;
  while (count < words.size() && !TrimView(rest).empty()) {
    rest = TrimView(rest);
    words[count] = rest.substr(0, rest.find_first_of(" \t"));
    rest.remove_prefix(words[count].size());
    ++count;
  }
  const auto ce = count == 3 ? ParseNumber(words[1]) : std::nullopt;
  const auto ue = count == 3 ? ParseNumber(words[2]) : std::nullopt;
  if (!ce || !ue) {
    section_.clear();
    return false;
  }
  Attach(block, line);
  const auto mc = ControllerIn(words[0]);
  if (mc) named_mcs_[block].push_back(*mc);
  if (*ce > 0 || *ue > 0) {
    if (mc) nonzero_mcs_[block].push_back(*mc);
    Record(block).notice = false;
    Raise(Record(block), *ue > 0 ? Severity::kUce : Severity::kCe);
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
  if (!path_line) {
    // A checkmk section goes on with its rows, a pending path with its
    // value: any other line ends them (left open, they would take in every
    // line of the log after them).
    const bool checkmk_row = checkmk_section_ && StartsWith(text, "mc");
    if (!checkmk_row) checkmk_section_ = false;
    const std::string path = std::move(sysfs_pending_path_);
    sysfs_pending_path_.clear();
    const bool pending_value = !path.empty() && IsDigitAt(text, 0);
    if (!checkmk_row && !pending_value && !Contains(text, "/edac/")) return false;
    const auto block = OpenBlock(BlockKind::kSysfs);
    if (!block) return false;
    if (checkmk_row) {
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
    } else if (pending_value) {
      // The value of the path printed on the line before.
      const auto value = ParseNumber(text).value_or(0);
      if (value > 0) {
        if (auto mc = ControllerIn(path)) nonzero_mcs_[*block].push_back(*mc);
        Raise(Record(*block), Contains(path, "ue_count") ? Severity::kUce : Severity::kCe);
      }
    }
    Attach(*block, line);  // a row, a value, or an ls of an EDAC directory
    return true;
  }
  sysfs_pending_path_.clear();  // a path without its value: the value is not known
  auto block = OpenBlock(BlockKind::kSysfs);
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
