// The config schema: its defaults are Config{}'s, it covers every field,
// reload classifies keys as daemon.cc always did, and README's config table
// is generated from it.

#include "config_schema.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "rasd/daemon/config.h"

namespace rasd::daemon {
namespace {

std::vector<std::string> Problems(const ConfigParseResult& result) {
  std::vector<std::string> lines;
  for (const auto& problem : result.problems) lines.push_back(problem.ToString());
  return lines;
}

// "ras.codes.ascend" and "{}" as a YAML document.
std::string Document(const std::string& dotted_key, const std::string& value) {
  std::string document, indent;
  std::string_view rest = dotted_key;
  for (auto dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
    document += indent + std::string(rest.substr(0, dot)) + ":\n";
    indent += "  ";
    rest.remove_prefix(dot + 1);
  }
  return document + indent + std::string(rest) + ": " + value + "\n";
}

const ConfigKey* FindKey(std::string_view name) {
  for (const auto& key : ConfigSchema()) {
    if (key.name == name) return &key;
  }
  return nullptr;
}

// Every key set to a value that is not its default.
Config EveryKeyChanged() {
  const auto result = ParseConfig(R"(host: {root: /srv/fixture}
daemon: {state_dir: /var/lib/x, log_level: debug}
control: {socket: /run/x.sock, socket_mode: "0600", admin_group: ops, client_timeout_ms: 500,
          max_clients: 8}
metrics: {listen: off}
runtime: {driver: [cuda, sim], cuda_library: /opt/libcuda.so, ascend_library: /opt/libacl.so,
          dcmi_library: /opt/libdcmi.so}
ras:
  kmsg: false
  kmsg_quiet_flush_ms: 250
  kmsg_file_poll_ms: 50
  tracefs: false
  tracefs_instance: other
  edac_poll_ms: 0
  infiniband_poll_ms: 0
  nvml: false
  nvml_library: /opt/libnvidia-ml.so
  nvml_poll_ms: 500
  retention_days: 7
  max_events: 5000
  storm_threshold: 8
  codes: {nvidia_xid: {31: UCE}, ascend: {0x80E01801: UCE}}
  recovery: [{match: {origin: ascend, vendor_code: 0x80E01801}, action: contact-vendor}]
  fault_rules: [{name: xid-storm, rule: storm, window_s: 5}]
policy:
  rules: [{name: r, actions: [record]}]
  ce_page_threshold: 3
  ce_page_window_s: 60
  ce_device_threshold: 4
  ce_device_window_s: 61
  degrade_after_retirements: 2
  isolate_after_retirements: 5
  escalation_window_s: 62
  host_page_offline: true
  drain_deadline_ms: 1000
  auto_recover: true
  auto_recover_delay_ms: 100
  auto_recover_window_s: 63
  link_up_debounce_s: 7
  link_flap_limit: 2
  link_settle_s: 9
  nic_fault_hold_s: 60
  hook_timeout_ms: 200
inject: {allow_sources: true, allow_hardware: true}
scheduler: {kind: slurm, node: n1, scontrol: /opt/scontrol, resume_on_undrain: false,
            max_drained_fraction: 0.25, guard_window_s: 0}
kubernetes: {device_plugin: true, gpu_resource: example.com/gpu, npu_resource: example.com/npu,
             sim_resource: example.com/sim}
jobs: [{name: j, kind: inference}]
probe: {deadline_ms: 2000, isolate_after: 5, interval_ms: 250}
liveness: {period_ms: 0, deadline_ms: 300, misses: 5, idle_period_ms: 0}
screening: {budget: 0.05, interval_s: 60, elements: 65536, confirm: 3, window_s: 600, sample_one_in: 7}
workloads: {grace_ms: 1500, on_drain: notify, kill_consumer: false}
simulator: {devices: 2, memory_mib: 64, link_sysfs: true}
)",
                                  "changed.yaml");
  EXPECT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  return result.config;
}

TEST(ConfigSchemaTest, KeysAreUniqueAndDocumentedOnOneLine) {
  std::set<std::string> names;
  for (const auto& key : ConfigSchema()) {
    EXPECT_TRUE(names.insert(key.name).second) << "twice: " << key.name;
    EXPECT_FALSE(key.type.empty()) << key.name;
    EXPECT_FALSE(key.doc.empty()) << key.name;
    for (const auto& text : {key.type, key.default_value, key.doc}) {
      EXPECT_EQ(text.find_first_of("|\n"), std::string::npos)
          << key.name << ": a table cell: " << text;
    }
  }
  // A name is a key or a section, never both ("ras.codes" is a section).
  for (const auto& name : names) {
    for (auto dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
      EXPECT_FALSE(names.contains(name.substr(0, dot))) << name;
    }
  }
}

TEST(ConfigSchemaTest, EveryDefaultReadsBackAsConfigsDefault) {
  for (const auto& key : ConfigSchema()) {
    const std::string document = Document(key.name, key.default_value);
    const auto result = ParseConfig(document, "default.yaml");
    ASSERT_TRUE(result.ok()) << document << testing::PrintToString(Problems(result));
    EXPECT_EQ(result.config, Config{}) << "the default of " << key.name << " is not Config{}'s:\n"
                                       << document;
  }
  EXPECT_EQ(FindKey("control.socket_mode")->default_value, "\"0666\"");
  EXPECT_EQ(FindKey("ras.kmsg_quiet_flush_ms")->default_value, "500");
  EXPECT_EQ(FindKey("daemon.state_dir")->default_value, "\"\"");
  EXPECT_EQ(FindKey("runtime.driver")->default_value, "sim");
}

TEST(ConfigSchemaTest, EveryKeyReadsItsOwnFieldAndTheRowsCoverTheConfig) {
  const Config defaults;
  const Config changed = EveryKeyChanged();
  for (const auto& key : ConfigSchema()) {
    EXPECT_FALSE(key.same(defaults, changed)) << key.name << " is not changed by the document";
    // Each key's copy moves exactly its own value.
    Config one;
    key.copy(one, changed);
    for (const auto& other : ConfigSchema()) {
      EXPECT_EQ(other.same(one, defaults), &other != &key) << key.name << " vs " << other.name;
    }
  }
  Config all;
  for (const auto& key : ConfigSchema()) key.copy(all, changed);
  EXPECT_EQ(all, changed) << "a field the document set is not behind any row";
}

TEST(ConfigSchemaTest, RestartKeysAreTheOnesReloadAlwaysKept) {
  // daemon.cc's hand-written list, key by key (it named runtime.* and ras.*
  // as whole sections), and scheduler.*, which reload never applied.
  const std::vector<std::string> expected = {
      "host.root",
      "daemon.state_dir",
      "control.socket",
      "control.socket_mode",
      "metrics.listen",
      "runtime.driver",
      "runtime.cuda_library",
      "runtime.ascend_library",
      "runtime.dcmi_library",
      "ras.kmsg",
      "ras.kmsg_quiet_flush_ms",
      "ras.kmsg_file_poll_ms",
      "ras.tracefs",
      "ras.tracefs_instance",
      "ras.infiniband_poll_ms",
      "ras.edac_poll_ms",
      "ras.nvml",
      "ras.nvml_library",
      "ras.nvml_poll_ms",
      "ras.retention_days",
      "ras.max_events",
      "ras.storm_threshold",
      "probe.deadline_ms",
      "probe.isolate_after",
      "probe.interval_ms",
      "scheduler.kind",
      "scheduler.node",
      "scheduler.scontrol",
      "scheduler.resume_on_undrain",
      "scheduler.max_drained_fraction",
      "scheduler.guard_window_s",
      "kubernetes.device_plugin",
      "kubernetes.gpu_resource",
      "kubernetes.npu_resource",
      "kubernetes.sim_resource",
      "jobs",
      "simulator.devices",
      "simulator.memory_mib",
      "simulator.link_sysfs",
  };
  EXPECT_EQ(SchemaRestartRequiredChanges(Config{}, EveryKeyChanged()), expected);
  EXPECT_TRUE(SchemaRestartRequiredChanges(EveryKeyChanged(), EveryKeyChanged()).empty());
  EXPECT_TRUE(SchemaRestartRequiredChanges(Config{}, Config{}).empty());
}

TEST(ConfigSchemaTest, LiveKeysAreTheOnesReloadAlwaysApplied) {
  const Config running;
  const Config loaded = EveryKeyChanged();
  // What daemon.cc's Reload copied by hand.
  Config expected = running;
  expected.daemon.log_level = loaded.daemon.log_level;
  expected.control.admin_group = loaded.control.admin_group;
  expected.control.client_timeout = loaded.control.client_timeout;
  expected.control.max_clients = loaded.control.max_clients;
  expected.ras.codes = loaded.ras.codes;
  expected.ras.recovery = loaded.ras.recovery;
  expected.ras.fault_rules = loaded.ras.fault_rules;
  expected.policy = loaded.policy;
  expected.inject = loaded.inject;
  expected.liveness = loaded.liveness;
  expected.screening = loaded.screening;
  expected.workloads = loaded.workloads;
  EXPECT_EQ(SchemaApplyLiveChanges(running, loaded), expected);
}

TEST(ConfigSchemaTest, AReloadAppliesALiveKeyAndReportsARestartKey) {
  const auto running = ParseConfig("simulator:\n  devices: 2\n", "running.yaml");
  const auto loaded = ParseConfig(
      "simulator:\n  devices: 6\ndaemon:\n  log_level: debug\npolicy:\n  ce_page_threshold: 7\n",
      "loaded.yaml");
  ASSERT_TRUE(running.ok() && loaded.ok());
  EXPECT_EQ(SchemaRestartRequiredChanges(running.config, loaded.config),
            std::vector<std::string>{"simulator.devices"});
  const Config applied = SchemaApplyLiveChanges(running.config, loaded.config);
  EXPECT_EQ(applied.simulator.devices, 2) << "a restart key keeps its running value";
  EXPECT_EQ(applied.daemon.log_level, spdlog::level::debug);
  EXPECT_EQ(applied.policy.engine.ce_page.count, 7u);
  EXPECT_EQ(SchemaRestartRequiredChanges(applied, loaded.config),
            std::vector<std::string>{"simulator.devices"});
}

std::vector<std::string> ReadmeConfigTable() {
  std::ifstream file(RASD_SOURCE_DIR "/README.md");
  std::vector<std::string> table;
  bool in_section = false;
  for (std::string line; std::getline(file, line);) {
    if (line.starts_with("## ")) in_section = line == "## Configuration";
    if (!in_section) continue;
    if (line.starts_with("|")) {
      table.push_back(line);
    } else if (!table.empty()) {
      break;  // the first table of the section is the config table
    }
  }
  return table;
}

TEST(ConfigSchemaTest, ReadmeConfigTableIsTheSchema) {
  const auto readme = ReadmeConfigTable();
  const auto schema = ConfigSchemaMarkdown();
  ASSERT_FALSE(readme.empty()) << "no table under README's '## Configuration'";
  // Key by key first, so that a missing or stray row is named.
  auto keys = [](const std::vector<std::string>& rows) {
    std::set<std::string> names;
    for (const auto& row : rows) {
      const auto open = row.find('`'), close = row.find('`', open + 1);
      if (row.starts_with("| `") && close != std::string::npos)
        names.insert(row.substr(open + 1, close - open - 1));
    }
    return names;
  };
  const auto in_readme = keys(readme), in_schema = keys(schema);
  for (const auto& name : in_schema)
    EXPECT_TRUE(in_readme.contains(name)) << name << " is not in README's config table";
  for (const auto& name : in_readme)
    EXPECT_TRUE(in_schema.contains(name)) << name << " in README's config table is not a key";
  std::ostringstream generated;
  for (const auto& line : schema) generated << line << "\n";
  EXPECT_EQ(readme, schema) << "README's config table is generated: replace it with the output "
                               "of `rasd --print-config-schema`:\n"
                            << generated.str();
}

// Whether `dotted` is in the YAML mapping `node`; a section written as an
// empty mapping ("codes: {}") counts for the keys under it.
bool Shows(const YAML::Node& node, std::string_view dotted) {
  if (dotted.empty() || (node.IsMap() && node.size() == 0)) return true;
  if (!node.IsMap()) return false;
  const auto dot = dotted.find('.');
  const YAML::Node child = node[std::string(dotted.substr(0, dot))];
  if (!child.IsDefined()) return false;
  return Shows(child, dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1));
}

// packaging/rasd.yaml is the documented default file: every key is in it.
TEST(ConfigSchemaTest, ThePackagedConfigShowsEveryKey) {
  const YAML::Node packaged = YAML::LoadFile(RASD_SOURCE_DIR "/packaging/rasd.yaml");
  for (const auto& key : ConfigSchema()) {
    EXPECT_TRUE(Shows(packaged, key.name)) << key.name << " is not in packaging/rasd.yaml";
  }
}

}  // namespace
}  // namespace rasd::daemon
