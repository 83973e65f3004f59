#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/host_env.h"

namespace rasd::common {

// A HostEnv whose reads and writes fail on demand, as leveldb's ErrorEnv:
// a test names a host path prefix and the error, and every read or write
// under it fails so until Heal(). Everything else goes to the fixture tree
// under `root`. Thread-safe.
class ErrorHostEnv final : public HostEnv {
 public:
  using HostEnv::HostEnv;

  // From now on, writes (or reads) of host paths starting with `prefix` fail
  // with `error`; counted in Failures().
  void FailWrites(std::string prefix, Error error);
  void FailReads(std::string prefix, Error error);
  void Heal();
  std::size_t Failures() const;

  Result<std::string> ReadFile(std::string_view host_path,
                               std::size_t max_bytes = 1 << 20) const override;
  Status WriteFile(std::string_view host_path, std::string_view content,
                   bool create = false) const override;

 private:
  struct Rule {
    std::string prefix;
    Error error;
    bool writes = true;
  };
  const Rule* Match(std::string_view host_path, bool write) const;  // under mutex_

  mutable std::mutex mutex_;
  std::vector<Rule> rules_;
  mutable std::size_t failures_ = 0;
};

}  // namespace rasd::common
