#include "rasd/ras/severity.h"

#include <cctype>

namespace rasd::ras {

std::string_view SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "INFO";
    case Severity::kCe:
      return "CE";
    case Severity::kUcna:
      return "UCNA";
    case Severity::kSrao:
      return "SRAO";
    case Severity::kSrar:
      return "SRAR";
    case Severity::kUce:
      return "UCE";
    case Severity::kFatal:
      return "FATAL";
  }
  return "INFO";
}

std::optional<Severity> ParseSeverity(std::string_view name) {
  for (Severity severity : kAllSeverities) {
    const std::string_view candidate = SeverityName(severity);
    if (candidate.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == candidate[i];
    }
    if (same) return severity;
  }
  return std::nullopt;
}

Severity SeverityOfGhesNumber(unsigned long long number) {
  switch (number) {
    case 1:
      return Severity::kCe;
    case 2:
      return Severity::kUce;
    case 3:
      return Severity::kFatal;
    default:
      return Severity::kInfo;
  }
}

}  // namespace rasd::ras
