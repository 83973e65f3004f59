#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace rasd::common {

// Where the daemon keeps its state and control socket when neither the
// config nor the command line says. rasd and rasctl share this so that a
// plain `rasctl status` finds a plain `rasd`.
struct DefaultPaths {
  std::filesystem::path state_dir;
  std::filesystem::path socket;
};

// Looks up an environment variable; empty values count as unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// As root: /var/lib/rasd and /run/rasd/rasd.sock, or systemd's
// STATE_DIRECTORY / RUNTIME_DIRECTORY when the service manager set them.
// Otherwise: $XDG_STATE_HOME/rasd (else $HOME/.local/state/rasd) and
// $XDG_RUNTIME_DIR/rasd/rasd.sock (else $HOME/.cache/rasd/rasd.sock), and
// /tmp/rasd-<uid>/... when not even HOME is set.
DefaultPaths ComputeDefaultPaths(uid_t euid, const EnvLookup& env);

// The same for this process: its effective uid and environment.
DefaultPaths ComputeDefaultPaths();

// getenv that treats "" as unset.
std::optional<std::string> GetEnv(std::string_view name);

}  // namespace rasd::common
