#include "check_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <ostream>
#include <thread>

#include "control_client.h"
#include "rasd/cluster/slurm.h"
#include "rasd/common/host_env.h"

namespace rasd::ctl {
namespace {

constexpr std::size_t kLineLimit = 80;  // node-problem-detector's max_output_length default
constexpr std::size_t kSummaryLimit = kLineLimit - 6;  // after "rasd: "

int ExitCode(CheckHealth health, const std::string& format) {
  switch (health) {
    case CheckHealth::kOk:
    case CheckHealth::kDegraded:
      return 0;
    case CheckHealth::kProblem:
      return 1;
    case CheckHealth::kUnknown:
      return format == "nhc" ? 1 : 2;
  }
  return 2;
}

std::string Finding(const nlohmann::json& finding) {
  const std::string state = finding.value("state", std::string("?"));
  const std::string reason = finding.value("reason", std::string());
  std::string text;
  if (finding.contains("device") && finding["device"].is_number_integer()) {
    text = fmt::format("device {} {}", finding["device"].get<int>(), state);
  } else if (state == "backend-missing") {
    text = "backend missing";
  } else {
    text = "node fault";
  }
  if (!reason.empty()) text += ": " + reason;
  return text;
}

std::string ShortHostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  std::string host = name;
  if (const auto dot = host.find('.'); dot != std::string::npos) host.resize(dot);
  return host;
}

struct NhcOutcome {
  std::string action;  // drained, resumed, none, guarded, left-alone, failed
  std::string detail;
};

// What a HealthCheckProgram does with the verdict: drain on a problem (the
// node rasd's own or nobody's), resume a node rasd drained once it is
// healthy, leave an administrator's drain alone.
NhcOutcome ApplyToSlurm(const CheckOptions& options, const CheckVerdict& verdict,
                        const std::optional<nlohmann::json>& result) {
  nlohmann::json scheduler = result && result->contains("scheduler") ? (*result)["scheduler"]
                                                                      : nlohmann::json::object();
  std::string node = options.node;
  if (node.empty() && scheduler.is_object()) node = scheduler.value("node", std::string());
  if (node.empty()) node = ShortHostName();
  double max_fraction = 0.5;
  long long window_s = 300;
  if (scheduler.is_object()) {
    max_fraction = scheduler.value("max_drained_fraction", max_fraction);
    window_s = scheduler.value("guard_window_s", window_s);
  }
  const std::filesystem::path scontrol(options.scontrol);
  cluster::SlurmClient slurm(
      {.scontrol = scontrol.string(),
       .sinfo = (scontrol.parent_path() / "sinfo").string(),
       .environment = cluster::SlurmClient::EnvironmentFromCaller(),
       .timeout = std::chrono::milliseconds(10000)});
  auto nodes = slurm.Nodes();
  if (!nodes) return {"failed", "cannot read Slurm's nodes: " + nodes.error().message};
  const bool problem =
      verdict.health == CheckHealth::kProblem || verdict.health == CheckHealth::kUnknown;
  if (problem && scheduler.is_object() && scheduler.value("kind", std::string()) == "slurm" &&
      scheduler.value("drain_wanted", false)) {
    // rasd's own link drains this node and ranks its drain: a second drain
    // here would give the node a second reason time, and rank it twice.
    return {"none", fmt::format("rasd drains node {} itself (scheduler.kind: slurm)", node)};
  }
  using Kind = cluster::NodeActionDecision::Kind;
  const auto decision =
      cluster::DecideNodeAction(*nodes, node, problem, max_fraction, std::chrono::seconds(window_s),
                                common::SystemClock().Wall());
  switch (decision.kind) {
    case Kind::kUnknownNode:
      return {"failed", decision.detail + " (rasctl check --node NAME)"};
    case Kind::kAlreadyDrained:
      return {"none", decision.detail};
    case Kind::kHeldByOthers:
      return {"left-alone", decision.detail};
    case Kind::kGuarded:
      return {"guarded", fmt::format("not draining node {}: the blast-radius guard holds: {}", node,
                                     decision.detail)};
    case Kind::kNothing:
      return {"none", ""};
    case Kind::kDrain:
      if (max_fraction < 1.0) {
        // Every node's health check runs at once: each claims its drain
        // and drains only where the peers' claims leave room.
        auto claimed = slurm.DrainWithClaim(
            *nodes, node, verdict.summary, max_fraction, std::chrono::seconds(window_s),
            [] { return common::SystemClock().Wall(); },
            [](std::chrono::milliseconds settle) {
              std::this_thread::sleep_for(settle);
              return true;
            });
        if (!claimed) return {"failed", claimed.error().message};
        using Claimed = cluster::ClaimedDrain::Kind;
        switch (claimed->kind) {
          case Claimed::kDrained:
            break;
          case Claimed::kGuarded:
            return {"guarded", fmt::format("not draining node {}: the blast-radius guard holds: {}",
                                           node, claimed->detail)};
          case Claimed::kChanged:
            if (claimed->decision.kind == Kind::kHeldByOthers) {
              return {"left-alone", claimed->detail};
            }
            if (claimed->decision.kind == Kind::kUnknownNode) {
              return {"failed", claimed->detail + " (rasctl check --node NAME)"};
            }
            return {"none", claimed->detail};
          case Claimed::kStopped:
            return {"none", claimed->detail};
        }
      } else if (auto drained = slurm.Drain(node, verdict.summary); !drained) {
        // DrainReason puts the "rasd: " prefix on the summary.
        return {"failed", drained.error().message};
      }
      if (max_fraction < 1.0) {
        // The drains are ranked alike on every node once all of them can
        // be seen, should clocks or a Comment of someone else's have
        // defeated the claim.
        std::this_thread::sleep_for(cluster::kDrainSettle);
        auto rank = slurm.ConfirmOwnDrain(node, max_fraction, std::chrono::seconds(window_s),
                                          common::SystemClock().Wall());
        if (!rank) {
          return {"drained",
                  fmt::format("node {} drained: {}; its place among rasd's drains "
                              "could not be read ({}): the drain stands",
                              node, cluster::DrainReason(verdict.summary), rank.error().message)};
        }
        if (!rank->keep) {
          return {"guarded", fmt::format("node {} resumed again: the blast-radius guard holds: {}",
                                         node, rank->why)};
        }
      }
      return {"drained",
              fmt::format("node {} drained: {}", node, cluster::DrainReason(verdict.summary))};
    case Kind::kResume:
      if (auto resumed = slurm.Resume(node); !resumed) return {"failed", resumed.error().message};
      return {"resumed", fmt::format("node {} resumed (it was drained with '{}')", node,
                                     cluster::FindNode(*nodes, node)->reason)};
  }
  return {"failed", "no decision"};
}

}  // namespace

std::string_view CheckHealthName(CheckHealth health) {
  switch (health) {
    case CheckHealth::kOk:
      return "ok";
    case CheckHealth::kDegraded:
      return "degraded";
    case CheckHealth::kProblem:
      return "problem";
    case CheckHealth::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string OneLine(std::string_view text, std::size_t most) {
  std::string line;
  line.reserve(std::min(text.size(), most));
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    line += (byte < 0x20 || byte == 0x7f) ? ' ' : c;
  }
  if (line.size() <= most) return line;
  std::size_t cut = most - 3;
  // Back off to the start of a UTF-8 character.
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  line.resize(cut);
  return line + "...";
}

CheckVerdict VerdictFrom(const std::optional<nlohmann::json>& result,
                         const std::string& unreachable_why) {
  CheckVerdict verdict;
  if (!result || !result->is_object() || !result->contains("health") ||
      !(*result)["health"].is_string()) {
    verdict.health = CheckHealth::kUnknown;
    const std::string why =
        result ? "rasd's check reply has no verdict" : unreachable_why;
    verdict.summary = OneLine("unknown: " + why, kSummaryLimit);
    verdict.headline = why;
    verdict.details.push_back(why);
    verdict.line = "rasd: " + verdict.summary;
    return verdict;
  }
  const std::string health = (*result)["health"].get<std::string>();
  std::vector<std::string> problems, warnings;
  if (result->contains("findings") && (*result)["findings"].is_array()) {
    for (const auto& finding : (*result)["findings"]) {
      if (!finding.is_object()) continue;
      (finding.value("level", std::string()) == "problem" ? problems : warnings)
          .push_back(Finding(finding));
    }
  }
  int devices = 0;
  if (result->contains("devices") && (*result)["devices"].is_object())
    devices = (*result)["devices"].value("count", 0);
  auto first_and_more = [](const std::vector<std::string>& list, const std::string& lead) {
    std::string more = list.size() > 1 ? fmt::format(" (+{} more)", list.size() - 1) : "";
    // The count of the others stays visible however long the first is.
    return OneLine(lead + list.front(), kSummaryLimit - more.size()) + more;
  };
  if (health == "problem" && !problems.empty()) {
    verdict.health = CheckHealth::kProblem;
    verdict.summary = first_and_more(problems, "");
  } else if (health == "degraded" && !warnings.empty()) {
    verdict.health = CheckHealth::kDegraded;
    verdict.summary = first_and_more(warnings, "OK, ");
  } else if (health == "ok") {
    verdict.health = CheckHealth::kOk;
    verdict.headline = fmt::format("{} device(s) healthy", devices);
    verdict.summary = OneLine("OK: " + verdict.headline, kSummaryLimit);
  } else {
    verdict.health = CheckHealth::kUnknown;
    verdict.headline = "a verdict rasctl does not know: " + health;
    verdict.summary = OneLine("unknown: " + verdict.headline, kSummaryLimit);
  }
  verdict.line = "rasd: " + verdict.summary;
  verdict.details = problems;
  verdict.details.insert(verdict.details.end(), warnings.begin(), warnings.end());
  return verdict;
}

int RunCheck(const CheckOptions& options, std::ostream& out, std::ostream& err) {
  std::optional<nlohmann::json> result;
  std::string why;
  if (auto client = ControlClient::Connect(options.socket, options.timeout); !client) {
    why = "rasd does not answer: " + client.error().message;
  } else if (auto reply = client->Call("check"); !reply) {
    why = "rasd does not answer: " + reply.error().message;
  } else if (!reply->value("ok", false)) {
    const auto& error = (*reply)["error"];
    why = "rasd refused check: " +
          (error.is_object() ? error.value("message", std::string("(no message)"))
                             : std::string("(no message)"));
  } else {
    result = reply->value("result", nlohmann::json());
  }
  const CheckVerdict verdict = VerdictFrom(result, why);
  std::optional<NhcOutcome> nhc;
  if (options.format == "nhc") nhc = ApplyToSlurm(options, verdict, result);

  if (options.json) {
    nlohmann::json document = {{"health", std::string(CheckHealthName(verdict.health))},
                               {"line", verdict.line},
                               {"details", verdict.details},
                               {"rasd", result ? *result : nlohmann::json()},
                               {"error", why.empty() ? nlohmann::json() : nlohmann::json(why)}};
    if (nhc) document["slurm"] = {{"action", nhc->action}, {"detail", nhc->detail}};
    out << document.dump(2) << "\n";
  } else if (options.format == "npd") {
    out << verdict.line << "\n";
  } else if (options.format == "nhc") {
    const bool problem =
        verdict.health == CheckHealth::kProblem || verdict.health == CheckHealth::kUnknown;
    // NHC's own words for a failed check, on standard output.
    if (problem) {
      out << "ERROR:  rasd:  Health check failed:  " << verdict.summary << "\n";
    }
    if (nhc && !nhc->detail.empty()) {
      (nhc->action == "failed" || nhc->action == "guarded" ? err : out)
          << "rasctl check: " << nhc->detail << "\n";
    }
  } else {
    // The whole of each finding: a person reads this, not an agent.
    // Reasons come from kernel records and operators: no control character
    // reaches the terminal.
    constexpr std::size_t kWhole = 4096;
    out << CheckHealthName(verdict.health) << ": "
        << OneLine(verdict.details.empty() ? verdict.headline : verdict.details.front(), kWhole)
        << "\n";
    for (std::size_t i = 1; i < verdict.details.size(); ++i)
      out << "  " << OneLine(verdict.details[i], kWhole) << "\n";
  }
  int code = ExitCode(verdict.health, options.format);
  // A HealthCheckProgram that could not tell Slurm has failed too.
  if (nhc && nhc->action == "failed" && code == 0) code = 1;
  return code;
}

}  // namespace rasd::ctl
