#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "config_value_reader.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/fault_rules.h"
#include "rasd/ras/policy.h"
#include "rasd/ras/recovery.h"
#include "rasd/ras/severity.h"

namespace rasd::daemon {

// The readers of the config keys whose values are lists or mappings with
// their own structure; the schema (config_schema.cc) refers to them from
// their rows. Each reads a non-null `value` found at the dotted `path`,
// records every problem through `reader`, and changes its output only with
// what it read correctly.

// runtime.driver: one backend name or a list of them, each at most once.
void ReadDrivers(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 std::vector<std::string>& drivers);

// ras.codes.*: {code: CLASS, ...} entries over `table` (the built-in one).
// With `hex_keys`, codes may also be 32-bit hex values (Ascend DCMI fault
// codes, 0x80E01801), stored with the bits the driver reports them with (a
// negative int above 0x7fffffff).
void ReadCodeMap(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                 bool hex_keys, std::map<int, ras::Severity>& table);

// policy.rules: a list of {name, match, threshold, actions, hook}; a rule
// with a problem is left out, and so is the second of two with one name.
void ReadPolicyRules(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                     std::vector<ras::PolicyRule>& rules);

// ras.recovery: a list of {match: {origin, vendor_code (DCMI codes also in
// hex), severity, component}, action, escalate_after, escalate_window_s,
// escalate_to}; a row with a problem is left out.
void ReadRecoveryRows(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                      std::vector<ras::RecoveryRow>& rows);

// ras.fault_rules: a list of {name, rule: echo | supersede | storm,
// enabled, origin, codes, after_codes, after_classes, window_s}; a row with
// a problem is left out, and so is the second of two with one name.
void ReadFaultRules(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
                    std::vector<ras::FaultRule>& rows);

// jobs: a list of {name, kind, devices, ...}; as rules, a bad one is left out.
void ReadJobs(ConfigValueReader& reader, const YAML::Node& value, const std::string& path,
              std::vector<jobs::JobSpec>& specs);

}  // namespace rasd::daemon
