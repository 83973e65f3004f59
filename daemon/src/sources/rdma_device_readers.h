#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/drivers_shim/probe_calls.h"
#include "rasd/ras/infiniband_sysfs_source.h"

namespace rasd::daemon {

// Reads each RDMA device (ras::ReadInfinibandDevice) on a thread of its
// own. mlx5's counter and port-state files are answered by the NIC's
// firmware, and a firmware that does not answer blocks the read for as long
// as it does not: the read holds that device's thread alone, never the loop
// and never another NIC. A device has one thread and at most one read in
// flight, so a wedged NIC holds one thread, never a growing pile.
//
// Each file read is a drivers::ProbeCalls call (device: the RDMA device's
// name; function: the file under its class directory), timed on the loop's
// clock, so the caller can tell a read past its deadline and name it.
//
// Destroying the readers leaves a thread still inside a read behind,
// detached: nothing can end a read stuck in the kernel, and a stop must not
// wait for it. Once it returns it reads nothing more and reports nothing.
// `host` must outlive that last read; `loop` must outlive the readers.
//
// Loop thread only, but for Running().
class RdmaDeviceReaders {
 public:
  // Called on the loop after a read has finished (Take() has it).
  RdmaDeviceReaders(common::EventLoop& loop, const common::HostEnv& host,
                    std::function<void()> finished);
  RdmaDeviceReaders(const RdmaDeviceReaders&) = delete;
  RdmaDeviceReaders& operator=(const RdmaDeviceReaders&) = delete;
  ~RdmaDeviceReaders();

  // Starts a read of device `name`; false, and nothing started, while its
  // last read is still in flight.
  bool Request(const std::string& name);
  // Blocks the caller until no read is in flight, or for `at_most`; true
  // when none is. For a start that wants its baseline before it serves.
  bool WaitUntilIdle(std::chrono::milliseconds at_most);

  // The reads finished since the last Take, by device name; nullopt for a
  // device that was gone when read.
  std::map<std::string, std::optional<ras::InfinibandSnapshot::Device>> Take();

  // The reads in flight now, by device: how long since each was asked for
  // (on the loop's clock) and the file it is inside (empty between files).
  std::map<std::string, drivers::ProbeCalls::Call> InFlightReads() const;

 private:
  struct Shared;
  static void ReadDevice(const std::shared_ptr<Shared>& shared, const std::string& name);

  std::shared_ptr<Shared> shared_;
  std::map<std::string, std::thread> threads_;
  int left_behind_ = 0;
};

}  // namespace rasd::daemon
