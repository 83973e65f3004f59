#pragma once

#include <chrono>
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace rasd::ctl {

// `rasctl check`: one health verdict for node agents.
//
//   text (default)  the verdict and every finding, one per line;
//   npd             node-problem-detector's custom plugin: one line of at
//                   most 80 characters; exit 0 OK, 1 problem, 2 unknown;
//   nhc             a Slurm HealthCheckProgram in NHC's manner: on a problem
//                   the node is drained with a reason that starts "rasd:",
//                   and a node is resumed only when its reason starts so
//                   (never one an administrator drained); "ERROR:  rasd:
//                   Health check failed:  ..." and exit 1 on a problem,
//                   exit 0 otherwise.
//
// A degraded device still takes work: the node is OK (exit 0), and the
// line says which device is degraded. A rasd that does not answer is
// unknown, never healthy: npd and text exit 2; nhc treats it as a problem
// (the node's accelerators are unwatched) and drains, under the same
// blast-radius guard as rasd's own drains.
struct CheckOptions {
  std::filesystem::path socket;
  std::chrono::milliseconds timeout{10000};
  std::string format = "text";  // text | npd | nhc
  bool json = false;            // the verdict as JSON (with what nhc did)
  std::string node;             // nhc: Slurm's name for this node; empty: rasd's, else the host's
  std::string scontrol = "/usr/bin/scontrol";  // nhc; sinfo is taken from beside it
};

enum class CheckHealth { kOk, kDegraded, kProblem, kUnknown };
std::string_view CheckHealthName(CheckHealth health);

struct CheckVerdict {
  CheckHealth health = CheckHealth::kUnknown;
  std::string line;                  // one line, at most 80 characters: "rasd: " and the summary
  std::string summary;               // the line without its "rasd: " (the drain reason under nhc)
  std::string headline;              // without details: what follows the health word, whole
  std::vector<std::string> details;  // every finding, for the text format
};

// The verdict from rasd's `check` reply (its result), or from why rasd did
// not answer (`reply` unset). Pure.
CheckVerdict VerdictFrom(const std::optional<nlohmann::json>& result,
                         const std::string& unreachable_why);

// `text` cut to `most` bytes on a UTF-8 boundary, control characters made
// spaces, "..." marking a cut.
std::string OneLine(std::string_view text, std::size_t most);

// Runs the check and prints; returns the exit code.
int RunCheck(const CheckOptions& options, std::ostream& out, std::ostream& err);

}  // namespace rasd::ctl
