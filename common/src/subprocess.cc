#include "rasd/common/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rasd/common/unique_fd.h"

namespace rasd::common {

const char* ProgramOutcomeName(ProgramOutcome outcome) {
  switch (outcome) {
    case ProgramOutcome::kOk:
      return "ok";
    case ProgramOutcome::kFailed:
      return "failed";
    case ProgramOutcome::kTimeout:
      return "timeout";
  }
  return "failed";
}

ProgramResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const ProgramOptions& options) {
  const auto timeout = options.timeout;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return {ProgramOutcome::kFailed, fmt::format("pipe: {}", std::strerror(errno)), "", ""};
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  UniqueFd error_read_end, error_write_end;
  if (options.separate_errors) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
      return {ProgramOutcome::kFailed, fmt::format("pipe: {}", std::strerror(errno)), "", ""};
    error_read_end = UniqueFd(pipe_fds[0]);
    error_write_end = UniqueFd(pipe_fds[1]);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.Get(), 1);
  posix_spawn_file_actions_adddup2(&actions,
                                   options.separate_errors ? error_write_end.Get() : write_end.Get(), 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // The daemon blocks its signals in every thread; the hook starts clean.
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigfillset(&defaults);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  std::vector<char*> argv_pointers;
  for (const auto& arg : argv) argv_pointers.push_back(const_cast<char*>(arg.c_str()));
  argv_pointers.push_back(nullptr);
  std::vector<char*> env_pointers;
  for (const auto& entry : env) env_pointers.push_back(const_cast<char*>(entry.c_str()));
  env_pointers.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv_pointers[0], &actions, &attributes,
                                    argv_pointers.data(), env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  write_end.Reset();
  error_write_end.Reset();
  if (spawned != 0)
    return {ProgramOutcome::kFailed,
            fmt::format("cannot run {}: {}", argv[0], std::strerror(spawned)), "", ""};

  ProgramResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  char buffer[4096];
  // Both ends are read until both are closed (a full stderr pipe would
  // stall a program that writes much there).
  std::vector<std::pair<int, std::string*>> open;
  open.emplace_back(read_end.Get(), &result.output);
  if (options.separate_errors) open.emplace_back(error_read_end.Get(), &result.errors);
  while (!open.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2];
    for (std::size_t i = 0; i < open.size(); ++i) fds[i] = pollfd{open[i].first, POLLIN, 0};
    const int ready = ::poll(fds, open.size(), static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline is checked at the top
    for (std::size_t i = open.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      const ssize_t got = ::read(open[i].first, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {  // end of output: the program closed it or exited
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      std::string& text = *open[i].second;
      if (text.size() < options.output_limit) {
        text.append(buffer, std::min<std::size_t>(static_cast<std::size_t>(got),
                                                  options.output_limit - text.size()));
      }
    }
  }
  // Kill the whole session: a hook's own children must not linger either.
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    result.outcome = ProgramOutcome::kTimeout;
    result.detail = fmt::format("killed after {} ms", timeout.count());
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    result.outcome = ProgramOutcome::kOk;
    result.detail = "exit 0";
  } else if (WIFEXITED(status)) {
    result.outcome = ProgramOutcome::kFailed;
    result.detail = fmt::format("exit {}", WEXITSTATUS(status));
  } else {
    result.outcome = ProgramOutcome::kFailed;
    result.detail = fmt::format("signal {}", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  return result;
}

}  // namespace rasd::common
