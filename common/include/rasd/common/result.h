#pragma once

#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>

namespace rasd {

// The small set of failure kinds callers branch on. The message carries the
// detail a human needs; the code carries what a program needs.
enum class ErrorCode {
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kUnavailable,
  kTimeout,
  kAborted,
  kOutOfMemory,
  kDeviceIsolated,
  kDeviceFault,
  kNotSupported,
  kIoError,
  kCorruptData,
  kInternal,
};

// Stable lower-case name ("invalid_argument"), used in logs and on the wire.
std::string_view ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;

  // "invalid_argument: message"
  std::string ToString() const;
};

// Result<T> is either a T or an Error. It is [[nodiscard]] as a type, so a
// dropped error is a compiler warning (an error in CI).
template <typename T>
class [[nodiscard]] Result : public tl::expected<T, Error> {
 public:
  using Base = tl::expected<T, Error>;
  using Base::Base;
  Result(Base base) : Base(std::move(base)) {}  // NOLINT: implicit on purpose
};

using Status = Result<void>;

// Builds the error side: `return Fail(ErrorCode::kNotFound, "no such device");`
inline tl::unexpected<Error> Fail(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}

inline tl::unexpected<Error> Fail(Error error) { return tl::unexpected<Error>(std::move(error)); }

// Builds an Error from errno with the failing operation named:
// ErrnoError("open /run/rasd", errno) -> {kIoError, "open /run/rasd: No such file or directory"}.
Error ErrnoError(std::string_view what, int errno_value);

}  // namespace rasd
