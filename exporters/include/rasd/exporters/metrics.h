#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/ras/edac_sysfs_source.h"
#include "rasd/ras/infiniband_sysfs_source.h"

namespace prometheus {
class Exposer;
class Collectable;
}  // namespace prometheus

namespace rasd::exporters {

// A histogram as Prometheus wants it: upper bounds and cumulative counts.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  const std::vector<double>& Bounds() const { return bounds_; }
  const std::vector<std::uint64_t>& Counts() const {
    return counts_;
  }  // per bucket, not cumulative
  std::uint64_t Count() const { return count_; }
  double Sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // one per bound, then +Inf
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

struct DeviceMetrics {
  int index = 0;
  std::string vendor, model, bdf;
  std::string state;  // healthy | degraded | draining | isolated
  std::uint64_t reserved_bytes = 0, allocated_bytes = 0, retired_bytes = 0, retired_pages = 0;
  // Liveness: heartbeats finished and deadlines missed, hangs reported,
  // jobs' work abandoned past its deadline, the last beat's latency.
  std::uint64_t heartbeats = 0, heartbeat_misses = 0, hangs = 0, op_timeouts = 0;
  double heartbeat_latency_seconds = 0;
  // How long the device's longest driver call past its deadline has run
  // (ProbeWatchdog); 0 while none is.
  double probe_stuck_seconds = 0;
  bool links_usable = true;  // Device::LinksUsable: collectives may place a rank here
  // Silent data corruption, by kind of check ("screen": known-answer
  // screening): kernels checked, and those with a wrong result.
  std::map<std::string, std::uint64_t> sdc_checks, sdc_mismatches;
  std::uint64_t sdc_verdicts = 0;         // confirmed: the device isolated for it
  double sdc_budget_used = 0;             // screening's device time over the time since start
  double sdc_last_screening_seconds = 0;  // unix time of the last completed screening; 0: none
};

// Everything /metrics shows, as one value: the daemon assembles it (from
// state the loop keeps and from thread-safe runtime reads) and the exporter
// only renders it. Label values are bounded: no addresses, no messages.
struct MetricsSnapshot {
  std::string version;
  std::vector<DeviceMetrics> devices;
  // (origin, severity, device or "") -> errors
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> events;
  // (fault rule, judgement) -> errors judged part of an earlier fault, a
  // repeat, or links training (ras::FaultRules)
  std::map<std::pair<std::string, std::string>, std::uint64_t> fault_rule_events;
  std::map<std::pair<std::string, std::string>, std::uint64_t> actions;   // (action, result)
  std::map<std::pair<std::string, std::string>, std::uint64_t> jobs;      // (kind, state) -> jobs
  std::map<std::pair<std::string, std::string>, std::uint64_t> requests;  // (job, outcome)
  // An LLM job's replica: its KV cache's blocks and its sequences.
  struct LlmReplica {
    std::uint64_t kv_used = 0, kv_free = 0, kv_retired = 0;
    std::uint64_t running = 0, waiting = 0;
    std::uint64_t preempted = 0, recomputed = 0, moved_out = 0;  // since the job started
    std::uint64_t swapped_out = 0, swapped_in = 0;
  };
  std::map<std::pair<std::string, int>, LlmReplica> llm_replicas;  // (job, device)
  ras::EdacSnapshot edac;
  // RDMA ports (InfiniBand, RoCE) as sysfs shows them: published under
  // node_exporter's infiniband names and values, with rasd_ for node_.
  ras::InfinibandSnapshot infiniband;
  // A device's own links: (device, link kind) -> links down now, for each
  // kind the device has (RDMA, NVLink, HCCS, RoCE); (device, link kind,
  // counter) -> errors its links corrected (NVLink replay, recovery,
  // crc_flit, crc_data, ecc_data) since rasd started.
  std::map<std::pair<int, std::string>, std::uint64_t> links_down;
  std::map<std::tuple<int, std::string, std::string>, std::uint64_t> link_errors;
  std::map<std::string, std::uint64_t> source_errors;  // undecodable input, by source
  std::uint64_t kmsg_gaps = 0;
  std::uint64_t kmsg_untrusted = 0;
  // The state store: whether its last write succeeded, and what waits for it.
  bool store_ok = true;
  std::uint64_t store_backlog_events = 0;
  std::uint64_t store_dropped_events = 0;
  std::map<std::string, std::uint64_t> scheduler_actions;  // result -> calls
  // Each device's suggested recovery action (ras::RecoveryActionName).
  std::map<int, std::string> suggested_actions;
  // The blast-radius guard holds this node's drain back now (scheduler set).
  std::optional<bool> scheduler_drain_guarded;
  // The scheduler holds this node drained with rasd's reason (scheduler set).
  std::optional<bool> scheduler_node_drained;
  // Processes outside rasd attached to its devices (`rasctl run`, attach).
  std::map<std::string, std::uint64_t> workloads;          // state -> processes
  std::map<std::string, std::uint64_t> workload_signals;   // drain | grace_kill | consumer_kill
  std::map<std::string, std::uint64_t> workload_attaches;  // ok | refused
  Histogram fault_to_isolation{{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5}};
  Histogram drain_duration{{0.1, 0.5, 1, 5, 10, 30, 60, 120, 300}};
  Histogram collective_abort{{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1}};
};

// The Prometheus text exposition of a snapshot (what a scrape returns).
std::string RenderText(const MetricsSnapshot& snapshot);

// Serves /metrics over HTTP on `listen` ("ADDR:PORT"; port 0 picks one)
// with prometheus-cpp's exposer. Each scrape calls `provide` on the
// exposer's thread: it must be thread-safe and must not wait for the event
// loop.
class MetricsServer {
 public:
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                      std::function<MetricsSnapshot()> provide);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int Port() const { return port_; }

 private:
  MetricsServer() = default;
  // Connects to the listening port until the exposer has stopped (see the
  // destructor).
  void WakeWhileStopping(const std::atomic<bool>& stopped) const;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Collectable> collectable_;
  std::string host_;
  int port_ = 0;
};

}  // namespace rasd::exporters
