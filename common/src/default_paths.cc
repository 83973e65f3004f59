#include "rasd/common/default_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace rasd::common {
namespace {

// systemd passes "a:b" when a unit lists several directories; ours is the first.
std::filesystem::path FirstOfList(const std::string& list) {
  return std::filesystem::path(list.substr(0, list.find(':')));
}

}  // namespace

std::optional<std::string> GetEnv(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

DefaultPaths ComputeDefaultPaths(uid_t euid, const EnvLookup& env) {
  DefaultPaths paths;
  const auto state_directory = env("STATE_DIRECTORY");
  const auto runtime_directory = env("RUNTIME_DIRECTORY");
  if (euid == 0) {
    paths.state_dir = state_directory ? FirstOfList(*state_directory) : "/var/lib/rasd";
    paths.socket =
        (runtime_directory ? FirstOfList(*runtime_directory) : std::filesystem::path("/run/rasd")) /
        "rasd.sock";
    return paths;
  }
  const auto home = env("HOME");
  const std::filesystem::path fallback = "/tmp/rasd-" + std::to_string(euid);
  if (state_directory) {
    paths.state_dir = FirstOfList(*state_directory);
  } else if (const auto xdg_state = env("XDG_STATE_HOME")) {
    paths.state_dir = std::filesystem::path(*xdg_state) / "rasd";
  } else if (home) {
    paths.state_dir = std::filesystem::path(*home) / ".local/state/rasd";
  } else {
    paths.state_dir = fallback / "state";
  }
  if (runtime_directory) {
    paths.socket = FirstOfList(*runtime_directory) / "rasd.sock";
  } else if (const auto xdg_runtime = env("XDG_RUNTIME_DIR")) {
    paths.socket = std::filesystem::path(*xdg_runtime) / "rasd/rasd.sock";
  } else if (home) {
    paths.socket = std::filesystem::path(*home) / ".cache/rasd/rasd.sock";
  } else {
    paths.socket = fallback / "rasd.sock";
  }
  return paths;
}

DefaultPaths ComputeDefaultPaths() { return ComputeDefaultPaths(::geteuid(), GetEnv); }

}  // namespace rasd::common
