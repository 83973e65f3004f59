// fleet: a cluster on one machine (`make fleet`). One real slurmctld (and
// munged), one real Prometheus loaded with the packaged alert rules, and
// --nodes real rasd processes, each Slurm's node of its own with its own
// state, socket and metrics port over four simulated devices. Trials:
//   all-at-once   every node gets the same fatal host error in the same
//                 instant (--trials times): rasd may drain at most
//                 scheduler.max_drained_fraction of the nodes, and every
//                 node's alert (RasdNodeDrained or RasdNodeDrainGuarded)
//                 fires in Prometheus;
//   device-fault  a few nodes' GPU falls off the bus: that device is
//                 isolated and RasdDeviceIsolated fires; no node drains;
//   rolling-restart every rasd restarted in turn: no node drains, each
//                 isolation stays, every node is scraped again.
// Then every node runs `rasctl check --format nhc` at once, as Slurm runs
// its HealthCheckProgram. --json writes the figures (build/fleet.json).
// Everything started is stopped at the end, also on SIGINT or SIGTERM.
//
// Exit codes: 0 every check held; 1 a check failed (named on stdout and in
// the JSON); 2 bad command line or the fleet did not start.

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "slurm_cluster.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kPrometheus = "/usr/bin/prometheus";
// The device the device-fault trial takes off the bus (the simulator's
// GPU 1 sits at ffff:c2:00).
constexpr int kFaultyDevice = 1;

std::atomic<bool> interrupted{false};
void OnSignal(int) { interrupted = true; }

struct Options {
  int nodes = 32;
  int trials = 5;
  double max_drained_fraction = 0.5;
  int scrape_interval_s = 15;  // Prometheus's default
  fs::path json;
};

void Usage(std::ostream& out) {
  out << "usage: fleet [--nodes N] [--trials T] [--max-drained-fraction F]\n"
         "             [--scrape-interval-s S] [--json PATH]\n"
         "  --nodes N                 rasd processes, each a Slurm node (default 32, 2 to 256)\n"
         "  --trials T                all-at-once trials (default 5, 1 to 100)\n"
         "  --max-drained-fraction F  scheduler.max_drained_fraction of every node (default 0.5)\n"
         "  --scrape-interval-s S     Prometheus's scrape and rule evaluation interval "
         "(default 15, 1 to 60)\n"
         "  --json PATH               write the figures there\n";
}

std::optional<Options> ParseOptions(int argc, char** argv, std::string* why) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage(std::cout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      *why = flag + " wants a value";
      return std::nullopt;
    }
    const std::string value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    const bool numeric = end != value.c_str() && *end == '\0';
    const auto whole = [&](int low, int high, int& into) {
      if (!numeric || number != std::floor(number) || number < low || number > high) {
        *why = fmt::format("{}: a whole number from {} to {} is wanted, not '{}'", flag, low, high,
                           value);
        return false;
      }
      into = static_cast<int>(number);
      return true;
    };
    if (flag == "--nodes") {
      if (!whole(2, 256, options.nodes)) return std::nullopt;
    } else if (flag == "--trials") {
      if (!whole(1, 100, options.trials)) return std::nullopt;
    } else if (flag == "--scrape-interval-s") {
      if (!whole(1, 60, options.scrape_interval_s)) return std::nullopt;
    } else if (flag == "--max-drained-fraction") {
      if (!numeric || number <= 0 || number > 1) {
        *why =
            "--max-drained-fraction: a number above 0 and at most 1 is wanted, not '" + value + "'";
        return std::nullopt;
      }
      options.max_drained_fraction = number;
    } else if (flag == "--json") {
      options.json = value;
    } else {
      *why = "unknown option " + flag;
      return std::nullopt;
    }
  }
  return options;
}

std::string NodeName(int i) { return i == 0 ? "localhost" : fmt::format("n{}", i); }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The q-quantile (nearest rank) of `values`; 0 for none.
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::ranges::sort(values);
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

// Resident memory of a process, in MiB; 0 when it cannot be read.
double RssMib(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmRSS:")) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return 0;
}

class Fleet {
 public:
  explicit Fleet(const Options& options) : options_(options) {}

  // Slurm, the rasd nodes and Prometheus; false with `why` when one did not
  // start.
  bool Start(std::string* why) {
    if (::geteuid() != 0) {
      *why = "the Slurm daemons run as root: run fleet as root";
      return false;
    }
    if (::access(kPrometheus, X_OK) != 0) {
      *why = std::string(kPrometheus) + " is missing: run scripts/bootstrap (package prometheus)";
      return false;
    }
    std::vector<std::string> idle;
    for (int i = 1; i < options_.nodes; ++i) idle.push_back(NodeName(i));
    std::string missing;
    slurm_ = std::make_unique<SlurmCluster>(why, &missing, SlurmClusterOptions{.idle_nodes = idle});
    if (!missing.empty() || !why->empty()) {
      if (why->empty()) *why = missing;
      return false;
    }
    for (int i = 0; i < options_.nodes; ++i) ports_.push_back(FreePort());
    nodes_.resize(options_.nodes);
    for (int i = 0; i < options_.nodes; ++i)
      if (!StartNode(i, why)) return false;
    return StartPrometheus(why);
  }

  // A fresh rasd for node i (new state), on the node's metrics port.
  bool StartNode(int i, std::string* why) {
    nodes_[i] = std::make_unique<RasdInstance>();
    nodes_[i]->WriteConfig(
        fmt::format("scheduler:\n  kind: slurm\n  node: {}\n  max_drained_fraction: {}\n"
                    "liveness:\n  period_ms: 0\n",
                    NodeName(i), options_.max_drained_fraction));
    return Restart(i, why);
  }

  // The repair between trials: every rasd stopped, the nodes rasd drained
  // resumed, every rasd started afresh.
  bool Renew(std::string* why) {
    for (auto& node : nodes_) (void)node->Stop();
    ResumeAll();
    for (int i = 0; i < options_.nodes; ++i)
      if (!StartNode(i, why)) return false;
    return true;
  }

  // Starts node i's rasd again over its own state.
  bool Restart(int i, std::string* why) {
    std::string reason;
    if (nodes_[i]->Start({"--metrics-listen", Instance(i)}, {{"SLURM_CONF", slurm_->Conf()}},
                         &reason))
      return true;
    *why = fmt::format("{}'s rasd did not start: {}", NodeName(i), reason);
    return false;
  }

  int Nodes() const { return options_.nodes; }
  RasdInstance& Node(int i) { return *nodes_[i]; }
  SlurmCluster& Slurm() { return *slurm_; }
  pid_t PrometheusPid() const { return prometheus_->Pid(); }

  // Nodes Slurm holds drained with rasd's reason now.
  std::set<std::string> DrainedByRasd() {
    std::set<std::string> drained;
    for (const auto& [node, reason] : slurm_->Reasons())
      if (reason.starts_with("rasd: ")) drained.insert(node);
    return drained;
  }

  // Resumes every node rasd drained (between trials: the repair).
  void ResumeAll() {
    for (const auto& node : DrainedByRasd()) (void)slurm_->Update(node, {"State=RESUME"});
  }

  // An instant query's samples: labels and value.
  std::vector<std::pair<nlohmann::json, double>> Query(const std::string& promql) {
    return PrometheusQuery(prometheus_port_, promql);
  }

  // Targets Prometheus scraped successfully in its last scrape.
  int ScrapedNodes() {
    int up = 0;
    for (const auto& [labels, value] : Query("up{job=\"rasd\"}")) up += value == 1.0 ? 1 : 0;
    return up;
  }

  // The firing alerts, as "alertname instance".
  std::set<std::string> FiringAlerts() {
    std::set<std::string> firing;
    const auto json =
        nlohmann::json::parse(Http(prometheus_port_, "GET", "/api/v1/alerts"), nullptr, false);
    if (!json.is_object() || !json["data"].is_object()) return firing;
    for (const auto& alert : json["data"]["alerts"]) {
      if (alert.value("state", "") != "firing") continue;
      firing.insert(alert["labels"].value("alertname", "") + " " +
                    alert["labels"].value("instance", ""));
    }
    return firing;
  }

  std::string Instance(int i) const { return fmt::format("127.0.0.1:{}", ports_[i]); }

 private:
  bool StartPrometheus(std::string* why) {
    const fs::path rules = fs::path(RASD_SOURCE_DIR) / "packaging/prometheus/rasd-alerts.yml";
    std::string targets;
    for (int port : ports_) targets += fmt::format("'127.0.0.1:{}', ", port);
    WriteText(dir_.Path() / "prometheus.yml",
              fmt::format("global:\n  scrape_interval: {0}s\n  evaluation_interval: {0}s\n"
                          "rule_files: ['{1}']\n"
                          "scrape_configs:\n  - job_name: rasd\n    static_configs:\n"
                          "      - targets: [{2}]\n",
                          options_.scrape_interval_s, rules.string(), targets));
    fs::create_directories(dir_.Path() / "tsdb");
    prometheus_port_ = FreePort();
    prometheus_ = std::make_unique<Process>(ProcessOptions{
        .argv = {kPrometheus, "--config.file=" + (dir_.Path() / "prometheus.yml").string(),
                 "--storage.tsdb.path=" + (dir_.Path() / "tsdb").string(),
                 fmt::format("--web.listen-address=127.0.0.1:{}", prometheus_port_),
                 "--web.enable-lifecycle"},
        .stderr_path = dir_.Path() / "prometheus.log"});
    if (WaitUntil([&] { return ScrapedNodes() == options_.nodes; },
                  std::chrono::seconds(30 + 2 * options_.scrape_interval_s)))
      return true;
    *why = fmt::format("Prometheus scraped {} of {} nodes:\n{}", ScrapedNodes(), options_.nodes,
                       ReadText(dir_.Path() / "prometheus.log"));
    return false;
  }

  Options options_;
  TempDir dir_;
  std::unique_ptr<SlurmCluster> slurm_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<RasdInstance>> nodes_;
  int prometheus_port_ = 0;
  std::unique_ptr<Process> prometheus_;
};

// Waits until each node in `nodes` has one of `alerts` firing, or
// `timeout`; the seconds from `start` to each node's first, by node.
std::map<int, double> AlertTimes(Fleet& fleet, const std::set<int>& nodes,
                                 const std::vector<std::string>& alerts, Clock::time_point start,
                                 std::chrono::seconds timeout) {
  std::map<int, double> times;
  while (times.size() < nodes.size() && Clock::now() - start < timeout && !interrupted) {
    const auto firing = fleet.FiringAlerts();
    const double now = Seconds(Clock::now() - start);
    for (int i : nodes) {
      if (times.contains(i)) continue;
      for (const auto& alert : alerts)
        if (firing.contains(alert + " " + fleet.Instance(i))) times[i] = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return times;
}

struct Report {
  nlohmann::json json = nlohmann::json::object();
  std::vector<std::string> failures;
  void Check(bool held, const std::string& what) {
    if (held) return;
    failures.push_back(what);
    std::cout << "FAILED: " << what << "\n";
  }
};

// Every node: settled as drained (its drain kept) or guarded.
bool Settled(Fleet& fleet) {
  for (int i = 0; i < fleet.Nodes(); ++i) {
    if (!SchedulerSettled(fleet.Node(i).RasctlJson({"status"}))) return false;
  }
  return true;
}

void AllAtOnceTrials(Fleet& fleet, const Options& options, Report& report,
                     std::vector<double>& alert_seconds) {
  const auto limit = static_cast<std::size_t>(
      std::max(1.0, std::floor(options.max_drained_fraction * fleet.Nodes())));
  constexpr std::string_view kFatal =
      "3,{},{},-;{{1}}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: "
      "0\n3,{},{},-;{{1}}[Hardware Error]: event severity: fatal\n";
  std::size_t worst = 0, worst_peak = 0;
  nlohmann::json trials = nlohmann::json::array();
  for (int trial = 0; trial < options.trials && !interrupted; ++trial) {
    std::string why;
    if (trial > 0) {
      // The repair: nodes resumed, every rasd afresh, no alert left over.
      if (!fleet.Renew(&why)) {
        report.Check(false, why);
        return;
      }
      const bool quiet = WaitUntil(
          [&] {
            for (const auto& alert : fleet.FiringAlerts())
              if (alert.starts_with("RasdNodeDrain")) return false;
            return fleet.ScrapedNodes() == fleet.Nodes();
          },
          std::chrono::seconds(30 + 4 * options.scrape_interval_s));
      report.Check(quiet, fmt::format("trial {}: the last trial's alerts did not resolve", trial));
    }
    const long long at_us = KernelMicrosNow();
    const std::string records = fmt::format(fmt::runtime(kFatal), 1, at_us, 2, at_us);
    const auto start = Clock::now();
    for (int i = 0; i < fleet.Nodes(); ++i) fleet.Node(i).AppendKmsg(records);

    // Slurm's drains, polled until every node settles: the peak is the
    // most drained by rasd at any one poll, the ranking's undoing included.
    std::size_t peak = 0;
    const bool settled = WaitUntil(
        [&] {
          peak = std::max(peak, fleet.DrainedByRasd().size());
          return Settled(fleet);
        },
        std::chrono::seconds(60));
    const auto drained = fleet.DrainedByRasd();
    peak = std::max(peak, drained.size());
    std::set<int> everyone;
    for (int i = 0; i < fleet.Nodes(); ++i) everyone.insert(i);
    const auto times = AlertTimes(fleet, everyone, {"RasdNodeDrained", "RasdNodeDrainGuarded"},
                                  start, std::chrono::seconds(120));
    std::vector<double> seconds;
    for (const auto& [node, s] : times) seconds.push_back(s);
    alert_seconds.insert(alert_seconds.end(), seconds.begin(), seconds.end());
    worst = std::max(worst, drained.size());
    worst_peak = std::max(worst_peak, peak);
    std::cout << fmt::format(
        "all-at-once trial {}: {} of {} drained by rasd when settled (peak {}), alerts on {} "
        "nodes, p99 {:.1f} s\n",
        trial, drained.size(), fleet.Nodes(), peak, times.size(), Quantile(seconds, 0.99));
    trials.push_back({{"trial", trial},
                      {"settled", settled},
                      {"drained", drained.size()},
                      {"drained_peak", peak},
                      {"alerted_nodes", times.size()},
                      {"fault_to_alert_p50_s", Quantile(seconds, 0.5)},
                      {"fault_to_alert_p99_s", Quantile(seconds, 0.99)}});
    report.Check(settled, fmt::format("trial {}: not every node settled in 60 s", trial));
    report.Check(drained.size() <= limit,
                 fmt::format("trial {}: {} nodes drained by rasd, over the limit {}", trial,
                             drained.size(), limit));
    report.Check(!drained.empty(), fmt::format("trial {}: no node drained", trial));
    report.Check(
        times.size() == static_cast<std::size_t>(fleet.Nodes()),
        fmt::format("trial {}: {} of {} nodes' alerts fired", trial, times.size(), fleet.Nodes()));
  }
  report.json["drain_limit"] = limit;
  report.json["worst_trial_drained"] = worst;
  report.json["worst_trial_drained_peak"] = worst_peak;
  report.json["all_at_once"] = trials;
}

// A few nodes' GPU falls off the bus (Xid 79): isolated there, alerted on,
// and no node drains.
std::set<int> DeviceFaultTrial(Fleet& fleet, Report& report, std::vector<double>& alert_seconds) {
  std::string why;
  if (!fleet.Renew(&why)) {
    report.Check(false, why);
    return {};
  }
  const std::set<int> faulty = {1, fleet.Nodes() / 2, fleet.Nodes() - 1};
  const auto start = Clock::now();
  for (int i : faulty)
    fleet.Node(i).AppendKmsg(
        fmt::format("3,1,{},-;NVRM: Xid (PCI:ffff:c2:00): 79, pid=1, GPU has fallen off the bus.\n",
                    KernelMicrosNow()));
  const auto times =
      AlertTimes(fleet, faulty, {"RasdDeviceIsolated"}, start, std::chrono::seconds(120));
  std::vector<double> seconds;
  for (const auto& [node, s] : times) seconds.push_back(s);
  alert_seconds.insert(alert_seconds.end(), seconds.begin(), seconds.end());
  int isolated = 0;
  for (int i : faulty)
    isolated += DeviceOf(fleet.Node(i), kFaultyDevice)["state"] == "isolated" ? 1 : 0;
  const auto drained = fleet.DrainedByRasd();
  std::cout << fmt::format(
      "device-fault trial: {} of {} faulty GPUs isolated, alerts on {}, {} nodes drained\n",
      isolated, faulty.size(), times.size(), drained.size());
  report.json["device_fault"] = {{"nodes", faulty.size()},
                                 {"isolated", isolated},
                                 {"alerted_nodes", times.size()},
                                 {"drained", drained.size()},
                                 {"fault_to_alert_p99_s", Quantile(seconds, 0.99)}};
  report.Check(isolated == static_cast<int>(faulty.size()), "device fault: not every GPU isolated");
  report.Check(times.size() == faulty.size(), "device fault: not every alert fired");
  report.Check(drained.empty(), "device fault: a node was drained");
  return faulty;
}

// Every rasd restarted in turn over its own state: nothing drains, each
// isolation stays, every node is scraped again.
void RollingRestartTrial(Fleet& fleet, const Options& options, const std::set<int>& faulty,
                         Report& report) {
  std::size_t peak = 0;
  std::vector<double> restart_seconds;
  for (int i = 0; i < fleet.Nodes() && !interrupted; ++i) {
    const auto start = Clock::now();
    (void)fleet.Node(i).Stop();
    std::string why;
    if (!fleet.Restart(i, &why)) {
      report.Check(false, why);
      return;
    }
    restart_seconds.push_back(Seconds(Clock::now() - start));
    peak = std::max(peak, fleet.DrainedByRasd().size());
  }
  int kept = 0;
  for (int i : faulty)
    kept += DeviceOf(fleet.Node(i), kFaultyDevice)["state"] == "isolated" ? 1 : 0;
  const bool scraped = WaitUntil([&] { return fleet.ScrapedNodes() == fleet.Nodes(); },
                                 std::chrono::seconds(30 + 2 * options.scrape_interval_s));
  std::cout << fmt::format(
      "rolling restart: {} restarts (p99 {:.2f} s each), at most {} drained, {} of {} "
      "isolations kept, all scraped: {}\n",
      restart_seconds.size(), Quantile(restart_seconds, 0.99), peak, kept, faulty.size(), scraped);
  report.json["rolling_restart"] = {{"restarts", restart_seconds.size()},
                                    {"restart_p99_s", Quantile(restart_seconds, 0.99)},
                                    {"drained_peak", peak},
                                    {"isolations_kept", kept}};
  report.Check(peak == 0, "rolling restart: a node was drained");
  report.Check(kept == static_cast<int>(faulty.size()), "rolling restart: an isolation was lost");
  report.Check(scraped, "rolling restart: not every node scraped again");
}

// Every node's `rasctl check --format nhc` at once, as Slurm runs its
// HealthCheckProgram on all nodes.
void NhcAtOnce(Fleet& fleet, Report& report) {
  std::vector<double> seconds(fleet.Nodes());
  std::vector<int> codes(fleet.Nodes());
  std::vector<std::thread> threads;
  for (int i = 0; i < fleet.Nodes(); ++i)
    threads.emplace_back([&, i] {
      const auto start = Clock::now();
      codes[i] = fleet.Node(i).Rasctl({"check", "--format", "nhc"}).exit_code;
      seconds[i] = Seconds(Clock::now() - start);
    });
  for (auto& thread : threads) thread.join();
  const double p99 = Quantile(seconds, 0.99);
  std::cout << fmt::format("nhc: {} checks at once, p50 {:.3f} s, p99 {:.3f} s\n", fleet.Nodes(),
                           Quantile(seconds, 0.5), p99);
  report.json["nhc_check_p50_s"] = Quantile(seconds, 0.5);
  report.json["nhc_check_p99_s"] = p99;
  report.Check(p99 < 60, "nhc: a check took 60 s or more (Slurm's HealthCheckProgram limit)");
  for (int i = 0; i < fleet.Nodes(); ++i)
    report.Check(codes[i] == 0 || codes[i] == 1,
                 fmt::format("nhc: {}'s check exited {}", NodeName(i), codes[i]));
}

int Run(const Options& options) {
  Fleet fleet(options);
  std::string why;
  const auto began = Clock::now();
  if (!fleet.Start(&why)) {
    std::cout << "fleet did not start: " << why << "\n";
    return 2;
  }
  std::cout << fmt::format("{} rasd nodes, slurmctld and Prometheus up in {:.1f} s\n",
                           fleet.Nodes(), Seconds(Clock::now() - began));
  Report report;
  report.json["nodes"] = options.nodes;
  report.json["trials"] = options.trials;
  report.json["max_drained_fraction"] = options.max_drained_fraction;
  report.json["scrape_interval_s"] = options.scrape_interval_s;
  report.json["scraped_nodes"] = fleet.ScrapedNodes();
  report.Check(report.json["scraped_nodes"] == options.nodes, "not every node scraped");

  // Per node, from its last scrape: the samples it exposed (one per series).
  std::vector<double> series;
  for (const auto& [labels, value] : fleet.Query("scrape_samples_scraped{job=\"rasd\"}"))
    series.push_back(value);
  report.json["series_per_node"] = Quantile(series, 1.0);

  std::vector<double> alert_seconds;
  AllAtOnceTrials(fleet, options, report, alert_seconds);
  std::set<int> faulty;
  if (!interrupted) faulty = DeviceFaultTrial(fleet, report, alert_seconds);
  if (!interrupted) RollingRestartTrial(fleet, options, faulty, report);
  if (!interrupted) NhcAtOnce(fleet, report);

  std::vector<double> series_after;
  for (const auto& [labels, value] : fleet.Query("scrape_samples_scraped{job=\"rasd\"}"))
    series_after.push_back(value);
  report.json["series_per_node_after_faults"] = Quantile(series_after, 1.0);
  std::vector<double> rss;
  for (int i = 0; i < fleet.Nodes(); ++i) rss.push_back(RssMib(fleet.Node(i).Proc().Pid()));
  report.json["rasd_rss_mib_p50"] = Quantile(rss, 0.5);
  report.json["rasd_rss_mib_p99"] = Quantile(rss, 0.99);
  report.json["prometheus_rss_mib"] = RssMib(fleet.PrometheusPid());
  report.json["fault_to_alert_p50_s"] = Quantile(alert_seconds, 0.5);
  report.json["fault_to_alert_p99_s"] = Quantile(alert_seconds, 0.99);
  report.Check(Quantile(alert_seconds, 0.99) <= 60, "a fault's alert took over 60 s");
  report.json["seconds"] = Seconds(Clock::now() - began);
  if (interrupted) report.Check(false, "interrupted");
  report.json["failures"] = report.failures;
  std::cout << report.json.dump(2) << "\n";
  if (!options.json.empty()) {
    std::ofstream out(options.json);
    out << report.json.dump(2) << "\n";
    if (!out) {
      std::cout << "cannot write " << options.json << "\n";
      return 1;
    }
  }
  return report.failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace rasd::testing

int main(int argc, char** argv) {
  std::string why;
  const auto options = rasd::testing::ParseOptions(argc, argv, &why);
  if (!options) {
    std::cerr << "fleet: " << why << "\n";
    rasd::testing::Usage(std::cerr);
    return 2;
  }
  std::cout.setf(std::ios::unitbuf);  // progress shows as it happens, also into a file
  std::signal(SIGINT, rasd::testing::OnSignal);
  std::signal(SIGTERM, rasd::testing::OnSignal);
  return rasd::testing::Run(*options);
}
