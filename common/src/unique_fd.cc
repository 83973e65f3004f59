#include "rasd/common/unique_fd.h"

#include <unistd.h>

namespace rasd::common {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) {
    // close() may report EINTR, but on Linux the descriptor is released
    // anyway; retrying would close an unrelated, reused descriptor.
    ::close(fd_);
  }
  fd_ = fd;
}

}  // namespace rasd::common
