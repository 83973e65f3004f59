#include "rasd/daemon/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace rasd::daemon {
namespace {

std::vector<std::string> Problems(const ConfigParseResult& result) {
  std::vector<std::string> lines;
  for (const auto& problem : result.problems) lines.push_back(problem.ToString());
  return lines;
}

TEST(ConfigTest, EmptyDocumentGivesDefaults) {
  const auto result = ParseConfig("", "empty.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  EXPECT_EQ(result.config, Config{});
  EXPECT_EQ(result.config.host.root, "/");
  EXPECT_EQ(result.config.simulator.devices, 4);
  EXPECT_EQ(result.config.control.socket_mode, 0666u);
  EXPECT_EQ(result.config.control.client_timeout, std::chrono::milliseconds(10000));
}

TEST(ConfigTest, ValidDocumentSetsEveryKey) {
  const auto result = ParseConfig(R"(
host:
  root: /srv/fixture
daemon:
  state_dir: /var/lib/rasd-test
  log_level: debug
control:
  socket: /run/rasd-test/rasd.sock
  socket_mode: "0660"
  admin_group: rasd
  client_timeout_ms: 2500
  max_clients: 8
metrics:
  listen: 127.0.0.1:9464
runtime:
  driver: sim
ras:
  kmsg: false
  kmsg_quiet_flush_ms: 250
  kmsg_file_poll_ms: 50
  edac_poll_ms: 0
simulator:
  devices: 8
  memory_mib: 256
)",
                                  "full.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  const Config& config = result.config;
  EXPECT_EQ(config.host.root, "/srv/fixture");
  EXPECT_EQ(config.daemon.state_dir, "/var/lib/rasd-test");
  EXPECT_EQ(config.daemon.log_level, spdlog::level::debug);
  EXPECT_EQ(config.control.socket, "/run/rasd-test/rasd.sock");
  EXPECT_EQ(config.control.socket_mode, 0660u);
  EXPECT_EQ(config.control.admin_group, "rasd");
  EXPECT_EQ(config.control.client_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(config.control.max_clients, 8);
  EXPECT_EQ(config.metrics.listen, "127.0.0.1:9464");
  EXPECT_EQ(config.simulator.devices, 8);
  EXPECT_EQ(config.simulator.memory_mib, 256u);
  EXPECT_FALSE(config.ras.kmsg);
  EXPECT_EQ(config.ras.kmsg_quiet_flush, std::chrono::milliseconds(250));
  EXPECT_EQ(config.ras.kmsg_file_poll, std::chrono::milliseconds(50));
  EXPECT_EQ(config.ras.edac_poll, std::chrono::milliseconds(0));
}

TEST(ConfigTest, ARuleMayHaveABootGrace) {
  const auto result = ParseConfig(R"(policy:
  rules:
    - name: links
      match: {severity: UCE, component: device}
      boot_grace_s: 300
      actions: [degrade-device]
)",
                                  "grace.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  ASSERT_EQ(result.config.policy.engine.rules.size(), 1u);
  EXPECT_EQ(result.config.policy.engine.rules[0].boot_grace, std::chrono::seconds(300));
  EXPECT_FALSE(ParseConfig("policy:\n  rules:\n    - name: x\n      boot_grace_s: -1\n      "
                           "actions: [record]\n",
                           "bad.yaml")
                   .ok());
}

TEST(ConfigTest, AnLlmJobNamesItsPreemptionPolicyAndABadOneIsNamed) {
  const auto result = ParseConfig(R"(jobs:
  - name: chat
    kind: llm
    preemption: swap
  - name: other
    kind: llm
)",
                                  "llm.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  ASSERT_EQ(result.config.jobs.size(), 2u);
  EXPECT_EQ(result.config.jobs[0].preemption, jobs::Preemption::kSwap);
  EXPECT_EQ(result.config.jobs[1].preemption, jobs::Preemption::kRecompute) << "the default";
  const auto bad =
      ParseConfig("jobs:\n  - name: chat\n    kind: llm\n    preemption: evict\n", "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(testing::PrintToString(Problems(bad))
                .find("'jobs[0].preemption' must be recompute or swap, not 'evict'"),
            std::string::npos)
      << testing::PrintToString(Problems(bad));
}

TEST(ConfigTest, RecoveryRowsAreReadWithTheirEscalationAndBadOnesNamed) {
  const auto result = ParseConfig(R"(ras:
  recovery:
    - match: {origin: nvidia_xid, vendor_code: 79}
      action: contact-vendor
    - match: {origin: ascend, vendor_code: 0x80E18005, severity: UCE, component: device}
      action: reset-device
      escalate_after: 1
      escalate_window_s: 3600
      escalate_to: reboot-node
)",
                                  "recovery.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  const auto& rows = result.config.ras.recovery;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].vendor_code, 79);
  EXPECT_EQ(rows[0].action, ras::RecoveryAction::kContactVendor);
  EXPECT_EQ(rows[0].escalate_after, 0u);
  EXPECT_EQ(rows[1].vendor_code, static_cast<int>(static_cast<std::int32_t>(0x80E18005u)));
  EXPECT_EQ(rows[1].severity, ras::Severity::kUce);
  EXPECT_EQ(rows[1].component, ras::ComponentKind::kDevice);
  EXPECT_EQ(rows[1].escalate_after, 1u);
  EXPECT_EQ(rows[1].escalate_window, std::chrono::seconds(3600));
  EXPECT_EQ(rows[1].escalate_to, ras::RecoveryAction::kRebootNode);
  EXPECT_EQ(rows[1].source, "site: ras.recovery[1]");

  const auto bad = ParseConfig(R"(ras:
  recovery:
    - match: {origin: nvidia_xid}
      action: reboot
    - match: {severity: LOUD}
      action: none
    - action: none
      escalate_to: pray
    - match: {vendor_code: 79}
    - match: {vendor_code: 79}
      action: reboot-node
      escalate_to: none
)",
                               "bad.yaml");
  const auto problems = Problems(bad);
  ASSERT_EQ(problems.size(), 5u) << testing::PrintToString(problems);
  EXPECT_NE(problems[4].find("escalate_to (none) must be stronger than action (reboot-node)"),
            std::string::npos)
      << problems[4];
  EXPECT_NE(problems[0].find("bad.yaml:4:15: 'ras.recovery[0].action' must be one of none, "
                             "restart-app"),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[3].find("'ras.recovery[3]' needs an 'action'"), std::string::npos)
      << problems[3];
}

TEST(ConfigTest, FaultRulesAreReadOverTheBuiltInOnesAndBadOnesNamed) {
  const auto result = ParseConfig(R"(ras:
  fault_rules:
    - {name: echo-of-another-xid, enabled: false}
    - name: ascend-storm
      rule: storm
      origin: ascend
      window_s: 10
    - {name: dbe-echo, rule: echo, codes: 63, after_classes: [UCE, fatal], window_s: 5}
)",
                                  "fault_rules.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  const auto rows = ras::MergeFaultRules(result.config.ras.fault_rules);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].name, "fallen-off-the-bus");
  EXPECT_EQ(rows[3].origin, "ascend");
  EXPECT_EQ(rows[3].window, std::chrono::seconds(10));
  EXPECT_EQ(rows[4].codes, std::vector<int>{63});
  EXPECT_EQ(rows[4].after_classes,
            (std::vector<ras::Severity>{ras::Severity::kUce, ras::Severity::kFatal}));

  const auto bad = ParseConfig(R"(ras:
  fault_rules:
    - {name: a, rule: echoes, codes: [45]}
    - {name: b, rule: echo}
    - {name: c, rule: supersede, codes: [119]}
    - {rule: storm}
    - {name: xid-storm, window_s: 5}
    - {name: e, rule: storm, window_s: 0}
    - {name: f, rule: echo, codes: [45, x]}
    - {name: g, rule: storm}
    - {name: g, rule: storm}
)",
                               "bad.yaml");
  const auto problems = Problems(bad);
  ASSERT_EQ(problems.size(), 8u) << testing::PrintToString(problems);
  EXPECT_NE(problems[0].find("must be one of echo, supersede, storm, settle, not 'echoes'"),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("an echo row needs 'codes'"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("needs 'after_codes'"), std::string::npos) << problems[2];
  EXPECT_NE(problems[3].find("needs a 'name'"), std::string::npos) << problems[3];
  EXPECT_NE(problems[4].find("turned off with 'enabled: false'"), std::string::npos) << problems[4];
  EXPECT_NE(problems[7].find("a second row named 'g'"), std::string::npos) << problems[7];
}

TEST(ConfigTest, CodeTablesOverrideTheBuiltInOnes) {
  const auto result = ParseConfig(
      "ras:\n  codes:\n    nvidia_xid:\n      31: UCE\n      999: fatal\n    ascend:\n      "
      "507099: SRAO\n      0x80E01801: UCE\n",
      "codes.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  const auto& codes = result.config.ras.codes;
  EXPECT_EQ(codes.Xid(31), ras::Severity::kUce) << "overridden";
  EXPECT_EQ(codes.Xid(999), ras::Severity::kFatal) << "added";
  EXPECT_EQ(codes.Xid(79), ras::Severity::kFatal) << "built-in kept";
  EXPECT_EQ(codes.Ascend(507099), ras::Severity::kSrao);
  EXPECT_EQ(codes.Ascend(507053), ras::Severity::kSrar);
  // A DCMI fault code, with the bits the driver reports it with.
  EXPECT_EQ(codes.Ascend(static_cast<int>(static_cast<std::int32_t>(0x80E01801u))),
            ras::Severity::kUce);
  const auto bad_hex = ParseConfig("ras:\n  codes:\n    ascend:\n      0xZZ: CE\n", "hex.yaml");
  ASSERT_EQ(Problems(bad_hex).size(), 1u);
  EXPECT_NE(Problems(bad_hex)[0].find("such as 507053 or 0x80E01801, not '0xZZ'"),
            std::string::npos)
      << Problems(bad_hex)[0];
  EXPECT_FALSE(ParseConfig("ras:\n  codes:\n    nvidia_xid:\n      0x10: CE\n", "x.yaml").ok())
      << "Xids are decimal";

  const auto bad = ParseConfig(
      "ras:\n  codes:\n    nvidia_xid:\n      x: CE\n      31: LOUD\n    amd: {}\n", "bad.yaml");
  const auto problems = Problems(bad);
  ASSERT_EQ(problems.size(), 3u) << testing::PrintToString(problems);
  EXPECT_NE(problems[0].find("bad.yaml:4:7: 'ras.codes.nvidia_xid key' must be an integer"),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("bad.yaml:5:11: 'ras.codes.nvidia_xid.31' must be one of CE"),
            std::string::npos)
      << problems[1];
  EXPECT_NE(problems[2].find("unknown key 'ras.codes.amd'"), std::string::npos) << problems[2];
}

TEST(ConfigTest, PolicyRulesAndThresholdsAreRead) {
  const auto result = ParseConfig(R"(policy:
  ce_page_threshold: 10
  ce_page_window_s: 600
  isolate_after_retirements: 5
  host_page_offline: true
  rules:
    - name: xid-48-hook
      match: {origin: nvidia_xid, severity: UCE, component: device, vendor_code: 48}
      actions: [run-hook, isolate-device]
      hook: [/usr/local/bin/page-oncall, --gpu]
    - name: dimm-storm
      match: {severity: CE, component: host-memory}
      threshold: {count: 1000, window_s: 3600, per: dimm}
      actions: [record]
)",
                                  "policy.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  const auto& policy = result.config.policy;
  EXPECT_EQ(policy.engine.ce_page.count, 10u);
  EXPECT_EQ(policy.engine.ce_page.window, std::chrono::seconds(600));
  EXPECT_EQ(policy.engine.isolate_after_retirements, 5u);
  EXPECT_TRUE(policy.host_page_offline);
  ASSERT_EQ(policy.engine.rules.size(), 2u);
  const auto& hook = policy.engine.rules[0];
  EXPECT_EQ(hook.name, "xid-48-hook");
  EXPECT_EQ(hook.origin, "nvidia_xid");
  EXPECT_EQ(hook.severity, ras::Severity::kUce);
  EXPECT_EQ(hook.component, ras::ComponentKind::kDevice);
  EXPECT_EQ(hook.vendor_code, 48);
  EXPECT_EQ(hook.actions, (std::vector<ras::ActionKind>{ras::ActionKind::kRunHook,
                                                        ras::ActionKind::kIsolateDevice}));
  EXPECT_EQ(hook.hook, (std::vector<std::string>{"/usr/local/bin/page-oncall", "--gpu"}));
  ASSERT_TRUE(policy.engine.rules[1].threshold.has_value());
  EXPECT_EQ(policy.engine.rules[1].threshold->key, ras::Threshold::Key::kDimm);
  EXPECT_EQ(policy.engine.rules[1].threshold->count, 1000u);
}

TEST(ConfigTest, BadPolicyRulesAreErrorsWithPosition) {
  const auto bad = ParseConfig(R"(policy:
  rules:
    - name: a
      match: {severity: LOUD}
      actions: [reboot]
    - name: b
      actions: [run-hook]
    - name: c
      actions: [run-hook]
      hook: [sh, -c, "rm -rf /"]
    - actions: [record]
    - name: e
      match: {colour: red}
      actions: [record]
      threshold: {per: rack}
)",
                               "bad.yaml");
  const auto problems = Problems(bad);
  ASSERT_EQ(problems.size(), 7u) << testing::PrintToString(problems);
  EXPECT_NE(problems[0].find("bad.yaml:4:25: 'policy.rules[0].match.severity' must be one of"),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("unknown action 'reboot'"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("runs a hook but has no 'hook' argv"), std::string::npos)
      << problems[2];
  EXPECT_NE(problems[3].find("must be an absolute path (no shell"), std::string::npos)
      << problems[3];
  EXPECT_NE(problems[4].find("'policy.rules[3]' needs a name"), std::string::npos) << problems[4];
  EXPECT_NE(problems[5].find("unknown key 'policy.rules[4].match.colour'"), std::string::npos)
      << problems[5];
  EXPECT_NE(problems[6].find("must be page, dimm or device, not 'rack'"), std::string::npos)
      << problems[6];
  EXPECT_TRUE(bad.config.policy.engine.rules.empty()) << "a rule with a problem is not used";
}

TEST(ConfigTest, RasKeysAreValidated) {
  const auto result = ParseConfig("ras:\n  kmsg: maybe\n  edac_poll_ms: 50\n", "ras.yaml");
  const auto problems = Problems(result);
  ASSERT_EQ(problems.size(), 2u) << testing::PrintToString(problems);
  EXPECT_EQ(problems[0], "ras.yaml:2:9: 'ras.kmsg' must be true or false, not 'maybe'");
  EXPECT_EQ(problems[1], "ras.yaml:3:17: 'ras.edac_poll_ms' must be 0 (off) or at least 100");
}

TEST(ConfigTest, EmptyValuesKeepDefaults) {
  const auto result = ParseConfig("daemon:\n  state_dir:\ncontrol:\n", "nulls.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  EXPECT_EQ(result.config, Config{});
}

TEST(ConfigTest, UnknownKeysAreErrorsWithPosition) {
  const auto result = ParseConfig("control:\n  sockett: /x\nbogus: 1\n", "typo.yaml");
  ASSERT_EQ(result.problems.size(), 2u) << testing::PrintToString(Problems(result));
  EXPECT_EQ(result.problems[0].ToString(),
            "typo.yaml:2:3: unknown key 'control.sockett' (did you mean 'socket'?)");
  EXPECT_EQ(result.problems[1].line, 3);
  EXPECT_EQ(result.problems[1].column, 1);
  EXPECT_NE(result.problems[1].message.find("unknown key 'bogus'"), std::string::npos);
  EXPECT_NE(result.problems[1].message.find("known: host, daemon"), std::string::npos);
}

TEST(ConfigTest, WrongTypesAreErrorsWithPosition) {
  const auto result = ParseConfig(R"(simulator:
  devices: four
  memory_mib: [1, 2]
control:
  max_clients: 0
  socket_mode: "999"
  socket: relative/path
daemon: just-a-string
)",
                                  "types.yaml");
  const auto problems = Problems(result);
  ASSERT_EQ(problems.size(), 6u) << testing::PrintToString(problems);
  EXPECT_EQ(problems[0], "types.yaml:2:12: 'simulator.devices' must be an integer, not 'four'");
  EXPECT_EQ(problems[1], "types.yaml:3:15: 'simulator.memory_mib' must be an integer, not a list");
  EXPECT_EQ(problems[2], "types.yaml:5:16: 'control.max_clients' must be in 1..4096, not 0");
  EXPECT_EQ(
      problems[3],
      "types.yaml:6:16: 'control.socket_mode' must be an octal mode such as \"0660\", not '999'");
  EXPECT_EQ(problems[4],
            "types.yaml:7:11: 'control.socket' must be an absolute path, not 'relative/path'");
  EXPECT_EQ(problems[5], "types.yaml:8:9: 'daemon' must be a mapping, not 'just-a-string'");
}

TEST(ConfigTest, SemanticValuesAreChecked) {
  const auto result = ParseConfig(
      "daemon:\n  log_level: loud\nmetrics:\n  listen: nowhere\nruntime:\n  driver: quantum\n",
      "values.yaml");
  const auto problems = Problems(result);
  ASSERT_EQ(problems.size(), 3u) << testing::PrintToString(problems);
  EXPECT_NE(problems[0].find("values.yaml:2:14: 'daemon.log_level': unknown log level 'loud'"),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("values.yaml:4:11: 'metrics.listen'"), std::string::npos)
      << problems[1];
  EXPECT_NE(problems[2].find(
                "values.yaml:6:11: 'runtime.driver' must be one of: sim, cuda, ascend, auto"),
            std::string::npos)
      << problems[2];
}

TEST(ConfigTest, BrokenYamlReportsLineAndColumn) {
  const auto result = ParseConfig("control:\n  socket: /x\n  max_clients: [1, 2\n", "broken.yaml");
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_EQ(result.problems[0].file, "broken.yaml");
  EXPECT_GE(result.problems[0].line, 3);
  EXPECT_GE(result.problems[0].column, 1);
  EXPECT_FALSE(result.problems[0].message.empty());
}

TEST(ConfigTest, TabIndentationIsBrokenYaml) {
  const auto result = ParseConfig("control:\n\tsocket: /x\n", "tabs.yaml");
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_EQ(result.problems[0].line, 2);
}

TEST(ConfigTest, DuplicateKeysAreErrors) {
  const auto result = ParseConfig("simulator:\n  devices: 2\n  devices: 3\n", "dup.yaml");
  const auto problems = Problems(result);
  ASSERT_EQ(problems.size(), 1u) << testing::PrintToString(problems);
  EXPECT_EQ(problems[0], "dup.yaml:3:3: duplicate key 'simulator.devices'");
}

TEST(ConfigTest, TopLevelMustBeAMapping) {
  const auto result = ParseConfig("- a\n- b\n", "list.yaml");
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_EQ(result.problems[0].ToString(),
            "list.yaml:1:1: 'the document' must be a mapping, not a list");
}

TEST(ConfigTest, UnreadableFileIsOneProblem) {
  const auto result = LoadConfigFile("/nonexistent/rasd.yaml");
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_EQ(result.problems[0].ToString(),
            "/nonexistent/rasd.yaml:1:1: cannot read config file: No such file or directory");
}

TEST(ConfigTest, ThePackagedDefaultConfigIsValidAndEqualsTheBuiltInDefaults) {
  const auto result = LoadConfigFile(RASD_SOURCE_DIR "/packaging/rasd.yaml");
  ASSERT_TRUE(result.ok()) << testing::PrintToString(Problems(result));
  // The one difference: an installed rasd serves the host's accelerators;
  // without a config file (development, tests, `make run`) it runs the
  // simulator.
  Config expected;
  expected.runtime.drivers = {"auto"};
  EXPECT_EQ(result.config, expected);
}

TEST(ConfigTest, OverridesWinOverTheFile) {
  auto result = ParseConfig("daemon:\n  state_dir: /a\n", "o.yaml");
  ASSERT_TRUE(result.ok());
  ConfigOverrides overrides;
  overrides.state_dir = "/b";
  overrides.host_root = "/fixture";
  overrides.ApplyTo(result.config);
  EXPECT_EQ(result.config.daemon.state_dir, "/b");
  EXPECT_EQ(result.config.host.root, "/fixture");
  EXPECT_EQ(result.config.control.socket, "");
}

}  // namespace
}  // namespace rasd::daemon
