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

}  // namespace rasd::ras
