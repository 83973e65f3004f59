#include "rasd/common/host_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "rasd/common/unique_fd.h"

namespace rasd::common {

std::chrono::nanoseconds SystemClock::Monotonic() const {
  return std::chrono::steady_clock::now().time_since_epoch();
}

std::chrono::system_clock::time_point SystemClock::Wall() const {
  return std::chrono::system_clock::now();
}

std::chrono::nanoseconds SystemClock::SinceBoot() const {
  timespec boottime{};
  ::clock_gettime(CLOCK_BOOTTIME, &boottime);
  return std::chrono::seconds(boottime.tv_sec) + std::chrono::nanoseconds(boottime.tv_nsec);
}

ManualClock::ManualClock(std::chrono::system_clock::time_point wall_start,
                         std::chrono::nanoseconds booted_before)
    : wall_start_(wall_start), booted_before_(booted_before) {}

std::chrono::nanoseconds ManualClock::Monotonic() const {
  return std::chrono::nanoseconds(elapsed_ns_.load(std::memory_order_acquire));
}

std::chrono::system_clock::time_point ManualClock::Wall() const {
  return wall_start_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(Monotonic());
}

std::chrono::nanoseconds ManualClock::SinceBoot() const { return booted_before_ + Monotonic(); }

void ManualClock::Advance(std::chrono::nanoseconds by) {
  elapsed_ns_.fetch_add(by.count(), std::memory_order_acq_rel);
}

HostEnv::HostEnv(std::filesystem::path root, std::shared_ptr<const Clock> clock)
    : root_(std::move(root)), clock_(std::move(clock)) {}

std::filesystem::path HostEnv::Resolve(std::string_view host_path) const {
  std::string_view relative = host_path;
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  if (relative.empty()) return root_;
  return root_ / std::filesystem::path(relative);
}

Result<std::string> HostEnv::ReadFile(std::string_view host_path, std::size_t max_bytes) const {
  const std::filesystem::path path = Resolve(host_path);
  // O_NONBLOCK: opening a FIFO put where a sysfs attribute belongs would
  // otherwise wait for a writer, and the event loop with it. Only regular
  // files are read (sysfs and procfs attributes are): a FIFO, a socket or a
  // device node is refused.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) return Fail(ErrnoError("open " + path.string(), errno));
  struct stat info {};
  if (::fstat(fd.Get(), &info) != 0) return Fail(ErrnoError("stat " + path.string(), errno));
  if (!S_ISREG(info.st_mode)) {
    return Fail(ErrorCode::kInvalidArgument, path.string() + " is not a regular file");
  }
  std::string content;
  char buffer[4096];
  while (content.size() < max_bytes) {
    const ssize_t n = ::read(fd.Get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(ErrnoError("read " + path.string(), errno));
    }
    if (n == 0) break;
    content.append(buffer, static_cast<std::size_t>(n));
  }
  if (content.size() > max_bytes) content.resize(max_bytes);
  return content;
}

bool HostEnv::Exists(std::string_view host_path) const {
  std::error_code ec;
  return std::filesystem::exists(Resolve(host_path), ec);
}

Status HostEnv::WriteFile(std::string_view host_path, std::string_view content,
                         bool create) const {
  const std::filesystem::path path = Resolve(host_path);
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
  }
  const int flags = O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0);
  UniqueFd fd(::open(path.c_str(), flags, 0644));
  if (!fd) return Fail(ErrnoError("open " + path.string(), errno));
  const ssize_t n = ::write(fd.Get(), content.data(), content.size());
  if (n < 0) return Fail(ErrnoError("write " + path.string(), errno));
  if (static_cast<std::size_t>(n) != content.size())
    return Fail(ErrorCode::kIoError, "short write to " + path.string());
  return {};
}

}  // namespace rasd::common
