#pragma once

#include <sys/types.h>

#include <memory>

#include "rasd/common/result.h"
#include "rasd/common/unique_fd.h"

namespace rasd::daemon {

// The processes of rasd's own PID namespace, as workloads need them: a
// handle that stays bound to one process (a pidfd: a reused pid never
// receives a signal meant for the process that exited), its owner and its
// start time. An interface so that tests can stand in for it; the system's
// reads /proc of rasd's namespace, never a fixture host root (processes
// are rasd's own, not the host tree's). Thread-safe.
class ProcessTable {
 public:
  virtual ~ProcessTable() = default;
  // A pidfd: readable once the process has exited. kNotFound when no such
  // process runs.
  virtual Result<common::UniqueFd> Open(pid_t pid) const = 0;
  // The process's real uid. kNotFound when it is gone.
  virtual Result<uid_t> OwnerOf(pid_t pid) const = 0;
  // Clock ticks since boot at which the process started (/proc's
  // starttime): with the pid, it names one process across a rasd restart.
  virtual Result<unsigned long long> StartTimeOf(pid_t pid) const = 0;
  // Signals the process the pidfd names (pidfd_send_signal).
  virtual Status Signal(const common::UniqueFd& pidfd, int signal) const = 0;
};

std::unique_ptr<ProcessTable> SystemProcessTable();

}  // namespace rasd::daemon
