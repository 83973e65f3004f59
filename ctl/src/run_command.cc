#include "run_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <vector>

#include "control_client.h"
#include "rasd/common/device_visibility.h"

namespace rasd::ctl {
namespace {

constexpr int kExitRefused = 1;
constexpr int kExitUnreachable = 3;
constexpr int kExitCannotStart = 127;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// rasd's own answer (the devices reply), not a reading of the state name.
bool TakesNewWork(const nlohmann::json& device) { return device.value("takes_new_work", false); }

std::string Say(const nlohmann::json& message) {
  const std::string event = message.value("event", std::string("?"));
  const auto device = message.contains("device") ? message["device"].dump() : std::string("?");
  if (event == "drain") {
    return fmt::format(
        "device {} is {} ({}): rasd sent the drain signal; {}", device,
        message.value("state", std::string("?")), message.value("reason", std::string("?")),
        message.value("kill_after_grace", true)
            ? fmt::format("SIGKILL in {} ms if it still runs", message.value("grace_ms", 0))
            : std::string("it will not be killed"));
  }
  if (event == "isolated") {
    return fmt::format("device {} is isolated ({})", device,
                       message.value("reason", std::string("?")));
  }
  if (event == "returned") return fmt::format("device {} is back in service", device);
  if (event == "killed") {
    return message.contains("reason")
               ? fmt::format("rasd killed the workload: it met an uncorrectable error on device "
                             "{} ({})",
                             device, message.value("reason", std::string("?")))
               : fmt::format("rasd killed the workload (SIGKILL): it still ran {} ms after its "
                             "drain signal",
                             message.value("grace_ms", 0));
  }
  return message.dump();
}

// Why `command` cannot be executed as execvp would look for it, or empty:
// checked before rasd is asked, so that a typo attaches nothing.
std::string CannotExecute(const std::string& command) {
  // kUnreachable: the directory cannot be searched, so whether the file
  // is there is unknown (another user's PATH entries, as `su` keeps them).
  constexpr int kUnreachable = -1;
  auto check = [](const std::string& path) -> int {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return errno == EACCES ? kUnreachable : errno;
    if (S_ISDIR(info.st_mode)) return EISDIR;
    return ::access(path.c_str(), X_OK) == 0 ? 0 : errno;
  };
  if (command.find('/') != std::string::npos) {
    const int error = check(command);
    if (error == 0) return {};
    return error == kUnreachable ? std::strerror(EACCES) : std::strerror(error);
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  int first_error = ENOENT;
  std::vector<std::string> unsearchable;
  while (true) {
    const std::size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);  // empty: the current directory
    const std::string where(dir.empty() ? "." : dir);
    const int error = check(fmt::format("{}/{}", where, command));
    if (error == 0) return {};
    if (error == kUnreachable) {
      unsearchable.push_back(where);
    } else if (error != ENOENT && first_error == ENOENT) {
      first_error = error;
    }
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  if (first_error != ENOENT) return std::strerror(first_error);
  if (unsearchable.empty()) return "not found in PATH";
  return fmt::format("not found in PATH ({} cannot be searched: {})", fmt::join(unsearchable, ", "),
                     std::strerror(EACCES));
}

}  // namespace

Result<std::vector<int>> ChooseDevices(const nlohmann::json& devices, const RunOptions& options) {
  std::map<int, const nlohmann::json*> by_index;
  for (const auto& device : devices) by_index[device.value("index", -1)] = &device;
  if (!options.devices.empty()) {
    std::vector<int> chosen = options.devices;
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    for (int index : chosen) {
      auto found = by_index.find(index);
      if (found == by_index.end()) {
        return Fail(ErrorCode::kNotFound,
                    fmt::format("no device {} (rasd has {})", index, by_index.size()));
      }
      if (!TakesNewWork(*found->second)) {
        return Fail(ErrorCode::kDeviceIsolated,
                    fmt::format("device {} is {}: it takes no new work", index,
                                found->second->value("state", std::string("?"))));
      }
    }
    return chosen;
  }
  const int wanted = std::max(1, options.count);
  std::vector<const nlohmann::json*> serving;
  for (const auto& [index, device] : by_index) {
    if (TakesNewWork(*device)) serving.push_back(device);
  }
  if (static_cast<int>(serving.size()) < wanted) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("{} device(s) wanted, {} take new work", wanted, serving.size()));
  }
  std::stable_sort(serving.begin(), serving.end(), [](const auto* a, const auto* b) {
    const bool a_healthy = a->value("state", std::string()) == "healthy";
    const bool b_healthy = b->value("state", std::string()) == "healthy";
    if (a_healthy != b_healthy) return a_healthy;
    const auto a_jobs = a->contains("jobs") ? (*a)["jobs"].size() : 0;
    const auto b_jobs = b->contains("jobs") ? (*b)["jobs"].size() : 0;
    return a_jobs < b_jobs;
  });
  std::vector<int> chosen;
  for (int i = 0; i < wanted; ++i) chosen.push_back(serving[static_cast<std::size_t>(i)]->value("index", -1));
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

std::map<std::string, std::string> VisibilityEnvironment(const nlohmann::json& devices,
                                                         const std::vector<int>& chosen) {
  std::vector<common::VisibleDevice> all;
  for (const auto& device : devices) {
    all.push_back({.index = device.value("index", -1),
                   .vendor = device.value("vendor", std::string()),
                   .uuid = device.value("uuid", std::string())});
  }
  return common::VisibilityEnvironment(all, chosen);
}

namespace {

// Where and as what a workload runs, as rasd's devices allow.
struct Placement {
  std::vector<int> devices;
  std::map<std::string, std::string> environment;  // the vendors' visibility variables
  std::string name;
};

// Asks rasd for its devices and chooses among them; else says why and sets
// the exit code.
std::optional<Placement> Place(ControlClient& client, const RunOptions& options, int& exit_code) {
  auto listed = client.Call("devices");
  if (!listed) {
    std::cerr << "rasctl: " << listed.error().message << "\n";
    exit_code = kExitUnreachable;
    return std::nullopt;
  }
  if (!listed->value("ok", false)) {
    std::cerr << "rasctl: run: devices: " << (*listed)["error"].value("message", "?") << "\n";
    exit_code = kExitRefused;
    return std::nullopt;
  }
  const nlohmann::json devices = (*listed)["result"]["devices"];
  auto chosen = ChooseDevices(devices, options);
  if (!chosen) {
    std::cerr << "rasctl: run: " << chosen.error().message << "\n";
    exit_code = kExitRefused;
    return std::nullopt;
  }
  Placement placement;
  placement.environment = VisibilityEnvironment(devices, *chosen);
  placement.devices = std::move(*chosen);
  placement.name = options.name.empty()
                       ? std::filesystem::path(options.command.front()).filename().string()
                       : options.name;
  return placement;
}

// The child's side of the fork: it waits on `go` until rasd has it
// attached, then becomes the command.
[[noreturn]] void BecomeWorkload(const RunOptions& options, const Placement& placement,
                                 const int go[2], pid_t supervisor, const sigset_t& previous) {
  // The workload ends with rasctl: whoever ends rasctl by force (a
  // scheduler's step kill, an operator's kill -9) ends the work it
  // started, and nothing keeps a device busy with no one to answer for
  // it. A graceful signal to rasctl reaches the workload through Supervise
  // instead. The parent check covers a rasctl that died before the prctl.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != supervisor)
    ::_exit(kExitCannotStart);
  // Waits until rasd has it attached: no work starts unwatched. EOF
  // (rasctl gave up) ends it before the command runs.
  ::close(go[1]);
  char byte = 0;
  if (::read(go[0], &byte, 1) != 1) ::_exit(kExitCannotStart);
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  for (const auto& [key, value] : placement.environment) ::setenv(key.c_str(), value.c_str(), 1);
  ::setenv("RASD_WORKLOAD_NAME", placement.name.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& word : options.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int error = errno;
  const std::string why = fmt::format("rasctl: run: cannot start {}: {}\n", options.command.front(),
                                      std::strerror(error));
  (void)::write(STDERR_FILENO, why.data(), why.size());
  ::_exit(kExitCannotStart);
}

// Attaches `child` to rasd; on a refusal the child (still waiting on its
// pipe) is ended and reaped, and the exit code says why.
std::optional<int> Attach(ControlClient& client, pid_t child, const Placement& placement,
                          const RunOptions& options, int go_write) {
  nlohmann::json args = {{"pid", child},
                         {"name", placement.name},
                         {"devices", placement.devices},
                         {"drain_signal", options.drain_signal}};
  if (options.grace) args["grace_ms"] = options.grace->count();
  auto attached = client.Call("attach", args);
  if (!attached || !attached->value("ok", false)) {
    ::close(go_write);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!attached) {
      std::cerr << "rasctl: " << attached.error().message << "\n";
      return kExitUnreachable;
    }
    std::cerr << "rasctl: run: " << (*attached)["error"].value("message", "?") << "\n";
    return kExitRefused;
  }
  const auto& result = (*attached)["result"];
  std::cerr << fmt::format(
      "rasctl run: '{}' (pid {}) on device(s) {}; drain signal {}, grace {} ms\n", placement.name,
      child, fmt::join(placement.devices, ","), result.value("drain_signal", std::string("?")),
      result.value("grace_ms", 0));
  if (!result.value("saved", true)) {
    std::cerr << fmt::format(
        "rasctl run: warning: rasd could not save the attachment ({}); until it can (it retries "
        "every second), a restarted rasd will not follow '{}'\n",
        result.value("unsaved_reason", std::string("?")), placement.name);
  }
  return std::nullopt;
}

// Until the child ends: forwards the signals `handled` names to it and
// prints what rasd says about it. Returns the child's exit code.
int Supervise(ControlClient& client, pid_t child, const sigset_t& handled,
              const std::string& name) {
  const int signals = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  bool connected = true;
  // Prints every message that has arrived.
  auto read_messages = [&](bool child_running) {
    while (connected) {
      auto message = client.Next(std::chrono::milliseconds(0));
      if (!message) {
        if (child_running) {
          std::cerr << "rasctl run: rasd closed the connection; '" << name
                    << "' runs on, no longer watched\n";
        }
        connected = false;
        break;
      }
      if (!*message) break;
      std::cerr << "rasctl run: " << Say(**message) << "\n";
    }
  };
  for (;;) {
    pollfd fds[2] = {{signals, POLLIN, 0}, {connected ? client.Fd() : -1, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) read_messages(true);
    if ((fds[0].revents & POLLIN) == 0) continue;
    signalfd_siginfo info{};
    while (::read(signals, &info, sizeof info) == sizeof info) {
      if (info.ssi_signo != SIGCHLD) {
        ::kill(child, static_cast<int>(info.ssi_signo));
        continue;
      }
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) != child) continue;
      // What rasd said about it before it ended (why it was killed).
      read_messages(false);
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) {
        std::cerr << "rasctl run: '" << name << "' ended by signal " << WTERMSIG(status) << "\n";
        return 128 + WTERMSIG(status);
      }
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int RunWorkload(const RunOptions& options) {
  if (options.command.empty()) {
    std::cerr << "rasctl: run: no command (rasctl run [OPTIONS] -- CMD [ARGS...])\n";
    return 2;
  }
  if (const std::string why = CannotExecute(options.command.front()); !why.empty()) {
    std::cerr << "rasctl: run: cannot start " << options.command.front() << ": " << why << "\n";
    return kExitCannotStart;
  }
  auto client = ControlClient::Connect(options.socket, options.timeout);
  if (!client) {
    std::cerr << "rasctl: " << client.error().message << "\n";
    return kExitUnreachable;
  }
  int exit_code = 0;
  const auto placement = Place(*client, options, exit_code);
  if (!placement) return exit_code;

  // Signals for the child are taken through a signalfd from before the
  // fork, so none is lost between the fork and Supervise.
  sigset_t handled, previous;
  sigemptyset(&handled);
  for (int signal : kForwarded) sigaddset(&handled, signal);
  sigaddset(&handled, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &handled, &previous);
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) {
    std::cerr << "rasctl: run: pipe: " << std::strerror(errno) << "\n";
    return kExitCannotStart;
  }
  const pid_t supervisor = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    std::cerr << "rasctl: run: fork: " << std::strerror(errno) << "\n";
    return kExitCannotStart;
  }
  if (child == 0) BecomeWorkload(options, *placement, go, supervisor, previous);
  ::close(go[0]);
  if (auto refused = Attach(*client, child, *placement, options, go[1])) return *refused;
  const char byte = 1;
  (void)::write(go[1], &byte, 1);
  ::close(go[1]);
  return Supervise(*client, child, handled, placement->name);
}

}  // namespace rasd::ctl
