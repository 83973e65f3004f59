// Device drivers whose records are written as plain dev_err()/dev_info()
// lines, decoded from the drivers' own format strings:
//
// - Intel Gaudi, drivers/accel/habanalabs: common/device.c (hl_device_reset,
//   hl_device_heartbeat, hl_device_init: "Device is NOT usable", "Device
//   heartbeat failed", "Successfully finished resetting the %s device"),
//   common/command_submission.c (cs_timedout), gaudi/gaudi2.c (ECC events
//   with "critical %u", "System Error Interrupt - HBM(%u) MC(%u)", MMU
//   page faults), and hl-smi's table (Bus-Id, Volatile Uncorr. ECC).
// - NVIDIA (Mellanox) ConnectX, drivers/net/ethernet/mellanox/mlx5/core:
//   health.c (poll_health "Fatal error %u detected", "device's health
//   compromised - reached miss count", print_health_info's buffer dump,
//   "Health issue observed, %s, severity(%d) %s", mlx5_health_try_recover's
//   "health recovery flow aborted" / "failed"), cmd.c (command timeouts),
//   main.c (probe_one "mlx5_init_one failed with error code %d",
//   mlx5_function_setup, mlx5_pci_err_detected), and the Ethernet
//   queue reporters (en/reporter_tx.c "TX timeout on queue: %d, SQ: ...",
//   "Wait for SQ 0x%x flush timeout (sq cc = 0x%x, sq pc = 0x%x)",
//   reporter_rx.c "RX timeout on channel: %d, ...", "ERR CQE on SQ/RQ",
//   en_main.c "TX timeout detected").
//
// A driver's lines about one device within a few lines of each other are
// one record (a failed probe, a health dump), named by the device's PCI
// address; its class is the worst line's. Rules: tests/data/README.md.

#include <cctype>
#include <optional>

#include "rasd/ras/kernel_log_scanner.h"
#include "scan_util.h"

namespace rasd::ras {

using scan::IsPciBdf;
using scan::WordAfter;

namespace {

// A PCI address anywhere among `text`'s words ("Successfully added device
// 0000:19:00.0 to habanalabs driver", "probe of 0000:41:00.1 failed").
std::string_view BdfInText(std::string_view text) {
  std::size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == '(' || text[at] == '[')) ++at;
    std::size_t end = at;
    while (end < text.size() && text[end] != ' ' && text[end] != ',' && text[end] != ')' &&
           text[end] != ']')
      ++end;
    std::string_view word = text.substr(at, end - at);
    if (!word.empty() && (word.back() == ':' || word.back() == '.')) word.remove_suffix(1);
    if (IsPciBdf(word)) return word;
    at = end + 1;
  }
  return {};
}

// "poll_health:852:(pid 0): text" -> "text": mlx5_core_err's prefix.
std::string_view WithoutFunctionPrefix(std::string_view body) {
  const std::size_t pid = body.find(":(pid ");
  if (pid == std::string_view::npos || pid > 64) return body;
  const std::size_t close = body.find("): ", pid);
  if (close == std::string_view::npos) return body;
  return body.substr(close + 3);
}

// mlx5's log levels in the health buffer ("severity(2) CRITICAL").
Severity Mlx5BufferSeverity(std::string_view body) {
  const std::size_t at = body.find("severity(");
  if (at == std::string_view::npos) return Severity::kUce;
  const auto level = ParseNumber(WordAfter(body.substr(at), "severity(", ")"));
  if (!level) return Severity::kUce;
  if (*level <= 2) return Severity::kFatal;  // emergency, alert, critical
  if (*level <= 4) return Severity::kUce;    // error, warning
  return Severity::kInfo;
}

}  // namespace

KernelLogScanner::BlockKey KernelLogScanner::BlockKey::Device(BlockKind kind,
                                                              std::string_view device) {
  // FNV-1a: distinct device names, distinct keys (in practice).
  std::uint64_t hash = 14695981039346656037ULL;
  for (char c : device) {
    hash ^= static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(c)));
    hash *= 1099511628211ULL;
  }
  return {kind, hash};
}

std::size_t KernelLogScanner::JoinDeviceRecord(BlockKey key, const char* origin,
                                               const LogLine& line, Severity severity, bool notice,
                                               std::string_view bdf) {
  std::size_t index = 0;
  if (auto open = OpenBlock(key)) {
    index = *open;
    Attach(index, line);
    ScannedRecord& record = Record(index);
    if (severity > record.severity || (record.notice && !notice)) {
      // The record is named by its worst line, the one that says what failed.
      if (!notice) record.message = std::string(line.text);
      record.severity = std::max(record.severity, severity);
      record.notice = record.notice && notice;
    }
  } else {
    index = NewRecord(origin, line, severity, notice);
    OpenAs(key, index);
  }
  if (!bdf.empty() && !Record(index).pci_bdf) Record(index).pci_bdf = std::string(bdf);
  return index;
}

bool KernelLogScanner::ScanHabanalabs(const LogLine& line) {
  const std::string_view text = line.text;
  if (ScanHlSmiTable(line)) return true;
  if (!StartsWith(text, "habanalabs")) return false;
  // "habanalabs hl2: ...", "habanalabs 0000:1a:00.0: ...", "habanalabs: ..."
  std::string_view device;
  std::string_view body;
  if (StartsWith(text, "habanalabs: ")) {
    body = text.substr(12);
  } else if (StartsWith(text, "habanalabs ")) {
    const std::size_t colon = text.find(": ", 11);
    if (colon == std::string_view::npos) return false;
    device = text.substr(11, colon - 11);
    body = text.substr(colon + 2);
  } else {
    return false;
  }
  std::string_view bdf = IsPciBdf(device) ? device : BdfInText(body);
  // "Failed to initialize hl2. Device is NOT usable !" on the PCI device
  // names the hlN device its other lines were printed on.
  std::string_view key_device = device;
  if (const std::string_view named = WordAfter(body, "initialize ", " .,;");
      StartsWith(named, "hl") || StartsWith(named, "accel"))
    key_device = named;
  Severity severity = Severity::kInfo;
  bool notice = true;
  auto error = [&](Severity level) {
    severity = level;
    notice = false;
  };
  if (Contains(body, "NOT usable") || Contains(body, "Consecutive fatal errors") ||
      Contains(body, "stopping hard reset") || Contains(body, "terribly wrong")) {
    error(Severity::kFatal);  // the driver gave the device up
  } else if (Contains(body, "ECC error detected")) {
    // gaudi2: "critical 1" needs a reset; gaudi's events without the field
    // and "critical 0" were corrected.
    error(Contains(body, "critical 1") ? Severity::kUce : Severity::kCe);
  } else if (Contains(body, "page fault on va") || Contains(body, "Killing CS") ||
             Contains(body, "Killing user process")) {
    // A job's bad address, and the jobs a reset ends: not the device's fault.
  } else if (Contains(body, "heartbeat failed") || Contains(body, "heartbeat event was not") ||
             Contains(body, "has not finished in") || Contains(body, "got stuck") ||
             Contains(body, "Failed to communicate") || Contains(body, "ailed to initialize") ||
             Contains(body, "Failed to reset") || Contains(body, "Failed to do compute reset") ||
             Contains(body, "Failed to detect if device is alive") ||
             Contains(body, "Failed late init") || Contains(body, "not idle after") ||
             Contains(body, "System Error Interrupt") || Contains(body, "Received H/W interrupt")) {
    error(Severity::kUce);
  }
  const BlockKey key = BlockKey::Device(BlockKind::kDevice, key_device.empty() ? bdf : key_device);
  JoinDeviceRecord(key, "habanalabs", line, severity, notice, bdf);
  return true;
}

// hl-smi's table: per card a row "|   0  HL-225   N/A  | 0000:19:00.0  N/A |   0  |"
// whose third cell is the card's volatile uncorrected ECC count.
bool KernelLogScanner::ScanHlSmiTable(const LogLine& line) {
  const std::string_view text = line.text;
  if (Contains(text, "HL-SMI Version")) {
    const std::size_t index = NewRecord("habanalabs", line, Severity::kInfo, /*notice=*/true);
    OpenAs(BlockKind::kHlSmi, index);
    hl_smi_cards_ = 0;
    return true;
  }
  auto block = ContinueTable(BlockKind::kHlSmi, line);
  if (!block) return false;
  // Cells: "   0  HL-225   N/A  ", " 0000:19:00.0  N/A ", "   0  ".
  std::string_view cells = text.substr(1);
  const std::size_t first_bar = cells.find('|');
  if (first_bar == std::string_view::npos) return true;
  const std::string_view first = TrimView(cells.substr(0, first_bar));
  if (first.empty() || std::isdigit(static_cast<unsigned char>(first[0])) == 0) return true;
  const std::string_view rest = cells.substr(first_bar + 1);
  const std::size_t second_bar = rest.find('|');
  if (second_bar == std::string_view::npos) return true;
  const std::string_view bus = WordAfter(rest.substr(0, second_bar), "", " ");
  if (!IsPciBdf(bus)) return true;
  const std::string_view ecc_cell = rest.substr(second_bar + 1);
  const auto ecc = ParseNumber(TrimView(ecc_cell.substr(0, ecc_cell.find('|'))));
  ScannedRecord& record = Record(*block);
  ++hl_smi_cards_;
  const Severity card = ecc && *ecc > 0 ? Severity::kUce : Severity::kInfo;
  if (card > record.severity && ecc) record.count = *ecc;
  AddTableDevice(record, card, bus, hl_smi_cards_);
  return true;
}

bool KernelLogScanner::ScanMlx5(const LogLine& line) {
  const std::string_view text = line.text;
  if (!StartsWith(text, "mlx5_core")) return false;
  std::string_view device;
  std::string_view body;
  if (StartsWith(text, "mlx5_core: ")) {
    body = text.substr(11);  // the PCI core's "mlx5_core: probe of <bdf> failed ..."
  } else if (StartsWith(text, "mlx5_core ")) {
    // "mlx5_core <bdf>: ..." (mlx5_core_err), or "mlx5_core <bdf> <netdev>:
    // ..." (netdev_err of the Ethernet functions).
    const std::size_t colon = text.find(": ", 10);
    if (colon == std::string_view::npos) return false;
    device = text.substr(10, colon - 10);
    device = device.substr(0, device.find(' '));
    body = WithoutFunctionPrefix(text.substr(colon + 2));
  } else {
    return false;
  }
  const std::string_view bdf = IsPciBdf(device) ? device : BdfInText(body);
  if (bdf.empty()) return false;
  if (body.ends_with("):") && Contains(body, ":(pid ")) {
    // The prefix alone: the message went to the next line.
    ContinueMessage(line, &KernelLogScanner::ScanMlx5);
    return true;
  }
  Severity severity = Severity::kInfo;
  bool notice = true;
  auto error = [&](Severity level) {
    severity = level;
    notice = false;
  };
  if (Contains(body, "Fatal error") || Contains(body, "health compromised") ||
      Contains(body, "recovery flow aborted") || Contains(body, "health recovery failed") ||
      Contains(body, "Driver is in error state") || Contains(body, "is unavailable") ||
      Contains(body, "failed with error") || Contains(body, "pre-initializing state, aborting") ||
      Contains(body, "enable hca failed") || Contains(body, "pci channel state = 3")) {
    // The device is gone or the driver gave it up (no function, a probe
    // that failed, PCI permanently failed).
    error(Severity::kFatal);
  } else if (StartsWith(body, "Health issue observed")) {
    error(Mlx5BufferSeverity(body));
  } else if (StartsWith(body, "synd 0x") || Contains(body, "timeout. Will cause a leak") ||
             Contains(body, "No done completion") || Contains(body, "after timeout") ||
             Contains(body, "mlx5_pci_err_detected") || Contains(body, "handling bad device") ||
             Contains(body, "65535.65535.65535") ||
             (StartsWith(body, "Waiting for FW initialization") && Contains(body, "0xffffffff"))) {
    // A firmware syndrome, a command the firmware never answered, a frozen
    // PCI channel, reads of all ones: the function is failing.
    error(Severity::kUce);
  } else if (Contains(body, "Cable error")) {
    error(Severity::kCe);  // the module, not the device
  } else if (StartsWith(body, "TX timeout") || StartsWith(body, "RX timeout on") ||
             StartsWith(body, "ERR CQE on") || Contains(body, "flush timeout (sq cc") ||
             StartsWith(body, "NETDEV WATCHDOG")) {
    // The queue health reporters' errors (en/reporter_tx.c, reporter_rx.c,
    // en_main.c's tx timeout, the stack's watchdog that starts it): one
    // queue stalled or got an error completion, and the reporter recovers
    // that queue, as devlink's tx and rx reporters are classed.
    error(Severity::kCe);
  }
  JoinDeviceRecord(BlockKey::Device(BlockKind::kDevice, bdf), "mlx5", line, severity, notice, bdf);
  return true;
}

}  // namespace rasd::ras
