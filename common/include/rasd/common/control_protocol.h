#pragma once

// The control protocol between rasd and its clients (rasctl): a Unix stream
// socket carrying newline-delimited JSON. One request per line:
//   {"command": "status", "args": {...}, "id": <any>}
// One reply per request, in order:
//   {"ok": true, "result": {...}, "id": <echoed>}
//   {"ok": false, "error": {"code": "unknown_command", "message": "..."}, "id": <echoed>}

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "rasd/common/result.h"

namespace rasd::common::control {

inline constexpr std::size_t kMaxRequestBytes = 64 * 1024;

// Error codes on the wire. Stable: scripts match on them.
namespace wire_error {
inline constexpr std::string_view kParseError = "parse_error";
inline constexpr std::string_view kRequestTooLarge = "request_too_large";
inline constexpr std::string_view kInvalidRequest = "invalid_request";
inline constexpr std::string_view kUnknownCommand = "unknown_command";
inline constexpr std::string_view kPermissionDenied = "permission_denied";
inline constexpr std::string_view kTooManyClients = "too_many_clients";
inline constexpr std::string_view kTimeout = "timeout";
}  // namespace wire_error

// Splits a byte stream into lines, never holding more than `max_line_bytes`
// of an unfinished line. Not thread-safe.
class LineFramer {
 public:
  enum class Outcome { kLine, kNeedMore, kTooLarge };

  explicit LineFramer(std::size_t max_line_bytes = kMaxRequestBytes);

  void Append(std::string_view bytes);

  // kLine: `line` holds the next line without its "\n" (and without a "\r"
  // before it). kTooLarge: a line is over the bound; the framer can no longer
  // tell where the next request starts, so the caller must end the stream.
  Outcome Next(std::string& line);

  // At end of stream: whatever unterminated bytes remain (a last request
  // without a trailing newline), and clears them.
  std::string TakeRemainder();

  std::size_t Buffered() const { return buffer_.size() - consumed_; }

 private:
  std::size_t max_line_bytes_;
  std::string buffer_;
  std::size_t consumed_ = 0;  // bytes of buffer_ already returned as lines
  bool too_large_ = false;
};

struct Request {
  std::string command;
  nlohmann::json args = nlohmann::json::object();
  nlohmann::json id;  // null when the client sent none
};

// The request's problem is described in the error's message; the code is
// kInvalidArgument for a well-formed JSON value that is not a request and
// kCorruptData for text that is not JSON at all.
Result<Request> ParseRequest(std::string_view line);

nlohmann::json MakeOkReply(nlohmann::json result, const nlohmann::json& id = nullptr);
nlohmann::json MakeErrorReply(std::string_view code, std::string_view message,
                              const nlohmann::json& id = nullptr);

// Serialises one message as a line. Invalid UTF-8 in strings is replaced, not
// thrown: a hostile byte in a request must not crash the reply path.
std::string EncodeLine(const nlohmann::json& message);

}  // namespace rasd::common::control
