// The platform around the CPU and the accelerators, decoded from the
// formats' sources:
//
// - CXL memory devices. The cxl: trace events as trace_pipe prints them
//   (drivers/cxl/core/trace.h: CXL_EVT_TP_printk's "memdev=%s host=%s
//   serial=%lld log=%s : ...", general media and DRAM "descriptor='%s' ...
//   hpa=%llx", memory module "health_status='%s' media_status='%s'", poison
//   "trace_type=%s ... hpa=0x%llx", the AER events "status: '%s'"),
//   rasdaemon's log of the same events (ras-cxl-handler.c: "memdev:%s
//   host:%s ... log type:%s ... descriptor:'%s' ... hpa:0x%llx"), and the
//   cxl_pci driver's error handling (drivers/cxl/core/ras.c and pci.c:
//   "frozen state error detected, disable CXL.mem", "failure state error
//   detected, request disconnect", "memdev disabled, abort error
//   handling", "mailbox timeout", the panic "CXL cachemem error.").
// - ARM processor error records: ras:arm_event (include/ras/ras_event.h:
//   "cpu: %d; error: %d; affinity level: %d; MPIDR: ..." since 6.14,
//   "affinity level: %d; MPIDR: %016llx; ..." before) and rasdaemon's
//   decode of them (ras-arm-handler.c: "the error has been corrected",
//   "the error has not been corrected", "processor context corrupted").
// - Firmware's non-standard CPER sections: ras:non_standard_event
//   ("severity: %d; sec type:%pU; FRU: %pU %s; ...") and rasdaemon's
//   (ras-non-standard-handler.c: "Informational", "Corrected",
//   "Recoverable", "Fatal").
// - AMD's reason for the previous reset (arch/x86/kernel/cpu/amd.c, 6.16:
//   "x86/amd: Previous system reset reason [0x%08x]: %s", the
//   s5_reset_reason_txt table).
// - Block-layer I/O errors (block/blk-core.c blk_print_req_error: "%s error,
//   dev %s, sector %llu op 0x%x:(%s) ...", with the blk_errors names; the
//   "blk_update_request: " and "end_request: " prefixes of older kernels;
//   fs/buffer.c "Buffer I/O error on dev %s"; the block:block_rq_error
//   trace text "%d,%d %s (%s) %llu + %u %s [%d]", and block_rq_complete's
//   "%d,%d %s (%s) %llu + %u [%d]" with a negative errno).
// - devlink health reports (include/trace/events/devlink.h
//   devlink_health_report: "bus_name=%s dev_name=%s driver_name=%s
//   reporter_name=%s: %s").
//
// Severity where the text states none is decided by what it states; the
// rules are tests/data/README.md's "The third corpus".

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>
#include <utility>

#include "rasd/ras/kernel_log_scanner.h"
#include "scan_util.h"

namespace rasd::ras {

using scan::IsPciBdf;
using scan::WordAfter;

namespace {

bool IsFieldStop(char c) { return c == ' ' || c == ',' || c == ';' || c == '\'' || c == '"'; }

// The value of `key` in a line of key=value or key:value fields (trace
// text, rasdaemon's log, ras-mc-ctl's rows): the key starts the text or
// follows a separator, and a quoted value runs to its closing quote.
std::string_view FieldValue(std::string_view text, std::string_view key) {
  for (std::size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    if (at > 0 && !IsFieldStop(text[at - 1])) continue;
    std::size_t value = at + key.size();
    if (value >= text.size() || (text[value] != '=' && text[value] != ':')) continue;
    ++value;
    while (value < text.size() && text[value] == ' ') ++value;
    if (value < text.size() && text[value] == '\'') {
      const std::size_t close = text.find('\'', value + 1);
      if (close == std::string_view::npos) return text.substr(value + 1);
      return text.substr(value + 1, close - value - 1);
    }
    std::size_t end = value;
    while (end < text.size() && !IsFieldStop(text[end])) ++end;
    return text.substr(value, end - value);
  }
  return {};
}

enum class CxlRecord : std::uint8_t {
  kMedia,          // general media, DRAM: the descriptor decides
  kModule,         // memory module: its log, health and media status
  kPoison,         // poison list entries
  kUncorrectable,  // the RAS capability's uncorrectable status
  kCorrectable,
  kByLog,  // overflow, generic: the log's class
};

struct CxlEvent {
  std::string_view name;
  CxlRecord kind;
};

// Longest names first where one is the start of another.
constexpr std::array<CxlEvent, 10> kCxlEvents = {{
    {"cxl_general_media", CxlRecord::kMedia},
    {"cxl_dram", CxlRecord::kMedia},
    {"cxl_memory_module", CxlRecord::kModule},
    {"cxl_poison", CxlRecord::kPoison},
    {"cxl_port_aer_uncorrectable_error", CxlRecord::kUncorrectable},
    {"cxl_aer_uncorrectable_error", CxlRecord::kUncorrectable},
    {"cxl_port_aer_correctable_error", CxlRecord::kCorrectable},
    {"cxl_aer_correctable_error", CxlRecord::kCorrectable},
    {"cxl_overflow", CxlRecord::kByLog},
    {"cxl_generic_event", CxlRecord::kByLog},
}};

// rasdaemon's `ras-mc-ctl --errors` sections of the same records.
constexpr std::array<std::pair<std::string_view, CxlRecord>, 8> kCxlSections = {{
    {"CXL general media", CxlRecord::kMedia},
    {"CXL DRAM", CxlRecord::kMedia},
    {"CXL memory module", CxlRecord::kModule},
    {"CXL poison", CxlRecord::kPoison},
    {"CXL AER uncorrectable", CxlRecord::kUncorrectable},
    {"CXL AER correctable", CxlRecord::kCorrectable},
    {"CXL overflow", CxlRecord::kByLog},
    {"CXL  generic", CxlRecord::kByLog},
}};

// The event log a record came from (Informational, Warning, Failure,
// Fatal: CXL 3.1 8.2.9.2), however the printer named the field.
Severity CxlLogSeverity(std::string_view text) {
  std::string_view log = FieldValue(text, "log");
  if (log.empty()) log = FieldValue(text, "log type");
  if (log.empty()) log = FieldValue(text, "log_type");
  if (StartsWith(log, "Fatal")) return Severity::kFatal;
  if (StartsWith(log, "Failure")) return Severity::kUce;
  if (StartsWith(log, "Warning")) return Severity::kCe;
  return Severity::kInfo;
}

Severity CxlSeverity(CxlRecord kind, std::string_view text) {
  const Severity by_log = CxlLogSeverity(text);
  switch (kind) {
    case CxlRecord::kMedia: {
      // Descriptor bit 0, UNCORRECTABLE_EVENT: the media could not correct
      // it. Spelled out by the kernel ('UNCORRECTABLE_EVENT|...') and by
      // ras-mc-ctl ('UNCORRECTABLE EVENT'), or printed as the number.
      bool uncorrectable = Contains(text, "UNCORRECTABLE");
      std::string_view descriptor = FieldValue(text, "descriptor");
      if (StartsWith(descriptor, "0x")) {
        descriptor.remove_prefix(2);
        uncorrectable = uncorrectable || (ParseNumber(descriptor, 16).value_or(0) & 1) != 0;
      }
      const Severity media = uncorrectable ? Severity::kUce : Severity::kCe;
      return by_log == Severity::kFatal ? Severity::kFatal : media;
    }
    case CxlRecord::kModule: {
      Severity severity = by_log;
      if (Contains(text, "REPLACEMENT_NEEDED") || Contains(text, "REPLACEMENT NEEDED"))
        severity = std::max(severity, Severity::kUce);
      // Media status 3 and 7-9: all data lost, now or at the next power loss.
      if (Contains(text, "All Data Los") || Contains(text, "All Data los"))
        severity = Severity::kFatal;
      return severity;
    }
    case CxlRecord::kPoison: {
      const std::string_view type = FieldValue(text, "trace_type");
      return StartsWith(type, "Clear") ? Severity::kInfo : Severity::kUce;
    }
    case CxlRecord::kUncorrectable:
      return Severity::kUce;
    case CxlRecord::kCorrectable:
      return Severity::kCe;
    case CxlRecord::kByLog:
      return by_log;
  }
  return Severity::kInfo;
}

// The host physical address a record names. The kernel writes ULLONG_MAX
// (and rasdaemon 0) where the device address maps to no region: then there
// is no host page.
// The PCI function a record is about: a port's own address (the port AER
// events print it as `device=`, older kernels as `memdev=`), else the
// memory device's parent (`host=`).
std::string_view CxlDevice(std::string_view text) {
  for (std::string_view key : {"device", "memdev", "host"}) {
    const std::string_view value = FieldValue(text, key);
    if (IsPciBdf(value)) return value;
    // A port by its name, then its function: "device=port1 (0000:0c:00.0)".
    if (key == "device" && !value.empty()) {
      const std::size_t after = static_cast<std::size_t>(value.data() - text.data()) + value.size();
      if (const std::string_view rest = text.substr(after); StartsWith(rest, " (")) {
        const std::string_view inner = WordAfter(rest, " (", ")");
        if (IsPciBdf(inner)) return inner;
      }
    }
  }
  return {};
}

std::optional<Address> CxlHostAddress(std::string_view text) {
  std::string_view hpa = FieldValue(text, "hpa");
  if (StartsWith(hpa, "0x")) hpa.remove_prefix(2);
  const auto value = ParseNumber(hpa, 16);
  if (!value || *value == 0 || *value == std::numeric_limits<unsigned long long>::max())
    return std::nullopt;
  return Address::Of(*value);
}

// What an ARM processor error record says of itself: the GHES severity
// newer kernels print ("error: N"), rasdaemon's decode of each error
// information structure, or a section severity word.
std::optional<Severity> ArmRecordSeverity(std::string_view body) {
  if (Contains(body, "processor context corrupted") && !Contains(body, "context not corrupted"))
    return Severity::kFatal;
  if (Contains(body, "has not been corrected")) return Severity::kUce;
  if (Contains(body, "has been corrected")) return Severity::kCe;
  const std::string_view error = WordAfter(body, "error: ", " ;,");
  if (auto sev = ParseNumber(error); sev && error.size() == 1) return SeverityOfGhesNumber(*sev);
  for (const auto& [word, severity] :
       std::array<std::pair<std::string_view, Severity>, 4>{{{"Fatal", Severity::kFatal},
                                                             {"Recoverable", Severity::kUce},
                                                             {"Corrected", Severity::kCe},
                                                             {"Informational", Severity::kInfo}}}) {
    if (Contains(body, word)) return severity;
  }
  return std::nullopt;
}

// blk_errors' names (block/blk-core.c) as blk_print_req_error and the
// block_rq_error event print them. A transport error the layer retried is
// corrected; a request the device or the kernel refused for want of
// support, memory or a free slot moved no data but met no failing
// hardware; every other name is data the device lost or could not move.
Severity BlockErrorSeverity(std::string_view name) {
  if (Contains(name, "recoverable transport")) return Severity::kCe;
  for (std::string_view refused : {"not supported", "kernel resource", "device resource", "again",
                                   "duration limit", "invalid", "zones exceeded"}) {
    if (Contains(name, refused)) return Severity::kInfo;
  }
  return Severity::kUce;
}

// Disks with no hardware of their own to fail, or an empty drive: an
// optical drive without a disc (sr), a floppy (fd), loop, nbd, zram and
// RAM disks. Their I/O errors are a missing medium or a backing file, not
// a device going bad.
bool IsMediaLessDisk(std::string_view disk) {
  for (std::string_view name : {"sr", "fd", "loop", "nbd", "zram", "ram"}) {
    if (disk.size() > name.size() && StartsWith(disk, name) &&
        std::isdigit(static_cast<unsigned char>(disk[name.size()])))
      return true;
  }
  return false;
}

// s5_reset_reason_txt (arch/x86/kernel/cpu/amd.c): the hardware's own
// reasons for a reset. An uncorrected error's sync flood, a parity error
// and a CPU shutdown event are the previous boot's fatal errors; a thermal
// trip is hardware stopping itself; the rest are buttons, software and
// firmware resets.
Severity ResetReasonSeverity(std::string_view reason) {
  if (Contains(reason, "uncorrected error") || Contains(reason, "sync flood") ||
      Contains(reason, "parity error") || Contains(reason, "shutdown event"))
    return Severity::kFatal;
  if (Contains(reason, "thermal") || Contains(reason, "THERMTRIP")) return Severity::kUce;
  return Severity::kInfo;
}

// The reporter a devlink health report names: mlx5's fw_fatal is a
// firmware fatal error (the function is reset), fw a syndrome the device
// survives; queue reporters (tx, rx) a queue the driver recovers.
Severity DevlinkReporterSeverity(std::string_view reporter) {
  if (reporter == "fw_fatal") return Severity::kFatal;
  if (reporter == "fw") return Severity::kUce;
  return Severity::kCe;
}

// A line its publisher wrapped: it goes on in the next one.
bool EndsWithBackslash(std::string_view text) {
  text = TrimView(text);
  return !text.empty() && text.back() == '\\';
}

}  // namespace

bool KernelLogScanner::ScanPlatform(const LogLine& line) {
  return ScanCxl(line) || ScanArmRecord(line) || ScanResetReason(line) || ScanBlockError(line) ||
         ScanDevlinkReport(line) || ScanDevlinkTool(line);
}

void KernelLogScanner::ContinueMessage(const LogLine& line, Handler handler) {
  continued_text_.assign(TrimView(line.text));
  continued_raw_.assign(line.raw);
  continued_handler_ = handler;
  continued_ = Continued::kMessage;
  // No record yet: the block's index is never read for kMessage.
  OpenAs(BlockKind::kContinued, first_index_ + records_.size());
}

// The later lines of a record that spans lines without the words that
// find its first: a CXL event wrapped with backslashes (commit messages
// and rasdaemon's examples print them so), where the descriptor, the log
// and hpa may be on any line; rasdaemon's multi-line non-standard event,
// whose second line is the severity word (err_severity: Informational,
// Corrected, Recoverable, Fatal) and whose others are the section type,
// FRU, length and a hex dump; a message a publisher wrapped after its
// prefix.
bool KernelLogScanner::ScanContinuedRecord(const LogLine& line, bool own_words) {
  const auto open = OpenBlock(BlockKind::kContinued);
  if (!open) return false;
  const std::string_view text = TrimView(line.text);
  if (continued_ == Continued::kMessage) {
    CloseBlock(BlockKind::kContinued);
    const Handler handler = std::exchange(continued_handler_, nullptr);
    if (own_words || handler == nullptr) return false;
    const std::string joined_text = continued_text_ + " " + std::string(text);
    const std::string joined_raw = continued_raw_ + "\n" + std::string(line.raw);
    LogLine joined = line;
    joined.text = joined_text;
    joined.raw = joined_raw;
    return (this->*handler)(joined);
  }
  ScannedRecord& record = Record(*open);
  if (++continued_lines_ > kMaxContinuedLines) {
    CloseBlock(BlockKind::kContinued);
    return false;
  }
  if (continued_ == Continued::kCxlWrapped) {
    // A line with words of its own is a record of its own, never the rest
    // of a wrapped one.
    if (!continued_line_wrapped_ || own_words) {
      CloseBlock(BlockKind::kContinued);
      return false;
    }
    Attach(*open, line);
    const auto kind = static_cast<CxlRecord>(continued_cxl_kind_);
    // The log may be on the first line and the descriptor on this one: the
    // class is the worst either gives.
    Raise(record, CxlSeverity(kind, text));
    if (kind == CxlRecord::kMedia && !record.address) record.address = CxlHostAddress(text);
    if (!record.pci_bdf) {
      if (const std::string_view device = CxlDevice(text); !device.empty())
        record.pci_bdf = std::string(device);
    }
    continued_line_wrapped_ = EndsWithBackslash(text);
    if (!continued_line_wrapped_) CloseBlock(BlockKind::kContinued);
    return true;
  }
  if (continued_ == Continued::kArm) {
    // A field of the print; the first stated severity decides, in place of
    // the uncorrected taken while none was.
    bool field = false;
    for (std::string_view name :
         {"affinity", "MPIDR", "MIDR", "running_state", "psci_state", "ARM Processor", "Error Info",
          "error", "pei_len", "context_info", "vendor", "Vendor", "cpu", "severity"}) {
      field = field || StartsWith(text, name);
    }
    // rasdaemon's hex dump of the error info: "00000000: ..." rows.
    field = field || (text.size() > 9 && text[8] == ':' &&
                      std::all_of(text.begin(), text.begin() + 8, [](char c) {
                        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                      }));
    // Only the producer that opened it continues it.
    field = field && (line.producer == "rasdaemon") == (record.origin == "rasdaemon");
    // Words of its own do not end it: rasdaemon's journal tag routes every
    // field line to the report scanner.
    if (!field) {
      CloseBlock(BlockKind::kContinued);
      return false;
    }
    Attach(*open, line);
    // The first stated severity takes the place of the uncorrected taken
    // while none was; later ones only raise it.
    if (const auto stated = ArmRecordSeverity(text)) {
      if (continued_arm_stated_) {
        Raise(record, *stated);
      } else {
        record.severity = *stated;
        continued_arm_stated_ = true;
      }
    }
    return true;
  }
  for (const auto& [word, severity] :
       std::array<std::pair<std::string_view, Severity>, 4>{{{"Fatal", Severity::kFatal},
                                                             {"Recoverable", Severity::kUce},
                                                             {"Corrected", Severity::kCe},
                                                             {"Informational", Severity::kInfo}}}) {
    if (text == word) {
      Attach(*open, line);
      record.notice = severity == Severity::kInfo;
      Raise(record, severity);
      return true;
    }
  }
  // A hex dump row is "00000010: ..." (eight hex digits), not "EDAC MC0: ...".
  const bool dump_row =
      text.size() > 9 && text[8] == ':' && std::all_of(text.begin(), text.begin() + 8, [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      });
  if (!own_words && (StartsWith(text, "section type:") || StartsWith(text, "length:") ||
                     text == "error:" || dump_row)) {
    Attach(*open, line);
    return true;
  }
  CloseBlock(BlockKind::kContinued);
  return false;
}

bool KernelLogScanner::ScanCxl(const LogLine& line) {
  const std::string_view text = line.text;
  for (const auto& event : kCxlEvents) {
    const std::size_t at = text.find(event.name);
    if (at == std::string_view::npos) continue;
    const std::size_t after = at + event.name.size();
    // "cxl_poison: " (trace_pipe) or "cxl_poison [ERROR] " (rasdaemon),
    // not a longer name.
    if (after < text.size() && text[after] != ':' && text[after] != ' ') continue;
    const std::string_view body = text.substr(after);
    // A record names its device (a memory device, or a port's "device="
    // since 6.16); rasdaemon's "cxl:cxl_poison event enabled" does not.
    if (!Contains(body, "memdev") && !Contains(body, "device=")) continue;
    const std::size_t index = NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : "cxl", line,
                                        CxlSeverity(event.kind, body));
    ScannedRecord& record = Record(index);
    if (const std::string_view device = CxlDevice(body); !device.empty())
      record.pci_bdf = std::string(device);
    if (event.kind == CxlRecord::kMedia ||
        (event.kind == CxlRecord::kPoison && record.severity != Severity::kInfo))
      record.address = CxlHostAddress(body);
    if (EndsWithBackslash(body)) {
      OpenAs(BlockKind::kContinued, index);
      continued_ = Continued::kCxlWrapped;
      continued_cxl_kind_ = static_cast<std::uint8_t>(event.kind);
      continued_line_wrapped_ = true;
      continued_lines_ = 0;
    }
    if (event.kind == CxlRecord::kByLog && event.name == "cxl_overflow") {
      // "%u records from %llu to %llu": the records the device dropped.
      const std::string_view count = WordAfter(body, " : ", " ");
      if (Contains(body, " records from "))
        record.count = std::max<std::uint64_t>(ParseNumber(count).value_or(1), 1);
    }
    return true;
  }
  if (Contains(text, "CXL cachemem error")) {  // the panic of pci_error_detected
    NewRecord("cxl", line, Severity::kFatal);
    return true;
  }
  // "cxl_pci 0000:0d:00.0: <message>", "cxl_mem mem0: ...", "cxl_port port1: ...".
  if (!StartsWith(text, "cxl_") && !StartsWith(text, "cxl ")) return false;
  const std::size_t space = text.find(' ');
  const std::size_t colon = text.find(": ", space);
  if (space == std::string_view::npos || colon == std::string_view::npos) return false;
  const std::string_view device = text.substr(space + 1, colon - space - 1);
  const std::string_view body = text.substr(colon + 2);
  Severity severity = Severity::kInfo;
  bool notice = true;
  if (Contains(body, "frozen state error detected") ||
      Contains(body, "failure state error detected") || Contains(body, "abort error handling")) {
    // CXL.mem is disabled or the device disconnected: its memory is gone.
    severity = Severity::kFatal;
    notice = false;
  } else if (Contains(body, "mailbox timeout") || Contains(body, "Mailbox timeout") ||
             Contains(body, "RAS capability") || Contains(body, "poison") ||
             Contains(body, "Poison")) {
    severity = Severity::kUce;
    notice = false;
  }
  const std::size_t index = NewRecord("cxl", line, severity, notice);
  if (IsPciBdf(device)) Record(index).pci_bdf = std::string(device);
  return true;
}

bool KernelLogScanner::ScanArmRecord(const LogLine& line) {
  const std::string_view text = line.text;
  for (std::string_view event : {"arm_event", "non_standard_event"}) {
    const std::size_t at = text.find(event);
    if (at == std::string_view::npos) continue;
    const std::size_t after = at + event.size();
    if (after < text.size() && text[after] != ':' && text[after] != ' ') continue;
    const std::string_view body = text.substr(after);
    const bool arm = event == "arm_event";
    std::string_view rest = TrimView(body);
    if (arm && StartsWith(rest, ":")) rest = TrimView(rest.substr(1));  // trace_seq's "name: "
    if (arm && !rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0])) &&
        !Contains(rest, "MPIDR") && !Contains(rest, ";")) {
      // rasdaemon's ARM print (ras-arm-handler.c) in a journal: its
      // timestamp alone, then one field a line (affinity, MPIDR, MIDR,
      // running_state, psci_state, then the error info where the kernel
      // gives it). Without a stated severity it is a processor error of
      // unknown class: uncorrected, as below.
      const std::optional<Severity> stated = ArmRecordSeverity(rest);
      const std::size_t index = NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : "arm", line,
                                          stated.value_or(Severity::kUce));
      OpenAs(BlockKind::kContinued, index);
      continued_ = Continued::kArm;
      continued_lines_ = 0;
      continued_arm_stated_ = stated.has_value();
      return true;
    }
    if (!arm && !rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0])) &&
        !Contains(rest, ";")) {
      // rasdaemon's own print (ras-non-standard-handler.c): its timestamp,
      // then the severity word, on this line or (before 0.8.1) the next.
      const std::optional<Severity> stated = ArmRecordSeverity(rest);
      const std::size_t index =
          NewRecord("rasdaemon", line, stated.value_or(Severity::kInfo), !stated.has_value());
      if (!stated) {
        OpenAs(BlockKind::kContinued, index);
        continued_ = Continued::kNonStandard;
        continued_lines_ = 0;
      }
      return true;
    }
    // A record, not rasdaemon's "ras:arm_event event enabled".
    if (!Contains(body, arm ? "MPIDR" : "sec type") && !Contains(body, "severity") &&
        !Contains(body, "error")) {
      continue;
    }
    std::optional<Severity> severity = ArmRecordSeverity(body);
    if (!arm) {
      // "severity: %d;": the GHES severity, before rasdaemon's words.
      const std::string_view sev = WordAfter(body, "severity: ", " ;,");
      if (auto number = ParseNumber(sev); number && sev.size() == 1)
        severity = SeverityOfGhesNumber(*number);
    }
    // An ARM record that states no severity (kernels before 6.14 printed
    // none) is a processor error of unknown class: taken as uncorrected,
    // so that a lost severity never reads as corrected.
    const Severity decided = severity.value_or(arm ? Severity::kUce : Severity::kInfo);
    const char* origin = line.producer == "rasdaemon" ? "rasdaemon" : arm ? "arm" : "ghes";
    const std::size_t index = NewRecord(origin, line, decided);
    for (std::string_view marker :
         {"physical fault address: ", "physical address: ", "phy_addr: ", "physical addr: "}) {
      if (auto address = ParsePrintedAddress(WordAfter(body, marker, " ,()"))) {
        Record(index).address = address;
        break;
      }
    }
    return true;
  }
  return false;
}

bool KernelLogScanner::ScanResetReason(const LogLine& line) {
  const std::string_view text = line.text;
  const std::size_t at = text.find("Previous system reset reason");
  if (at == std::string_view::npos) return false;
  const std::size_t colon = text.find(": ", at);
  const std::string_view reason =
      colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 2);
  if (reason.empty() && text.back() == ':') {  // the reason wrapped onto the next line
    ContinueMessage(line, &KernelLogScanner::ScanResetReason);
    return true;
  }
  const Severity severity = ResetReasonSeverity(reason);
  const std::size_t index = NewRecord("x86", line, severity, severity == Severity::kInfo);
  // The error ended the boot before this one: nothing to act on now.
  Record(index).historical = true;
  return true;
}

bool KernelLogScanner::ScanBlockError(const LogLine& line) {
  std::string_view text = line.text;
  for (std::string_view prefix : {"blk_update_request: ", "end_request: ", "print_req_error: "}) {
    if (StartsWith(text, prefix)) text.remove_prefix(prefix.size());
  }
  std::size_t trace = text.find("block_rq_error");
  // A record carries its errno ("[-5]") or rasdaemon's fields, not "event enabled".
  bool failed = trace != std::string_view::npos &&
                (Contains(text, "[-") || Contains(text, "sector") || Contains(text, "error="));
  if (trace == std::string_view::npos) {
    // block_rq_complete prints the same fields for every request
    // (include/trace/events/block.h: "%d,%d %s (%s) %llu + %u [%d]"); one
    // with a negative errno failed.
    trace = text.find("block_rq_complete");
    failed = trace != std::string_view::npos && Contains(text.substr(trace), " [-");
  }
  if (failed) {
    // "%d,%d ... [%d]": the disk's major and minor, and the errno of
    // blk_status_to_errno, classed as the raw event's are.
    const std::string_view body = text.substr(trace);
    Severity severity = BlockErrorSeverity(body);
    const std::size_t errno_at = body.rfind("[-");
    int error = 0;
    if (errno_at != std::string_view::npos &&
        std::from_chars(body.data() + errno_at + 1, body.data() + body.size(), error).ec ==
            std::errc()) {
      severity = SeverityOfBlockErrno(error);
    }
    // The first number after the event's name is the major.
    const std::size_t digits = body.find_first_of("0123456789");
    unsigned major = 0;
    const std::size_t comma = digits == std::string_view::npos ? digits : body.find(',', digits);
    if (comma != std::string_view::npos && comma == body.find_first_not_of("0123456789", digits) &&
        std::from_chars(body.data() + digits, body.data() + comma, major).ec == std::errc() &&
        IsMediaLessBlockMajor(major)) {
      severity = Severity::kInfo;
    }
    NewRecord(line.producer == "rasdaemon" ? "rasdaemon" : "block", line, severity);
    return true;
  }
  const std::size_t error = text.find(" error, dev ");
  if (error != std::string_view::npos && Contains(text, "sector")) {
    const std::string_view disk = WordAfter(text.substr(error), " error, dev ", " ,");
    NewRecord(
        "block", line,
        IsMediaLessDisk(disk) ? Severity::kInfo : BlockErrorSeverity(text.substr(0, error + 7)));
    return true;
  }
  if (StartsWith(text, "Buffer I/O error on dev") || StartsWith(text, "I/O error, dev ")) {
    // "on dev %pg" since 4.x, "on device %s" before.
    const std::string_view disk =
        WordAfter(text,
                  StartsWith(text, "Buffer I/O error on device ") ? "on device "
                  : StartsWith(text, "Buffer")                    ? "on dev "
                                                                  : "dev ",
                  " ,");
    NewRecord("block", line, IsMediaLessDisk(disk) ? Severity::kInfo : Severity::kUce);
    return true;
  }
  return false;
}

bool KernelLogScanner::ScanDevlinkReport(const LogLine& line) {
  const std::string_view text = line.text;
  const std::size_t at = text.find("devlink_health_report");
  if (at == std::string_view::npos) return false;
  const std::string_view body = text.substr(at);
  if (!Contains(body, "reporter_name")) return false;  // not "... event enabled"
  const std::string_view driver = FieldValue(body, "driver_name");
  const char* origin = line.producer == "rasdaemon" ? "rasdaemon"
                       : StartsWith(driver, "mlx5") ? "mlx5"
                                                    : "devlink";
  std::string_view reporter = FieldValue(body, "reporter_name");
  if (!reporter.empty() && reporter.back() == ':') reporter.remove_suffix(1);
  const std::size_t index = NewRecord(origin, line, DevlinkReporterSeverity(reporter));
  const std::string_view device = FieldValue(body, "dev_name");
  if (IsPciBdf(device)) Record(index).pci_bdf = std::string(device);
  return true;
}

// iproute2's devlink/devlink.c: `devlink health [show]` and `devlink mon
// health` print the device handle ("pci/0000:03:00.0:", after
// "[health,status] " for mon), then "reporter <name>" ("name <name>"
// before 5.x), then "state
// <healthy|error> error <count> recover <count> ...". A reporter that
// counted errors is classed as its trace event's reports are; a healthy
// one with none is a notice.
bool KernelLogScanner::ScanDevlinkTool(const LogLine& line) {
  std::string_view text = TrimView(line.text);
  if (StartsWith(text, "[health,")) text = TrimView(text.substr(text.find(']') + 1));
  if (StartsWith(text, "pci/") && text.back() == ':') {
    const std::string_view handle = text.substr(4, text.size() - 5);
    if (!IsPciBdf(handle)) return false;
    devlink_device_ = std::string(handle);
    devlink_reporter_.clear();
    return true;
  }
  if (devlink_device_.empty()) return false;
  // iproute2 before 5.x printed the reporter as "name <reporter>".
  if (StartsWith(text, "reporter ") || StartsWith(text, "name ")) {
    devlink_reporter_ = std::string(
        TrimView(WordAfter(text, StartsWith(text, "name ") ? "name " : "reporter ", " ")));
    return !devlink_reporter_.empty();
  }
  if (devlink_reporter_.empty() || !StartsWith(text, "state ")) return false;
  // "state error error 1": the count is the "error" followed by a number.
  std::optional<unsigned long long> errors;
  for (std::size_t at = text.find(" error "); at != std::string_view::npos && !errors;
       at = text.find(" error ", at + 1)) {
    errors = ParseNumber(WordAfter(text.substr(at), " error ", " "));
  }
  if (!errors) return false;
  const bool failing = *errors > 0 || StartsWith(text, "state error");
  const Severity severity = failing ? DevlinkReporterSeverity(devlink_reporter_) : Severity::kInfo;
  const std::size_t index = JoinDeviceRecord(BlockKey::Device(BlockKind::kDevice, devlink_device_),
                                             "devlink", line, severity, !failing, devlink_device_);
  if (failing) Record(index).count = std::max<std::uint64_t>(*errors, 1);
  return true;
}

// A row of a `ras-mc-ctl --errors` CXL or disk-error section.
std::optional<Severity> KernelLogScanner::PlatformRowSeverity(std::string_view section,
                                                              std::string_view row) {
  for (const auto& [name, kind] : kCxlSections) {
    if (StartsWith(section, name)) return CxlSeverity(kind, row);
  }
  if (StartsWith(section, "Disk errors")) return BlockErrorSeverity(WordAfter(row, "error='", "'"));
  if (StartsWith(section, "Devlink"))
    return DevlinkReporterSeverity(FieldValue(row, "reporter_name"));
  if (StartsWith(section, "ARM processor") || StartsWith(section, "NVIDIA")) {
    return ArmRecordSeverity(row);
  }
  return std::nullopt;
}

std::string_view KernelLogScanner::PlatformRowDevice(std::string_view section,
                                                     std::string_view row) {
  if (!StartsWith(section, "CXL")) return {};
  return CxlDevice(row);
}

std::optional<Address> KernelLogScanner::PlatformRowAddress(std::string_view section,
                                                            std::string_view row) {
  if (!StartsWith(section, "CXL")) return std::nullopt;
  return CxlHostAddress(row);
}

}  // namespace rasd::ras
