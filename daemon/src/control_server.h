#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rasd/common/control_protocol.h"
#include "rasd/common/event_loop.h"
#include "rasd/common/result.h"
#include "rasd/common/unique_fd.h"

namespace rasd::daemon {

// Who is on the other end of a control connection, from SO_PEERCRED and
// SO_PEERGROUPS at accept time.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// Decides who may run state-changing commands: root, the daemon's own uid,
// and members of the admin group. Everyone who can reach the socket may read.
struct Authorizer {
  uid_t daemon_uid = 0;
  std::optional<gid_t> admin_gid;
  std::string admin_group_name;

  bool MayChangeState(const PeerCredentials& peer) const;
  std::string Requirement() const;  // for the "permission denied" message
};

// The admin group by name or number; none for an empty name. A name this
// host does not know is a warning and no group (only root and rasd's own
// user may then change state), not an error: rasd must protect the
// hardware before an operator creates the group.
Result<std::optional<gid_t>> ResolveAdminGroup(const std::string& name);

// One control command. `changes_state` commands run only for peers the
// Authorizer admits. Handlers run on the event loop thread; they may throw
// nlohmann::json exceptions on malformed args, which become invalid_request.
//
// A command whose answer takes time (an inference request) sets `run_async`
// instead of `run`: it gets a reply function that any thread may call, once;
// the answer reaches the client through the loop.
//
// A long-lived command (attach, watch) sets `run_subscribe`: after its reply
// the connection stays open, free of the idle timeout, for messages rasd
// pushes to it. `push` (loop thread only) writes one message line and
// returns false once the client is gone (a client that does not read its
// messages is dropped like any other). The handler returns its reply and a
// token that lives as long as the connection: the token's destructor is how
// the handler learns that the client left. It must not push before it has
// returned (its reply comes first), nor call back into the server from the
// token's destructor.
using AsyncReply = std::function<void(Result<nlohmann::json>)>;
using Push = std::function<bool(const nlohmann::json& message)>;
struct Subscribed {
  nlohmann::json reply;
  std::shared_ptr<void> token;
};
struct Command {
  bool changes_state = false;
  std::function<Result<nlohmann::json>(const common::control::Request&, const PeerCredentials&)>
      run;
  std::function<void(const common::control::Request&, const PeerCredentials&, AsyncReply)>
      run_async;
  std::function<Result<Subscribed>(const common::control::Request&, const PeerCredentials&, Push)>
      run_subscribe;
};

// Serves the control protocol (rasd/common/control_protocol.h) on a
// listening Unix stream socket, on an EventLoop.
//
// Robustness against hostile or broken clients: requests are bounded in
// size; a client that sends no complete request within `client_timeout` is
// told so and dropped; a client whose replies wait unread (64 KiB) is not
// served, nor read, until it reads, and is dropped by its timeout;
// descriptor exhaustion pauses accepting instead of spinning. Nothing a
// client sends ends the daemon.
//
// Connections: administrators (whom the Authorizer lets change state) have
// `max_clients` slots of their own, so that no local user can lock root
// out; everyone else shares another `max_clients`, at most a quarter of
// them per uid. A connection that subscribes (attach, watch) moves to a
// second pool, `max_subscribers`, shared the same way: workloads attached
// for hours never hold the slots an operator needs. Refusals answer with too_many_clients and are logged at
// most once a minute, with a count. Non-administrators are held to
// `requests_per_second` (a bucket of `request_burst`): past it their
// requests wait, they are not refused.
//
// Single-threaded: every method runs on the loop's thread. The server must
// be destroyed before the loop it was created on.
class ControlServer {
 public:
  struct Options {
    std::size_t max_request_bytes = common::control::kMaxRequestBytes;
    std::size_t max_pending_output = 4 * 1024 * 1024;
    std::chrono::milliseconds client_timeout{10000};
    int max_clients = 64;
    // Subscribed connections (an attached workload's, a watcher's), apart
    // from max_clients: administrators have this many, everyone else shares
    // as many more, at most a quarter of them per uid.
    int max_subscribers = 1024;
    double requests_per_second = 500;  // 0: no limit
    int request_burst = 200;
  };

  static Result<std::unique_ptr<ControlServer>> Create(common::EventLoop& loop,
                                                       common::UniqueFd listen_fd,
                                                       Options options, Authorizer authorizer,
                                                       std::map<std::string, Command> commands);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Takes effect for new requests and new connections (config reload).
  void Reconfigure(Options options, Authorizer authorizer);

  std::size_t ClientCount() const { return clients_.size(); }
  std::size_t SubscriberCount() const;
  std::uint64_t RejectedRequests() const { return rejected_requests_; }
  std::uint64_t RefusedConnections() const { return refused_connections_; }

 private:
  class Client;

  ControlServer(common::EventLoop& loop, common::UniqueFd listen_fd, Options options,
                Authorizer authorizer, std::map<std::string, Command> commands);
  void AcceptAll();
  void Close(std::uint64_t client_id);
  // Why a new connection is refused, or nullopt when it is admitted.
  void Refuse(const common::UniqueFd& fd, const PeerCredentials& peer, const std::string& why);
  // The reply line, or "" when the command answers later (run_async).
  std::string HandleLine(std::uint64_t client_id, const PeerCredentials& peer,
                         std::string_view line);
  void DeliverMailbox();

  // Answers of run_async commands, posted from any thread.
  struct Mailbox {
    std::mutex mutex;
    std::deque<std::pair<std::uint64_t, std::string>> lines;  // client id, reply line
    common::UniqueFd wake;                                    // eventfd
    bool open = true;
  };
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
  // False once the server is destroyed: a Push kept by a handler then fails.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<common::FdWatch> mailbox_watch_;

  common::EventLoop& loop_;
  common::UniqueFd listen_fd_;
  std::unique_ptr<common::FdWatch> listen_watch_;
  std::unique_ptr<common::Timer> accept_resume_;
  Options options_;
  Authorizer authorizer_;
  std::map<std::string, Command> commands_;
  std::map<std::uint64_t, std::unique_ptr<Client>> clients_;
  std::uint64_t next_client_id_ = 1;
  std::uint64_t rejected_requests_ = 0;
  std::uint64_t refused_connections_ = 0;
  // Connections by who holds them: administrators' apart, everyone
  // else's by uid. Request connections and subscribed ones (attach, watch:
  // they stay open for as long as a workload runs) are two pools, so that
  // attached workloads never take the slots an operator needs to act.
  struct ClientCounts {
    std::size_t admins = 0;
    std::map<uid_t, std::size_t> by_uid;  // non-administrators'
    void Add(const PeerCredentials& peer, bool admin);
    void Remove(const PeerCredentials& peer, bool admin);
  };
  static std::optional<std::string> Admit(const ClientCounts& counts, std::size_t max,
                                          const PeerCredentials& peer, bool admin,
                                          std::string_view what);
  ClientCounts connections_;
  ClientCounts subscribers_;
  std::uint64_t refused_since_log_ = 0;
  std::optional<std::chrono::nanoseconds> last_refusal_log_;
};

// The listening socket: the one systemd passed (LISTEN_FDS), else a fresh
// one bound at `path` with `mode`. A stale socket file left by a crash is
// replaced; a socket some live process still answers on is an error, and so
// is any other file at that path.
struct ControlSocket {
  common::UniqueFd fd;
  bool activated = false;            // from systemd: do not unlink on exit
  std::filesystem::path bound_path;  // empty when activated
};
Result<ControlSocket> OpenControlSocket(const std::filesystem::path& path, mode_t mode);

}  // namespace rasd::daemon
