// rasd: the RAS-aware device runtime and health daemon. This file is the
// edge: command-line parsing (CLI11, kept to this one file for build time),
// signal masks, and turning errors into exit codes.
//
// Exit codes: 0 clean stop; 1 start-up failure; 2 bad command line or config.

#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "config_schema.h"
#include "daemon.h"
#include "rasd/common/logging.h"
#include "rasd/common/version.h"
#include "rasd/daemon/config.h"
#include "rasd/exporters/listen_address.h"

namespace {

constexpr int kExitStartFailure = 1;
constexpr int kExitUsage = 2;

int CheckConfig(const std::string& path) {
  const auto result = rasd::daemon::LoadConfigFile(path);
  for (const auto& problem : result.problems) std::cerr << problem.ToString() << "\n";
  if (!result.ok()) return kExitUsage;
  std::cout << path << ": ok\n";
  return 0;
}

// README's config table, from the schema that the parser uses.
int PrintConfigSchema() {
  for (const auto& line : rasd::daemon::ConfigSchemaMarkdown()) std::cout << line << "\n";
  return 0;
}

// Every attached workload holds a connection and a pidfd, every watcher a
// connection: the soft descriptor limit systemd gives a service (1024) is
// raised to the hard one (at most 65536), as control.max_clients and the
// subscribers' pools together need more than 1024.
void RaiseDescriptorLimit() {
  constexpr rlim_t kWanted = 65536;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = std::min(limit.rlim_max, kWanted);
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = wanted;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    RASD_LOG_WARN("cannot raise the descriptor limit to {}: {}", wanted, std::strerror(errno));
  }
}

// A storm's batches allocate and free a few MiB each, thousands of times
// a second. glibc's defaults give the heap's free top back to the system
// after each (and move big blocks to fresh mmaps), so every batch faulted
// its pages in again: a third of the loop's time in a one-channel storm.
// The heap keeps up to kTrimThreshold free instead; the kmsg source's
// malloc_trim at a storm's end still returns it all, so RSS settles as
// before. Fixed thresholds also stop glibc's own adjusting of them.
//
// Each arena keeps its own free memory up to that threshold, and its own
// fragments. glibc's default of eight arenas per core spread rasd's
// threads (jobs, devices, self-tests coming and going) over up to sixteen
// on two cores, each ratcheting to its own high-water mark: under the
// soak's load RSS grew by megabytes an hour for as long as it was watched.
// With kArenas it levels off within minutes. The price is contention: on
// the simulator, where rasd's own threads compute every kernel, the
// collective stepped about 3% slower, within the runs' noise. On
// accelerators the kernels' data lives in device memory and the host
// threads allocate little; a host with many busy threads may want more
// arenas, which an operator sets through MALLOC_ARENA_MAX or the
// glibc.malloc.arena_max tunable (the unit's Environment=): those are left
// as they are. glibc reads the limit when a thread first needs an arena, so
// this runs before any thread starts.
void TuneAllocator() {
  constexpr int kTrimThreshold = 64 << 20;
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kArenas = 2;
  if (::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1 ||
      ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1) {
    RASD_LOG_WARN("cannot tune the allocator: storms will run slower");
  }
  const char* arena_max = std::getenv("MALLOC_ARENA_MAX");
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool operator_set = (arena_max != nullptr && *arena_max != '\0') ||
                            (tunables != nullptr && std::strstr(tunables, "arena_max") != nullptr);
  if (!operator_set && ::mallopt(M_ARENA_MAX, kArenas) != 1) {
    RASD_LOG_WARN("cannot bound the allocator's arenas: its resident memory may creep");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rasd: RAS-aware device runtime and health daemon"};
  std::string config_path;
  std::string check_config_path;
  bool print_config_schema = false;
  std::string state_dir, socket, host_root, metrics_listen, tracefs_instance, log_level;
  // A flag given twice: the last one wins, so that `make daemon`'s own
  // flags can be overridden through RUN_ARGS.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", config_path, "YAML config file (default: built-in defaults)");
  app.add_option("--check-config", check_config_path,
                 "validate FILE, print FILE:LINE:COL: message per problem, exit 0 or 2");
  app.add_flag("--print-config-schema", print_config_schema,
               "print every config key (type, default, whether reload applies it, meaning) as "
               "README's markdown table");
  app.add_option("--state-dir", state_dir, "override daemon.state_dir");
  app.add_option("--socket", socket, "override control.socket");
  app.add_option("--host-root", host_root, "override host.root (a fixture tree for tests)");
  app.add_option("--metrics-listen", metrics_listen, "override metrics.listen (ADDR:PORT)");
  app.add_option("--tracefs-instance", tracefs_instance, "override ras.tracefs_instance");
  app.add_option("--log-level", log_level, "override daemon.log_level");
  app.set_version_flag("--version", std::string("rasd ") + rasd::kVersion);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int rc = app.exit(error);
    return rc == 0 ? 0 : kExitUsage;
  }

  if (print_config_schema) return PrintConfigSchema();
  if (!check_config_path.empty()) return CheckConfig(check_config_path);

  rasd::daemon::ConfigOverrides overrides;
  // Relative paths on the command line are relative to where rasd was started.
  if (!state_dir.empty()) overrides.state_dir = std::filesystem::absolute(state_dir);
  if (!socket.empty()) overrides.socket = std::filesystem::absolute(socket);
  if (!host_root.empty()) overrides.host_root = std::filesystem::absolute(host_root);
  if (!metrics_listen.empty()) overrides.metrics_listen = metrics_listen;
  if (!tracefs_instance.empty()) overrides.tracefs_instance = tracefs_instance;
  if (!log_level.empty()) {
    auto level = rasd::common::ParseLogLevel(log_level);
    if (!level) {
      std::cerr << "rasd: --log-level: " << level.error().message << "\n";
      return kExitUsage;
    }
    overrides.log_level = *level;
  }

  rasd::daemon::ConfigParseResult loaded;
  std::optional<std::filesystem::path> config_file;
  if (!config_path.empty()) {
    config_file = config_path;
    loaded = rasd::daemon::LoadConfigFile(config_path);
    if (!loaded.ok()) {
      for (const auto& problem : loaded.problems) std::cerr << problem.ToString() << "\n";
      return kExitUsage;
    }
  }
  overrides.ApplyTo(loaded.config);
  // Overrides are checked as strictly as the file.
  if (!metrics_listen.empty() && metrics_listen != "off") {
    if (auto parsed = rasd::exporters::ParseListenAddress(metrics_listen); !parsed) {
      std::cerr << "rasd: --metrics-listen: " << parsed.error().message << "\n";
      return kExitUsage;
    }
  }

  rasd::common::InitLogging(loaded.config.daemon.log_level);
  RaiseDescriptorLimit();
  TuneAllocator();

  // Signals are taken through sd-event's signalfd; they must be blocked
  // before any thread exists so that every thread inherits the mask.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    auto daemon = rasd::daemon::Daemon::Start({config_file, overrides}, loaded.config);
    if (!daemon) {
      RASD_LOG_CRITICAL("cannot start: {}", daemon.error().message);
      return kExitStartFailure;
    }
    return (*daemon)->Run();
  } catch (const std::exception& error) {
    // A bug, not input: say so loudly and let systemd restart us.
    RASD_LOG_CRITICAL("unexpected exception: {}", error.what());
    return kExitStartFailure;
  }
}
