#include "control_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "rasd/common/logging.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace rasd::daemon {
namespace control = common::control;

namespace {

constexpr std::size_t kReadChunk = 16 * 1024;
// Per wake-up, so that one chatty client cannot starve the others.
constexpr std::size_t kReadBudget = 64 * 1024;
constexpr auto kAcceptPause = std::chrono::milliseconds(200);
// A client's replies waiting beyond this stop the serving of its further
// requests, and the reading of them, until it reads: a client that never
// reads costs one buffer of this size, not the loop's time.
constexpr std::size_t kOutputHighWater = 64 * 1024;
// Refused connections are logged at most this often, with a count.
constexpr auto kRefusalLogPeriod = std::chrono::minutes(1);

PeerCredentials ReadPeerCredentials(int fd) {
  PeerCredentials peer;
  ucred cred{};
  socklen_t length = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) == 0) {
    peer.pid = cred.pid;
    peer.uid = cred.uid;
    peer.gid = cred.gid;
  } else {
    // Unknown peer: treat as nobody, never as root.
    peer.uid = static_cast<uid_t>(-1);
    peer.gid = static_cast<gid_t>(-1);
  }
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      peer.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;
    groups.resize(bytes / sizeof(gid_t) + 1);
  }
  return peer;
}

bool SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

}  // namespace

Result<std::optional<gid_t>> ResolveAdminGroup(const std::string& name) {
  if (name.empty()) return std::optional<gid_t>();
  unsigned gid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), gid);
  if (ec == std::errc() && end == name.data() + name.size()) return std::optional<gid_t>(gid);
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16384);
  const int rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr) {
    // Not fatal: the daemon must run (and protect the hardware) before an
    // operator creates the group; until then only root may change state.
    RASD_LOG_WARN(
        "control.admin_group '{}' is not a group on this host: only root and rasd's own "
        "user may change state",
        name);
    return std::optional<gid_t>();
  }
  return std::optional<gid_t>(found->gr_gid);
}

bool Authorizer::MayChangeState(const PeerCredentials& peer) const {
  if (peer.uid == 0 || peer.uid == daemon_uid) return true;
  if (!admin_gid) return false;
  if (peer.gid == *admin_gid) return true;
  return std::find(peer.groups.begin(), peer.groups.end(), *admin_gid) != peer.groups.end();
}

std::string Authorizer::Requirement() const {
  std::string text = "root";
  if (daemon_uid != 0) text += fmt::format(", uid {}", daemon_uid);
  if (admin_gid) text += fmt::format(" or a member of group '{}'", admin_group_name);
  return text;
}

// One accepted connection. Owned by the server's client map; its event
// sources point back at it and are released with it.
class ControlServer::Client {
 public:
  Client(ControlServer& server, std::uint64_t id, common::UniqueFd fd, PeerCredentials peer,
         bool admin)
      : server_(server),
        id_(id),
        fd_(std::move(fd)),
        peer_(std::move(peer)),
        admin_(admin),
        framer_(server.options_.max_request_bytes),
        tokens_(static_cast<double>(server.options_.request_burst)),
        refilled_(server.loop_.Now()) {}

  Status Start() {
    auto watch = server_.loop_.WatchFd(fd_.Get(), EPOLLIN,
                                       [this](std::uint32_t revents) { HandleIo(revents); });
    if (!watch) return Fail(watch.error().code, "control client: " + watch.error().message);
    io_watch_ = std::move(*watch);
    timeout_ = server_.loop_.CreateTimer([this] { OnTimeout(); });
    timeout_->ArmAfter(server_.options_.client_timeout);
    resume_ = server_.loop_.CreateTimer([this] { HandleIo(0); });
    return {};
  }

  const PeerCredentials& Peer() const { return peer_; }
  bool Admin() const { return admin_; }

  // A subscribed connection waits for rasd's messages, not for requests.
  void Subscribe(std::shared_ptr<void> token) {
    subscriptions_.push_back(std::move(token));
    timeout_->Disarm();
  }
  bool Subscribed() const { return !subscriptions_.empty(); }

 private:

  void OnTimeout() {
    if (Subscribed() && output_.size() < kOutputHighWater) return;
    if (output_.size() >= kOutputHighWater) {
      RASD_LOG_WARN("control client pid {} uid {} does not read its replies; dropping it",
                   peer_.pid, peer_.uid);
      return server_.Close(id_);
    }
    Reply(control::MakeErrorReply(control::wire_error::kTimeout,
                                  fmt::format("no complete request within {} ms; closing",
                                              server_.options_.client_timeout.count())));
    // Best effort: one non-blocking attempt, then go.
    Flush();
    server_.Close(id_);
  }

  // revents 0: no readiness, a pause has ended (the rate limit's timer).
  void HandleIo(uint32_t revents) {
    if ((revents & EPOLLOUT) != 0 && !Flush()) return server_.Close(id_);
    // Requests read before a pause are served first, in order.
    ServeLines();
    if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && !stop_reading_ && !Paused()) {
      if (!ReadAndServe()) return server_.Close(id_);
    }
    if (!Flush()) return server_.Close(id_);
    if (output_.size() > server_.options_.max_pending_output) {
      RASD_LOG_WARN("control client pid {} uid {} does not read its replies; dropping it", peer_.pid,
                   peer_.uid);
      return server_.Close(id_);
    }
    if (output_.empty() && stop_reading_) return server_.Close(id_);
    UpdateInterest();
  }

  // Returns false when the connection is dead.
  bool ReadAndServe() {
    std::size_t budget = kReadBudget;
    char buffer[kReadChunk];
    while (budget > 0 && !stop_reading_ && !Paused()) {
      const ssize_t n = ::recv(fd_.Get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return false;  // ECONNRESET and friends: nobody to answer
      }
      if (n == 0) {
        // The client finished sending; answer a last unterminated request.
        ServeLines();
        std::string rest = framer_.TakeRemainder();
        if (!stop_reading_ && !rest.empty()) ServeOne(rest);
        stop_reading_ = true;
        break;
      }
      framer_.Append(std::string_view(buffer, static_cast<std::size_t>(n)));
      budget -= std::min(budget, static_cast<std::size_t>(n));
      ServeLines();
    }
    return true;
  }

  // Whether this client must wait: its replies are not being read, or it
  // has used up its request rate (admins are not limited).
  bool Paused() {
    if (output_.size() >= kOutputHighWater) return true;
    if (admin_ || server_.options_.requests_per_second <= 0) return false;
    const auto now = server_.loop_.Now();
    const double rate = server_.options_.requests_per_second;
    tokens_ = std::min(static_cast<double>(server_.options_.request_burst),
                       tokens_ + rate * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
    if (tokens_ >= 1.0) return false;
    if (!resume_->Armed()) {
      resume_->ArmAfter(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>((1.0 - tokens_) / rate)));
    }
    return true;
  }

  void ServeLines() {
    std::string line;
    while (!stop_reading_ && !Paused()) {
      switch (framer_.Next(line)) {
        case control::LineFramer::Outcome::kNeedMore:
          return;
        case control::LineFramer::Outcome::kLine:
          ServeOne(line);
          break;
        case control::LineFramer::Outcome::kTooLarge:
          ++server_.rejected_requests_;
          Reply(control::MakeErrorReply(control::wire_error::kRequestTooLarge,
                                        fmt::format("request exceeds {} bytes; closing",
                                                    server_.options_.max_request_bytes)));
          stop_reading_ = true;
          return;
      }
    }
  }

  void ServeOne(std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank: keep-alive
    tokens_ -= 1.0;
    output_ += server_.HandleLine(id_, peer_, line);
    if (!Subscribed()) timeout_->ArmAfter(server_.options_.client_timeout);
  }

  void Reply(const nlohmann::json& message) { output_ += control::EncodeLine(message); }

 public:
  // A reply that came later (run_async).
  void Deliver(const std::string& line) {
    output_ += line;
    if (!Flush()) return server_.Close(id_);
    if (output_.size() > server_.options_.max_pending_output) {
      RASD_LOG_WARN("control client pid {} uid {} does not read its messages; dropping it",
                    peer_.pid, peer_.uid);
      return server_.Close(id_);
    }
    if (output_.size() >= kOutputHighWater && Subscribed() && !timeout_->Armed()) {
      // Messages pile up unread: the client has client_timeout to read.
      timeout_->ArmAfter(server_.options_.client_timeout);
    }
    UpdateInterest();
  }

 private:
  // Returns false when the peer is gone.
  bool Flush() {
    while (!output_.empty()) {
      const ssize_t n =
          ::send(fd_.Get(), output_.data(), output_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        return false;
      }
      output_.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  void UpdateInterest() {
    uint32_t events = 0;
    if (!stop_reading_ && !Paused()) events |= EPOLLIN;
    if (!output_.empty()) events |= EPOLLOUT;
    io_watch_->SetEvents(events);
  }

  ControlServer& server_;
  std::uint64_t id_;
  common::UniqueFd fd_;
  PeerCredentials peer_;
  bool admin_;
  control::LineFramer framer_;
  double tokens_;                     // the request rate's bucket
  std::chrono::nanoseconds refilled_;  // loop time of its last refill
  std::string output_;
  bool stop_reading_ = false;
  std::vector<std::shared_ptr<void>> subscriptions_;  // their tokens, for the connection's life
  // Destroyed before fd_ (declared after it): the watch never sees a closed fd.
  std::unique_ptr<common::FdWatch> io_watch_;
  std::unique_ptr<common::Timer> timeout_;
  std::unique_ptr<common::Timer> resume_;  // the end of a rate-limit pause
};

Result<std::unique_ptr<ControlServer>> ControlServer::Create(
    common::EventLoop& loop, common::UniqueFd listen_fd, Options options, Authorizer authorizer,
    std::map<std::string, Command> commands) {
  if (!SetNonBlocking(listen_fd.Get())) return Fail(ErrnoError("control socket O_NONBLOCK", errno));
  std::unique_ptr<ControlServer> server(new ControlServer(
      loop, std::move(listen_fd), options, std::move(authorizer), std::move(commands)));
  ControlServer* self = server.get();
  auto listen = loop.WatchFd(self->listen_fd_.Get(), EPOLLIN,
                             [self](std::uint32_t) { self->AcceptAll(); });
  if (!listen) return Fail(listen.error().code, "control socket: " + listen.error().message);
  server->listen_watch_ = std::move(*listen);
  server->accept_resume_ = loop.CreateTimer([self] { self->listen_watch_->SetEnabled(true); });
  server->mailbox_->wake.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!server->mailbox_->wake) return Fail(ErrnoError("eventfd", errno));
  auto mailbox = loop.WatchFd(self->mailbox_->wake.Get(), EPOLLIN,
                              [self](std::uint32_t) { self->DeliverMailbox(); });
  if (!mailbox) return Fail(mailbox.error().code, "control replies: " + mailbox.error().message);
  server->mailbox_watch_ = std::move(*mailbox);
  return server;
}

ControlServer::ControlServer(common::EventLoop& loop, common::UniqueFd listen_fd, Options options,
                             Authorizer authorizer, std::map<std::string, Command> commands)
    : loop_(loop),
      listen_fd_(std::move(listen_fd)),
      options_(options),
      authorizer_(std::move(authorizer)),
      commands_(std::move(commands)) {}

ControlServer::~ControlServer() {
  *alive_ = false;
  {
    std::lock_guard lock(mailbox_->mutex);
    mailbox_->open = false;  // late answers are dropped
  }
  mailbox_watch_.reset();
  clients_.clear();
  listen_watch_.reset();
  accept_resume_.reset();
}

void ControlServer::DeliverMailbox() {
  std::uint64_t count = 0;
  (void)::read(mailbox_->wake.Get(), &count, sizeof count);
  std::deque<std::pair<std::uint64_t, std::string>> lines;
  {
    std::lock_guard lock(mailbox_->mutex);
    lines.swap(mailbox_->lines);
  }
  for (const auto& [client_id, line] : lines) {
    // A client that left meanwhile gets nothing.
    if (auto client = clients_.find(client_id); client != clients_.end())
      client->second->Deliver(line);
  }
}

void ControlServer::Reconfigure(Options options, Authorizer authorizer) {
  options_ = options;
  authorizer_ = std::move(authorizer);
}

void ControlServer::AcceptAll() {
  for (;;) {
    common::UniqueFd fd(
        ::accept4(listen_fd_.Get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays readable; pause instead of spinning.
        RASD_LOG_WARN("control socket: cannot accept ({}); pausing for {} ms", std::strerror(errno),
                     kAcceptPause.count());
        listen_watch_->SetEnabled(false);
        accept_resume_->ArmAfter(kAcceptPause);
        return;
      }
      RASD_LOG_WARN("control socket: accept failed: {}", std::strerror(errno));
      return;
    }
    PeerCredentials peer = ReadPeerCredentials(fd.Get());
    const bool admin = authorizer_.MayChangeState(peer);
    if (auto full = Admit(connections_, static_cast<std::size_t>(std::max(1, options_.max_clients)),
                          peer, admin, "control clients")) {
      Refuse(fd, peer, *full);
      continue;
    }
    const std::uint64_t id = next_client_id_++;
    auto client = std::make_unique<Client>(*this, id, std::move(fd), peer, admin);
    if (auto started = client->Start(); !started) {
      RASD_LOG_WARN("control socket: {}", started.error().message);
      continue;
    }
    clients_.emplace(id, std::move(client));
    connections_.Add(peer, admin);
  }
}

void ControlServer::ClientCounts::Add(const PeerCredentials& peer, bool admin) {
  ++(admin ? admins : by_uid[peer.uid]);
}

void ControlServer::ClientCounts::Remove(const PeerCredentials& peer, bool admin) {
  if (admin) {
    --admins;
  } else if (auto uid = by_uid.find(peer.uid); uid != by_uid.end() && --uid->second == 0) {
    by_uid.erase(uid);
  }
}

std::optional<std::string> ControlServer::Admit(const ClientCounts& counts, std::size_t max,
                                                const PeerCredentials& peer, bool admin,
                                                std::string_view what) {
  if (admin) {
    if (counts.admins >= max)
      return fmt::format("rasd already serves {} administrators' {}", max, what);
    return std::nullopt;
  }
  std::size_t others = 0;
  for (const auto& [uid, count] : counts.by_uid) others += count;
  if (others >= max) return fmt::format("rasd already serves {} {}", max, what);
  const std::size_t share = std::max<std::size_t>(1, max / 4);
  if (auto mine = counts.by_uid.find(peer.uid); mine != counts.by_uid.end() && mine->second >= share) {
    return fmt::format("uid {} already has {} {} (at most {} a user)", peer.uid, mine->second,
                       what, share);
  }
  return std::nullopt;
}

void ControlServer::Refuse(const common::UniqueFd& fd, const PeerCredentials& peer,
                           const std::string& why) {
  ++rejected_requests_;
  ++refused_connections_;
  const std::string line = control::EncodeLine(
      control::MakeErrorReply(control::wire_error::kTooManyClients, why + "; try again later"));
  (void)::send(fd.Get(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  // One line a minute at most: a flood of refusals must not flood the log.
  ++refused_since_log_;
  const auto now = loop_.Now();
  if (last_refusal_log_ && now - *last_refusal_log_ < kRefusalLogPeriod) return;
  RASD_LOG_WARN("control socket: refused {} connection(s) since the last report; the last from "
               "pid {} uid {}: {}",
               refused_since_log_, peer.pid, peer.uid, why);
  refused_since_log_ = 0;
  last_refusal_log_ = now;
}

void ControlServer::Close(std::uint64_t client_id) {
  // The loop runs a copy of a callback, so a client may close itself from
  // inside its own callback (and returns at once after doing so).
  auto found = clients_.find(client_id);
  if (found == clients_.end()) return;
  (found->second->Subscribed() ? subscribers_ : connections_)
      .Remove(found->second->Peer(), found->second->Admin());
  // Out of the map before it is destroyed: its subscriptions' tokens run
  // handler code that may push to other clients.
  std::unique_ptr<Client> closing = std::move(found->second);
  clients_.erase(found);
  closing.reset();
}

std::size_t ControlServer::SubscriberCount() const {
  std::size_t count = 0;
  for (const auto& [id, client] : clients_) count += client->Subscribed() ? 1 : 0;
  return count;
}

std::string ControlServer::HandleLine(std::uint64_t client_id, const PeerCredentials& peer,
                                      std::string_view line) {
  auto request = control::ParseRequest(line);
  if (!request) {
    ++rejected_requests_;
    const auto code = request.error().code == ErrorCode::kCorruptData
                          ? control::wire_error::kParseError
                          : control::wire_error::kInvalidRequest;
    return control::EncodeLine(control::MakeErrorReply(code, request.error().message));
  }
  const auto command = commands_.find(request->command);
  if (command == commands_.end()) {
    ++rejected_requests_;
    std::string known;
    for (const auto& [name, unused] : commands_) {
      if (!known.empty()) known += ", ";
      known += name;
    }
    return control::EncodeLine(control::MakeErrorReply(
        control::wire_error::kUnknownCommand,
        fmt::format("unknown command '{}' (known: {})", request->command, known), request->id));
  }
  if (command->second.changes_state) {
    if (!authorizer_.MayChangeState(peer)) {
      ++rejected_requests_;
      RASD_LOG_WARN("control: denied '{}' to pid {} uid {}", request->command, peer.pid, peer.uid);
      return control::EncodeLine(
          control::MakeErrorReply(control::wire_error::kPermissionDenied,
                                  fmt::format("permission denied: '{}' changes state and needs {}",
                                              request->command, authorizer_.Requirement()),
                                  request->id));
    }
    RASD_LOG_INFO("control: '{}' by pid {} uid {}", request->command, peer.pid, peer.uid);
  }
  if (command->second.run_subscribe) {
    const auto asking = clients_.find(client_id);
    if (asking != clients_.end() && !asking->second->Subscribed()) {
      if (auto full = Admit(subscribers_,
                            static_cast<std::size_t>(std::max(1, options_.max_subscribers)), peer,
                            asking->second->Admin(), "attached or watching connections")) {
        ++refused_connections_;
        return control::EncodeLine(control::MakeErrorReply(control::wire_error::kTooManyClients,
                                                           *full + "; try again later",
                                                           request->id));
      }
    }
    Push push = [alive = alive_, server = this, client_id](const nlohmann::json& message) {
      if (!*alive) return false;
      auto client = server->clients_.find(client_id);
      if (client == server->clients_.end()) return false;
      client->second->Deliver(control::EncodeLine(message));
      return server->clients_.contains(client_id);
    };
    Result<Subscribed> subscribed = Fail(ErrorCode::kInternal, "command did not run");
    try {
      subscribed = command->second.run_subscribe(*request, peer, std::move(push));
    } catch (const nlohmann::json::exception& error) {
      subscribed =
          Fail(ErrorCode::kInvalidArgument, fmt::format("bad arguments: {}", error.what()));
    } catch (const std::exception& error) {
      RASD_LOG_ERROR("control: '{}' failed: {}", request->command, error.what());
      subscribed = Fail(ErrorCode::kInternal, error.what());
    }
    if (!subscribed) {
      return control::EncodeLine(control::MakeErrorReply(
          ErrorCodeName(subscribed.error().code), subscribed.error().message, request->id));
    }
    if (auto client = clients_.find(client_id); client != clients_.end()) {
      if (!client->second->Subscribed()) {
        // From the request pool to the subscribers': a workload attached for
        // hours holds no slot an operator's rasctl needs.
        connections_.Remove(client->second->Peer(), client->second->Admin());
        subscribers_.Add(client->second->Peer(), client->second->Admin());
      }
      client->second->Subscribe(std::move(subscribed->token));
    }
    return control::EncodeLine(control::MakeOkReply(std::move(subscribed->reply), request->id));
  }
  if (command->second.run_async) {
    auto reply = [mailbox = mailbox_, client_id, id = request->id,
                  once =
                      std::make_shared<std::atomic<bool>>(false)](Result<nlohmann::json> answer) {
      if (once->exchange(true)) return;  // answered already
      std::string encoded =
          answer ? control::EncodeLine(control::MakeOkReply(std::move(*answer), id))
                 : control::EncodeLine(control::MakeErrorReply(ErrorCodeName(answer.error().code),
                                                               answer.error().message, id));
      std::lock_guard lock(mailbox->mutex);
      if (!mailbox->open) return;
      mailbox->lines.emplace_back(client_id, std::move(encoded));
      const std::uint64_t one = 1;
      (void)::write(mailbox->wake.Get(), &one, sizeof one);
    };
    try {
      command->second.run_async(*request, peer, reply);
    } catch (const nlohmann::json::exception& error) {
      reply(Fail(ErrorCode::kInvalidArgument, fmt::format("bad arguments: {}", error.what())));
    } catch (const std::exception& error) {
      reply(Fail(ErrorCode::kInternal, error.what()));
    }
    return {};
  }
  Result<nlohmann::json> result = Fail(ErrorCode::kInternal, "command did not run");
  try {
    result = command->second.run(*request, peer);
  } catch (const nlohmann::json::exception& error) {
    result = Fail(ErrorCode::kInvalidArgument, fmt::format("bad arguments: {}", error.what()));
  } catch (const std::exception& error) {
    RASD_LOG_ERROR("control: '{}' failed: {}", request->command, error.what());
    result = Fail(ErrorCode::kInternal, error.what());
  }
  if (!result) {
    return control::EncodeLine(control::MakeErrorReply(ErrorCodeName(result.error().code),
                                                       result.error().message, request->id));
  }
  return control::EncodeLine(control::MakeOkReply(std::move(*result), request->id));
}

Result<ControlSocket> OpenControlSocket(const std::filesystem::path& path, mode_t mode) {
  const int passed = sd_listen_fds(/*unset_environment=*/1);
  if (passed < 0) return Fail(ErrnoError("sd_listen_fds", -passed));
  if (passed > 1) {
    return Fail(
        ErrorCode::kInvalidArgument,
        fmt::format("systemd passed {} sockets; rasd.socket should pass exactly one", passed));
  }
  if (passed == 1) {
    const int fd = SD_LISTEN_FDS_START;
    if (sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) <= 0) {
      return Fail(ErrorCode::kInvalidArgument,
                  "the socket systemd passed is not a listening Unix stream socket");
    }
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return ControlSocket{common::UniqueFd(fd), true, {}};
  }

  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path_text = path.string();
  if (path_text.empty() || path_text.size() >= sizeof address.sun_path) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("control socket path '{}' is empty or longer than {} bytes", path_text,
                            sizeof address.sun_path - 1));
  }
  std::memcpy(address.sun_path, path_text.c_str(), path_text.size() + 1);

  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return Fail(ErrorCode::kIoError,
                fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Fail(ErrorCode::kAlreadyExists,
                  fmt::format("{} exists and is not a socket; refusing to replace it", path_text));
    }
    common::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe &&
        ::connect(probe.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      return Fail(ErrorCode::kAlreadyExists,
                  fmt::format("{} is in use: another rasd is running", path_text));
    }
    ::unlink(path.c_str());  // stale, left by a daemon that died
  }

  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return Fail(ErrnoError("socket", errno));
  // Bind under a umask that yields `mode` at once: no window in which the
  // socket is more open than configured.
  const mode_t old_umask = ::umask(static_cast<mode_t>(~mode & 0777));
  const int bound = ::bind(fd.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0) return Fail(ErrnoError("bind " + path_text, bind_errno));
  if (::chmod(path.c_str(), mode) != 0) return Fail(ErrnoError("chmod " + path_text, errno));
  if (::listen(fd.Get(), 128) != 0) return Fail(ErrnoError("listen " + path_text, errno));
  return ControlSocket{std::move(fd), false, path};
}

}  // namespace rasd::daemon
