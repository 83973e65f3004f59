#include "test_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "rasd/testing/eventually.h"

extern char** environ;

namespace rasd::testing {
namespace {

sockaddr_un UnixAddress(const std::filesystem::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string text = path.string();
  if (text.size() >= sizeof address.sun_path)
    throw std::runtime_error("socket path too long: " + text);
  std::memcpy(address.sun_path, text.c_str(), text.size() + 1);
  return address;
}

int Remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Whether a user who is neither the owner nor in the group (nobody) can
// reach and execute `path`: every directory above it searchable by others.
bool OthersCanExecute(const std::filesystem::path& path) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(path, ec);
  if (ec) return false;
  for (auto at = absolute; !at.empty(); at = at.parent_path()) {
    struct stat info {};
    if (::stat(at.c_str(), &info) != 0 || (info.st_mode & S_IXOTH) == 0) return false;
    if (at == at.parent_path()) break;
  }
  return true;
}

// `binary` as another user can run it: itself where others reach it, else
// a copy in a directory they do (a checkout under a 0700 directory, as
// `mktemp -d` and root's home are, is out of their reach). One copy per
// binary and test process, removed when it exits.
std::string ReachableByOthers(const std::string& binary) {
  if (OthersCanExecute(binary)) return binary;
  static TempDir copies;
  static std::map<std::string, std::string> copied;
  if (auto found = copied.find(binary); found != copied.end()) return found->second;
  const auto copy = copies / (std::to_string(copied.size()) + "-" +
                              std::filesystem::path(binary).filename().string());
  std::error_code ec;
  std::filesystem::copy_file(binary, copy, ec);
  if (ec) throw std::runtime_error("cannot copy " + binary + " for another user: " + ec.message());
  ::chmod(copy.c_str(), 0755);
  return copied[binary] = copy.string();
}

}  // namespace

TempDir::TempDir() {
  char pattern[] = "/tmp/rasd-test-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
  ::chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
}

void ReplaceText(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  const bool written =
      ::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()) &&
      ::ftruncate(fd, static_cast<off_t>(text.size())) == 0;
  ::close(fd);
  if (!written) throw std::runtime_error("cannot write " + path.string());
}

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  // Every 10 ms: most conditions ask rasd over its socket.
  return Eventually(condition, timeout, 10ms);
}

Process::Process(const ProcessOptions& options) {
  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed.
  std::map<std::string, std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  for (const auto& name : options.unset_env) env.erase(name);
  env.erase("LISTEN_FDS");
  env.erase("LISTEN_PID");
  env.erase("LISTEN_FDNAMES");
  for (const auto& [name, value] : options.set_env) env[name] = value;
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  if (options.pass_listen_fd >= 0) env_strings.push_back("LISTEN_FDS=1");
  std::string listen_pid(64, '\0');  // filled in by the child
  std::vector<char*> envp;
  for (auto& entry : env_strings) envp.push_back(entry.data());
  if (options.pass_listen_fd >= 0) envp.push_back(listen_pid.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = options.argv;
  if (options.uid && *options.uid != ::geteuid() && !argv_strings.empty())
    argv_strings[0] = ReachableByOthers(argv_strings[0]);
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const int out_fd =
      ::open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd =
      ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out_fd < 0 || err_fd < 0 || in_fd < 0) throw std::runtime_error("cannot open child stdio");

  const pid_t test = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // Its own process group, so that the end of the test ends what it
    // started too (a `rasctl run` workload, a shell's commands).
    ::setpgid(0, 0);
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (options.pass_listen_fd >= 0) {
      if (options.pass_listen_fd == 3) {
        ::fcntl(3, F_SETFD, 0);
      } else {
        ::dup2(options.pass_listen_fd, 3);
      }
      std::snprintf(listen_pid.data(), listen_pid.size(), "LISTEN_PID=%d",
                    static_cast<int>(::getpid()));
    }
    if (options.gid || options.uid) {
      if (::setgroups(options.groups.size(), options.groups.data()) != 0) ::_exit(125);
      if (options.gid && ::setgid(*options.gid) != 0) ::_exit(125);
      if (options.uid && ::setuid(*options.uid) != 0) ::_exit(125);
    }
    // A test binary that crashes or times out takes its children with it.
    // Set after the credentials change, which clears it.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != test) ::_exit(126);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // as the child does: whichever runs first, no kill misses the group
  ::close(out_fd);
  ::close(err_fd);
  ::close(in_fd);
}

Process::~Process() {
  // The whole group, also when the child itself has ended: what it started
  // may run on. The child is reaped only after that, so that its pid (the
  // group's id) cannot have been given to another process meanwhile.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  (void)Wait(5s);
  int status = 0;
  (void)::waitpid(pid_, &status, WNOHANG);
}

void Process::Signal(int signal) const { ::kill(pid_, signal); }

bool Process::Running() {
  if (status_) return false;
  siginfo_t info{};
  // WNOWAIT: seen, not reaped (the destructor reaps; see there).
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != pid_)
    return true;
  status_ = info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
  return false;
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  if (!Running()) return status_;
  // The pidfd is readable once the child has exited: woken at its exit, not
  // at the next look.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd < 0) {
    WaitUntil([this] { return !Running(); }, timeout);
    return status_;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Running()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd ready{pidfd, POLLIN, 0};
    (void)::poll(&ready, 1, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 60'000)));
  }
  ::close(pidfd);
  return status_;
}

bool Alive(pid_t pid) {
  const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  const auto state = stat.rfind(") ");
  return state != std::string::npos && state + 2 < stat.size() && stat[state + 2] != 'Z';
}

CommandResult RunToCompletion(ProcessOptions options, std::chrono::milliseconds timeout) {
  TempDir capture;
  options.stdout_path = capture / "stdout";
  options.stderr_path = capture / "stderr";
  CommandResult result;
  {
    Process process(options);
    const auto code = process.Wait(timeout);
    result.exit_code = code.value_or(-1);
  }
  result.out = ReadText(capture / "stdout");
  result.err = ReadText(capture / "stderr");
  return result;
}

NotifyListener::NotifyListener(std::filesystem::path path) : path_(std::move(path)) {
  fd_.Reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  ::setsockopt(fd_.Get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
  const sockaddr_un address = UnixAddress(path_);
  if (::bind(fd_.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error("cannot bind notify socket " + path_.string());
  }
}

std::optional<std::string> NotifyListener::Receive(std::chrono::milliseconds timeout) {
  pollfd pfd{fd_.Get(), POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  char buffer[4096];
  const ssize_t n = ::recv(fd_.Get(), buffer, sizeof buffer, 0);
  if (n <= 0) return std::nullopt;
  return std::string(buffer, static_cast<std::size_t>(n));
}

bool NotifyListener::WaitFor(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& message : messages_) {
    if (message.find(needle) != std::string::npos) return true;
  }
  while (std::chrono::steady_clock::now() < deadline) {
    auto message = Receive(std::chrono::milliseconds(Remaining(deadline)));
    if (!message) return false;
    messages_.push_back(*message);
    if (message->find(needle) != std::string::npos) return true;
  }
  return false;
}

RawClient::RawClient(const std::filesystem::path& socket) {
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_un address = UnixAddress(socket);
  if (::connect(fd.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    fd_ = std::move(fd);
  }
}

double PingMilliseconds(RawClient& client) {
  const auto begin = std::chrono::steady_clock::now();
  if (!client.Send("{\"command\":\"ping\"}\n")) return -1;
  const auto reply = client.ReadLine();
  if (!reply || reply->find("\"ok\":true") == std::string::npos) return -1;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
      .count();
}

bool RawClient::Send(const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_.Get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

void RawClient::ShutdownWrite() { ::shutdown(fd_.Get(), SHUT_WR); }

std::optional<std::string> RawClient::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (const auto newline = buffer_.find('\n'); newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    pollfd pfd{fd_.Get(), POLLIN, 0};
    if (::poll(&pfd, 1, Remaining(deadline)) <= 0) return std::nullopt;
    char chunk[65536];
    const ssize_t n = ::recv(fd_.Get(), chunk, sizeof chunk, 0);
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

bool RawClient::WaitClosed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    pollfd pfd{fd_.Get(), POLLIN, 0};
    if (::poll(&pfd, 1, Remaining(deadline)) <= 0) return false;
    char chunk[65536];
    const ssize_t n = ::recv(fd_.Get(), chunk, sizeof chunk, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

RasdInstance::RasdInstance() {
  notify_ = std::make_unique<NotifyListener>(dir_ / "notify.sock");
  std::filesystem::create_directories(HostRoot() / "dev");
  std::filesystem::create_directories(HostRoot() / "proc/sys/kernel/random");
  WriteText(HostRoot() / "dev/kmsg", "");
  WriteText(HostRoot() / "proc/sys/kernel/random/boot_id",
            "11111111-2222-3333-4444-555555555555\n");
}

void RasdInstance::AppendKmsg(const std::string& records) {
  std::ofstream file(HostRoot() / "dev/kmsg", std::ios::binary | std::ios::app);
  file << records;
}

RasdInstance::~RasdInstance() {
  if (process_ && process_->Running()) Stop();
}

void RasdInstance::WriteConfig(const std::string& yaml) {
  WriteText(ConfigPath(), yaml);
  has_config_ = true;
}

bool RasdInstance::Start(std::vector<std::string> extra_args,
                         std::map<std::string, std::string> env, std::string* why) {
  ProcessOptions options;
  options.argv = {RASD_BINARY, "--state-dir", StateDir().string(), "--socket", Socket().string()};
  // Parallel tests must not fight over rasd's default metrics port.
  if (std::find(extra_args.begin(), extra_args.end(), "--metrics-listen") == extra_args.end()) {
    options.argv.push_back("--metrics-listen");
    options.argv.push_back("127.0.0.1:0");
  }
  if (std::find(extra_args.begin(), extra_args.end(), "--host-root") == extra_args.end()) {
    options.argv.push_back("--host-root");
    options.argv.push_back(HostRoot().string());
  }
  if (has_config_) {
    options.argv.push_back("--config");
    options.argv.push_back(ConfigPath().string());
  }
  for (auto& arg : extra_args) options.argv.push_back(std::move(arg));
  options.set_env = std::move(env);
  options.set_env["NOTIFY_SOCKET"] = notify_->Path().string();
  options.unset_env = {"WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "RASD_SOCKET"};
  options.stderr_path = dir_ / "rasd.stderr";
  notify_->ClearMessages();
  process_ = std::make_unique<Process>(options);
  if (notify_->WaitFor("READY=1", 10s)) return true;
  if (why != nullptr) {
    *why = "rasd did not send READY=1 within 10 s; running=" + std::to_string(process_->Running()) +
           "; stderr:\n" + Stderr();
  }
  return false;
}

std::optional<int> RasdInstance::Stop(std::chrono::milliseconds timeout) {
  process_->Signal(SIGTERM);
  return process_->Wait(timeout);
}

nlohmann::json RasdInstance::RasctlJson(std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  const auto result = Rasctl(std::move(args));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out, nullptr, false);
}

CommandResult RasdInstance::Rasctl(std::vector<std::string> args, std::optional<uid_t> uid,
                                   std::optional<gid_t> gid, std::vector<gid_t> groups) {
  ProcessOptions options;
  options.argv = {RASCTL_BINARY, "--socket", Socket().string()};
  for (auto& arg : args) options.argv.push_back(std::move(arg));
  options.uid = uid;
  options.gid = gid;
  options.groups = std::move(groups);
  return RunToCompletion(options);
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string Http(int port, const std::string& method, const std::string& path) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return {};
  const std::string request = method + " " + path +
                              " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "Content-Length: 0\r\n\r\n";
  if (::write(fd.Get(), request.data(), request.size()) < 0) return {};
  std::string response;
  char buffer[8192];
  ssize_t got = 0;
  while ((got = ::read(fd.Get(), buffer, sizeof buffer)) > 0)
    response.append(buffer, static_cast<std::size_t>(got));
  const auto body = response.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

int FreePort() {
  common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd.Get(), reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

nlohmann::json Job(RasdInstance& rasd, const std::string& name) {
  const nlohmann::json reply =
      rasd.RasctlJson({"jobs"});  // named: a temporary's member would dangle
  for (const auto& job : reply["jobs"])
    if (job["name"] == name) return job;
  return nullptr;
}

nlohmann::json DeviceOf(RasdInstance& rasd, int index) {
  const nlohmann::json reply = rasd.RasctlJson({"devices", std::to_string(index)});
  return reply["devices"][0];
}

std::vector<std::pair<nlohmann::json, double>> PrometheusQuery(int port,
                                                               const std::string& promql) {
  std::vector<std::pair<nlohmann::json, double>> samples;
  const auto body = Http(port, "GET", "/api/v1/query?query=" + UrlEncode(promql));
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_object() || json.value("status", "") != "success") return samples;
  for (const auto& sample : json["data"]["result"])
    samples.emplace_back(sample["metric"], std::stod(sample["value"][1].get<std::string>()));
  return samples;
}

bool SchedulerSettled(const nlohmann::json& status) {
  const auto& scheduler = status["scheduler"];
  const bool drained = scheduler["drained"] == true;
  const bool guarded = scheduler["guarded"].is_string();
  return drained != guarded && scheduler["confirming"] != true;
}

long long KernelMicrosNow() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<long long>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
}

}  // namespace rasd::testing
