#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "rasd/common/result.h"

namespace rasd::common {

// Time as the daemon sees it. Production uses SystemClock; tests use
// ManualClock to fire timers and age leaky buckets without sleeping.
// Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time since an arbitrary epoch: durations and deadlines.
  virtual std::chrono::nanoseconds Monotonic() const = 0;
  // Wall-clock time: timestamps stored and shown to people.
  virtual std::chrono::system_clock::time_point Wall() const = 0;
  // Time since the host booted, counting suspend (CLOCK_BOOTTIME): what the
  // kernel log stamps its records with.
  virtual std::chrono::nanoseconds SinceBoot() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::chrono::nanoseconds Monotonic() const override;
  std::chrono::system_clock::time_point Wall() const override;
  std::chrono::nanoseconds SinceBoot() const override;
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  // `booted_before` is how long the host had been up when the clock
  // started: SinceBoot() is that plus the time advanced.
  explicit ManualClock(
      std::chrono::system_clock::time_point wall_start =
          std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000)),
      std::chrono::nanoseconds booted_before = std::chrono::hours(1));
  std::chrono::nanoseconds Monotonic() const override;
  std::chrono::system_clock::time_point Wall() const override;
  std::chrono::nanoseconds SinceBoot() const override;
  void Advance(std::chrono::nanoseconds by);

 private:
  std::atomic<std::int64_t> elapsed_ns_{0};
  std::chrono::system_clock::time_point wall_start_;
  std::chrono::nanoseconds booted_before_;
};

// Every path on the host (sysfs, procfs, tracefs, /dev/kmsg) goes through a
// HostEnv, so tests point the daemon at a fixture tree instead of the real
// machine. HostEnv never caches file contents: sysfs values change under us.
// Thread-safe; the clock it returns lives as long as the HostEnv.
//
// ReadFile, Exists and WriteFile are virtual so that a test can make a host
// access fail on demand (ErrorHostEnv in error_host_env.h).
class HostEnv {
 public:
  // `root` prefixes every host path; "/" is the real machine. `clock` must
  // not be null.
  HostEnv(std::filesystem::path root, std::shared_ptr<const Clock> clock);
  virtual ~HostEnv() = default;
  HostEnv(const HostEnv&) = delete;
  HostEnv& operator=(const HostEnv&) = delete;

  const std::filesystem::path& Root() const { return root_; }
  const Clock& GetClock() const { return *clock_; }
  // For a HostEnv that wraps this one and must share its clock.
  std::shared_ptr<const Clock> SharedClock() const { return clock_; }

  // Maps an absolute host path ("/sys/devices/system/edac") into the root.
  // A relative path is taken as relative to the root as well.
  std::filesystem::path Resolve(std::string_view host_path) const;

  // Reads a whole (small) file such as a sysfs attribute. A vanished file is
  // kNotFound, not a crash: devices and EDAC controllers come and go. Only a
  // regular file is read, never waited on: a FIFO, socket or device node in
  // its place is kInvalidArgument.
  virtual Result<std::string> ReadFile(std::string_view host_path,
                                       std::size_t max_bytes = 1 << 20) const;

  virtual bool Exists(std::string_view host_path) const;

  // Writes `content` to a host file in one write(), as sysfs control files
  // (soft_offline_page, EINJ's) expect. Without `create` the file must
  // exist (a missing sysfs file is kNotFound, never created by mistake);
  // with it, a missing file and its directories are made (fixture trees).
  virtual Status WriteFile(std::string_view host_path, std::string_view content,
                           bool create = false) const;

 private:
  std::filesystem::path root_;
  std::shared_ptr<const Clock> clock_;
};

}  // namespace rasd::common
