#include "control_client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rasd/common/control_protocol.h"
#include "rasd/common/real_time.h"

namespace rasd::ctl {

Result<ControlClient> ControlClient::Connect(const std::filesystem::path& socket_path,
                                             std::chrono::milliseconds timeout) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = socket_path.string();
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("socket path '{}' is empty or too long", path));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return Fail(ErrnoError("socket", errno));
  // A blocking connect to a socket whose backlog is full (a wedged rasd)
  // waits for ever; a non-blocking one says EAGAIN at once, and is tried
  // again until the timeout.
  const auto deadline = common::Deadline::After(timeout);
  int connected = -1;
  while ((connected = ::connect(fd.Get(), reinterpret_cast<const sockaddr*>(&address),
                                sizeof address)) != 0 &&
         (errno == EAGAIN || errno == EINTR)) {
    if (deadline.Expired()) {
      return Fail(ErrorCode::kTimeout,
                  fmt::format("rasd at {} accepts no connection (its queue is full) within {} ms",
                              path, timeout.count()));
    }
    ::poll(nullptr, 0, std::min(20, deadline.PollMillis()));
  }
  if (connected != 0) {
    const int error = errno;
    std::string hint;
    if (error == ENOENT || error == ECONNREFUSED)
      hint = " (is rasd running? set --socket or RASD_SOCKET)";
    return Fail(ErrorCode::kUnavailable, fmt::format("cannot connect to rasd at {}: {}{}", path,
                                                     std::strerror(error), hint));
  }
  // The rest of the client waits with poll() and expects whole writes.
  if (const int flags = ::fcntl(fd.Get(), F_GETFL); flags < 0 ||
      ::fcntl(fd.Get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Fail(ErrnoError("fcntl", errno));
  }
  return ControlClient(std::move(fd), socket_path, timeout);
}

ControlClient::ControlClient(common::UniqueFd fd, std::filesystem::path path,
                             std::chrono::milliseconds timeout)
    : fd_(std::move(fd)), path_(std::move(path)), timeout_(timeout) {}

Result<nlohmann::json> ControlClient::Call(const std::string& command, const nlohmann::json& args) {
  const auto deadline = common::Deadline::After(timeout_);
  nlohmann::json request = {{"command", command}};
  if (!args.empty()) request["args"] = args;
  const std::string line = common::control::EncodeLine(request);

  std::size_t sent = 0;
  while (sent < line.size()) {
    pollfd pfd{fd_.Get(), POLLOUT, 0};
    if (::poll(&pfd, 1, deadline.PollMillis()) == 0) {
      return Fail(ErrorCode::kTimeout,
                  fmt::format("rasd at {} did not take the request in time", path_.string()));
    }
    const ssize_t n =
        ::send(fd_.Get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      const int send_error = errno;
      // rasd refuses a connection it cannot serve (too many clients) with a
      // reply and closes it, maybe before the request arrived: that reply
      // says why, where "Broken pipe" would not.
      if (send_error == EPIPE || send_error == ECONNRESET) {
        char buffer[4096];
        const ssize_t got = ::recv(fd_.Get(), buffer, sizeof buffer, MSG_DONTWAIT);
        if (got > 0) pending_.append(buffer, static_cast<std::size_t>(got));
        if (pending_.find('\n') != std::string::npos) break;
      }
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("send to rasd at {}: {}", path_.string(), std::strerror(send_error)));
    }
    sent += static_cast<std::size_t>(n);
  }

  for (;;) {
    if (const auto newline = pending_.find('\n'); newline != std::string::npos) {
      const std::string reply_line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      auto reply = nlohmann::json::parse(reply_line, nullptr, false);
      if (reply.is_discarded() || !reply.is_object()) {
        return Fail(ErrorCode::kCorruptData, "rasd sent a reply that is not a JSON object");
      }
      return reply;
    }
    pollfd pfd{fd_.Get(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, deadline.PollMillis());
    if (ready == 0) {
      return Fail(ErrorCode::kTimeout, fmt::format("rasd at {} did not answer within {} ms",
                                                   path_.string(), timeout_.count()));
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Fail(ErrnoError("poll", errno));
    }
    if (auto read = ReadMore(" without a reply", "reply"); !read) return Fail(read.error());
  }
}

Status ControlClient::ReadMore(std::string_view closed, std::string_view what) {
  char buffer[16384];
  const ssize_t n = ::recv(fd_.Get(), buffer, sizeof buffer, 0);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return {};
    return Fail(ErrorCode::kUnavailable,
                fmt::format("read from rasd at {}: {}", path_.string(), std::strerror(errno)));
  }
  if (n == 0) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("rasd at {} closed the connection{}", path_.string(), closed));
  }
  pending_.append(buffer, static_cast<std::size_t>(n));
  if (pending_.size() > 64 * 1024 * 1024) {
    return Fail(ErrorCode::kCorruptData, fmt::format("a {} from rasd is larger than 64 MiB", what));
  }
  return {};
}

Result<std::optional<nlohmann::json>> ControlClient::Next(std::chrono::milliseconds wait) {
  const auto deadline = common::Deadline::After(wait);
  for (;;) {
    if (const auto newline = pending_.find('\n'); newline != std::string::npos) {
      const std::string line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      auto message = nlohmann::json::parse(line, nullptr, false);
      if (message.is_discarded() || !message.is_object()) {
        return Fail(ErrorCode::kCorruptData, "rasd sent a message that is not a JSON object");
      }
      return std::optional<nlohmann::json>(std::move(message));
    }
    pollfd pfd{fd_.Get(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, deadline.PollMillis());
    if (ready == 0) return std::optional<nlohmann::json>();
    if (ready < 0) {
      if (errno == EINTR) return std::optional<nlohmann::json>();
      return Fail(ErrnoError("poll", errno));
    }
    if (auto read = ReadMore("", "message"); !read) return Fail(read.error());
  }
}

}  // namespace rasd::ctl
