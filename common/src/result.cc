#include "rasd/common/result.h"

#include <cerrno>
#include <cstring>

namespace rasd {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kAlreadyExists:
      return "already_exists";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kAborted:
      return "aborted";
    case ErrorCode::kOutOfMemory:
      return "out_of_memory";
    case ErrorCode::kDeviceIsolated:
      return "device_isolated";
    case ErrorCode::kDeviceFault:
      return "device_fault";
    case ErrorCode::kNotSupported:
      return "not_supported";
    case ErrorCode::kIoError:
      return "io_error";
    case ErrorCode::kCorruptData:
      return "corrupt_data";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Error::ToString() const {
  std::string out(ErrorCodeName(code));
  out += ": ";
  out += message;
  return out;
}

Error ErrnoError(std::string_view what, int errno_value) {
  ErrorCode code = ErrorCode::kIoError;
  switch (errno_value) {
    case ENOENT:
      code = ErrorCode::kNotFound;
      break;
    case EEXIST:
      code = ErrorCode::kAlreadyExists;
      break;
    case EACCES:
    case EPERM:
      code = ErrorCode::kPermissionDenied;
      break;
    case ENOMEM:
      code = ErrorCode::kOutOfMemory;
      break;
    case ETIMEDOUT:
      code = ErrorCode::kTimeout;
      break;
    case EINVAL:
      code = ErrorCode::kInvalidArgument;
      break;
    case ENOTSUP:
      code = ErrorCode::kNotSupported;
      break;
    default:
      break;
  }
  std::string message(what);
  message += ": ";
  message += std::strerror(errno_value);
  return Error{code, std::move(message)};
}

}  // namespace rasd
