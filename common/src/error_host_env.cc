#include "rasd/common/error_host_env.h"

namespace rasd::common {

void ErrorHostEnv::FailWrites(std::string prefix, Error error) {
  std::lock_guard lock(mutex_);
  rules_.push_back({std::move(prefix), std::move(error), true});
}

void ErrorHostEnv::FailReads(std::string prefix, Error error) {
  std::lock_guard lock(mutex_);
  rules_.push_back({std::move(prefix), std::move(error), false});
}

void ErrorHostEnv::Heal() {
  std::lock_guard lock(mutex_);
  rules_.clear();
}

std::size_t ErrorHostEnv::Failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

const ErrorHostEnv::Rule* ErrorHostEnv::Match(std::string_view host_path, bool write) const {
  for (const auto& rule : rules_)
    if (rule.writes == write && host_path.starts_with(rule.prefix)) return &rule;
  return nullptr;
}

Result<std::string> ErrorHostEnv::ReadFile(std::string_view host_path,
                                           std::size_t max_bytes) const {
  {
    std::lock_guard lock(mutex_);
    if (const Rule* rule = Match(host_path, false)) {
      ++failures_;
      return Fail(rule->error);
    }
  }
  return HostEnv::ReadFile(host_path, max_bytes);
}

Status ErrorHostEnv::WriteFile(std::string_view host_path, std::string_view content,
                               bool create) const {
  {
    std::lock_guard lock(mutex_);
    if (const Rule* rule = Match(host_path, true)) {
      ++failures_;
      return Fail(rule->error);
    }
  }
  return HostEnv::WriteFile(host_path, content, create);
}

}  // namespace rasd::common
