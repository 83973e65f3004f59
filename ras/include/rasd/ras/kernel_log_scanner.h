#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/ras/address.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/log_line.h"
#include "rasd/ras/severity.h"

namespace rasd::ras {

// One hardware-error report recognised in a kernel log, with the fields the
// corpus (tests/data/README.md) defines. A record may span several lines
// (a GHES/CPER block, an MCE decode, an AER header with its details); they
// are kept in `lines`.
struct ScannedRecord {
  std::string origin;  // edac | mce | ghes | aer | memory_failure | nvidia_xid | nvswitch |
                       // amdgpu | ascend | habanalabs | mlx5 | arm | rasdaemon | sysfs
  Severity severity = Severity::kInfo;
  bool notice = false;      // a status or boot notice, not an error report
  bool historical = false;  // describes a previous boot (BERT)
  std::optional<int> xid;
  // The record's own recovery instruction, in its vendor's numbering: Xid
  // 154's "recovery action changed ... to 0x2 (...)" as NVML's
  // nvmlDeviceGpuRecoveryAction_t. Not in ToJson.
  std::optional<int> vendor_action;
  std::optional<std::string> pci_bdf;  // as printed
  std::optional<int> mc;
  // The memory module an EDAC error line names (its DIMM label, or its
  // location where the label says none); not in ToJson.
  std::optional<std::string> dimm;
  std::optional<Address> address;
  // The process the record names as the one that met the error (NVIDIA's
  // "pid=1234" after an Xid); not in ToJson.
  std::optional<std::int64_t> pid;
  std::uint64_t count = 1;             // errors the record reports
  std::uint64_t tag = 0;               // the caller's tag of its first line (kmsg: the timestamp)
  // Where its first and last lines sit in the caller's stream (kmsg: their
  // sequence numbers); 0 where the caller gives no positions.
  std::uint64_t first_position = 0;
  std::uint64_t last_position = 0;
  std::string message;                 // the record's key line, prefixes removed
  std::vector<std::string> lines;      // the raw lines

  // {"origin", "severity", "xid", "pci_bdf", "mc", "address", "message", ...}
  nlohmann::json ToJson() const;
  // Appends ToJson() serialized on one line (keys sorted, invalid UTF-8
  // replaced), byte for byte what nlohmann's dump gives, without building
  // the tree: `rasctl scan --json` prints a record in a fraction of the time.
  void AppendJson(std::string& out) const;
};

// Recognises RAS records in kernel log text of any common form: raw
// /dev/kmsg, dmesg with or without timestamps, dmesg -T, journalctl -k,
// syslog, trace_pipe text of the RAS tracepoints, rasdaemon and mcelog
// output, and sysfs dumps. Lines of one event are joined into one record;
// unrelated lines interleaved with a block are routed to their own records.
//
// Lines that are not RAS records cost one keyword prefilter. Never throws;
// any input is acceptable. Not thread-safe.
class KernelLogScanner {
 public:
  // `codes` classifies accelerator error codes; it must outlive the scanner
  // (or be replaced with SetCodeTable first).
  explicit KernelLogScanner(const CodeTable& codes = CodeTable::Default());
  ~KernelLogScanner();
  KernelLogScanner(KernelLogScanner&&) noexcept;
  KernelLogScanner& operator=(KernelLogScanner&&) noexcept;
  void SetCodeTable(const CodeTable& codes) { codes_ = &codes; }
  // A live kernel record (kmsg) is the message itself: a RAS word in its
  // middle (a USB device's product string, an audit record's file name) is
  // data, not a record. Off by default: saved logs carry prefixes nobody
  // listed, and lines cut mid-prefix.
  void SetAnchoredLines(bool anchored) { anchored_ = anchored; }

  // `tag` is copied into a record that this line starts. `position`, where
  // the caller gives one, is the line's place in its stream (increasing,
  // never 0): see OldestHeldPosition.
  void AddLine(std::string_view raw_line, std::uint64_t tag = 0, std::uint64_t position = 0);
  // Scans `text`, a run of whole lines (each ended by '\n'; a last line
  // without one counts as a line), with exactly the result of AddLine on
  // each line (tag 0, no position): one multi-literal search over the whole
  // text (Vectorscan where the build has it) finds the lines with a RAS
  // word, and only those, and the lines that continue a block that is open,
  // reach the decoders. The lines between cost the bytes they occupy; none
  // allocates. Lines may be split between calls only at line ends.
  void AddText(std::string_view text);
  // The same, giving each line the position `text_offset` + its offset in
  // `text` + 1: a byte position in the caller's file (never 0), which
  // records carry as first_position/last_position.
  void AddTextAt(std::string_view text, std::uint64_t text_offset);
  // Whether this scanner and `other` would scan the lines that follow in
  // the same way: neither has a block open (one touched within the gap),
  // and the state that outlives blocks (a pending NVIDIA message, the
  // device and reporter of `devlink health` output, a checkmk or sysfs
  // section) is equal. From such a line on, both give the
  // same records, which is what lets ChunkedLogScanner scan a file's parts
  // in parallel. (State a decoder keeps across lines must be covered here
  // and in CarryStateFrom.)
  bool InSyncWith(const KernelLogScanner& other) const;
  // Takes `other`'s state that outlives blocks (what InSyncWith compares
  // besides blocks): a scanner that starts where `other` is, seeded with
  // it, is in sync with it unless a block is open there.
  void CarryStateFrom(const KernelLogScanner& other);
  // Lines added so far.
  std::uint64_t LinesRead() const { return line_number_; }
  // Records that no open block can extend any more, in the order their
  // first lines appeared (for a follower: call after each batch of lines).
  // With positions, a record some of whose lines come after the first line
  // of a record still held (two blocks interleaved) is held with it, so
  // that no record taken has a line at or after OldestHeldPosition().
  std::vector<ScannedRecord> TakeCompleted();
  // The same, appended to `out`: a follower that reuses one vector keeps its
  // capacity, instead of allocating (and the allocator faulting in) a slice's
  // worth of records on every call.
  void TakeCompleted(std::vector<ScannedRecord>& out);
  // Closes every open block (the log has been quiet), so that TakeCompleted
  // returns everything.
  void CloseOpenBlocks();
  // Closes every open block and returns every record not taken yet.
  std::vector<ScannedRecord> Finish();

  // The position of the first line of the oldest record not taken yet
  // (an open block, or one waiting behind it); nullopt when none is held.
  // A follower that resumes from the line before it after a crash reads
  // every held record whole and no line of a record already taken.
  std::optional<std::uint64_t> OldestHeldPosition() const;

  // Lines that looked like RAS records (a keyword matched) but did not
  // decode into one.
  std::uint64_t UndecodedLines() const { return undecoded_; }

 private:
  using Handler = bool (KernelLogScanner::*)(const LogLine&);

  // AddLine after the keyword pass: `words` has the line's family and
  // continuation bits.
  void ScanLine(std::string_view raw_line, std::uint32_t words, std::uint64_t position);
  void DecodeLine(std::string_view raw_line, std::uint32_t families);
  // A line with none of the words may still matter (a report section, a
  // message whose end is on a later line): then every line is decoded.
  bool NeedsEveryLine() const;
  void ScanTextPart(std::string_view text, bool positions, std::uint64_t text_offset);

  bool ScanGhes(const LogLine& line);
  bool ScanMce(const LogLine& line);
  bool ScanMcelogReport(const LogLine& line);
  bool ScanEdac(const LogLine& line);
  bool ScanMemoryFailure(const LogLine& line);
  bool ScanAer(const LogLine& line);
  bool ScanAerBox(const LogLine& line);
  bool ScanNvidia(const LogLine& line);
  bool ScanNvswitch(const LogLine& line);
  bool ScanFabricManagerError(const LogLine& line);
  bool ScanNvidiaSmiQuery(const LogLine& line);
  bool ScanAmdgpu(const LogLine& line);
  bool ScanAcaDump(const LogLine& line, std::string_view body, std::string_view bdf);
  bool ScanAmdgpuDrmError(const LogLine& line);
  bool ScanAmdgpuRecovery(const LogLine& line, std::string_view body, std::string_view bdf);
  bool ScanAscend(const LogLine& line);
  bool ScanNpuSmiTable(const LogLine& line);
  // A line of a CANN runtime failure: its 507xxx code, or the cause CANN
  // prints beside it, which may make it an application's error.
  bool ScanCannFailure(const LogLine& line);
  bool ScanRasdaemon(const LogLine& line);
  bool ScanErrorCountRow(const LogLine& line, std::size_t block);
  bool ScanSysfs(const LogLine& line);
  bool ScanHabanalabs(const LogLine& line);
  bool ScanHlSmiTable(const LogLine& line);
  bool ScanMlx5(const LogLine& line);
  bool ScanPlatform(const LogLine& line);
  bool ScanCxl(const LogLine& line);
  bool ScanArmRecord(const LogLine& line);
  bool ScanResetReason(const LogLine& line);
  bool ScanBlockError(const LogLine& line);
  bool ScanDevlinkReport(const LogLine& line);
  bool ScanDevlinkTool(const LogLine& line);
  // A line that continues the open kContinued block; `own_words` says the
  // line has words of a family, so it is a record of its own, never the
  // text of another line's message.
  bool ScanContinuedRecord(const LogLine& line, bool own_words);
  // The class and host address of a `ras-mc-ctl --errors` row of a section
  // the platform decoders know (CXL, disk errors, devlink, ARM); nullopt
  // for other sections.
  static std::optional<Severity> PlatformRowSeverity(std::string_view section,
                                                     std::string_view row);
  static std::optional<Address> PlatformRowAddress(std::string_view section, std::string_view row);
  static std::string_view PlatformRowDevice(std::string_view section, std::string_view row);

  // Starts a record; the index stays valid until the record is taken.
  std::size_t NewRecord(std::string origin, const LogLine& line, Severity severity,
                        bool notice = false);
  ScannedRecord& Record(std::size_t index) { return records_[index - first_index_]; }
  // The kinds of multi-line block the decoders keep open. A kind with
  // several concurrent blocks tells them apart by a sub-key: a GHES source
  // id, a GPU's PCI address. Indexing by kind, not by a string, keeps the
  // open-block state free of allocation and hashing on the hot path.
  enum class BlockKind : std::uint8_t {
    kMce,
    kAer,
    kGhes,     // sub-key: the "{N}" source id; none for BERT and unnumbered blocks
    kEdacMce,  // an sb_edac/skx_edac decode block
    kAmdgpu,   // sub-key: the device's PCI address
    kReport,   // a rasdaemon or mcelog report section
    kSysfs,
    kAmdSmi,
    kMcelog,      // mcelog's multi-line report of one machine check
    kNpuSmi,      // an `npu-smi info` table
    kAca,         // sub-key: the device's PCI address; an amdgpu ACA register dump
    kDevice,      // sub-key: a device's name; one driver's lines about it (habanalabs, mlx5)
    kHlSmi,       // an `hl-smi` table
    kAmdgpuHang,  // sub-key: the device's PCI address; a ring timeout and its reset
    kNvswitch,    // sub-key: switch and SXid; the lines of one SXid event
    kNvidiaSmi,   // `nvidia-smi -q`'s memory sections
    kGsp,         // a GSP failure and the dumps and Xid that follow it
    kContinued,   // a record whose later lines have no words of their own (continued_)
    kCann,        // a CANN runtime failure: its 507xxx code, cause and traceback lines
  };
  static constexpr std::size_t kBlockKinds = 19;
  struct BlockKey {
    // A kind with one block at a time.
    BlockKey(BlockKind block_kind) : kind(block_kind) {}  // NOLINT(google-explicit-constructor)
    BlockKey(BlockKind block_kind, std::uint64_t block_sub) : kind(block_kind), sub(block_sub) {}
    // A GHES block by its "{N}" id (up to 7 bytes, packed exactly), or the
    // unnumbered one with an empty id.
    static BlockKey Ghes(std::string_view id);
    // An amdgpu device's block by its address, as IsPciBdf accepts it.
    static BlockKey Amdgpu(std::string_view bdf);
    // A device's block by its name as the driver prints it ("hl2",
    // "0000:41:00.0"), case-insensitively.
    static BlockKey Device(BlockKind kind, std::string_view device);
    BlockKind kind;
    std::uint64_t sub = 0;
  };
  // The open block under `key`, if one was touched within the last few
  // lines; touching it keeps it open. Log lines of one event are adjacent
  // or nearly so (other CPUs' messages may interleave).
  std::optional<std::size_t> OpenBlock(BlockKey key);
  void OpenAs(BlockKey key, std::size_t index);
  void CloseBlock(BlockKey key);
  bool IsOpen(BlockKind kind) const { return !open_[static_cast<std::size_t>(kind)].empty(); }
  void Attach(std::size_t index, const LogLine& line) {
    ScannedRecord& record = Record(index);
    record.lines.emplace_back(line.raw);
    if (line_position_ != 0) record.last_position = line_position_;
  }
  static void Raise(ScannedRecord& record, Severity severity);
  // The line joins the open record under `key` (raising its class, and
  // naming it by its first error line), or starts one; `bdf`, when given,
  // names the record's device if nothing did before.
  std::size_t JoinDeviceRecord(BlockKey key, const char* origin, const LogLine& line,
                               Severity severity, bool notice, std::string_view bdf);
  // The open table of `kind` that `line` (a "|" or "+" row) continues, with
  // the line attached; a line of another shape closes it.
  std::optional<std::size_t> ContinueTable(BlockKind kind, const LogLine& line);
  // A device row of a status table (npu-smi, hl-smi): the table's class is
  // its worst device's and so is its address (or the only device's).
  static void AddTableDevice(ScannedRecord& record, Severity health, std::string_view bdf,
                             std::size_t devices);
  // Resolves what a block could only decide once it was complete: the
  // memory controller of a report section, an AER device known only by id.
  void Resolve(std::size_t index);

  const CodeTable* codes_;
  bool anchored_ = false;
  struct TextSearch;  // AddText's search state: Vectorscan scratch, hits
  std::unique_ptr<TextSearch> text_search_;
  std::vector<ScannedRecord> records_;  // records_[0] has index first_index_
  std::size_t first_index_ = 0;
  struct OpenEntry {
    std::size_t index = 0;
    std::uint64_t last_line = 0;
  };
  static constexpr std::uint64_t kBlockGapLines = 8;
  struct OpenBlockEntry {
    std::uint64_t sub = 0;
    OpenEntry entry;
  };
  // By kind: the open blocks of that kind (one, or a few with sub-keys).
  // Vectors keep their capacity, so opening and closing blocks does not
  // allocate once a log has had a block of each kind.
  std::array<std::vector<OpenBlockEntry>, kBlockKinds> open_;
  std::size_t open_count_ = 0;  // entries in open_, so that no-block lines skip it
  // Drops the blocks nobody continued within the gap.
  void ExpireBlocks();
  // No open block expires before this line (touching a block only moves
  // its expiry later), so ExpireBlocks looks at them only from here on.
  std::uint64_t next_expiry_line_ = 0;
  std::uint64_t line_number_ = 0;
  std::uint64_t line_tag_ = 0;
  std::uint64_t line_position_ = 0;
  std::uint64_t undecoded_ = 0;
  // The line being scanned has "mc_event" (a trace_pipe EDAC record): the
  // keyword pass found it, so ScanEdac need not look for it again.
  bool line_has_mc_event_ = false;
  // Multi-line state that is not a block of its own.
  std::string nvidia_pending_bdf_;
  std::optional<Severity> npu_row_health_;  // an npu-smi chip row waiting for its Bus-Id row
  std::size_t npu_chips_ = 0;
  int cann_code_ = 0;              // the 507xxx code of the open kCann block
  bool cann_device_lost_ = false;  // ... and a message of it said the device was lost
  std::size_t hl_smi_cards_ = 0;
  std::string section_;  // current rasdaemon or mcelog report section
  // iproute2's `devlink health` output: the device and reporter a "state"
  // line is about.
  std::string devlink_device_;
  std::string devlink_reporter_;
  // What the open kContinued block is: a CXL event its publisher wrapped
  // with trailing backslashes (the CxlRecord kind, as a number),
  // rasdaemon's multi-line log of a non-standard CPER section, or a
  // message whose text a publisher moved to the next line (kMessage: the
  // line so far waits in continued_text_ for `continued_handler_`).
  enum class Continued : std::uint8_t { kCxlWrapped, kNonStandard, kArm, kMessage };
  Continued continued_ = Continued::kCxlWrapped;
  std::uint8_t continued_cxl_kind_ = 0;
  bool continued_line_wrapped_ = false;  // the last line of the block ended with a backslash
  // Lines the open kContinued block took: a wrapped record is some tens of
  // lines, and one that goes on past kMaxContinuedLines is not one (a
  // file of backslashes would otherwise grow one record without bound).
  static constexpr std::size_t kMaxContinuedLines = 256;
  std::size_t continued_lines_ = 0;
  bool continued_arm_stated_ = false;  // the open ARM print stated its severity
  std::string continued_text_;
  std::string continued_raw_;
  Handler continued_handler_ = nullptr;
  // `line` ends where its message should start ("... reason [0x...]:",
  // "print_health_info:374:(pid 0):"): the next line, if it has no words
  // of its own, is that message, and `handler` decodes the two as one.
  void ContinueMessage(const LogLine& line, Handler handler);
  bool checkmk_section_ = false;
  std::string sysfs_pending_path_;
  std::map<std::size_t, std::vector<int>> named_mcs_;    // controllers a section names
  std::map<std::size_t, std::vector<int>> nonzero_mcs_;  // controllers with errors
  std::map<std::size_t, std::string> aer_fallback_bdf_;  // from an "id=" header
};

// Scans a whole text.
std::vector<ScannedRecord> ScanKernelLog(std::string_view text,
                                         const CodeTable& codes = CodeTable::Default());

// What a chunked scan read: lines, records by origin and class, and lines
// that looked like RAS records but did not decode (UndecodedLines).
struct ChunkScanStats {
  std::uint64_t lines = 0;
  std::uint64_t records = 0;
  std::map<std::pair<std::string, Severity>, std::uint64_t> by_origin;
  std::uint64_t undecoded = 0;
};

// Scans a text in parts, on up to `threads` threads, and hands `deliver`
// the output of the records a serial scan of the whole text gives
// (AddTextAt from offset 0), in the same order, as they are settled.
// The text comes in pieces of whole lines (Add), each split into parts at
// `boundaries`. Each part is scanned by a scanner of its own from its
// start, seeded (CarryStateFrom) with the state the scan had where the
// window of parts began; where the scanner of the part before reaches it,
// that one reads on, line by line, until the two are in sync (InSyncWith)
// at the same line: from there on the new part's records are exactly the
// serial scan's, and its records before that line are dropped. A block
// that straddles a boundary therefore comes out whole, and a part
// swallowed by a block that never closes is read by the scanner before it
// (serially).
//
// `format` turns a record into output (JSON, a table row) on the scanning
// threads, so that records are freed where they were made; it must be
// thread-safe and do nothing else, since the output of a record that is
// then dropped is discarded. `deliver` runs on the calling thread. Parts
// are scanned `threads` at a time, so memory stays bounded by a window of
// parts. Not thread-safe.
class ChunkedLogScanner {
 public:
  using Format = std::function<void(const ScannedRecord& record, std::string& out)>;
  using Deliver = std::function<void(std::string_view output)>;
  ChunkedLogScanner(unsigned threads, Format format, Deliver deliver,
                    const CodeTable& codes = CodeTable::Default());
  ~ChunkedLogScanner();

  // `text` continues the text given so far and ends at a line end (or is
  // the last piece); parts start at `boundaries`, offsets in `text` that
  // start a line (others are ignored), and at `text`'s start.
  void Add(std::string_view text, const std::vector<std::size_t>& boundaries);
  // Add with a boundary at the first line start after every `part_bytes`.
  void Add(std::string_view text, std::size_t part_bytes);
  // Closes every open block and delivers the remaining records.
  ChunkScanStats Finish();

 private:
  struct Formatted;
  void DeliverRecords(std::vector<ScannedRecord>& records);
  void DeliverFormatted(const Formatted& formatted);

  unsigned threads_;
  Format format_;
  Deliver deliver_;
  const CodeTable* codes_;
  ChunkScanStats stats_;
  std::uint64_t offset_ = 0;  // of the next piece's start in the whole text
  // The scanner that has read everything so far as a serial scan would;
  // its records at or before `current_skip_` came from the one before it.
  std::unique_ptr<KernelLogScanner> current_;
  std::uint64_t current_skip_ = 0;
  std::vector<ScannedRecord> batch_;
  std::string output_;
  std::vector<Formatted> formatted_;  // one a thread, reused window after window
};

// One text, with a ChunkedLogScanner.
ChunkScanStats ScanKernelLogChunks(std::string_view text,
                                   const std::vector<std::size_t>& boundaries, unsigned threads,
                                   const ChunkedLogScanner::Format& format,
                                   const ChunkedLogScanner::Deliver& deliver,
                                   const CodeTable& codes = CodeTable::Default());

// The text's main record, as the corpus labels a text: the worst severity;
// on a tie an error report before a notice, then a record of this boot
// before one of the previous boot, then the first. Fields the main
// record lacks stay empty. nullopt when nothing was recognised.
std::optional<ScannedRecord> MainRecord(const std::vector<ScannedRecord>& records);

// MCi_STATUS bits -> class, per the corpus rules (UC, PCC, S, AR).
Severity ClassifyMciStatus(std::uint64_t status);

}  // namespace rasd::ras
