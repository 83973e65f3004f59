#pragma once

// Helpers for integration tests that drive the real rasd and rasctl
// binaries: temporary directories, child processes with their own
// environment and credentials, a real sd_notify socket, and a raw control
// client that can misbehave on purpose.

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rasd/common/unique_fd.h"

namespace rasd::testing {

using namespace std::chrono_literals;

// A fresh directory under /tmp, mode 0755 so that a test may run clients as
// another user; removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& Path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

std::string ReadText(const std::filesystem::path& path);
void WriteText(const std::filesystem::path& path, const std::string& text);
// For a file a poller reads while the test changes it (a sysfs counter):
// the new text is written over the old in one write and the file then cut
// to its length, so a reader never sees the empty file WriteText leaves
// between its truncate and its write. (Not written beside and renamed:
// the pollers list their directories.)
void ReplaceText(const std::filesystem::path& path, const std::string& text);

// Polls `condition` every 10 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

struct ProcessOptions {
  std::vector<std::string> argv;               // argv[0] is the binary path
  std::map<std::string, std::string> set_env;  // added to (or replacing) ours
  std::vector<std::string> unset_env;
  std::filesystem::path stdout_path = "/dev/null";
  std::filesystem::path stderr_path = "/dev/null";
  int pass_listen_fd = -1;   // becomes fd 3 with LISTEN_FDS=1 and LISTEN_PID=<child>
  std::optional<uid_t> uid;  // drop to this uid (test must be root); argv[0] is copied
                             // where that user can reach it if it cannot already
  std::optional<gid_t> gid;
  std::vector<gid_t> groups;  // supplementary groups when dropping
};

// A child process, the leader of its own process group, with SIGKILL as its
// parent-death signal: it dies with the test binary, and on destruction
// (also after an assertion failed midway) its whole group is killed
// (SIGKILL) and the child reaped. What left the group (a daemon that
// detached, rasd's hooks in sessions of their own) is not covered: the
// suite's last test reports anything still running.
class Process {
 public:
  explicit Process(const ProcessOptions& options);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t Pid() const { return pid_; }
  void Signal(int signal) const;
  // Exit code, or 128+signal for a killed process; nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Whether this test may run clients as other users (uid 65534): it is root.
inline bool CanActAsOtherUsers() { return ::geteuid() == 0; }
// Whether process `pid` runs; a zombie has ended, whoever reaps it.
bool Alive(pid_t pid);

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs a command to completion (or kills it after `timeout`).
CommandResult RunToCompletion(ProcessOptions options, std::chrono::milliseconds timeout = 20s);

// An AF_UNIX datagram socket standing in for systemd's notify socket.
class NotifyListener {
 public:
  explicit NotifyListener(std::filesystem::path path);
  const std::filesystem::path& Path() const { return path_; }
  // Next datagram, or nullopt after `timeout`.
  std::optional<std::string> Receive(std::chrono::milliseconds timeout);
  // Reads datagrams until one contains `needle`; everything read is kept in
  // Messages().
  bool WaitFor(const std::string& needle, std::chrono::milliseconds timeout);
  const std::vector<std::string>& Messages() const { return messages_; }
  void ClearMessages() { messages_.clear(); }

 private:
  std::filesystem::path path_;
  common::UniqueFd fd_;
  std::vector<std::string> messages_;
};

// A control-socket client that sends raw bytes: for well-behaved and
// hostile clients alike.
class RawClient {
 public:
  explicit RawClient(const std::filesystem::path& socket);
  bool Connected() const { return fd_.Valid(); }
  bool Send(const std::string& bytes);
  void ShutdownWrite();
  // The next line without "\n", or nullopt on timeout or close.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout = 5s);
  // True once the daemon has closed the connection (EOF), within `timeout`.
  bool WaitClosed(std::chrono::milliseconds timeout);
  int Fd() const { return fd_.Get(); }

 private:
  common::UniqueFd fd_;
  std::string buffer_;
};

// How long the daemon took to answer a ping on `client`'s connection, in
// ms: the loop's own latency, without the start of a rasctl process (slow
// on a loaded machine). Negative when it did not answer with ok.
double PingMilliseconds(RawClient& client);

// A real rasd in a temp directory with its own state dir, socket and notify
// socket. Start() waits for READY=1.
// An HTTP/1.0 request to 127.0.0.1:port; the response body, or "" on
// failure. For rasd's /metrics and Prometheus's API.
std::string Http(int port, const std::string& method, const std::string& path);
// `text` percent-encoded for a URL's query (Prometheus's query API).
std::string UrlEncode(const std::string& text);
// rasd's `status` reply says its scheduler link has settled: the node
// drained by rasd (its drain kept) or guarded, one of the two, and no drain
// being ranked.
bool SchedulerSettled(const nlohmann::json& status);
// Microseconds on the kernel's clock now (CLOCK_BOOTTIME), as /dev/kmsg
// stamps a record and rasd turns a record's stamp into a time.
long long KernelMicrosNow();
// A Prometheus instant query on loopback `port`: each sample's labels and
// value; none when Prometheus does not answer or the query fails.
std::vector<std::pair<nlohmann::json, double>> PrometheusQuery(int port, const std::string& promql);
// A loopback TCP port nobody listens on right now.
int FreePort();

class RasdInstance {
 public:
  RasdInstance();
  ~RasdInstance();

  // Writes the config file that Start() passes with --config.
  void WriteConfig(const std::string& yaml);
  // Starts rasd; false (with the reason in `why`) if it did not become ready.
  bool Start(std::vector<std::string> extra_args = {}, std::map<std::string, std::string> env = {},
             std::string* why = nullptr);
  // SIGTERM and wait; returns the exit code.
  std::optional<int> Stop(std::chrono::milliseconds timeout = 5s);

  CommandResult Rasctl(std::vector<std::string> args, std::optional<uid_t> uid = std::nullopt,
                       std::optional<gid_t> gid = std::nullopt, std::vector<gid_t> groups = {});
  // `rasctl --json ARGS...` parsed (a failed command is a test failure and
  // a discarded value).
  nlohmann::json RasctlJson(std::vector<std::string> args);

  Process& Proc() { return *process_; }
  NotifyListener& Notify() { return *notify_; }
  const TempDir& Dir() const { return dir_; }
  std::filesystem::path Socket() const { return dir_ / "rasd.sock"; }
  std::filesystem::path StateDir() const { return dir_ / "state"; }
  std::filesystem::path ConfigPath() const { return dir_ / "rasd.yaml"; }
  // The fixture host root rasd runs against: an empty dev/kmsg (a plain
  // file, followed as it grows) and a boot id.
  std::filesystem::path HostRoot() const { return dir_ / "host"; }
  void AppendKmsg(const std::string& records);
  std::string Stderr() const { return ReadText(dir_ / "rasd.stderr"); }

 private:
  TempDir dir_;
  std::unique_ptr<NotifyListener> notify_;
  std::unique_ptr<Process> process_;
  bool has_config_ = false;
};

// A config section: an allreduce collective job that runs until stopped,
// checkpointing every 10 steps (the link tests move it between devices).
inline constexpr const char* kAllreduceJob = R"(jobs:
  - name: allreduce
    kind: collective
    elements: 16384
    steps: 100000000
    checkpoint_every: 10
)";

// The job named `name` in `rasctl jobs`; null when there is none.
nlohmann::json Job(RasdInstance& rasd, const std::string& name);
// Device `index` as `rasctl devices INDEX` shows it.
nlohmann::json DeviceOf(RasdInstance& rasd, int index);

}  // namespace rasd::testing
