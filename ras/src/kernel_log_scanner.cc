#include "rasd/ras/kernel_log_scanner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <thread>

#include "keyword_matcher.h"
#include "literal_search.h"
#include "scanner_words.h"
#include "scanner_words_database.h"

namespace rasd::ras {

nlohmann::json ScannedRecord::ToJson() const {
  auto optional = [](const auto& value) -> nlohmann::json {
    if (!value) return nullptr;
    return *value;
  };
  nlohmann::json json = {
      {"origin", origin},
      {"severity", std::string(SeverityName(severity))},
      {"xid", optional(xid)},
      {"pci_bdf", optional(pci_bdf)},
      {"mc", optional(mc)},
      {"address", address ? nlohmann::json(address->printed) : nlohmann::json()},
      {"count", count},
      {"message", message},
  };
  if (notice) json["notice"] = true;
  if (historical) json["historical"] = true;
  return json;
}

namespace {

// Bytes that JSON escapes, and bytes above ASCII.
constexpr std::array<bool, 256> kJsonSpecial = [] {
  std::array<bool, 256> special{};
  for (int c = 0; c < 0x20; ++c) special[static_cast<std::size_t>(c)] = true;
  for (int c = 0x80; c < 0x100; ++c) special[static_cast<std::size_t>(c)] = true;
  special['"'] = true;
  special['\\'] = true;
  return special;
}();

// The length of `text`'s start that has none of kJsonSpecial's bytes,
// sixteen bytes a step with the compiler's generic vectors (SSE2 on x86-64,
// NEON on the ARM hosts of Ascend nodes), then byte by byte: the per-byte
// loop alone was a tenth of a JSON scan.
std::size_t PlainPrefix(std::string_view text) {
  using Lanes = unsigned char __attribute__((vector_size(16)));
  std::size_t at = 0;
  for (; at + sizeof(Lanes) <= text.size(); at += sizeof(Lanes)) {
    Lanes lanes;
    std::memcpy(&lanes, text.data() + at, sizeof(Lanes));
    const auto special = (lanes < 0x20) | (lanes >= 0x80) | (lanes == '"') | (lanes == '\\');
    std::array<std::uint64_t, 2> halves{};
    std::memcpy(halves.data(), &special, sizeof(halves));
    if ((halves[0] | halves[1]) != 0) break;
  }
  while (at < text.size() && !kJsonSpecial[static_cast<unsigned char>(text[at])]) ++at;
  return at;
}

void AppendJsonString(std::string& out, std::string_view text) {
  // Most messages need no escape: one pass tells, and they are copied whole.
  const std::size_t plain = PlainPrefix(text);
  if (plain == text.size()) {
    out += '"';
    out.append(text.data(), text.size());
    out += '"';
    return;
  }
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

namespace {

// AppendJson of a record whose strings need no escape (nearly every one):
// its exact bytes written into room made for them at once, instead of a
// score of appends that each check the capacity. False, writing nothing,
// for a record with a string to escape.
bool AppendPlainJson(const ScannedRecord& record, std::string& out) {
  using namespace std::string_view_literals;
  auto plain = [](std::string_view text) { return PlainPrefix(text) == text.size(); };
  if (!plain(record.message) || !plain(record.origin) ||
      (record.address && !plain(record.address->printed)) ||
      (record.pci_bdf && !plain(*record.pci_bdf)))
    return false;
  constexpr std::size_t kFixedBytes = 256;  // keys, punctuation, numbers, nulls: about 200
  const std::size_t start = out.size();
  out.resize(start + kFixedBytes + record.message.size() + record.origin.size() +
             (record.address ? record.address->printed.size() : 0) +
             (record.pci_bdf ? record.pci_bdf->size() : 0));
  char* at = out.data() + start;
  auto put = [&at](std::string_view piece) {
    std::memcpy(at, piece.data(), piece.size());
    at += piece.size();
  };
  auto put_string = [&](std::string_view text) {
    *at++ = '"';
    put(text);
    *at++ = '"';
  };
  auto put_number = [&at](long long value) { at = std::to_chars(at, at + 24, value).ptr; };
  put("{\"address\":"sv);
  record.address ? put_string(record.address->printed) : put("null"sv);
  put(",\"count\":"sv);
  put_number(static_cast<long long>(record.count));
  if (record.historical) put(",\"historical\":true"sv);
  put(",\"mc\":"sv);
  record.mc ? put_number(*record.mc) : put("null"sv);
  put(",\"message\":"sv);
  put_string(record.message);
  if (record.notice) put(",\"notice\":true"sv);
  put(",\"origin\":"sv);
  put_string(record.origin);
  put(",\"pci_bdf\":"sv);
  record.pci_bdf ? put_string(*record.pci_bdf) : put("null"sv);
  put(",\"severity\":"sv);
  put_string(SeverityName(record.severity));
  put(",\"xid\":"sv);
  record.xid ? put_number(*record.xid) : put("null"sv);
  *at++ = '}';
  out.resize(static_cast<std::size_t>(at - out.data()));
  return true;
}

}  // namespace

void ScannedRecord::AppendJson(std::string& out) const {
  if (AppendPlainJson(*this, out)) return;
  // Keys in nlohmann's (sorted) order. A scan prints a record a line:
  // string_view pieces (no strlen) and to_chars (no temporary string).
  using namespace std::string_view_literals;
  auto append_number = [&out](long long value) {
    std::array<char, 24> digits{};
    const auto end = std::to_chars(digits.data(), digits.data() + digits.size(), value).ptr;
    out.append(digits.data(), static_cast<std::size_t>(end - digits.data()));
  };
  out.reserve(out.size() + message.size() + origin.size() + 160);
  out += "{\"address\":"sv;
  if (address) {
    AppendJsonString(out, address->printed);
  } else {
    out += "null"sv;
  }
  out += ",\"count\":"sv;
  append_number(static_cast<long long>(count));
  if (historical) out += ",\"historical\":true"sv;
  out += ",\"mc\":"sv;
  if (mc) {
    append_number(*mc);
  } else {
    out += "null"sv;
  }
  out += ",\"message\":"sv;
  AppendJsonString(out, message);
  if (notice) out += ",\"notice\":true"sv;
  out += ",\"origin\":"sv;
  AppendJsonString(out, origin);
  out += ",\"pci_bdf\":"sv;
  if (pci_bdf) {
    AppendJsonString(out, *pci_bdf);
  } else {
    out += "null"sv;
  }
  out += ",\"severity\":\""sv;
  out += SeverityName(severity);  // plain ASCII names
  out += "\",\"xid\":"sv;
  if (xid) {
    append_number(*xid);
  } else {
    out += "null"sv;
  }
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

struct KernelLogScanner::TextSearch {
  LiteralSearch::ScratchPtr scratch;
  std::vector<LiteralSearch::Hit> hits;
};

KernelLogScanner::KernelLogScanner(const CodeTable& codes) : codes_(&codes) {}
KernelLogScanner::~KernelLogScanner() = default;
KernelLogScanner::KernelLogScanner(KernelLogScanner&&) noexcept = default;
KernelLogScanner& KernelLogScanner::operator=(KernelLogScanner&&) noexcept = default;

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
  if (open_count_ == 0 || line_number_ < next_expiry_line_) return;
  std::uint64_t next_expiry = std::numeric_limits<std::uint64_t>::max();
  for (auto& blocks : open_) {
    open_count_ -= std::erase_if(blocks, [this](const OpenBlockEntry& block) {
      return line_number_ - block.entry.last_line > kBlockGapLines;
    });
    for (const auto& block : blocks)
      next_expiry = std::min(next_expiry, block.entry.last_line + kBlockGapLines + 1);
  }
  next_expiry_line_ = next_expiry;
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
  next_expiry_line_ = std::min(next_expiry_line_, line_number_ + kBlockGapLines + 1);
}

void KernelLogScanner::CloseBlock(BlockKey key) {
  auto& blocks = open_[static_cast<std::size_t>(key.kind)];
  open_count_ -=
      std::erase_if(blocks, [&key](const OpenBlockEntry& block) { return block.sub == key.sub; });
}

namespace {

using namespace scanner_words;  // NOLINT(google-build-using-namespace): the scanner's own words

std::uint32_t FamiliesOf(std::string_view line) {
  static const KeywordMatcher kWords(
      std::vector<Word>(std::begin(kFamilyWords), std::end(kFamilyWords)));
  return kWords.Groups(line);
}

std::uint32_t ContinuationsOf(std::string_view line) {
  static const KeywordMatcher kWords(
      std::vector<Word>(std::begin(kContinuationWords), std::end(kContinuationWords)));
  return kWords.Groups(line);
}

// AddText's search: both lists at once. A continuation word's hit is
// dropped by ScanLine unless its block is open.
const LiteralSearch& AllWords() {
  // Loaded from the database compiled with rasd where it fits this CPU.
  static const LiteralSearch kSearch(
      AllWordsInOrder(), std::string_view(reinterpret_cast<const char*>(kScannerWordsDatabase),
                                          kScannerWordsDatabaseSize));
  return kSearch;
}

// Newlines in [data, data + size). A byte-wide count per 255 bytes, which
// the compiler turns into 16- or 32-byte compares and subtracts; std::count
// widens every byte's count to 64 bits and runs at a third of the speed.
std::uint64_t CountNewlines(const char* data, std::size_t size) {
  std::uint64_t total = 0;
  while (size > 0) {
    const std::size_t block = std::min<std::size_t>(size, 255);
    std::uint8_t count = 0;
    for (std::size_t i = 0; i < block; ++i)
      count = static_cast<std::uint8_t>(count + (data[i] == '\n'));
    total += count;
    data += block;
    size -= block;
  }
  return total;
}

// Lines in `text`: its newlines, and a last line without one.
std::uint64_t CountLines(std::string_view text) {
  if (text.empty()) return 0;
  return CountNewlines(text.data(), text.size()) + (text.back() != '\n' ? 1 : 0);
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
  DecodeLine(raw_line, families);
}

void KernelLogScanner::ScanLine(std::string_view raw_line, std::uint32_t words,
                                std::uint64_t position) {
  ++line_number_;
  line_tag_ = 0;
  line_position_ = position;
  ExpireBlocks();
  if (!IsOpen(BlockKind::kMce) && !IsOpen(BlockKind::kAer))
    words &= ~(kMceContinuation | kAerContinuation);
  DecodeLine(raw_line, words);
}

bool KernelLogScanner::NeedsEveryLine() const {
  // DecodeLine's conditions for decoding a line without a word of its own.
  return !nvidia_pending_bdf_.empty() || (!section_.empty() && IsOpen(BlockKind::kReport)) ||
         ((checkmk_section_ || !sysfs_pending_path_.empty()) && IsOpen(BlockKind::kSysfs)) ||
         IsOpen(BlockKind::kMcelog) || IsOpen(BlockKind::kNpuSmi) || IsOpen(BlockKind::kHlSmi) ||
         IsOpen(BlockKind::kNvidiaSmi) || IsOpen(BlockKind::kContinued);
}

bool KernelLogScanner::InSyncWith(const KernelLogScanner& other) const {
  auto no_live_block = [](const KernelLogScanner& scanner) {
    if (scanner.open_count_ == 0) return true;
    for (const auto& blocks : scanner.open_) {
      for (const auto& block : blocks) {
        if (scanner.line_number_ + 1 - block.entry.last_line <= kBlockGapLines) return false;
      }
    }
    return true;
  };
  // A report section's name outlives its block, but without the block it
  // changes nothing: ScanRasdaemon gives up on the line either way.
  return no_live_block(*this) && no_live_block(other) &&
         nvidia_pending_bdf_ == other.nvidia_pending_bdf_ &&
         devlink_device_ == other.devlink_device_ && devlink_reporter_ == other.devlink_reporter_ &&
         checkmk_section_ == other.checkmk_section_ &&
         sysfs_pending_path_ == other.sysfs_pending_path_;
}

void KernelLogScanner::CarryStateFrom(const KernelLogScanner& other) {
  nvidia_pending_bdf_ = other.nvidia_pending_bdf_;
  devlink_device_ = other.devlink_device_;
  devlink_reporter_ = other.devlink_reporter_;
  checkmk_section_ = other.checkmk_section_;
  sysfs_pending_path_ = other.sysfs_pending_path_;
}

void KernelLogScanner::AddText(std::string_view text) { ScanTextPart(text, false, 0); }

void KernelLogScanner::AddTextAt(std::string_view text, std::uint64_t text_offset) {
  ScanTextPart(text, true, text_offset);
}

void KernelLogScanner::ScanTextPart(std::string_view text, bool positions,
                                    std::uint64_t text_offset) {
  // Vectorscan takes at most 4 GiB a call, and the hits of a part are
  // kept: parts of at most 64 MiB, cut after a line.
  constexpr std::size_t kPartBytes = std::size_t{64} << 20;
  while (text.size() > kPartBytes) {
    std::size_t cut = text.rfind('\n', kPartBytes - 1);
    cut = cut == std::string_view::npos ? text.find('\n', kPartBytes) : cut;
    if (cut == std::string_view::npos) break;  // one huge line
    ScanTextPart(text.substr(0, cut + 1), positions, text_offset);
    text.remove_prefix(cut + 1);
    text_offset += cut + 1;
  }
  if (text.empty()) return;
  if (!text_search_) {
    text_search_ = std::make_unique<TextSearch>();
    text_search_->scratch = AllWords().NewScratch();
  }
  auto& hits = text_search_->hits;
  AllWords().FindAll(text, *text_search_->scratch, hits);
  const char* data = text.data();
  const std::size_t size = text.size();
  std::size_t pos = 0;  // the start of the next line
  std::size_t next_hit = 0;
  while (pos < size) {
    if (!NeedsEveryLine()) {
      // Lines up to the next hit's have none of the words: AddLine would
      // only count them (blocks they let expire expire on the next line
      // scanned, as AddLine's gap test gives the same answer then).
      if (next_hit == hits.size()) {
        line_number_ += CountLines(text.substr(pos));
        return;
      }
      const std::size_t hit_last = hits[next_hit].end - 1;  // words have no '\n'
      const void* newline = memrchr(data + pos, '\n', hit_last - pos);
      const std::size_t line_start =
          newline == nullptr
              ? pos
              : static_cast<std::size_t>(static_cast<const char*>(newline) - data) + 1;
      line_number_ += CountNewlines(data + pos, line_start - pos);
      pos = line_start;
    }
    const void* newline = std::memchr(data + pos, '\n', size - pos);
    const std::size_t end =
        newline == nullptr ? size
                           : static_cast<std::size_t>(static_cast<const char*>(newline) - data);
    std::uint32_t words = 0;
    while (next_hit < hits.size() && hits[next_hit].end <= end) words |= hits[next_hit++].group;
    ScanLine(text.substr(pos, end - pos), words, positions ? text_offset + pos + 1 : 0);
    pos = end + 1;
  }
}

void KernelLogScanner::DecodeLine(std::string_view raw_line, std::uint32_t families) {
  // A report section or a sysfs dump continues only while its block is
  // open: after kBlockGapLines quiet lines, unrelated lines cost nothing.
  const bool in_report =
      (!section_.empty() && IsOpen(BlockKind::kReport)) ||
      ((checkmk_section_ || !sysfs_pending_path_.empty()) && IsOpen(BlockKind::kSysfs));
  if (in_report) families |= kReports | kSysfs;
  if (!nvidia_pending_bdf_.empty()) families |= kNvidia;
  // mcelog's report and npu-smi's table have few words of their own.
  // (Every condition here that adds a family without a word of the line's
  // own must be in NeedsEveryLine too.)
  if (IsOpen(BlockKind::kMcelog)) families |= kMce;
  if (IsOpen(BlockKind::kNpuSmi)) families |= kAscend;
  if (IsOpen(BlockKind::kHlSmi)) families |= kDevices;
  if (IsOpen(BlockKind::kNvidiaSmi)) families |= kNvidia;
  if ((families & kMceContinuation) != 0 && IsOpen(BlockKind::kMce)) families |= kMce;
  if ((families & kAerContinuation) != 0 && IsOpen(BlockKind::kAer)) families |= kAer;
  line_has_mc_event_ = (families & kEdacTrace) != 0;
  families &= ~(kMceContinuation | kAerContinuation | kEdacTrace);
  const bool continued = IsOpen(BlockKind::kContinued);
  if (families == 0 && !continued) return;  // most lines of a busy log end here
  const LogLine line = SplitLogLine(raw_line, /*find_anchor=*/!anchored_);
  if (line.text.empty()) return;
  if (continued && ScanContinuedRecord(line, families != 0)) return;
  if (families == 0) return;
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
      {kDevices, &KernelLogScanner::ScanHabanalabs},
      {kDevices, &KernelLogScanner::ScanMlx5},
      {kPlatform, &KernelLogScanner::ScanPlatform},
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
  scanner.AddText(text);
  return scanner.Finish();
}

// A part's records, formatted where they were made.
struct ChunkedLogScanner::Formatted {
  struct Entry {
    std::uint64_t first_position = 0;
    std::size_t end = 0;  // of its output in `text`
    Severity severity = Severity::kInfo;
    std::string origin;
  };
  std::string text;
  std::vector<Entry> entries;
  std::map<std::pair<std::string, Severity>, std::uint64_t> by_origin;  // of all entries

  void Clear() {  // keeps the capacity for the next window
    text.clear();
    entries.clear();
    by_origin.clear();
  }
};

ChunkedLogScanner::ChunkedLogScanner(unsigned threads, Format format, Deliver deliver,
                                     const CodeTable& codes)
    : threads_(std::max(threads, 1U)),
      format_(std::move(format)),
      deliver_(std::move(deliver)),
      codes_(&codes) {}

ChunkedLogScanner::~ChunkedLogScanner() = default;

void ChunkedLogScanner::DeliverFormatted(const Formatted& formatted) {
  // Records are in the order of their first lines: those the scanner
  // before delivered are a prefix.
  std::size_t from = 0;
  std::size_t start = 0;
  while (from < formatted.entries.size() &&
         formatted.entries[from].first_position <= current_skip_) {
    start = formatted.entries[from].end;
    ++from;
  }
  stats_.records += formatted.entries.size() - from;
  for (const auto& [key, count] : formatted.by_origin) stats_.by_origin[key] += count;
  for (std::size_t i = 0; i < from; ++i) {
    const auto& entry = formatted.entries[i];
    auto it = stats_.by_origin.find({entry.origin, entry.severity});
    if (--it->second == 0) stats_.by_origin.erase(it);
  }
  if (start < formatted.text.size()) deliver_(std::string_view(formatted.text).substr(start));
}

void ChunkedLogScanner::DeliverRecords(std::vector<ScannedRecord>& records) {
  output_.clear();
  for (const auto& record : records) {
    if (record.first_position != 0 && record.first_position <= current_skip_) continue;
    ++stats_.records;
    ++stats_.by_origin[{record.origin, record.severity}];
    format_(record, output_);
  }
  records.clear();
  if (!output_.empty()) deliver_(output_);
}

void ChunkedLogScanner::Add(std::string_view text, std::size_t part_bytes) {
  std::vector<std::size_t> boundaries;
  part_bytes = std::max<std::size_t>(part_bytes, 1);
  for (std::size_t at = part_bytes; at < text.size();) {
    const std::size_t newline = text.find('\n', at - 1);
    if (newline == std::string_view::npos) break;
    boundaries.push_back(newline + 1);
    at = newline + 1 + part_bytes;
  }
  Add(text, boundaries);
}

void ChunkedLogScanner::Add(std::string_view text, const std::vector<std::size_t>& boundaries) {
  if (text.empty()) return;
  std::vector<std::size_t> starts = {0};
  for (std::size_t boundary : boundaries) {
    if (boundary > starts.back() && boundary < text.size() && text[boundary - 1] == '\n')
      starts.push_back(boundary);
  }
  starts.push_back(text.size());
  const std::size_t parts = starts.size() - 1;
  struct Part {
    std::unique_ptr<KernelLogScanner> scanner;
    Formatted* formatted = nullptr;
  };
  if (formatted_.size() < threads_) formatted_.resize(threads_);
  std::size_t current_end = 0;  // in `text`: where current_ has read to
  for (std::size_t window = 0; window < parts; window += threads_) {
    const std::size_t count = std::min<std::size_t>(threads_, parts - window);
    std::vector<Part> scanned(count);
    // The state that outlives blocks, as the scan has it here: it changes
    // rarely, so the parts of this window most likely start with it too.
    KernelLogScanner seed(*codes_);
    if (current_) seed.CarryStateFrom(*current_);
    auto scan = [&](std::size_t k) {
      const std::size_t part = window + k;
      Part& out = scanned[k];
      out.formatted = &formatted_[k];
      out.formatted->Clear();
      out.scanner = std::make_unique<KernelLogScanner>(*codes_);
      out.scanner->CarryStateFrom(seed);
      // In slices, taking and formatting records after each: they are
      // freed on this thread soon after they were made, so the allocator
      // reuses their memory instead of faulting in more.
      constexpr std::size_t kSliceBytes = 256 << 10;
      std::vector<ScannedRecord> records;
      std::size_t from = starts[part];
      while (from < starts[part + 1]) {
        std::size_t end = std::min(starts[part + 1], from + kSliceBytes);
        if (end < starts[part + 1]) {
          const std::size_t newline = text.find('\n', end - 1);
          end = std::min(starts[part + 1], newline + 1);
        }
        out.scanner->AddTextAt(text.substr(from, end - from), offset_ + from);
        from = end;
        out.scanner->TakeCompleted(records);
        for (const auto& record : records) {
          format_(record, out.formatted->text);
          out.formatted->entries.push_back(
              {record.first_position, out.formatted->text.size(), record.severity, record.origin});
          ++out.formatted->by_origin[{record.origin, record.severity}];
        }
        records.clear();
      }
    };
    std::vector<std::thread> workers;
    for (std::size_t k = 1; k < count; ++k) workers.emplace_back(scan, k);
    scan(0);
    for (auto& worker : workers) worker.join();

    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t part = window + k;
      Part& next = scanned[k];
      stats_.lines += next.scanner->LinesRead();
      if (!current_) {
        current_ = std::move(next.scanner);
        current_end = starts[part + 1];
        DeliverFormatted(*next.formatted);
        continue;
      }
      // current_ reads on from the boundary beside a new scanner (which
      // reads what `next` read) until the two are in sync at the same line.
      KernelLogScanner fresh(*codes_);
      fresh.CarryStateFrom(seed);
      std::size_t at = current_end;
      bool synced = false;
      while (true) {
        if (current_->InSyncWith(fresh)) {
          synced = true;
          break;
        }
        if (at == starts[part + 1]) break;
        const std::size_t newline = text.find('\n', at);
        const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
        current_->AddLine(text.substr(at, end - at), 0, offset_ + at + 1);
        fresh.AddLine(text.substr(at, end - at), 0, offset_ + at + 1);
        at = std::min(end + 1, text.size());
      }
      current_end = starts[part + 1];
      if (!synced) {  // the part is inside a block: current_ read it all
        current_->TakeCompleted(batch_);
        DeliverRecords(batch_);
        continue;
      }
      current_->CloseOpenBlocks();  // in sync: closes only blocks past their gap
      current_->TakeCompleted(batch_);
      DeliverRecords(batch_);
      stats_.undecoded += current_->UndecodedLines();
      // `next` read the lines before `at` as `fresh` did: not counted twice.
      stats_.undecoded -= fresh.UndecodedLines();
      current_ = std::move(next.scanner);
      current_skip_ = offset_ + at;  // records of lines before `at` came from the scanner before
      DeliverFormatted(*next.formatted);
    }
  }
  offset_ += text.size();
}

ChunkScanStats ChunkedLogScanner::Finish() {
  if (current_) {
    current_->CloseOpenBlocks();
    current_->TakeCompleted(batch_);
    DeliverRecords(batch_);
    stats_.undecoded += current_->UndecodedLines();
    current_.reset();
  }
  return stats_;
}

ChunkScanStats ScanKernelLogChunks(std::string_view text,
                                   const std::vector<std::size_t>& boundaries, unsigned threads,
                                   const ChunkedLogScanner::Format& format,
                                   const ChunkedLogScanner::Deliver& deliver,
                                   const CodeTable& codes) {
  ChunkedLogScanner scanner(threads, format, deliver, codes);
  scanner.Add(text, boundaries);
  return scanner.Finish();
}

std::optional<ScannedRecord> MainRecord(const std::vector<ScannedRecord>& records) {
  const ScannedRecord* best = nullptr;
  for (const auto& record : records) {
    // On a tie an error report outranks a notice, and a record of this
    // boot one of the boot before (a reset reason, BERT).
    const bool tie = best != nullptr && record.severity == best->severity;
    if (best == nullptr || record.severity > best->severity ||
        (tie && best->notice && !record.notice) ||
        (tie && best->notice == record.notice && best->historical && !record.historical)) {
      best = &record;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

}  // namespace rasd::ras
