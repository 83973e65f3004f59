#include "rasd/ras/kernel_log_scanner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "keyword_matcher.h"

namespace rasd::ras {

nlohmann::json ScannedRecord::ToJson() const {
  auto optional = [](const auto& value) -> nlohmann::json {
    if (!value) return nullptr;
    return *value;
  };
  nlohmann::json json = {
      {"origin", origin},     {"severity", std::string(SeverityName(severity))},
      {"xid", optional(xid)}, {"pci_bdf", optional(pci_bdf)},
      {"mc", optional(mc)},   {"address", address ? nlohmann::json(address->printed) : nlohmann::json()},
      {"count", count},       {"message", message},
  };
  if (notice) json["notice"] = true;
  if (historical) json["historical"] = true;
  return json;
}

namespace {

void AppendJsonString(std::string& out, std::string_view text) {
  // Text with bytes above ASCII goes through nlohmann, whose handling of
  // invalid UTF-8 (replaced with U+FFFD) is the contract; kernel logs are
  // almost always plain ASCII.
  if (std::any_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    out += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out += '"';
  std::size_t plain_from = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.data() + plain_from, i - plain_from);
    plain_from = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += fmt::format("\\u{:04x}", c);
    }
  }
  out.append(text.data() + plain_from, text.size() - plain_from);
  out += '"';
}

}  // namespace

void ScannedRecord::AppendJson(std::string& out) const {
  // Keys in nlohmann's (sorted) order.
  out += "{\"address\":";
  if (address) {
    AppendJsonString(out, address->printed);
  } else {
    out += "null";
  }
  out += ",\"count\":";
  out += std::to_string(count);
  if (historical) out += ",\"historical\":true";
  out += ",\"mc\":";
  out += mc ? std::to_string(*mc) : "null";
  out += ",\"message\":";
  AppendJsonString(out, message);
  if (notice) out += ",\"notice\":true";
  out += ",\"origin\":";
  AppendJsonString(out, origin);
  out += ",\"pci_bdf\":";
  if (pci_bdf) {
    AppendJsonString(out, *pci_bdf);
  } else {
    out += "null";
  }
  out += ",\"severity\":";
  AppendJsonString(out, SeverityName(severity));
  out += ",\"xid\":";
  out += xid ? std::to_string(*xid) : "null";
  out += '}';
}

Severity ClassifyMciStatus(std::uint64_t status) {
  const auto bit = [status](int n) { return ((status >> n) & 1U) != 0; };
  const bool valid = bit(63), uncorrected = bit(61), pcc = bit(57), signaled = bit(56),
             action_required = bit(55);
  if (!valid) return Severity::kInfo;
  if (!uncorrected) return Severity::kCe;
  if (pcc) return Severity::kFatal;
  if (signaled && action_required) return Severity::kSrar;
  if (signaled) return Severity::kSrao;
  return Severity::kUcna;
}

void KernelLogScanner::Raise(ScannedRecord& record, Severity severity) {
  record.severity = std::max(record.severity, severity);
}

std::size_t KernelLogScanner::NewRecord(std::string origin, const LogLine& line, Severity severity,
                                        bool notice) {
  ScannedRecord& record = records_.emplace_back();  // built in place: no move of the record
  record.origin = std::move(origin);
  record.severity = severity;
  record.notice = notice;
  record.message = std::string(line.text);
  record.lines.emplace_back(line.raw);
  record.tag = line_tag_;
  record.first_position = line_position_;
  record.last_position = line_position_;
  return first_index_ + records_.size() - 1;
}

KernelLogScanner::BlockKey KernelLogScanner::BlockKey::Ghes(std::string_view id) {
  // The length in the low byte, then up to 7 bytes: distinct ids, distinct keys.
  std::uint64_t sub = std::min<std::size_t>(id.size(), 7);
  for (std::size_t i = 0; i < id.size() && i < 7; ++i)
    sub |= static_cast<std::uint64_t>(static_cast<unsigned char>(id[i])) << (8 * (i + 1));
  return {BlockKind::kGhes, sub};
}

KernelLogScanner::BlockKey KernelLogScanner::BlockKey::Amdgpu(std::string_view bdf) {
  // dddd(d):bb:dd.f: its hex digits, 4 bits each, and whether the domain
  // has 5 digits. Case does not matter: one device, one block.
  std::uint64_t sub = bdf.find(':') == 5 ? 1 : 0;
  for (char c : bdf) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isxdigit(byte) == 0) continue;
    const auto digit = static_cast<std::uint64_t>(
        std::isdigit(byte) != 0 ? byte - '0' : std::tolower(byte) - 'a' + 10);
    sub = (sub << 4) | digit;
  }
  return {BlockKind::kAmdgpu, sub};
}

void KernelLogScanner::ExpireBlocks() {
  if (open_count_ == 0) return;
  for (auto& blocks : open_) {
    open_count_ -= std::erase_if(blocks, [this](const OpenBlockEntry& block) {
      return line_number_ - block.entry.last_line > kBlockGapLines;
    });
  }
}

std::optional<std::size_t> KernelLogScanner::OpenBlock(BlockKey key) {
  auto& blocks = open_[static_cast<std::size_t>(key.kind)];
  for (auto it = blocks.begin(); it != blocks.end(); ++it) {
    if (it->sub != key.sub) continue;
    if (line_number_ - it->entry.last_line > kBlockGapLines) {
      blocks.erase(it);
      --open_count_;
      return std::nullopt;
    }
    it->entry.last_line = line_number_;
    return it->entry.index;
  }
  return std::nullopt;
}

void KernelLogScanner::OpenAs(BlockKey key, std::size_t index) {
  auto& blocks = open_[static_cast<std::size_t>(key.kind)];
  for (auto& block : blocks) {
    if (block.sub == key.sub) {
      block.entry = OpenEntry{index, line_number_};
      return;
    }
  }
  blocks.push_back({key.sub, OpenEntry{index, line_number_}});
  ++open_count_;
}

void KernelLogScanner::CloseBlock(BlockKey key) {
  auto& blocks = open_[static_cast<std::size_t>(key.kind)];
  open_count_ -=
      std::erase_if(blocks, [&key](const OpenBlockEntry& block) { return block.sub == key.sub; });
}

namespace {

// The record families, as bits, and the words that send a line to their
// decoders. A line carrying none of them is looked at only when it may
// continue a block that is open (an MCE decode, an AER report) or a report
// section: most lines of a busy log cost one pass of the automaton.
enum Family : std::uint32_t {
  kGhes = 1U << 0,
  kEdac = 1U << 1,
  kMce = 1U << 2,
  kMemoryFailure = 1U << 3,
  kAer = 1U << 4,
  kNvidia = 1U << 5,
  kAmdgpu = 1U << 6,
  kAscend = 1U << 7,
  kReports = 1U << 8,  // rasdaemon, mcelog
  kSysfs = 1U << 9,
  kMceContinuation = 1U << 10,
  kAerContinuation = 1U << 11,
  kEdacTrace = 1U << 12,  // "mc_event": also kEdac
};

std::uint32_t FamiliesOf(std::string_view line) {
  static const KeywordMatcher kWords = {
      {"Hardware Error", kGhes | kMce},
      {"BERT", kGhes},
      {"ERST", kGhes},
      {"HEST", kGhes},
      {"EINJ", kGhes},
      {"pstore", kGhes},
      {"EDAC", kEdac},
      {"mc_event", kEdac | kEdacTrace},
      {"mce", kMce | kReports},
      {"MCE", kMce},
      {"Machine Check", kMce},
      {"emory failure", kMemoryFailure},
      {"memory_failure", kMemoryFailure},
      {"HardwareCorrupted", kMemoryFailure},
      {"hardware memory corruption", kMemoryFailure},
      {"AER", kAer},
      {"PCIe Bus", kAer},
      {"NVRM", kNvidia},
      {"fallen off", kNvidia},
      {"amdgpu", kAmdgpu},
      {"EEPROM_VERSION", kAmdgpu},
      {"_SCHEMA", kAmdgpu},
      {"BAD_PAGE", kAmdgpu},
      {"ECC_BLOCK", kAmdgpu},
      {"ascend", kAscend},
      {"heartbeat", kAscend},
      {"drv api", kAscend},
      {"npu-smi", kAscend},
      {"507", kAscend},
      {"rasdaemon", kReports},
      {"events:", kReports},
      {"Memory errors", kReports},
      {"/edac/", kSysfs},
      {"<<<edac>>>", kSysfs},
      // Older and rarer wordings (kernel 3.10 to 6.x, tools' reports).
      {"MCE 0x", kMemoryFailure},
      {"MCE: 0x", kMemoryFailure},
      {"oft offlin", kMemoryFailure},
      {"recovery action", kMemoryFailure},
      {"page recovery", kMemoryFailure},
      {"CMCI", kMce},
      {"achine check", kMce},
      {"Hardware event", kMce},
      {"GHES", kGhes},
      {"Fatal hardware error", kGhes},
      {"DPC", kAer},
      {"Xid", kNvidia},
      {"ras-mc-ctl", kReports},
      {"Label", kReports},
      {"summary:", kReports},
      {"_event:", kReports},
      {"aca entry", kAmdgpu},
      {"context corrupt", kMce},
      {"Device_Absent", kAscend},
      {"PCI-Express Device Error", kAer},
      {"error: ", kReports},
      {"error(s)", kReports},
  };
  return kWords.Groups(line);
}

// Words that continue an open MCE or AER block: common in other lines too,
// so looked for only while such a block is open.
std::uint32_t ContinuationsOf(std::string_view line) {
  static const KeywordMatcher kWords = {
      {"TSC ", kMceContinuation},
      {"PROCESSOR", kMceContinuation},
      {"Bank ", kMceContinuation},
      {"Error Severity", kAerContinuation},
      {"Requester ID", kAerContinuation},
      {":    [", kAerContinuation},
      {"  device [", kAerContinuation},
      {"TLP Header", kAerContinuation},
      {"can't", kAerContinuation},
      {"link has been reset", kAerContinuation},
      {"device recovery", kAerContinuation},
      {"Agent", kAerContinuation},
  };
  return kWords.Groups(line);
}

}  // namespace

void KernelLogScanner::AddLine(std::string_view raw_line, std::uint64_t tag,
                               std::uint64_t position) {
  ++line_number_;
  line_tag_ = tag;
  line_position_ = position;
  // Blocks nobody continued within the gap are closed for good.
  ExpireBlocks();
  std::uint32_t families = FamiliesOf(raw_line);
  if (IsOpen(BlockKind::kMce) || IsOpen(BlockKind::kAer)) families |= ContinuationsOf(raw_line);
  // A report section or a sysfs dump continues only while its block is
  // open: after kBlockGapLines quiet lines, unrelated lines cost nothing.
  const bool in_report =
      (!section_.empty() && IsOpen(BlockKind::kReport)) ||
      ((checkmk_section_ || !sysfs_pending_path_.empty()) && IsOpen(BlockKind::kSysfs));
  if (in_report) families |= kReports | kSysfs;
  if (!nvidia_pending_bdf_.empty()) families |= kNvidia;
  // mcelog's report and npu-smi's table have few words of their own.
  if (IsOpen(BlockKind::kMcelog)) families |= kMce;
  if (IsOpen(BlockKind::kNpuSmi)) families |= kAscend;
  if ((families & kMceContinuation) != 0 && IsOpen(BlockKind::kMce)) families |= kMce;
  if ((families & kAerContinuation) != 0 && IsOpen(BlockKind::kAer)) families |= kAer;
  line_has_mc_event_ = (families & kEdacTrace) != 0;
  families &= ~(kMceContinuation | kAerContinuation | kEdacTrace);
  if (families == 0) return;  // most lines of a busy log end here
  const LogLine line = SplitLogLine(raw_line, /*find_anchor=*/!anchored_);
  if (line.text.empty()) return;
  // Order matters where formats overlap: GHES claims "[Hardware Error]"
  // lines only inside its own blocks, so AMD MCE decode lines fall through.
  static constexpr std::pair<std::uint32_t, Handler> kHandlers[] = {
      {kGhes, &KernelLogScanner::ScanGhes},
      {kEdac, &KernelLogScanner::ScanEdac},
      {kMce, &KernelLogScanner::ScanMce},
      {kMemoryFailure, &KernelLogScanner::ScanMemoryFailure},
      {kAer, &KernelLogScanner::ScanAer},
      {kNvidia, &KernelLogScanner::ScanNvidia},
      {kAmdgpu, &KernelLogScanner::ScanAmdgpu},
      {kAscend, &KernelLogScanner::ScanAscend},
      {kReports, &KernelLogScanner::ScanRasdaemon},
      {kSysfs, &KernelLogScanner::ScanSysfs},
  };
  for (const auto& [family, handler] : kHandlers) {
    if ((families & family) != 0 && (this->*handler)(line)) return;
  }
  if (Contains(line.text, "Hardware Error") || Contains(line.text, "EDAC") ||
      Contains(line.text, "Xid")) {
    ++undecoded_;
  }
}

void KernelLogScanner::Resolve(std::size_t index) {
  ScannedRecord& record = Record(index);
  if (auto named = named_mcs_.find(index); named != named_mcs_.end()) {
    auto nonzero = nonzero_mcs_.find(index);
    if (record.mc) {
      // decided by the record itself
    } else if (nonzero != nonzero_mcs_.end() && !nonzero->second.empty()) {
      record.mc = nonzero->second.front();
    } else {
      std::vector<int> distinct = named->second;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      if (distinct.size() == 1) record.mc = distinct.front();
    }
    named_mcs_.erase(named);
    if (nonzero != nonzero_mcs_.end()) nonzero_mcs_.erase(nonzero);
  }
  if (auto fallback = aer_fallback_bdf_.find(index); fallback != aer_fallback_bdf_.end()) {
    if (!record.pci_bdf) record.pci_bdf = fallback->second;
    aer_fallback_bdf_.erase(fallback);
  }
}

std::vector<ScannedRecord> KernelLogScanner::TakeCompleted() {
  std::vector<ScannedRecord> completed;
  TakeCompleted(completed);
  return completed;
}

void KernelLogScanner::TakeCompleted(std::vector<ScannedRecord>& out) {
  const std::size_t held_end = first_index_ + records_.size();
  std::size_t open_start = held_end;
  for (const auto& blocks : open_) {
    for (const auto& block : blocks) open_start = std::min(open_start, block.entry.index);
  }
  // The longest run of closed records none of whose lines reach the first
  // line of the record after the run.
  std::size_t end = first_index_;
  std::uint64_t last_line = 0;
  for (std::size_t index = first_index_; index <= open_start; ++index) {
    if (index == held_end) {
      end = index;
      break;
    }
    const std::uint64_t next_first = Record(index).first_position;
    if (next_first == 0 || last_line < next_first) end = index;
    if (index < open_start) last_line = std::max(last_line, Record(index).last_position);
  }
  if (end == first_index_) return;
  for (std::size_t index = first_index_; index < end; ++index) Resolve(index);
  const auto count = static_cast<std::ptrdiff_t>(end - first_index_);
  out.insert(out.end(), std::make_move_iterator(records_.begin()),
             std::make_move_iterator(records_.begin() + count));
  records_.erase(records_.begin(), records_.begin() + count);
  first_index_ = end;
}

std::optional<std::uint64_t> KernelLogScanner::OldestHeldPosition() const {
  for (const auto& record : records_) {
    if (record.first_position != 0) return record.first_position;
  }
  return std::nullopt;
}

void KernelLogScanner::CloseOpenBlocks() {
  for (auto& blocks : open_) blocks.clear();
  open_count_ = 0;
  section_.clear();
  checkmk_section_ = false;
  sysfs_pending_path_.clear();
}

std::vector<ScannedRecord> KernelLogScanner::Finish() {
  CloseOpenBlocks();
  return TakeCompleted();
}

std::vector<ScannedRecord> ScanKernelLog(std::string_view text, const CodeTable& codes) {
  KernelLogScanner scanner(codes);
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    scanner.AddLine(text.substr(0, newline));
    if (newline == std::string_view::npos) break;
    text.remove_prefix(newline + 1);
  }
  return scanner.Finish();
}

std::optional<ScannedRecord> MainRecord(const std::vector<ScannedRecord>& records) {
  const ScannedRecord* best = nullptr;
  for (const auto& record : records) {
    if (best == nullptr || record.severity > best->severity ||
        (record.severity == best->severity && best->notice && !record.notice)) {
      best = &record;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

}  // namespace rasd::ras
