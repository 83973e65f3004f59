#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rasd/common/result.h"
#include "rasd/common/unique_fd.h"

namespace rasd::ctl {

// A blocking client for the control socket: one request, one reply. Errors:
// kUnavailable when nothing listens at the path (the message names it),
// kTimeout when the daemon does not answer in time, kCorruptData for a reply
// that is not JSON. A reply with "ok": false is returned as a value: it is
// the daemon's answer, not a transport failure. Not thread-safe.
class ControlClient {
 public:
  static Result<ControlClient> Connect(const std::filesystem::path& socket_path,
                                       std::chrono::milliseconds timeout);

  Result<nlohmann::json> Call(const std::string& command,
                              const nlohmann::json& args = nlohmann::json::object());

  // After a subscribing command (attach): the next message rasd pushes,
  // waiting at most `wait`; nullopt when none came. kUnavailable once rasd
  // closed the connection.
  Result<std::optional<nlohmann::json>> Next(std::chrono::milliseconds wait);
  int Fd() const { return fd_.Get(); }

 private:
  ControlClient(common::UniqueFd fd, std::filesystem::path path, std::chrono::milliseconds timeout);
  // One recv into pending_ once poll said readable: an error when rasd
  // closed the connection (`closed` says what was cut short) or the read
  // failed; EINTR and EAGAIN are nothing read, not errors.
  Status ReadMore(std::string_view closed, std::string_view what);

  common::UniqueFd fd_;
  std::filesystem::path path_;
  std::chrono::milliseconds timeout_;
  std::string pending_;  // bytes after the last reply's newline
};

}  // namespace rasd::ctl
