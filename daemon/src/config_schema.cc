#include "config_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <concepts>
#include <type_traits>

#include "config_compound_keys.h"
#include "rasd/common/logging.h"
#include "rasd/exporters/listen_address.h"
#include "rasd/k8s/device_plugin.h"

namespace rasd::daemon {
namespace {

// How a key's value is read and what it is called: the "type" of a row.
template <typename T>
struct Kind {
  std::string type;
  std::function<void(ConfigValueReader&, const YAML::Node&, const std::string&, T&)> read;
  std::function<std::string(const T&)> show;  // empty: YamlValue
};

// A value as a YAML file writes it; the schema's defaults are printed so.
std::string YamlValue(bool value) { return value ? "true" : "false"; }
template <std::integral T>
std::string YamlValue(T value) {
  return fmt::format("{}", value);
}
template <typename Rep, typename Period>
std::string YamlValue(std::chrono::duration<Rep, Period> value) {
  return fmt::format("{}", value.count());
}
std::string YamlValue(const std::string& value) { return value.empty() ? "\"\"" : value; }
std::string YamlValue(const std::filesystem::path& value) { return YamlValue(value.string()); }
std::string YamlValue(spdlog::level::level_enum level) {
  return std::string(common::LogLevelName(level));
}
std::string YamlValue(const std::vector<std::string>& values) {
  if (values.size() == 1) return values.front();
  return fmt::format("[{}]", fmt::join(values, ", "));
}
template <typename T>
std::string YamlValue(const std::vector<T>& values) {
  return values.empty() ? "[]" : fmt::format("[{} entries]", values.size());
}

// A field of Config, as a generic lambda: `field(config)` is a reference to
// the member, const or not as `config` is.
#define RASD_CONFIG_FIELD(member) \
  [](auto& config) -> auto& { return config.member; }

template <typename Field>
using FieldType = std::remove_cvref_t<decltype(std::declval<Field>()(std::declval<Config&>()))>;

template <typename Field>
ConfigKey Row(std::string name, ConfigApply applies, Field field, Kind<FieldType<Field>> kind,
              std::string doc) {
  const Config defaults;
  ConfigKey key;
  key.name = std::move(name);
  key.type = std::move(kind.type);
  key.applies = applies;
  const auto& default_value = field(defaults);
  if constexpr (requires { YamlValue(default_value); }) {
    key.default_value = kind.show ? kind.show(default_value) : YamlValue(default_value);
  } else {
    key.default_value = kind.show(default_value);  // a kind of its own says how
  }
  key.doc = std::move(doc);
  key.read = [field, read = std::move(kind.read)](
                 ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 Config& config) { read(reader, value, path, field(config)); };
  key.same = [field](const Config& a, const Config& b) { return field(a) == field(b); };
  key.copy = [field](Config& into, const Config& from) { field(into) = field(from); };
  return key;
}

Kind<bool> Bool() {
  return {"bool", [](ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                     bool& out) {
            if (auto enabled = reader.ReadBool(value, path)) out = *enabled;
          }};
}

template <typename T>
Kind<T> Integer(std::int64_t min, std::int64_t max, std::string_view unit = "integer") {
  return {fmt::format("{} {}..{}", unit, min, max),
          [min, max](ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                     T& out) {
            if (auto n = reader.ReadInteger(value, path, min, max)) {
              if constexpr (std::integral<T>) {
                out = static_cast<T>(*n);
              } else {
                out = T(*n);  // a std::chrono::duration
              }
            }
          }};
}

Kind<std::chrono::milliseconds> Milliseconds(std::int64_t min, std::int64_t max) {
  return Integer<std::chrono::milliseconds>(min, max, "ms");
}

Kind<std::chrono::seconds> Seconds(std::int64_t min, std::int64_t max) {
  return Integer<std::chrono::seconds>(min, max, "s");
}

// A decimal number between `min` (itself allowed or not) and `max`;
// `range` says which in words ("above 0 and at most 1 (0.5 is half)").
Kind<double> Decimal(std::string type, double min, bool min_allowed, double max,
                     std::string range) {
  return {std::move(type),
          [=](ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
              double& out) {
            auto text = reader.ReadString(value, path);
            if (!text) return;
            double number = 0;
            const auto [end, error] =
                std::from_chars(text->data(), text->data() + text->size(), number);
            const bool above_min = min_allowed ? number >= min : number > min;
            if (error != std::errc() || end != text->data() + text->size() || !above_min ||
                !(number <= max)) {
              reader.Problem(value.Mark(),
                             fmt::format("'{}' must be a number {}, not '{}'", path, range, *text));
              return;
            }
            out = number;
          },
          [](const double& number) { return fmt::format("{}", number); }};
}

// A number above 0 and at most 1.
Kind<double> Fraction() {
  return Decimal("number 0..1 (above 0)", 0, false, 1, "above 0 and at most 1 (0.5 is half)");
}

// A number from 0 to `max`.
Kind<double> Share(double max) {
  return Decimal(fmt::format("number 0..{}", max), 0, true, max,
                 fmt::format("from 0 to {} (0.01 is 1%)", max));
}

// A string; `check` returns the problem with a value, or "" for a good one.
Kind<std::string> Text(std::string type = "string",
                       std::function<std::string(const std::string& text)> check = nullptr) {
  return {std::move(type),
          [check = std::move(check)](ConfigValueReader& reader, const YAML::Node& value,
                                     const std::string& path, std::string& out) {
            auto text = reader.ReadString(value, path);
            if (!text) return;
            if (check) {
              if (auto problem = check(*text); !problem.empty()) {
                reader.Problem(value.Mark(), fmt::format("'{}' {}", path, problem));
                return;
              }
            }
            out = *text;
          }};
}

Kind<std::string> OneOf(std::vector<std::string> values) {
  std::string names;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) names += i + 1 == values.size() ? " or " : ", ";
    names += values[i];
  }
  std::string type;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) type += i + 1 == values.size() ? " or " : ", ";
    type += "`" + values[i] + "`";
  }
  return Text(type, [values = std::move(values), names](const std::string& text) {
    if (std::find(values.begin(), values.end(), text) != values.end()) return std::string();
    return fmt::format("must be {}, not '{}'", names, text);
  });
}

// Letters and digits, and the characters in `extra`.
bool IsName(const std::string& text, std::string_view extra) {
  return std::all_of(text.begin(), text.end(), [extra](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
}

// A library to dlopen; empty keeps the default.
Kind<std::string> Library() {
  return {"soname or path", [](ConfigValueReader& reader, const YAML::Node& value,
                               const std::string& path, std::string& out) {
            if (auto text = reader.ReadString(value, path); text && !text->empty()) out = *text;
          }};
}

Kind<std::filesystem::path> AbsolutePath() {
  return {"absolute path", [](ConfigValueReader& reader, const YAML::Node& value,
                              const std::string& path, std::filesystem::path& out) {
            auto text = reader.ReadString(value, path);
            if (!text) return;
            if (!text->empty() && text->front() != '/') {
              reader.Problem(value.Mark(),
                             fmt::format("'{}' must be an absolute path, not '{}'", path, *text));
              return;
            }
            out = *text;
          }};
}

Kind<spdlog::level::level_enum> LogLevel() {
  return {"log level", [](ConfigValueReader& reader, const YAML::Node& value,
                          const std::string& path, spdlog::level::level_enum& out) {
            auto text = reader.ReadString(value, path);
            if (!text) return;
            auto level = common::ParseLogLevel(*text);
            if (!level) {
              reader.Problem(value.Mark(), fmt::format("'{}': {}", path, level.error().message));
              return;
            }
            out = *level;
          }};
}

Kind<mode_t> SocketMode() {
  return {
      "octal mode, quoted",
      [](ConfigValueReader& reader, const YAML::Node& value, const std::string& path, mode_t& out) {
        auto text = reader.ReadString(value, path);
        if (!text) return;
        unsigned mode = 0;
        const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), mode, 8);
        if (text->empty() || ec != std::errc() || end != text->data() + text->size() ||
            mode > 0777) {
          reader.Problem(
              value.Mark(),
              fmt::format("'{}' must be an octal mode such as \"0660\", not '{}'", path, *text));
          return;
        }
        out = static_cast<mode_t>(mode);
      },
      [](const mode_t& mode) { return fmt::format("\"{:04o}\"", mode); }};
}

Kind<std::string> ListenAddress() {
  return {"ADDR:PORT or off", [](ConfigValueReader& reader, const YAML::Node& value,
                                 const std::string& path, std::string& out) {
            auto text = reader.ReadString(value, path);
            if (!text) return;
            if (*text == "off") text->clear();
            if (!text->empty()) {
              if (auto parsed = exporters::ParseListenAddress(*text); !parsed) {
                reader.Problem(value.Mark(), fmt::format("'{}': {}", path, parsed.error().message));
                return;
              }
            }
            out = *text;
          }};
}

Kind<std::chrono::milliseconds> EdacPoll() {
  Kind<std::chrono::milliseconds> kind = Milliseconds(0, 3'600'000);
  kind.type = "ms 0 or 100..3600000";
  kind.read = [](ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 std::chrono::milliseconds& out) {
    auto ms = reader.ReadInteger(value, path, 0, 3'600'000);
    if (!ms) return;
    if (*ms != 0 && *ms < 100) {
      reader.Problem(value.Mark(), fmt::format("'{}' must be 0 (off) or at least 100", path));
      return;
    }
    out = std::chrono::milliseconds(*ms);
  };
  return kind;
}

Kind<std::vector<std::string>> Drivers() { return {"backend or list of them", &ReadDrivers}; }

Kind<std::map<int, ras::Severity>> CodeMap(bool hex_keys) {
  return {"map of code: CLASS",
          [hex_keys](ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                     std::map<int, ras::Severity>& table) {
            ReadCodeMap(reader, value, path, hex_keys, table);
          },
          // Entries go over the built-in table, so none at all is the default.
          [](const std::map<int, ras::Severity>&) { return std::string("{}"); }};
}

Kind<std::vector<ras::PolicyRule>> PolicyRules() { return {"list of rules", &ReadPolicyRules}; }

Kind<std::vector<jobs::JobSpec>> Jobs() { return {"list of jobs", &ReadJobs}; }

Kind<std::vector<ras::RecoveryRow>> RecoveryRows() { return {"list of rows", &ReadRecoveryRows}; }

Kind<std::vector<ras::FaultRule>> FaultRules() { return {"list of rows", &ReadFaultRules}; }

}  // namespace

namespace {

constexpr ConfigApply kLive = ConfigApply::kLive;
constexpr ConfigApply kRestart = ConfigApply::kRestart;
constexpr std::int64_t kYearSeconds = 365LL * 86400;

// The rows, section by section, in the order of the file's sections. A new
// key is a field in Config, a row here, a line in packaging/rasd.yaml, a
// value in config_schema_test's EveryKeyChanged, and README's table
// regenerated with `rasd --print-config-schema`; the tests name whichever
// of those is missing.
void AddServiceKeys(std::vector<ConfigKey>& keys) {
  keys.push_back(Row("host.root", kRestart, RASD_CONFIG_FIELD(host.root), AbsolutePath(),
                     "prefix of every host path (sysfs, procfs, tracefs, /dev/kmsg); fixture "
                     "trees in tests"));
  keys.push_back(Row("daemon.state_dir", kRestart, RASD_CONFIG_FIELD(daemon.state_dir),
                     AbsolutePath(),
                     "SQLite state directory; empty: `/var/lib/rasd` as root (or systemd's "
                     "`$STATE_DIRECTORY`), else `$XDG_STATE_HOME/rasd` or `~/.local/state/rasd`"));
  keys.push_back(Row("daemon.log_level", kLive, RASD_CONFIG_FIELD(daemon.log_level), LogLevel(),
                     "trace, debug, info, warning, error, critical, off"));
  keys.push_back(Row("control.socket", kRestart, RASD_CONFIG_FIELD(control.socket), AbsolutePath(),
                     "control socket path; empty: `/run/rasd/rasd.sock` as root (or in systemd's "
                     "`$RUNTIME_DIRECTORY`), else `$XDG_RUNTIME_DIR/rasd/rasd.sock` or "
                     "`~/.cache/rasd/rasd.sock`; unused when systemd passes the socket"));
  keys.push_back(Row("control.socket_mode", kRestart, RASD_CONFIG_FIELD(control.socket_mode),
                     SocketMode(),
                     "file mode of the socket: who may connect (and read); "
                     "`control.admin_group` decides who may change state"));
  keys.push_back(Row("control.admin_group", kLive, RASD_CONFIG_FIELD(control.admin_group), Text(),
                     "group (name or gid) whose members may run state-changing commands; the "
                     "package creates it; a missing group is logged and leaves state changes to "
                     "root; empty: none"));
  keys.push_back(Row("control.client_timeout_ms", kLive, RASD_CONFIG_FIELD(control.client_timeout),
                     Milliseconds(100, 3'600'000),
                     "a client with no complete request for this long is disconnected"));
  keys.push_back(Row("control.max_clients", kLive, RASD_CONFIG_FIELD(control.max_clients),
                     Integer<int>(1, 4096),
                     "control connections of administrators, and separately of everyone else (at most a quarter of those per uid); more are refused with an error. Attached workloads and watchers are not counted here: they have 1024 slots of their own, shared the same way"));
  keys.push_back(Row("metrics.listen", kRestart, RASD_CONFIG_FIELD(metrics.listen), ListenAddress(),
                     "ADDR:PORT of the Prometheus endpoint; port 0 picks a free one (status "
                     "shows it); `off` or empty: none; a port in use is logged and rasd runs on "
                     "without metrics"));
  keys.push_back(Row("runtime.driver", kRestart, RASD_CONFIG_FIELD(runtime.drivers), Drivers(),
                     "the device backends, in device-numbering order: `sim` (the CPU simulator), "
                     "`cuda` (NVIDIA), `ascend` (Huawei), `auto` (every vendor backend present); "
                     "one that is not available here is logged and left out, and with none rasd "
                     "serves host errors only; the packaged `/etc/rasd/rasd.yaml` says `auto`"));
  keys.push_back(Row("runtime.cuda_library", kRestart, RASD_CONFIG_FIELD(runtime.cuda_library),
                     Library(), "the CUDA driver library the `cuda` backend loads"));
  keys.push_back(Row("runtime.ascend_library", kRestart, RASD_CONFIG_FIELD(runtime.ascend_library),
                     Library(), "the AscendCL library the `ascend` backend loads"));
  keys.push_back(Row("runtime.dcmi_library", kRestart, RASD_CONFIG_FIELD(runtime.dcmi_library),
                     Library(), "the DCMI library the `ascend` backend loads (health, faults)"));
}

void AddRasKeys(std::vector<ConfigKey>& keys) {
  keys.push_back(Row("ras.kmsg", kRestart, RASD_CONFIG_FIELD(ras.kmsg), Bool(),
                     "follow `<host.root>/dev/kmsg` (needs root or CAP_SYSLOG; otherwise logged "
                     "and left out)"));
  keys.push_back(Row("ras.kmsg_quiet_flush_ms", kRestart, RASD_CONFIG_FIELD(ras.kmsg_quiet_flush),
                     Milliseconds(10, 60'000),
                     "a record that may still grow (GHES, MCE blocks) is completed after this "
                     "much quiet"));
  keys.push_back(Row("ras.kmsg_file_poll_ms", kRestart, RASD_CONFIG_FIELD(ras.kmsg_file_poll),
                     Milliseconds(10, 60'000),
                     "how often a kmsg that is a plain file (replay, fixture) is re-read where "
                     "inotify cannot watch it (otherwise the file is followed by inotify and "
                     "nothing polls)"));
  keys.push_back(Row("ras.tracefs", kRestart, RASD_CONFIG_FIELD(ras.tracefs), Bool(),
                     "follow the RAS tracepoints (`ras:mc_event`, `aer_event`, `arm_event`, "
                     "`non_standard_event`, `memory_failure_event`, `extlog_mem_event`, "
                     "`mce:mce_record`, the seven `cxl:` memory-device events, "
                     "`devlink:devlink_health_report`, `signal:signal_generate` filtered to "
                     "SIGBUS, `block:block_rq_error` (`block_rq_complete` filtered to failed "
                     "requests on kernels without it), `ras:reri_event`; those the kernel has, "
                     "the others listed as absent in `status`) in "
                     "a private tracing instance, removed on exit (needs root and a mounted "
                     "tracefs; otherwise logged and left out)"));
  keys.push_back(Row("ras.tracefs_instance", kRestart, RASD_CONFIG_FIELD(ras.tracefs_instance),
                     Text("name: letters, digits, `-`, `_` (1 to 64)",
                          [](const std::string& name) {
                            return !name.empty() && name.size() <= 64 && IsName(name, "_-")
                                       ? std::string()
                                       : std::string("must be 1 to 64 letters, digits, '-' or '_'");
                          }),
                     "the instance's name under `<host.root>/sys/kernel/tracing/instances`; "
                     "one rasd owns it (a lock on it): a second rasd on the same name goes "
                     "without tracepoints and says so, leaving the owner's instance alone"));
  keys.push_back(Row("ras.infiniband_poll_ms", kRestart, RASD_CONFIG_FIELD(ras.infiniband_poll),
                     EdacPoll(),
                     "how often the RDMA ports under `/sys/class/infiniband` (InfiniBand, RoCE) "
                     "are read: state, rate and counters, published as `rasd_infiniband_*` (node_"
                     "exporter's values); an error counter's increase is a CE event, a port "
                     "leaving ACTIVE/LinkUp a UCE one (origin `infiniband`); 0: off. Without "
                     "RDMA devices rasd looks for them once a minute and more rarely after"));
  keys.push_back(Row("ras.edac_poll_ms", kRestart, RASD_CONFIG_FIELD(ras.edac_poll), EdacPoll(),
                     "how often the EDAC sysfs counters are read (csrow, dimm, rank layouts); "
                     "every increase is an event; 0: off. Without any EDAC controller rasd looks "
                     "for new ones once a minute instead"));
  keys.push_back(Row("ras.nvml", kRestart, RASD_CONFIG_FIELD(ras.nvml), Bool(),
                     "read NVIDIA's reports through NVML (dlopen of `ras.nvml_library`): Xid "
                     "events, single/double-bit ECC events, and increases of the ECC, "
                     "retired-page, remapped-row and PCIe replay counters, each NVLink's state "
                     "and its replay, recovery, CRC and ECC error counters (a link down takes "
                     "the GPU out of collectives, Degraded), and the driver's recovery action "
                     "(as Xid 154); each names the GPU by PCI address "
                     "and is attributed to the runtime device there; without NVML or a driver: "
                     "one log line"));
  keys.push_back(
      Row("ras.nvml_library", kRestart, RASD_CONFIG_FIELD(ras.nvml_library),
          Text("soname or path",
               [](const std::string& name) { return name.empty() ? "must not be empty" : ""; }),
          "the NVML library"));
  keys.push_back(Row("ras.nvml_poll_ms", kRestart, RASD_CONFIG_FIELD(ras.nvml_poll),
                     Milliseconds(100, 3'600'000), "how often NVML's counters are read"));
  keys.push_back(Row("ras.retention_days", kRestart, RASD_CONFIG_FIELD(ras.retention_days),
                     Integer<int>(1, 3650),
                     "stored events older than this are deleted (at start and hourly)"));
  keys.push_back(Row("ras.max_events", kRestart, RASD_CONFIG_FIELD(ras.max_events),
                     Integer<std::uint64_t>(1000, 100'000'000),
                     "and the oldest beyond this many rows"));
  keys.push_back(Row("ras.storm_threshold", kRestart, RASD_CONFIG_FIELD(ras.storm_threshold),
                     Integer<std::size_t>(1, 1'000'000),
                     "a batch of more events than this, or more within a second, is a storm "
                     "(for 10 s after): its events are stored coalesced per component (DIMM, "
                     "controller, device), class and minute, one row each, with exact counts and "
                     "each page's errors"));
  keys.push_back(Row("ras.codes.nvidia_xid", kLive, RASD_CONFIG_FIELD(ras.codes.nvidia_xid),
                     CodeMap(/*hex_keys=*/false),
                     "`code: CLASS` entries over the built-in table of NVIDIA Xids (decimal); "
                     "classes: CE, UCNA, SRAO, SRAR, UCE, FATAL, INFO"));
  keys.push_back(Row("ras.codes.ascend", kLive, RASD_CONFIG_FIELD(ras.codes.ascend),
                     CodeMap(/*hex_keys=*/true),
                     "`code: CLASS` entries over the built-in table of Ascend codes (runtime "
                     "codes in decimal; DCMI fault codes also in hex, e.g. `0x80E01801`)"));
  keys.push_back(Row("ras.recovery", kLive, RASD_CONFIG_FIELD(ras.recovery), RecoveryRows(),
                     "site rows of the recovery table, tried in order before the built-in ones "
                     "(docs/recovery.md): `match` (`origin`, `vendor_code`, `severity`, "
                     "`component`), `action` (none, restart-app, reset-device, reboot-node, "
                     "hardware-inspection, contact-vendor), optional `escalate_after` (recoveries "
                     "of the device), `escalate_window_s` (default 86400), `escalate_to` (default: "
                     "the next action)"));
  keys.push_back(Row("ras.fault_rules", kLive, RASD_CONFIG_FIELD(ras.fault_rules), FaultRules(),
                     "rows over the built-in fault rules (docs/architecture.md, \"Fault rules\"), "
                     "by `name`: `rule` (echo: `codes` within `window_s` after another code of "
                     "the device, of `after_codes` or `after_classes`, are part of it; supersede: "
                     "`codes` within `window_s` after one of `after_codes` are part of it; storm: "
                     "a code (of `codes`; none: any) repeated on a device within `window_s` is one "
                     "event with its exact count; settle: `codes` within `window_s` of the boot or "
                     "a driver load are recorded, their actions withheld), `origin` (default "
                     "nvidia_xid); `enabled: false` turns a built-in row off"));
}

void AddPolicyKeys(std::vector<ConfigKey>& keys) {
  keys.push_back(Row("policy.rules", kLive, RASD_CONFIG_FIELD(policy.engine.rules), PolicyRules(),
                     "site rules, tried in order before the built-in ones; the first match "
                     "decides: `name`, `match` (`origin`, `severity`, `component`: host-memory, "
                     "device-memory, device, pci-device, cpu, other; `vendor_code`), optional "
                     "`threshold` (`count`, `window_s`, `per`: page, dimm, device: a debounce), "
                     "`boot_grace_s` (events this soon after boot are recorded only), `actions`, "
                     "`hook` (argv; absolute path, no shell); counters of unchanged rules are "
                     "kept on reload"));
  keys.push_back(Row("policy.ce_page_threshold", kLive,
                     RASD_CONFIG_FIELD(policy.engine.ce_page.count),
                     Integer<std::uint64_t>(1, 1'000'000),
                     "corrected errors on one page within `policy.ce_page_window_s` before it is "
                     "retired (device) or soft-offlined (host), as rasdaemon"));
  keys.push_back(Row("policy.ce_page_window_s", kLive,
                     RASD_CONFIG_FIELD(policy.engine.ce_page.window), Seconds(1, kYearSeconds),
                     "the window of `policy.ce_page_threshold`"));
  keys.push_back(Row("policy.ce_device_threshold", kLive,
                     RASD_CONFIG_FIELD(policy.engine.ce_device.count),
                     Integer<std::uint64_t>(1, 100'000'000),
                     "corrected errors on one device (no address) within "
                     "`policy.ce_device_window_s` before it is Degraded"));
  keys.push_back(Row("policy.ce_device_window_s", kLive,
                     RASD_CONFIG_FIELD(policy.engine.ce_device.window), Seconds(1, kYearSeconds),
                     "the window of `policy.ce_device_threshold`"));
  keys.push_back(Row("policy.degrade_after_retirements", kLive,
                     RASD_CONFIG_FIELD(policy.engine.degrade_after_retirements),
                     Integer<std::uint64_t>(1, 1'000'000),
                     "page retirements on one device within `policy.escalation_window_s` that "
                     "make it Degraded"));
  keys.push_back(Row("policy.isolate_after_retirements", kLive,
                     RASD_CONFIG_FIELD(policy.engine.isolate_after_retirements),
                     Integer<std::uint64_t>(1, 1'000'000),
                     "page retirements on one device within `policy.escalation_window_s` that "
                     "make it Isolated (drained first)"));
  keys.push_back(Row("policy.escalation_window_s", kLive,
                     RASD_CONFIG_FIELD(policy.engine.escalation_window), Seconds(1, kYearSeconds),
                     "the window of the two retirement counts"));
  keys.push_back(Row("policy.host_page_offline", kLive, RASD_CONFIG_FIELD(policy.host_page_offline),
                     Bool(),
                     "write host pages to "
                     "`<host.root>/sys/devices/system/memory/{soft,hard}_offline_page`"));
  keys.push_back(Row("policy.drain_deadline_ms", kLive, RASD_CONFIG_FIELD(policy.drain_deadline),
                     Milliseconds(0, 3'600'000),
                     "how long admitted work may run on a draining device (`rasctl drain "
                     "--deadline` overrides)"));
  keys.push_back(Row("policy.auto_recover", kLive, RASD_CONFIG_FIELD(policy.auto_recover), Bool(),
                     "recover a device the policy isolated: after `policy.auto_recover_delay_ms` "
                     "reset it, run the self-test, return it to service on a pass"));
  keys.push_back(Row("policy.auto_recover_delay_ms", kLive,
                     RASD_CONFIG_FIELD(policy.auto_recover_delay), Milliseconds(0, 3'600'000),
                     "how long an isolated device waits before its automatic recovery"));
  keys.push_back(Row("policy.auto_recover_window_s", kLive,
                     RASD_CONFIG_FIELD(policy.auto_recover_window), Seconds(1, kYearSeconds),
                     "a device isolated again within this long of its recovery waits for an "
                     "operator"));
  keys.push_back(Row("policy.link_up_debounce_s", kLive,
                     RASD_CONFIG_FIELD(policy.link_up_debounce), Seconds(1, 86400),
                     "a device whose link went down (an RDMA port it uses, an NVLink, its RoCE "
                     "port: it left its collectives and is Degraded, not isolated) rejoins, "
                     "Healthy, once every link stayed up this long"));
  keys.push_back(Row("policy.link_flap_limit", kLive, RASD_CONFIG_FIELD(policy.link_flap_limit),
                     Integer<int>(1, 1000),
                     "a device whose links went down this many times within an hour is "
                     "flapping: the device stays out of collectives until an operator's undrain"));
  keys.push_back(Row("policy.link_settle_s", kLive, RASD_CONFIG_FIELD(policy.link_settle),
                     Seconds(0, 3600),
                     "links train after the node boots and after a GPU driver load (`NVRM: "
                     "loading`): for this long their states are read but decided only when it "
                     "ends (nothing leaves its collectives, nothing counts as a flap); 0: off"));
  keys.push_back(Row("policy.nic_fault_hold_s", kLive, RASD_CONFIG_FIELD(policy.nic_fault_hold),
                     Seconds(1, 86400),
                     "a NIC's fatal health (mlx5 firmware fatal, failed recovery, devlink "
                     "fw_fatal) is a link fault of the accelerators behind it: out of collectives, "
                     "Degraded, for this long after its last fatal record"));
  keys.push_back(
      Row("probe.deadline_ms", kRestart, RASD_CONFIG_FIELD(probe.deadline),
          Milliseconds(100, 3'600'000),
          "the longest a driver call about one device (NVML's polled counters and "
          "queries, a device query) may take: a call past it drains the device (no new work), with "
          "the call's name in the reason, until its calls return again for as long; an RDMA NIC's "
          "sysfs read past it counts that NIC's ports as down"));
  keys.push_back(Row("probe.isolate_after", kRestart, RASD_CONFIG_FIELD(probe.isolate_after),
                     Integer<int>(1, 1000),
                     "deadlines a driver call stays stuck before its device is isolated; the "
                     "isolation stays until an operator's undrain"));
  keys.push_back(Row("probe.interval_ms", kRestart, RASD_CONFIG_FIELD(probe.interval),
                     Milliseconds(10, 3'600'000),
                     "how often each device's health and counter queries run (the simulator's; "
                     "NVML's monitor polls on its own), each device on a thread of its own"));
  keys.push_back(Row("liveness.period_ms", kLive, RASD_CONFIG_FIELD(liveness.period),
                     Milliseconds(0, 3'600'000),
                     "a heartbeat kernel (`empty`) on each device that takes new work and a "
                     "job uses this often, on a stream of its own; 0: off"));
  keys.push_back(Row("liveness.idle_period_ms", kLive, RASD_CONFIG_FIELD(liveness.idle_period),
                     Milliseconds(0, 86'400'000),
                     "the heartbeat of a device no job uses (no job's stream and no attached "
                     "workload on it), so that an idle node sleeps; a job's first stream there "
                     "brings the next beat forward at once. A device used only by processes rasd "
                     "does not follow (a Slurm job's, a pod's) is beaten at this period. 0: every "
                     "`liveness.period_ms` like a busy device"));
  keys.push_back(Row("liveness.deadline_ms", kLive, RASD_CONFIG_FIELD(liveness.deadline),
                     Milliseconds(10, 3'600'000),
                     "how long one heartbeat may take; a hung device with work on it is found "
                     "within `period_ms` + `misses` x this (1000 + 2 x 800: 2.6 periods)"));
  keys.push_back(Row("liveness.misses", kLive, RASD_CONFIG_FIELD(liveness.misses),
                     Integer<int>(1, 1000),
                     "deadlines in a row a heartbeat stays unfinished before the device is "
                     "reported hung: one `hang` event (UCE), drained and isolated; it returns "
                     "only through an undrain's or auto-recovery's self-test. One deadline is "
                     "enough when jobs gave up on work there meanwhile (their timeouts are "
                     "evidence, never a hang alone). `rasctl status` shows beats, misses, "
                     "hangs, op timeouts and the last latency per device"));
  keys.push_back(Row("screening.budget", kLive, RASD_CONFIG_FIELD(screening.budget), Share(0.5),
                     "the share of the node's time that known-answer screening for silent data "
                     "corruption may take, on average, shared by the devices in service (0.01: "
                     "1%; over 4 devices, 0.25% of each one's time; measured per screening): a "
                     "job spanning them waits for every device's screening. Devices no job uses "
                     "are screened first. 0: off"));
  keys.push_back(Row("screening.interval_s", kLive, RASD_CONFIG_FIELD(screening.interval),
                     Seconds(1, 86'400),
                     "a device in service not screened for this long shows as overdue in "
                     "`rasctl devices` (the budget decides how often; it is never exceeded)"));
  keys.push_back(Row("screening.elements", kLive, RASD_CONFIG_FIELD(screening.elements),
                     Integer<std::uint64_t>(4096, 1ULL << 21),
                     "output elements of each elementwise kernel in one screening (about 5x "
                     "this are compared): larger catches lower rates per screening and "
                     "costs more device time per screening"));
  keys.push_back(Row("screening.confirm", kLive, RASD_CONFIG_FIELD(screening.confirm),
                     Integer<int>(1, 100),
                     "screenings with a wrong result within `window_s` that isolate the device "
                     "(a silent-corruption decision); fewer make it a suspect, screened first"));
  keys.push_back(Row("screening.window_s", kLive, RASD_CONFIG_FIELD(screening.window),
                     Seconds(1, kYearSeconds),
                     "the window of `confirm`; wrong screenings and outvoted answers count "
                     "together"));
  keys.push_back(Row("screening.sample_one_in", kLive, RASD_CONFIG_FIELD(screening.sample_one_in),
                     Integer<std::uint32_t>(0, 1'000'000),
                     "inference jobs started from then on run one answered request in this many "
                     "again on another replica, and on a third when the two disagree; collective "
                     "jobs compute one rank's part again on the next rank's device every this "
                     "many steps at most, and within 0.25% of the job's time (a third on "
                     "disagreement). The device outvoted counts a wrong "
                     "result; an answer is never held back, an outvoted part is replaced before "
                     "the step goes on. 0: off"));
  keys.push_back(Row("workloads.grace_ms", kLive, RASD_CONFIG_FIELD(workloads.grace),
                     Milliseconds(0, 3'600'000),
                     "how long an attached workload (`rasctl run`, attach) whose device left "
                     "service may run on after its drain message and signal, when it names no "
                     "grace of its own"));
  keys.push_back(Row("workloads.on_drain", kLive, RASD_CONFIG_FIELD(workloads.on_drain),
                     OneOf({"kill", "notify"}),
                     "`kill`: a workload still running at the end of its grace gets SIGKILL; "
                     "`notify`: only the message and its drain signal (docs/workloads.md)"));
  keys.push_back(Row("workloads.kill_consumer", kLive, RASD_CONFIG_FIELD(workloads.kill_consumer),
                     Bool(),
                     "an uncorrectable error that names the process that met it (an Xid 94 "
                     "line's `pid=`; where it names none, the only process NVML lists on that "
                     "GPU) SIGKILLs that process if it is an attached workload on that device, "
                     "and never any other process; off: stored as skipped"));
  keys.push_back(Row("policy.hook_timeout_ms", kLive, RASD_CONFIG_FIELD(policy.hook_timeout),
                     Milliseconds(100, 600'000),
                     "a `run-hook` program is killed (with its process group) after this"));
}

void AddOtherKeys(std::vector<ConfigKey>& keys) {
  keys.push_back(Row("inject.allow_sources", kLive, RASD_CONFIG_FIELD(inject.allow_sources), Bool(),
                     "allow `rasctl inject kmsg` and `inject edac` (records into the decoder, "
                     "counters into a simulated EDAC tree under a non-`/` host.root)"));
  keys.push_back(Row("inject.allow_hardware", kLive, RASD_CONFIG_FIELD(inject.allow_hardware),
                     Bool(), "allow `rasctl inject einj` (ACPI EINJ through debugfs; root only)"));
  // Reload never applied the scheduler keys: the Slurm link is made at start.
  keys.push_back(Row("scheduler.kind", kRestart, RASD_CONFIG_FIELD(scheduler.kind),
                     OneOf({"none", "slurm"}),
                     "`slurm`: drain-node actions run `scontrol update ... State=DRAIN "
                     "Reason=\"rasd: ...\"`, an undrain that leaves no device isolated resumes "
                     "the node (docs/scheduler.md)"));
  keys.push_back(Row("scheduler.node", kRestart, RASD_CONFIG_FIELD(scheduler.node),
                     Text("name: letters, digits, `-`, `_`, `.`",
                          [](const std::string& node) {
                            return IsName(node, "-_.") && node.size() <= 255
                                       ? ""
                                       : "must be a node name (letters, digits, '-', '_', '.')";
                          }),
                     "Slurm's name for this node; empty: the host name"));
  keys.push_back(Row("scheduler.scontrol", kRestart, RASD_CONFIG_FIELD(scheduler.scontrol),
                     AbsolutePath(),
                     "the scontrol to run (argv, no shell; `SLURM_CONF` from rasd's environment)"));
  keys.push_back(Row("scheduler.resume_on_undrain", kRestart,
                     RASD_CONFIG_FIELD(scheduler.resume_on_undrain), Bool(),
                     "whether an undrain that leaves no device isolated resumes the node"));
  keys.push_back(Row("scheduler.max_drained_fraction", kRestart,
                     RASD_CONFIG_FIELD(scheduler.max_drained_fraction), Fraction(),
                     "the blast-radius guard: rasd drains at most this fraction of the cluster's "
                     "nodes (rounded down, at least one) with a `rasd:` reason set within "
                     "`guard_window_s`; a drain is claimed first in the node's Slurm `Comment` "
                     "(`rasd-claim <ms>`) and goes ahead only where the peers' claims leave room, "
                     "and is ranked after by Slurm's time (the ones past the limit undone); 1: no "
                     "guard (docs/scheduler.md)"));
  keys.push_back(Row("scheduler.guard_window_s", kRestart,
                     RASD_CONFIG_FIELD(scheduler.guard_window), Seconds(0, kYearSeconds),
                     "which drains the guard counts: those set within this many seconds; 0: "
                     "every node drained with a `rasd:` reason"));
  keys.push_back(Row("kubernetes.device_plugin", kRestart,
                     RASD_CONFIG_FIELD(kubernetes.device_plugin), Bool(),
                     "serve the kubelet device-plugin API (v1beta1) on "
                     "`<host.root>/var/lib/kubelet/device-plugins`: one resource per vendor, "
                     "each device Healthy while it takes new work; Allocate sets the variables "
                     "`rasctl run` sets (docs/kubernetes.md)"));
  const auto resource_name = [] {
    return Text("extended resource name (domain/name)", [](const std::string& name) {
      const auto valid = k8s::ValidateResourceName(name);
      return valid ? std::string() : "is not a resource name: " + valid.error().message;
    });
  };
  keys.push_back(Row("kubernetes.gpu_resource", kRestart,
                     RASD_CONFIG_FIELD(kubernetes.gpu_resource), resource_name(),
                     "the kubelet resource of the NVIDIA devices"));
  keys.push_back(Row("kubernetes.npu_resource", kRestart,
                     RASD_CONFIG_FIELD(kubernetes.npu_resource), resource_name(),
                     "the kubelet resource of the Ascend devices"));
  keys.push_back(Row("kubernetes.sim_resource", kRestart,
                     RASD_CONFIG_FIELD(kubernetes.sim_resource), resource_name(),
                     "the kubelet resource of the simulated devices"));
  keys.push_back(Row("jobs", kRestart, RASD_CONFIG_FIELD(jobs), Jobs(),
                     "jobs to start at boot: `name`, `kind` (inference: `devices`, `max_batch`, "
                     "`max_wait_us`, `max_queue` (default 4096), `load_rps`; llm: `devices`, "
                     "`max_batch` (sequences in one step), `max_queue`, `load_rps`, `kv_bytes` "
                     "(the KV cache per device, default 4194304), `tokens_per_block` (default "
                     "16), `preemption` (`recompute`, the default, or `swap`: a full cache's "
                     "youngest sequence is recomputed later, or its blocks are copied to host "
                     "memory, up to the size of the KV caches, and back); collective: `devices`, "
                     "`elements`, `steps`, "
                     "`checkpoint_every`, `min_ranks`, `grow_on_return` (default true)); see "
                     "`packaging/rasd.yaml`"));
  keys.push_back(Row("simulator.devices", kRestart, RASD_CONFIG_FIELD(simulator.devices),
                     Integer<int>(1, 64), "simulated devices"));
  keys.push_back(Row("simulator.memory_mib", kRestart, RASD_CONFIG_FIELD(simulator.memory_mib),
                     Integer<std::uint64_t>(1, 1 << 20), "memory per simulated device, in MiB"));
  keys.push_back(Row("simulator.link_sysfs", kRestart, RASD_CONFIG_FIELD(simulator.link_sysfs),
                     Bool(),
                     "under a host.root other than `/`: each simulated device gets an RDMA NIC "
                     "in a sysfs tree there (`<host.root>/sys/class/infiniband/rasdsim_N`, behind "
                     "the device's own PCIe switch) that the RDMA poller reads; `rasctl inject "
                     "link` takes both devices' ports down and `inject link-up` brings them back, "
                     "so a link fault moves collectives through the real path. Off: `inject "
                     "link` is the simulator's isolating link-error report"));
}

#undef RASD_CONFIG_FIELD

}  // namespace

const std::vector<ConfigKey>& ConfigSchema() {
  static const std::vector<ConfigKey> kSchema = [] {
    std::vector<ConfigKey> keys;
    AddServiceKeys(keys);
    AddRasKeys(keys);
    AddPolicyKeys(keys);
    AddOtherKeys(keys);
    return keys;
  }();
  return kSchema;
}

std::vector<std::string> ConfigSchemaMarkdown() {
  std::vector<std::string> lines = {"| key | type | default | on reload | meaning |",
                                    "|---|---|---|---|---|"};
  for (const auto& key : ConfigSchema()) {
    lines.push_back(
        fmt::format("| `{}` | {} | `{}` | {} | {} |", key.name, key.type, key.default_value,
                    key.applies == ConfigApply::kLive ? "applied" : "restart", key.doc));
  }
  return lines;
}

std::vector<std::string> SchemaRestartRequiredChanges(const Config& running, const Config& loaded) {
  std::vector<std::string> changed;
  for (const auto& key : ConfigSchema()) {
    if (key.applies == ConfigApply::kRestart && !key.same(running, loaded))
      changed.push_back(key.name);
  }
  return changed;
}

Config SchemaApplyLiveChanges(const Config& running, const Config& loaded) {
  Config applied = running;
  for (const auto& key : ConfigSchema()) {
    if (key.applies == ConfigApply::kLive) key.copy(applied, loaded);
  }
  return applied;
}

}  // namespace rasd::daemon
