#pragma once

// The scanner's words: the record families as bits, and the words that send
// a line to their decoders. In a header of their own because the build
// compiles them into a Vectorscan database ahead of time
// (tools/compile_scanner_words.cc); kernel_log_scanner.cc is their user.

#include <cstdint>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

namespace rasd::ras::scanner_words {

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
  kDevices = 1U << 13,    // habanalabs, mlx5
  kPlatform = 1U << 14,   // CXL, ARM records, reset reasons, block errors, devlink
};

using Word = std::pair<std::string_view, std::uint32_t>;

inline constexpr Word kFamilyWords[] = {
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
    {"get_any_page: ", kMemoryFailure},
    {"recovery action", kMemoryFailure},
    {"page recovery", kMemoryFailure},
    {"CMCI", kMce},
    {"achine check", kMce},
    {"Hardware event", kMce},
    {"GHES", kGhes},
    {"Fatal hardware error", kGhes},
    {"DPC", kAer},
    {"Xid", kNvidia},
    {"detected NVSwitch", kNvidia},
    {"ras-mc-ctl", kReports},
    {"Label", kReports},
    {"summary:", kReports},
    {"_event:", kReports},
    {"aca entry", kAmdgpu},
    {"context corrupt", kMce},
    {"Device_Absent", kAscend},
    {"PCI-Express Device Error", kAer},
    {"system exception code", kAscend},
    // CANN's error messages, printed beside a runtime code: what they name
    // decides whether the device or the application failed.
    {"Memory_Allocation_Failure", kAscend},
    {"EL000", kAscend},
    {"EE1002", kAscend},
    {"[FUNC:", kAscend},
    {"E39009", kAscend},
    {"Heartbeats are missing", kAscend},
    {"ECC Errors", kNvidia},
    {"Retired Pages", kNvidia},
    {"Retired pages", kNvidia},
    {"Remapped Rows", kNvidia},
    {"habanalabs", kDevices},
    {"HL-SMI", kDevices},
    {"mlx5_core", kDevices},
    {"error: ", kReports},
    {"error(s)", kReports},
    {"cxl_", kPlatform},
    {"CXL cachemem", kPlatform},
    {"CXL Bus Error", kAer},
    {"arm_event", kPlatform},
    {"non_standard_event", kPlatform},
    {"reset reason", kPlatform},
    {" error, dev ", kPlatform},
    {"I/O error", kPlatform},
    {"block_rq_error", kPlatform},
    {"block_rq_complete", kPlatform},
    {"devlink_health_report", kPlatform},
    {"Unpoison", kMemoryFailure},
    {"oft_offline", kMemoryFailure},
    {"memory_failure_event", kMemoryFailure},
    {"  name ", kPlatform},  // devlink health output before iproute2 5.x
    {"Disk errors", kReports},
    {"pci/", kPlatform},  // iproute2's devlink health output
    {"reporter ", kPlatform},
    {"state error", kPlatform},
    {"state healthy", kPlatform},
};

// Words that continue an open MCE or AER block: common in other lines too,
// so looked for only while such a block is open.
inline constexpr Word kContinuationWords[] = {
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

// Both lists, in the order the block-level search numbers them: the word
// database built ahead of time is only valid for exactly this list.
inline std::vector<Word> AllWordsInOrder() {
  std::vector<Word> words(std::begin(kFamilyWords), std::end(kFamilyWords));
  words.insert(words.end(), std::begin(kContinuationWords), std::end(kContinuationWords));
  return words;
}

}  // namespace rasd::ras::scanner_words
