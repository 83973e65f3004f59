#pragma once

#include <spdlog/common.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/jobs/job_manager.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/fault_rules.h"
#include "rasd/ras/policy.h"
#include "rasd/ras/recovery.h"

namespace rasd::daemon {

// The daemon's configuration. Every field has a default, so rasd runs with
// no file at all. Each key's type, range, default, doc line and whether a
// reload applies it are in one table (daemon/src/config_schema.cc), which
// drives the parser, reload and README's config table; packaging/rasd.yaml
// documents each key too (a test checks that it gives these defaults).
struct Config {
  struct Host {
    std::filesystem::path root = "/";  // prefixes every host path (fixture trees)
    bool operator==(const Host&) const = default;
  } host;
  struct Daemon {
    std::filesystem::path state_dir;  // empty: /var/lib/rasd as root, else XDG/HOME based
    spdlog::level::level_enum log_level = spdlog::level::info;
    bool operator==(const Daemon&) const = default;
  } daemon;
  struct Control {
    std::filesystem::path socket;  // empty: /run/rasd/rasd.sock as root, else XDG/HOME based
    mode_t socket_mode = 0666;     // who may connect; SO_PEERCRED decides who may change state
    // Members may run state-changing commands; empty: none. The package
    // creates the group; where it does not exist, nobody beyond root.
    std::string admin_group = "rasd";
    std::chrono::milliseconds client_timeout{10000};
    int max_clients = 64;
    bool operator==(const Control&) const = default;
  } control;
  struct Metrics {
    std::string listen = "127.0.0.1:9470";  // "ADDR:PORT"; empty: no metrics endpoint
    bool operator==(const Metrics&) const = default;
  } metrics;
  struct Runtime {
    // The device backends, in device-numbering order: sim, cuda, ascend,
    // or auto (every vendor backend whose library and devices are here).
    // A vendor backend that is not available is logged and left out; with
    // none, rasd runs without devices and still handles host errors.
    std::vector<std::string> drivers = {"sim"};
    std::string cuda_library = "libcuda.so.1";
    std::string ascend_library = "libascendcl.so";
    std::string dcmi_library = "libdcmi.so";
    bool operator==(const Runtime&) const = default;
  } runtime;
  struct Ras {
    bool kmsg = true;  // follow <root>/dev/kmsg
    // A record still open (more lines may follow) is completed after the
    // log has been quiet this long.
    std::chrono::milliseconds kmsg_quiet_flush{500};
    // How often a kmsg that is a regular file (replays, tests) is re-read.
    std::chrono::milliseconds kmsg_file_poll{200};
    // Follow the RAS tracepoints in a private tracefs instance of this name.
    bool tracefs = true;
    std::string tracefs_instance = "rasd";
    // How often the EDAC sysfs counters are read; 0 turns the poller off.
    std::chrono::milliseconds edac_poll{10000};
    // RDMA ports under <host.root>/sys/class/infiniband; 0: off.
    std::chrono::milliseconds infiniband_poll{10000};
    // Read NVIDIA's Xid and ECC reports through NVML where the library and
    // a driver are present (a host without them logs one line).
    bool nvml = true;
    std::string nvml_library = "libnvidia-ml.so.1";
    std::chrono::milliseconds nvml_poll{10000};  // ECC, retired-page, remap, replay counters
    int retention_days = 90;                     // events older than this are deleted (hourly)
    std::uint64_t max_events = 1'000'000;        // and the oldest beyond this many
    std::size_t storm_threshold = 64;            // a batch larger than this is coalesced
    // Classes of accelerator error codes: the built-in table with the
    // config's entries over it. Applied on reload.
    ras::CodeTable codes = ras::CodeTable::Default();
    // Site rows of the recovery table, tried before the built-in ones.
    // Applied on reload.
    std::vector<ras::RecoveryRow> recovery;
    // Site rows over the built-in fault rules (ras::MergeFaultRules).
    // Applied on reload.
    std::vector<ras::FaultRule> fault_rules;
    bool operator==(const Ras&) const = default;
  } ras;
  struct Scheduler {
    std::string kind = "none";  // none | slurm
    std::string node;           // the scheduler's name for this host; empty: the host name
    std::filesystem::path scontrol = "/usr/bin/scontrol";
    // Resume the node when an operator undrains a device and none is left isolated.
    bool resume_on_undrain = true;
    // The blast-radius guard: rasd does not drain its node while this
    // fraction of the cluster's nodes or more were drained by rasd within
    // guard_window (0 s: whenever). 1: no guard.
    double max_drained_fraction = 0.5;
    std::chrono::seconds guard_window{300};
    bool operator==(const Scheduler&) const = default;
  } scheduler;
  struct Kubernetes {
    // Serve the kubelet device-plugin API on
    // <host.root>/var/lib/kubelet/device-plugins (docs/kubernetes.md).
    bool device_plugin = false;
    std::string gpu_resource = "rasd.io/gpu";  // NVIDIA devices
    std::string npu_resource = "rasd.io/npu";  // Ascend devices
    std::string sim_resource = "rasd.io/sim";  // simulated devices
    bool operator==(const Kubernetes&) const = default;
  } kubernetes;
  struct Inject {
    // `rasctl inject kmsg|edac`: records into the kernel-log decoder and
    // counters into a simulated EDAC tree (never the real sysfs). Faults
    // into the simulator are always allowed: it is simulated hardware.
    bool allow_sources = false;
    // `rasctl inject einj`: ACPI EINJ through debugfs, on real hardware,
    // as root only.
    bool allow_hardware = false;
    bool operator==(const Inject&) const = default;
  } inject;
  struct Policy {
    // Rules, thresholds and escalation (docs/architecture.md's taxonomy table is built
    // in; site rules come first). Applied on reload, counters kept.
    ras::PolicyConfig engine;
    // Write to <root>/sys/devices/system/memory/{soft,hard}_offline_page.
    bool host_page_offline = false;
    // How long admitted work may run on a draining device.
    std::chrono::milliseconds drain_deadline{30000};
    // How long a run-hook program may run before it is killed.
    std::chrono::milliseconds hook_timeout{10000};
    // Automatic recovery of a device the policy isolated: after the delay,
    // reset it, run the self-test, and return it to service on a pass. A
    // device that is isolated again within the window of its recovery
    // stays isolated until an operator undrains it.
    bool auto_recover = false;
    std::chrono::milliseconds auto_recover_delay{5000};
    std::chrono::seconds auto_recover_window{std::chrono::hours(24)};
    // A device whose RDMA port went down rejoins collectives once its ports
    // stayed up this long; a link that went down link_flap_limit times in an
    // hour keeps it out until an operator's undrain.
    std::chrono::seconds link_up_debounce{30};
    int link_flap_limit = 5;
    // Links train after the node boots and after a driver load: for this
    // long their states are read but not acted on. 0: off.
    std::chrono::seconds link_settle{300};
    // A NIC's fatal health keeps the accelerators behind it out of
    // collectives this long after its last fatal record.
    std::chrono::seconds nic_fault_hold{300};
    bool operator==(const Policy&) const = default;
  } policy;
  // Device liveness: a tiny kernel per device in service every `period`
  // (0: off) while a job uses it, every `idle_period` (0: `period`) while
  // none does; `misses` deadlines in a row unfinished make a hang (UCE:
  // drain and isolate).
  // A driver call about one device (NVML's, a device query's) that has not
  // returned within `deadline` drains the device; one past `isolate_after`
  // deadlines isolates it (ProbeWatchdog). A driver's device queries run
  // every `interval` (DeviceProber).
  struct Probe {
    std::chrono::milliseconds deadline{5000};
    int isolate_after = 3;
    std::chrono::milliseconds interval{1000};
    bool operator==(const Probe&) const = default;
  } probe;
  struct Liveness {
    std::chrono::milliseconds period{1000};
    std::chrono::milliseconds deadline{800};
    int misses = 2;
    std::chrono::milliseconds idle_period{60'000};
    bool operator==(const Liveness&) const = default;
  } liveness;
  // Known-answer screening for silent data corruption
  // (daemon/src/corruption_screening.h).
  struct Screening {
    double budget = 0.01;  // of the node's time, shared by the devices in service; 0: off
    std::chrono::seconds interval{600};
    std::uint64_t elements = 1 << 20;
    int confirm = 2;
    std::chrono::seconds window{3600};
    std::uint32_t sample_one_in = 100;  // inference answers re-run on another replica; 0: off
    bool operator==(const Screening&) const = default;
  } screening;
  // Processes outside rasd attached to its devices (`rasctl run`, attach):
  // when a device they use leaves service they get a message and their
  // drain signal, then SIGKILL after their grace unless on_drain is notify.
  struct Workloads {
    std::chrono::milliseconds grace{30000};  // when the workload names none
    std::string on_drain = "kill";           // kill | notify
    bool kill_consumer = true;               // SIGKILL the process an error names
    bool operator==(const Workloads&) const = default;
  } workloads;
  // Jobs to start at boot (none by default: a production node runs its
  // own; the demo config starts an inference service and a collective).
  std::vector<jobs::JobSpec> jobs;
  struct Simulator {
    int devices = 4;
    std::uint64_t memory_mib = 1024;
    // Under a non-`/` host.root: each device's RDMA NIC as a sysfs tree the
    // RDMA poller reads, and `rasctl inject link` / `link-up` flip its ports.
    bool link_sysfs = false;
    bool operator==(const Simulator&) const = default;
  } simulator;

  bool operator==(const Config&) const = default;
};

// One problem found in a config file, with a 1-based position.
struct ConfigProblem {
  std::string file;
  int line = 1;
  int column = 1;
  std::string message;

  // "FILE:LINE:COL: message", the form editors and CI logs understand.
  std::string ToString() const;
};

struct ConfigParseResult {
  Config config;                        // meaningful only when problems is empty
  std::vector<ConfigProblem> problems;  // every problem found, in file order
  bool ok() const { return problems.empty(); }
};

// Parses YAML text. Unknown keys, wrong types, out-of-range values, duplicate
// keys and broken YAML are all problems; parsing goes on after a problem so
// that one run reports them all. `file_name` only labels the problems.
// Never throws.
ConfigParseResult ParseConfig(std::string_view yaml_text, const std::string& file_name);

// Reads and parses a file; a file that cannot be read is one problem at 1:1.
ConfigParseResult LoadConfigFile(const std::filesystem::path& path);

// Command-line settings that win over the file, for tests and operators.
struct ConfigOverrides {
  std::optional<std::filesystem::path> state_dir;
  std::optional<std::filesystem::path> socket;
  std::optional<std::filesystem::path> host_root;
  std::optional<std::string> metrics_listen;
  std::optional<std::string> tracefs_instance;
  std::optional<spdlog::level::level_enum> log_level;

  void ApplyTo(Config& config) const;
};

// What a reload does with a changed key: apply it at once, or keep the
// running value until rasd restarts.
enum class ConfigApply { kLive, kRestart };

// The keys (dotted, "simulator.devices") that need a restart and whose
// values differ between the two configs, in schema order. Pure.
std::vector<std::string> SchemaRestartRequiredChanges(const Config& running, const Config& loaded);

// `running` with every key that applies live taken from `loaded`: what a
// reload puts in force. Keys that need a restart keep their running values,
// so that status tells the truth about what is in force. Pure.
Config SchemaApplyLiveChanges(const Config& running, const Config& loaded);

}  // namespace rasd::daemon
