#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace rasd::ras {

// The severity classes of the kernel's RAS model (see docs/architecture.md, "The
// severity taxonomy"), least to most severe, with INFO first.
enum class Severity : std::uint8_t {
  kInfo,   // informational, or an application fault
  kCe,     // corrected by hardware
  kUcna,   // uncorrected, not consumed, no action required
  kSrao,   // uncorrected, not consumed, action optional
  kSrar,   // uncorrected, being consumed, action required
  kUce,    // uncorrected, recoverability unknown
  kFatal,  // system or device cannot continue
};

inline constexpr std::array<Severity, 7> kAllSeverities = {
    Severity::kInfo, Severity::kCe,  Severity::kUcna, Severity::kSrao,
    Severity::kSrar, Severity::kUce, Severity::kFatal};

// "INFO", "CE", "UCNA", "SRAO", "SRAR", "UCE", "FATAL": the corpus and wire names.
std::string_view SeverityName(Severity severity);
// Case-insensitive inverse of SeverityName.
std::optional<Severity> ParseSeverity(std::string_view name);
// The kernel's GHES severity number (ghes_severity(), and the trace events
// that print it): 0 none, 1 corrected, 2 recoverable, 3 panic.
Severity SeverityOfGhesNumber(unsigned long long number);

// A failed block request by the errno blk_status_to_errno gives it (the
// block_rq_error event's `error`, block/blk-core.c's blk_errors table):
// a recoverable transport error (ENOLINK) is corrected; a request refused
// for want of support, memory, a free slot, a duration limit or open zones,
// or an invalid one, moved no data and met no failing hardware (INFO);
// every other status is data the device lost or could not move (UCE).
// `error` is negative as the kernel prints it; 0 (success) is INFO.
Severity SeverityOfBlockErrno(int error);
// Block majors with no hardware of their own to fail, or a drive that may
// hold no medium (Documentation/admin-guide/devices.txt): RAM disk 1,
// floppy 2, loop 7, SCSI CD-ROM 11, nbd 43. Their errors are a missing
// medium or a backing file, not a device going bad.
bool IsMediaLessBlockMajor(unsigned major);
// RISC-V RERI (the RAS Error-record Register Interface) status register, as
// ras:reri_event carries it: UEC (bit 3, an uncorrected error that could
// not be deferred) is UCE, UED (bit 2, uncorrected and deferred, not yet
// consumed) UCNA, CE (bit 1) CE, none of them INFO.
Severity SeverityOfReriStatus(unsigned long long status);

}  // namespace rasd::ras
