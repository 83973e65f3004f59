#include "rasd/ras/trace_event_decoder.h"

#include <event-parse.h>
// kbuffer.h has no C++ linkage guards of its own.
extern "C" {
#include <kbuffer.h>
}

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace rasd::ras {
namespace {

std::optional<std::string> ReadWhole(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// EDAC's enum hw_event_mc_err_type.
Severity McEventSeverity(unsigned long long type) {
  switch (type) {
    case 0:
      return Severity::kCe;
    case 1:
      return Severity::kUce;
    case 2:
      return Severity::kUcna;  // deferred: not consumed yet
    case 3:
      return Severity::kFatal;
    default:
      return Severity::kInfo;
  }
}

// Walks the event headers of a page's committed data (the kernel's ring
// buffer layout: 5-bit type_len, 27-bit time delta; 1..28 small data, 0
// length word, 29 padding, 30 time extend, 31 absolute time stamp) and
// returns how many bytes of it form well-built events. libtraceevent's
// kbuffer trusts the page; on a damaged one it can loop forever.
std::size_t WellFormedLength(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 0;
  while (at + 4 <= size) {
    std::uint32_t header = 0;
    std::memcpy(&header, data + at, 4);
    const std::uint32_t type_len = header & 0x1f;
    std::size_t length = 0;
    if (type_len >= 1 && type_len <= 28) {
      length = 4 + type_len * 4;
    } else if (type_len == 0 || type_len == 29) {
      // Padding to the end of the page: nothing after it. kbuffer would still
      // read its length word, so the walk stops before it.
      if (type_len == 29 && (header >> 5) == 0) return at;
      if (at + 8 > size) return at;
      std::uint32_t array0 = 0;
      std::memcpy(&array0, data + at + 4, 4);
      if (array0 < 4 || array0 % 4 != 0) return at;
      length =
          4 + static_cast<std::size_t>(array0);  // in size_t: 4 + 0xfffffffc must not wrap to 0
    } else {
      length = 8;  // time extend or time stamp
    }
    if (length == 0 || length > size - at) return at;
    at += length;
  }
  return at;
}

// The CXL event log a record came from (enum cxl_event_log_type), as the
// severity it stands for where the record states nothing stronger.
Severity CxlLogSeverity(unsigned long long log) {
  switch (log) {
    case 0:  // Informational
      return Severity::kInfo;
    case 1:  // Warning
      return Severity::kCe;
    case 2:  // Failure
      return Severity::kUce;
    case 3:  // Fatal
      return Severity::kFatal;
    default:
      return Severity::kInfo;
  }
}

const char* CxlLogName(unsigned long long log) {
  static constexpr const char* kNames[] = {"Informational", "Warning", "Failure", "Fatal"};
  return log < 4 ? kNames[log] : "unknown";
}

// The kernel writes ULLONG_MAX where a device address maps to no host
// address (no region): then the event has no host page to act on.
std::optional<Address> CxlHostAddress(const TraceRecord& record) {
  const auto hpa = record.Number("hpa");
  if (!hpa || *hpa == std::numeric_limits<unsigned long long>::max()) return std::nullopt;
  return Address::Of(*hpa);
}

// The cxl: events of drivers/cxl/core/trace.h. The memory device is named
// by its parent (`host`, the cxl_pci function's PCI address); the memdev
// ("mem0") goes in the summary.
bool DecodeCxl(const TraceRecord& record, RasEvent& decoded) {
  decoded.origin = "cxl";
  const std::string memdev = record.Text("memdev"), host = record.Text("host");
  if (!host.empty()) decoded.pci_bdf = host;
  const std::string_view event = record.Name();
  const auto log = record.Number("log");
  std::string detail;
  if (event == "cxl_general_media" || event == "cxl_dram") {
    // General Media / DRAM Event Record (CXL 3.1 8.2.9.2.1.1-2): descriptor
    // bit 0 is "uncorrectable event"; otherwise the media corrected it.
    constexpr unsigned kUncorrectable = 1U << 0;
    const auto descriptor = record.Number("descriptor").value_or(0);
    decoded.severity = (descriptor & kUncorrectable) != 0 ? Severity::kUce : Severity::kCe;
    if (log && *log == 3) decoded.severity = Severity::kFatal;
    decoded.address = CxlHostAddress(record);
    detail = fmt::format("{} media error (descriptor {:#x}) at dpa {:#x}",
                         (descriptor & kUncorrectable) != 0 ? "uncorrectable" : "corrected",
                         descriptor, record.Number("dpa").value_or(0));
  } else if (event == "cxl_memory_module") {
    // Memory Module Event Record: the device's health. Media status 3 and
    // 7..9 are "all data lost" (now or at the next power loss or shutdown).
    const auto media = record.Number("media_status").value_or(0);
    const auto health = record.Number("health_status").value_or(0);
    constexpr unsigned kReplacementNeeded = 1U << 2;
    decoded.severity = CxlLogSeverity(log.value_or(0));
    if ((health & kReplacementNeeded) != 0)
      decoded.severity = std::max(decoded.severity, Severity::kUce);
    if (media == 3 || (media >= 7 && media <= 9)) decoded.severity = Severity::kFatal;
    detail = fmt::format("memory module event type {} health {:#x} media status {}",
                         record.Number("event_type").value_or(0), health, media);
  } else if (event == "cxl_poison") {
    // A poison list entry (trace_type List or Inject) is memory that will
    // fault when read; Clear is its removal.
    const auto trace_type = record.Number("trace_type").value_or(0);
    if (trace_type == 2) {
      decoded.severity = Severity::kInfo;
    } else {
      decoded.severity = Severity::kUce;
      decoded.address = CxlHostAddress(record);
    }
    detail = fmt::format("poison {} at dpa {:#x} length {:#x}",
                         trace_type == 0   ? "listed"
                         : trace_type == 1 ? "injected"
                                           : "cleared",
                         record.Number("dpa").value_or(0), record.Number("dpa_length").value_or(0));
  } else if (event == "cxl_aer_uncorrectable_error") {
    decoded.severity = Severity::kUce;
    detail =
        fmt::format("uncorrectable RAS error status {:#x} first {:#x}",
                    record.Number("status").value_or(0), record.Number("first_error").value_or(0));
  } else if (event == "cxl_aer_correctable_error") {
    decoded.severity = Severity::kCe;
    detail = fmt::format("correctable RAS error status {:#x}", record.Number("status").value_or(0));
  } else if (event == "cxl_overflow") {
    // Records the device dropped: of the severity of the log that lost them.
    decoded.severity = CxlLogSeverity(log.value_or(0));
    decoded.count = std::max<unsigned long long>(record.Number("count").value_or(1), 1);
    detail =
        fmt::format("{} {} record(s) lost to overflow", decoded.count, CxlLogName(log.value_or(0)));
  } else {
    return false;
  }
  decoded.summary = fmt::format("cxl {} ({}): {}{}", memdev, host, detail,
                                log ? fmt::format(" [{} log]", CxlLogName(*log)) : "");
  return true;
}

// devlink:devlink_health_report: a driver's health reporter fired. mlx5's
// "fw_fatal" reporter is a firmware fatal error (the function is reset);
// "fw" a firmware syndrome the device survives; the queue reporters (tx,
// rx) a queue the driver recovers.
void DecodeDevlinkHealth(const TraceRecord& record, RasEvent& decoded) {
  const std::string driver = record.Text("driver_name"), reporter = record.Text("reporter_name"),
                    device = record.Text("dev_name"), message = record.Text("msg");
  decoded.origin = driver.starts_with("mlx5") ? "mlx5" : "devlink";
  decoded.severity = reporter == "fw_fatal" ? Severity::kFatal
                     : reporter == "fw"     ? Severity::kUce
                                            : Severity::kCe;
  if (record.Text("bus_name") == "pci" && !device.empty()) decoded.pci_bdf = device;
  decoded.summary = fmt::format("{} {} health reporter {}: {}", driver, device, reporter, message);
}

// signal:signal_generate, filtered to SIGBUS: codes BUS_MCEERR_AR (4, the
// process touched poisoned memory and is killed) and BUS_MCEERR_AO (5,
// poison found in its memory, action optional). Other SIGBUS codes are
// alignment and mapping faults, not memory errors.
bool DecodeMemoryErrorSignal(const TraceRecord& record, RasEvent& decoded) {
  constexpr unsigned long long kSigbus = 7;
  constexpr long long kActionRequired = 4, kActionOptional = 5;
  if (record.Number("sig").value_or(0) != kSigbus) return false;
  const auto code = static_cast<long long>(static_cast<int>(record.Number("code").value_or(0)));
  if (code != kActionRequired && code != kActionOptional) return false;
  decoded.origin = "memory_failure";
  decoded.severity = code == kActionRequired ? Severity::kSrar : Severity::kSrao;
  if (auto pid = record.Number("pid"))
    decoded.pid = static_cast<std::int64_t>(static_cast<int>(*pid));
  decoded.summary = fmt::format("SIGBUS ({}) to {} pid {}",
                                code == kActionRequired ? "BUS_MCEERR_AR" : "BUS_MCEERR_AO",
                                record.Text("comm"), decoded.pid.value_or(0));
  return true;
}

// block:block_rq_error (include/trace/events/block.h, block_rq_completion
// class; blk_update_request traces it for a failed request that is not a
// passthrough or quiet one), and block_rq_complete where a kernel before
// 5.18 has no block_rq_error: the same fields, `error` the negative errno of
// blk_status_to_errno. A completion without an error is no record.
bool DecodeBlockError(const TraceRecord& record, RasEvent& decoded) {
  const auto error = static_cast<int>(record.Number("error").value_or(0));
  if (error >= 0) return false;
  // dev_t as the kernel keeps it: major in the bits above 20.
  const auto dev = static_cast<unsigned>(record.Number("dev").value_or(0));
  const unsigned major = dev >> 20, minor = dev & ((1U << 20) - 1);
  decoded.origin = "block";
  decoded.severity = IsMediaLessBlockMajor(major) ? Severity::kInfo : SeverityOfBlockErrno(error);
  decoded.summary = fmt::format("block {},{} {} sector {} + {} failed: errno {}", major, minor,
                                record.Text("rwbs"), record.Number("sector").value_or(0),
                                record.Number("nr_sector").value_or(0), error);
  return true;
}

// ras:reri_event: a RISC-V hart's or IOMMU's error record (the RERI
// specification's status register; field names as rasdaemon's
// ras-reri-handler.c reads them). The address is a host physical one only
// when the status's address type (bits 12-15) says supervisor physical (1).
void DecodeReri(const TraceRecord& record, RasEvent& decoded) {
  constexpr unsigned long long kSupervisorPhysical = 1;
  const auto status = record.Number("status").value_or(0);
  decoded.origin = "reri";
  decoded.severity = SeverityOfReriStatus(status);
  const bool cpu = record.Number("source_type").value_or(0) == 0;
  if (((status >> 12) & 0xf) == kSupervisorPhysical) {
    if (auto address = record.Number("addr_info"); address && *address != 0)
      decoded.address = Address::Of(*address);
  }
  decoded.summary =
      fmt::format("RERI {} error source {:#x}{}: error code {:#x}, status {:#x}",
                  cpu ? "hart" : "IOMMU", record.Number("err_src_id").value_or(0),
                  cpu ? fmt::format(" hart {}", record.Number("hart_id").value_or(0)) : "",
                  (status >> 24) & 0xff, status);
}

}  // namespace

TraceEventDecoder::TraceEventDecoder() = default;

TraceEventDecoder::~TraceEventDecoder() {
  if (kbuf_ != nullptr) kbuffer_free(kbuf_);
  if (tep_ != nullptr) tep_free(tep_);
}

Result<std::unique_ptr<TraceEventDecoder>> TraceEventDecoder::Load(
    const std::filesystem::path& events_dir, const std::vector<std::string>& events,
    int page_size) {
  if (page_size < 4096 || page_size > (1 << 24) || page_size % 4096 != 0) {
    return Fail(ErrorCode::kInvalidArgument, fmt::format("ring-buffer page size {}", page_size));
  }
  std::unique_ptr<TraceEventDecoder> decoder(new TraceEventDecoder());
  decoder->tep_ = tep_alloc();
  if (decoder->tep_ == nullptr) return Fail(ErrorCode::kOutOfMemory, "tep_alloc");
  tep_set_long_size(decoder->tep_, static_cast<int>(sizeof(long)));
  tep_set_page_size(decoder->tep_, page_size);
  tep_set_file_bigendian(decoder->tep_, TEP_LITTLE_ENDIAN);
  tep_set_local_bigendian(decoder->tep_, TEP_LITTLE_ENDIAN);
  auto header = ReadWhole(events_dir / "header_page");
  if (!header) return Fail(ErrorCode::kNotFound, "no header_page in " + events_dir.string());
  if (tep_parse_header_page(decoder->tep_, header->data(), header->size(),
                            static_cast<int>(sizeof(long))) != 0) {
    return Fail(ErrorCode::kCorruptData, "cannot parse " + (events_dir / "header_page").string());
  }
  for (const auto& name : events) {
    const auto slash = name.find('/');
    if (slash == std::string::npos) continue;
    const std::string system = name.substr(0, slash);
    auto format = ReadWhole(events_dir / name / "format");
    if (!format) continue;  // this kernel does not have it
    // rasd reads fields by name and never prints an event: a print format
    // libtraceevent cannot parse (a newer kernel's helper) leaves the
    // fields usable.
    const auto parsed =
        tep_parse_event(decoder->tep_, format->data(), format->size(), system.c_str());
    if (parsed != TEP_ERRNO__SUCCESS && parsed != TEP_ERRNO__READ_PRINT_FAILED) continue;
    decoder->loaded_.push_back(name);
  }
  if (decoder->loaded_.empty()) {
    return Fail(ErrorCode::kNotFound, "none of the RAS trace events is in " + events_dir.string());
  }
  decoder->kbuf_ = tep_kbuffer(decoder->tep_);
  if (decoder->kbuf_ == nullptr) return Fail(ErrorCode::kOutOfMemory, "tep_kbuffer");
  return decoder;
}

std::string_view TraceRecord::System() const { return event_->system; }
std::string_view TraceRecord::Name() const { return event_->name; }

std::optional<unsigned long long> TraceRecord::Number(const char* field) const {
  unsigned long long result = 0;
  if (tep_get_field_val(seq_, event_, field, record_, &result, 0) != 0) return std::nullopt;
  return result;
}

std::string TraceRecord::Text(const char* field) const {
  int length = 0;
  const char* raw =
      static_cast<const char*>(tep_get_field_raw(seq_, event_, field, record_, &length, 0));
  // A flexible array at the end (ftrace's print: "char buf[]", size 0)
  // runs to the end of the record.
  if (raw == nullptr || length < 0) return {};
  // A __data_loc field's offset and length come from the record itself: a
  // damaged record may point anywhere. Only bytes inside it are read.
  const char* begin = static_cast<const char*>(record_->data);
  const char* limit = reinterpret_cast<const char*>(limit_);
  const char* end = std::min(begin + std::max(record_->size, 0), limit);
  if (raw < begin || raw >= end) return {};
  const auto available = static_cast<std::size_t>(
      length == 0 ? end - raw : std::min<std::ptrdiff_t>(length, end - raw));
  return std::string(raw, strnlen(raw, available));
}

void TraceEventDecoder::ForEachRecord(std::span<const std::uint8_t> page,
                                      const std::function<void(const TraceRecord&)>& visit) {
  const int page_size = tep_get_page_size(tep_);
  if (page.size() < 16 || page_size <= 0) return;
  // A page of zeros after the page: kbuffer may look a word past the
  // committed data, and libtraceevent reads fields at their format offsets
  // from a record that may start near the end. Both stay inside this copy.
  page_copy_.assign(static_cast<std::size_t>(page_size) * 2, 0);
  std::copy_n(page.begin(), std::min<std::size_t>(page.size(), static_cast<std::size_t>(page_size)),
              page_copy_.begin());
  // The header's commit word holds the data size (27 bits) and flags. A
  // corrupt size must not send kbuffer past the page, and the "missed count
  // stored after the data" flag is cleared: rasd does not use that count.
  constexpr std::uint64_t kCommitMask = (1U << 27) - 1;
  constexpr std::uint64_t kMissedStored = 1U << 30;
  std::uint64_t commit = 0;
  std::memcpy(&commit, page_copy_.data() + 8, sizeof commit);
  if ((commit & kCommitMask) + 16 > static_cast<std::uint64_t>(page_size)) return;
  const std::size_t committed = commit & kCommitMask;
  const std::size_t usable = WellFormedLength(page_copy_.data() + 16, committed);
  commit = (commit & ~kCommitMask & ~kMissedStored) | usable;
  std::memcpy(page_copy_.data() + 8, &commit, sizeof commit);
  if (kbuffer_load_subbuffer(kbuf_, page_copy_.data()) != 0) return;
  trace_seq seq;
  trace_seq_init(&seq);
  unsigned long long timestamp = 0;
  // A damaged page can make kbuffer stand still (a zero-length event): stop
  // when the offset does not advance, and after as many events as fit.
  int last_offset = -1;
  int budget = page_size / 4;
  for (void* data = kbuffer_read_event(kbuf_, &timestamp); data != nullptr && budget-- > 0;
       data = kbuffer_next_event(kbuf_, &timestamp)) {
    const int offset = kbuffer_curr_offset(kbuf_);
    if (offset <= last_offset) break;
    last_offset = offset;
    tep_record record{};
    record.ts = timestamp;
    record.size = kbuffer_event_size(kbuf_);
    record.data = data;
    const int type = tep_data_type(tep_, &record);
    tep_event* event = tep_find_event(tep_, type);
    if (event == nullptr) continue;
    visit(TraceRecord(event, &record, &seq, page_copy_.data() + page_copy_.size(), timestamp));
  }
  trace_seq_destroy(&seq);
}

std::vector<RasEvent> TraceEventDecoder::DecodePage(std::span<const std::uint8_t> page,
                                                    std::chrono::system_clock::time_point now) {
  std::vector<RasEvent> events;
  ForEachRecord(page, [&](const TraceRecord& record) {
    RasEvent decoded;
    decoded.time = now;
    decoded.source = "tracefs";
    const std::string name = fmt::format("{}:{}", record.System(), record.Name());
    if (name == "ras:mc_event") {
      decoded.origin = "edac";
      decoded.severity = McEventSeverity(record.Number("error_type").value_or(4));
      decoded.count = record.Number("error_count").value_or(1);
      if (auto mc = record.Number("mc_index")) decoded.mc = static_cast<int>(*mc);
      if (auto address = record.Number("address"))
        decoded.address = Address::Of(*address);
      const std::string label = record.Text("label"), message = record.Text("msg"),
                        detail = record.Text("driver_detail");
      decoded.summary = fmt::format("{} {} error(s){}{} on {}{}{}", decoded.count,
                                    SeverityName(decoded.severity), message.empty() ? "" : ": ",
                                    message, label, detail.empty() ? "" : " ", detail);
    } else if (name == "ras:arm_event" || name == "ras:non_standard_event") {
      // An ARM processor error record is the CPU's own report; a
      // non-standard section is firmware's, in a CPER record.
      decoded.origin = name == "ras:arm_event" ? "arm" : "ghes";
      const auto sev = record.Number("sev").value_or(0);
      decoded.severity = SeverityOfGhesNumber(sev);
      decoded.summary =
          fmt::format("{} ({} severity {})", name, SeverityName(decoded.severity), sev);
    } else if (record.System() == "cxl") {
      if (!DecodeCxl(record, decoded)) return;
    } else if (name == "devlink:devlink_health_report") {
      DecodeDevlinkHealth(record, decoded);
    } else if (name == "signal:signal_generate") {
      if (!DecodeMemoryErrorSignal(record, decoded)) return;
    } else if (name == "block:block_rq_error" || name == "block:block_rq_complete") {
      if (!DecodeBlockError(record, decoded)) return;
    } else if (name == "ras:reri_event") {
      DecodeReri(record, decoded);
    } else {
      return;
    }
    decoded.raw = fmt::format("{} ts={}", name, record.Timestamp());
    events.push_back(std::move(decoded));
  });
  return events;
}

}  // namespace rasd::ras
