#include "process_table.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <string>

namespace rasd::daemon {
namespace {

// Debian 12's glibc has no wrappers for these (2.36 has pidfd_open in
// <sys/pidfd.h>, but not every toolchain ships it): the raw calls.
int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int signal) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

Result<std::string> ReadProc(pid_t pid, const char* file) {
  std::ifstream in(fmt::format("/proc/{}/{}", pid, file));
  if (!in) return Fail(ErrorCode::kNotFound, fmt::format("no process {}", pid));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class SystemProcesses final : public ProcessTable {
 public:
  Result<common::UniqueFd> Open(pid_t pid) const override {
    if (pid <= 0) return Fail(ErrorCode::kInvalidArgument, fmt::format("bad pid {}", pid));
    common::UniqueFd fd(PidfdOpen(pid));
    if (!fd) {
      if (errno == ESRCH) return Fail(ErrorCode::kNotFound, fmt::format("no process {}", pid));
      return Fail(ErrnoError(fmt::format("pidfd_open {}", pid), errno));
    }
    // A zombie still has its pid (until its parent reaps it) but has ended:
    // its pidfd is readable already.
    pollfd ended{fd.Get(), POLLIN, 0};
    if (::poll(&ended, 1, 0) > 0)
      return Fail(ErrorCode::kNotFound, fmt::format("no process {}: it has exited", pid));
    return fd;
  }

  Result<uid_t> OwnerOf(pid_t pid) const override {
    auto status = ReadProc(pid, "status");
    if (!status) return Fail(status.error());
    std::istringstream lines(*status);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("Uid:")) continue;
      std::istringstream fields(line.substr(4));
      unsigned long real = 0;
      if (fields >> real) return static_cast<uid_t>(real);
    }
    return Fail(ErrorCode::kCorruptData, fmt::format("/proc/{}/status has no Uid line", pid));
  }

  Result<unsigned long long> StartTimeOf(pid_t pid) const override {
    auto stat = ReadProc(pid, "stat");
    if (!stat) return Fail(stat.error());
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last ')': state is field 3, starttime field 22.
    const auto close = stat->rfind(')');
    if (close == std::string::npos) return Fail(ErrorCode::kCorruptData, "bad /proc stat");
    std::istringstream fields(stat->substr(close + 1));
    std::string field;
    for (int i = 0; i < 19 && fields >> field; ++i) {
    }
    unsigned long long start = 0;
    if (!(fields >> start)) return Fail(ErrorCode::kCorruptData, "bad /proc stat");
    return start;
  }

  Status Signal(const common::UniqueFd& pidfd, int signal) const override {
    if (PidfdSendSignal(pidfd.Get(), signal) != 0) {
      return Fail(ErrnoError(fmt::format("pidfd_send_signal {}", signal), errno));
    }
    return {};
  }
};

}  // namespace

std::unique_ptr<ProcessTable> SystemProcessTable() { return std::make_unique<SystemProcesses>(); }

}  // namespace rasd::daemon
