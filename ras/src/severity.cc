#include "rasd/ras/severity.h"

#include <cctype>
#include <cerrno>

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

Severity SeverityOfBlockErrno(int error) {
  switch (-error) {
    case 0:
      return Severity::kInfo;
    case ENOLINK:  // BLK_STS_TRANSPORT, retried by the layer
      return Severity::kCe;
    case EOPNOTSUPP:    // BLK_STS_NOTSUPP
    case ENOMEM:        // BLK_STS_RESOURCE
    case EBUSY:         // BLK_STS_DEV_RESOURCE
    case EAGAIN:        // BLK_STS_AGAIN
    case ETIME:         // BLK_STS_DURATION_LIMIT
    case EINVAL:        // BLK_STS_INVAL
    case ETOOMANYREFS:  // BLK_STS_ZONE_OPEN_RESOURCE
    case EOVERFLOW:     // BLK_STS_ZONE_ACTIVE_RESOURCE
      return Severity::kInfo;
    default:
      return Severity::kUce;
  }
}

bool IsMediaLessBlockMajor(unsigned major) {
  return major == 1 || major == 2 || major == 7 || major == 11 || major == 43;
}

Severity SeverityOfReriStatus(unsigned long long status) {
  constexpr unsigned long long kCorrected = 1ULL << 1, kDeferred = 1ULL << 2, kCritical = 1ULL << 3;
  if ((status & kCritical) != 0) return Severity::kUce;
  if ((status & kDeferred) != 0) return Severity::kUcna;
  if ((status & kCorrected) != 0) return Severity::kCe;
  return Severity::kInfo;
}

}  // namespace rasd::ras
