#include "rasd/exporters/metrics.h"

#include "rasd/ras/recovery.h"

#include <fmt/format.h>
#include <netdb.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "rasd/exporters/listen_address.h"

namespace rasd::exporters {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

// A label value as the exposition format wants it: valid UTF-8 (one bad
// byte in a firmware string made Prometheus drop the whole scrape), no
// control characters, at most 256 bytes.
std::string CleanLabel(std::string text) {
  std::string clean;
  clean.reserve(std::min<std::size_t>(text.size(), 256));
  for (std::size_t i = 0; i < text.size() && clean.size() < 256;) {
    const auto byte = static_cast<unsigned char>(text[i]);
    std::size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3
                                         : (byte >> 3) == 0x1E ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k)
      valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (!valid) {
      clean += '?';
      ++i;
      continue;
    }
    if (length == 1 && (byte < 0x20 || byte == 0x7F)) {
      clean += ' ';
    } else {
      clean.append(text, i, length);
    }
    i += length;
  }
  return clean;
}

ClientMetric Value(MetricType type, double value,
                   std::vector<std::pair<std::string, std::string>> labels = {}) {
  ClientMetric metric;
  for (auto& [name, label] : labels)
    metric.label.push_back({std::move(name), CleanLabel(std::move(label))});
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

ClientMetric HistogramMetric(const Histogram& histogram) {
  ClientMetric metric;
  metric.histogram.sample_count = histogram.Count();
  metric.histogram.sample_sum = histogram.Sum();
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < histogram.Bounds().size(); ++i) {
    cumulative += histogram.Counts()[i];
    metric.histogram.bucket.push_back({cumulative, histogram.Bounds()[i]});
  }
  metric.histogram.bucket.push_back({histogram.Count(), std::numeric_limits<double>::infinity()});
  return metric;
}

// The RDMA ports: node_exporter's infiniband families (the same names with
// rasd_ for node_, the same labels and values, so dashboards carry over),
// each declared even on a host without ports, and the error counters
// node_exporter does not publish (hw_counters) in one family of rasd's own.
// That family also carries the six counters/ error counters that have
// node_exporter's names, so that an alert on the one family sees every
// error counter of a port.
template <typename Add>
void AddInfiniband(const ras::InfinibandSnapshot& infiniband, Add& add) {
  struct Known {
    const char* name;
    const char* help;
  };
  static const Known kCounters[] = {
      {"link_downed_total", "Times the port's link went down after failing to recover"},
      {"link_error_recovery_total", "Times the port's link recovered from an error"},
      {"multicast_packets_received_total", "Multicast packets received (counters/)"},
      {"multicast_packets_transmitted_total", "Multicast packets sent (counters/)"},
      {"port_constraint_errors_received_total", "Received packets a switch port discarded"},
      {"port_constraint_errors_transmitted_total", "Packets a switch port did not send"},
      {"port_data_received_bytes_total", "Data received, in bytes (counters/, 32-bit)"},
      {"port_data_transmitted_bytes_total", "Data sent, in bytes (counters/, 32-bit)"},
      {"port_discards_received_total", "Inbound packets discarded (port down or congested)"},
      {"port_discards_transmitted_total", "Outbound packets discarded (port down or congested)"},
      {"port_errors_received_total", "Received packets that held an error"},
      {"port_packets_received_total", "Packets received on all virtual lanes"},
      {"port_packets_transmitted_total", "Packets sent on all virtual lanes"},
      {"port_transmit_wait_total", "Ticks the port had data to send and sent none"},
      {"unicast_packets_received_total", "Unicast packets received (counters/)"},
      {"unicast_packets_transmitted_total", "Unicast packets sent (counters/)"},
      {"legacy_data_received_bytes_total", "Data received, in bytes (counters_ext/, 64-bit)"},
      {"legacy_data_transmitted_bytes_total", "Data sent, in bytes (counters_ext/, 64-bit)"},
      {"legacy_multicast_packets_received_total", "Multicast packets received (counters_ext/)"},
      {"legacy_multicast_packets_transmitted_total", "Multicast packets sent (counters_ext/)"},
      {"legacy_packets_received_total", "Packets received (counters_ext/)"},
      {"legacy_packets_transmitted_total", "Packets sent (counters_ext/)"},
      {"legacy_unicast_packets_received_total", "Unicast packets received (counters_ext/)"},
      {"legacy_unicast_packets_transmitted_total", "Unicast packets sent (counters_ext/)"},
      {"symbol_error_total", "Minor link errors detected on one or more physical lanes"},
      {"vl15_dropped_total",
       "Incoming VL15 (subnet management) packets dropped for lack of resources"},
      {"local_link_integrity_errors_total",
       "Times local physical errors exceeded the LocalPhyErrors threshold"},
      {"excessive_buffer_overrun_errors_total",
       "Times OverrunErrors consecutive flow control update periods each had an overrun"},
      {"port_receive_remote_physical_errors_total",
       "Packets received marked with the EBP (end of bad packet) delimiter"},
      {"port_receive_switch_relay_errors_total", "Received packets the switch could not forward"},
  };
  // Error counters in rasd's own family as well as under node_exporter's name.
  static const std::set<std::string, std::less<>> kAlsoInOwnFamily = {
      "counters/symbol_error",
      "counters/VL15_dropped",
      "counters/local_link_integrity_errors",
      "counters/excessive_buffer_overrun_errors",
      "counters/port_rcv_remote_physical_errors",
      "counters/port_rcv_switch_relay_errors",
  };
  std::map<std::string, MetricFamily> counters;
  for (const auto& known : kCounters) {
    counters.emplace(known.name, Family(std::string("rasd_infiniband_") + known.name, known.help,
                                        MetricType::Counter));
  }
  auto info = Family("rasd_infiniband_info", "An RDMA device's identity; always 1",
                     MetricType::Gauge);
  auto state = Family("rasd_infiniband_state_id",
                      "Port state (1 down, 2 init, 3 armed, 4 active, 5 active defer)",
                      MetricType::Gauge);
  auto physical = Family("rasd_infiniband_physical_state_id",
                         "Port physical state (1 sleep, 2 polling, 3 disabled, 4 training, 5 "
                         "link up, 6 error recovery, 7 phy test)",
                         MetricType::Gauge);
  auto rate = Family("rasd_infiniband_rate_bytes_per_second", "The port's signalling rate",
                     MetricType::Gauge);
  auto errors = Family("rasd_infiniband_other_errors_total",
                       "Error counters node_exporter does not publish (hw_counters), and six "
                       "counters/ ones it does (symbol_error, VL15_dropped, ...), by counter, as "
                       "sysfs gives them",
                       MetricType::Counter);
  for (const auto& [name, device] : infiniband.devices) {
    info.metric.push_back(Value(MetricType::Gauge, 1,
                                {{"board_id", device.board_id},
                                 {"device", name},
                                 {"firmware_version", device.fw_ver},
                                 {"hca_type", device.hca_type}}));
    for (const auto& [number, port] : device.ports) {
      const std::vector<std::pair<std::string, std::string>> labels = {
          {"device", name}, {"port", std::to_string(number)}};
      if (port.state) state.metric.push_back(Value(MetricType::Gauge, port.state->id, labels));
      if (port.phys_state)
        physical.metric.push_back(Value(MetricType::Gauge, port.phys_state->id, labels));
      if (port.rate_bytes_per_second) {
        rate.metric.push_back(
            Value(MetricType::Gauge, static_cast<double>(*port.rate_bytes_per_second), labels));
      }
      for (const auto& [counter, raw] : port.counters) {
        const auto published = ras::NodeExporterName(counter);
        auto family = published ? counters.find(std::string(*published)) : counters.end();
        if (family != counters.end()) {
          family->second.metric.push_back(
              Value(MetricType::Counter,
                    static_cast<double>(ras::NodeExporterValue(counter, raw)), labels));
        }
        if ((family == counters.end() || kAlsoInOwnFamily.contains(counter)) &&
            ras::IsInfinibandErrorCounter(counter)) {
          auto with_counter = labels;
          with_counter.emplace_back("counter", counter);
          errors.metric.push_back(
              Value(MetricType::Counter, static_cast<double>(raw), with_counter));
        }
      }
    }
  }
  add(std::move(info));
  add(std::move(state));
  add(std::move(physical));
  add(std::move(rate));
  for (auto& [name, family] : counters) add(std::move(family));
  add(std::move(errors));
}

// Hardware errors by origin, severity and device.
template <typename Add>
void AddEventFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    auto family = Family("rasd_ras_events_total",
                         "Hardware errors rasd ingested, by origin, severity class and device "
                         "(empty for host components)",
                         MetricType::Counter);
    for (const auto& [key, count] : snapshot.events) {
      const auto& [origin, severity, device] = key;
      family.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(count),
                {{"origin", origin}, {"severity", severity}, {"device", device}}));
    }
    add(std::move(family));
  }
  {
    auto family = Family("rasd_fault_rule_events_total",
                         "Hardware errors a fault rule judged not a fault of their own: an echo "
                         "or a superseded code of an earlier fault, a repeat within a storm "
                         "window, a link code while links train",
                         MetricType::Counter);
    for (const auto& [key, count] : snapshot.fault_rule_events) {
      const auto& [rule, judgement] = key;
      family.metric.push_back(Value(MetricType::Counter, static_cast<double>(count),
                                    {{"rule", rule}, {"judgement", judgement}}));
    }
    add(std::move(family));
  }
}

// Each device: health, identity, memory, liveness, links.
template <typename Add>
void AddDeviceFamilies(const MetricsSnapshot& snapshot, Add& add) {
  static const char* kStates[] = {"healthy", "degraded", "draining", "isolated"};
  {
    auto health = Family("rasd_device_health", "1 for the device's current state, 0 otherwise",
                         MetricType::Gauge);
    auto info = Family("rasd_device_info", "Device identity; always 1", MetricType::Gauge);
    auto memory = Family("rasd_device_memory_bytes",
                         "Device memory of the pool by kind: reserved from the driver, allocated "
                         "to jobs, retired for good",
                         MetricType::Gauge);
    auto retired =
        Family("rasd_retired_pages_total", "Device memory pages retired", MetricType::Counter);
    auto beats = Family("rasd_device_heartbeats_total",
                        "Liveness heartbeats by result: finished, or a deadline missed",
                        MetricType::Counter);
    auto hangs = Family("rasd_device_hangs_total", "Devices reported hung by their heartbeat",
                        MetricType::Counter);
    auto op_timeouts = Family("rasd_device_op_timeouts_total",
                              "Work on the device that jobs abandoned past its deadline",
                              MetricType::Counter);
    auto usable = Family("rasd_device_links_usable",
                         "1 while collectives may place a rank on the device (no link of it "
                         "down, or held for flapping)",
                         MetricType::Gauge);
    auto latency = Family("rasd_device_heartbeat_latency_seconds",
                          "Launch to seen finished of the device's last heartbeat",
                          MetricType::Gauge);
    auto sdc_checks = Family("rasd_sdc_checks_total",
                             "Checks for silent data corruption by kind (screen: a kernel's "
                             "known-answer test)",
                             MetricType::Counter);
    auto sdc_mismatches =
        Family("rasd_sdc_mismatches_total",
               "Checks for silent data corruption that found a wrong result", MetricType::Counter);
    auto sdc_verdicts = Family("rasd_sdc_verdicts_total",
                               "Devices isolated for silent data corruption: wrong results "
                               "confirmed (screening.confirm within screening.window_s)",
                               MetricType::Counter);
    auto sdc_budget = Family("rasd_sdc_budget_used_ratio",
                             "Device time known-answer screening took, over the time since rasd "
                             "started (summed over devices, screening.budget is the limit)",
                             MetricType::Gauge);
    auto sdc_last = Family("rasd_sdc_last_screening_timestamp_seconds",
                           "When the device's last screening completed (unix time); 0: never",
                           MetricType::Gauge);
    auto stuck = Family("rasd_device_probe_stuck_seconds",
                        "How long the device's longest driver call past probe.deadline_ms has "
                        "run; 0 while none is",
                        MetricType::Gauge);
    for (const auto& device : snapshot.devices) {
      const std::string index = std::to_string(device.index);
      for (const char* state : kStates) {
        health.metric.push_back(Value(MetricType::Gauge, device.state == state ? 1 : 0,
                                      {{"device", index}, {"state", state}}));
      }
      info.metric.push_back(Value(MetricType::Gauge, 1,
                                  {{"device", index},
                                   {"vendor", device.vendor},
                                   {"model", device.model},
                                   {"bdf", device.bdf}}));
      for (const auto& [kind, bytes] : {std::pair{"reserved", device.reserved_bytes},
                                        {"allocated", device.allocated_bytes},
                                        {"retired", device.retired_bytes}}) {
        memory.metric.push_back(Value(MetricType::Gauge, static_cast<double>(bytes),
                                      {{"device", index}, {"kind", kind}}));
      }
      retired.metric.push_back(Value(MetricType::Counter, static_cast<double>(device.retired_pages),
                                     {{"device", index}}));
      beats.metric.push_back(Value(MetricType::Counter, static_cast<double>(device.heartbeats),
                                   {{"device", index}, {"result", "finished"}}));
      beats.metric.push_back(Value(MetricType::Counter,
                                   static_cast<double>(device.heartbeat_misses),
                                   {{"device", index}, {"result", "missed"}}));
      hangs.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(device.hangs), {{"device", index}}));
      op_timeouts.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(device.op_timeouts), {{"device", index}}));
      latency.metric.push_back(
          Value(MetricType::Gauge, device.heartbeat_latency_seconds, {{"device", index}}));
      stuck.metric.push_back(
          Value(MetricType::Gauge, device.probe_stuck_seconds, {{"device", index}}));
      usable.metric.push_back(
          Value(MetricType::Gauge, device.links_usable ? 1 : 0, {{"device", index}}));
      for (const auto& [kind, count] : device.sdc_checks)
        sdc_checks.metric.push_back(Value(MetricType::Counter, static_cast<double>(count),
                                          {{"device", index}, {"kind", kind}}));
      for (const auto& [kind, count] : device.sdc_mismatches)
        sdc_mismatches.metric.push_back(Value(MetricType::Counter, static_cast<double>(count),
                                              {{"device", index}, {"kind", kind}}));
      if (!device.sdc_checks.empty()) {
        sdc_verdicts.metric.push_back(Value(
            MetricType::Counter, static_cast<double>(device.sdc_verdicts), {{"device", index}}));
        sdc_budget.metric.push_back(
            Value(MetricType::Gauge, device.sdc_budget_used, {{"device", index}}));
        sdc_last.metric.push_back(
            Value(MetricType::Gauge, device.sdc_last_screening_seconds, {{"device", index}}));
      }
    }
    add(std::move(health));
    add(std::move(info));
    add(std::move(memory));
    add(std::move(retired));
    add(std::move(beats));
    add(std::move(hangs));
    add(std::move(op_timeouts));
    add(std::move(latency));
    add(std::move(stuck));
    add(std::move(usable));
    add(std::move(sdc_checks));
    add(std::move(sdc_mismatches));
    add(std::move(sdc_verdicts));
    add(std::move(sdc_budget));
    add(std::move(sdc_last));
  }
  {
    auto down = Family("rasd_device_links_down",
                       "A device's links down now, by kind (RDMA, NVLink, HCCS, RoCE)",
                       MetricType::Gauge);
    for (const auto& [key, count] : snapshot.links_down) {
      down.metric.push_back(Value(MetricType::Gauge, static_cast<double>(count),
                                  {{"device", std::to_string(key.first)}, {"link", key.second}}));
    }
    add(std::move(down));
    auto errors = Family("rasd_device_link_errors_total",
                         "Errors a device's links corrected (NVLink replay, recovery, CRC, ECC) "
                         "since rasd started",
                         MetricType::Counter);
    for (const auto& [key, count] : snapshot.link_errors) {
      const auto& [device, link, counter] = key;
      errors.metric.push_back(Value(
          MetricType::Counter, static_cast<double>(count),
          {{"device", std::to_string(device)}, {"link", link}, {"counter", counter}}));
    }
    add(std::move(errors));
  }
}

// What recovery is suggested for each device.
template <typename Add>
void AddRecoveryFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    auto family = Family("rasd_device_suggested_action",
                         "1 for the recovery action suggested for the device (none, restart-app, "
                         "reset-device, reboot-node, hardware-inspection, contact-vendor), 0 for "
                         "the others",
                         MetricType::Gauge);
    for (const auto& [device, suggested] : snapshot.suggested_actions) {
      for (int i = 0; i < ras::kRecoveryActionCount; ++i) {
        const std::string action(ras::RecoveryActionName(static_cast<ras::RecoveryAction>(i)));
        family.metric.push_back(Value(MetricType::Gauge, suggested == action ? 1 : 0,
                                      {{"device", std::to_string(device)}, {"action", action}}));
      }
    }
    add(std::move(family));
  }
}

// What rasd did, and the jobs it runs.
template <typename Add>
void AddActionAndJobFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    auto family = Family("rasd_actions_total", "Actions rasd took, by action and result",
                         MetricType::Counter);
    for (const auto& [key, count] : snapshot.actions) {
      family.metric.push_back(Value(MetricType::Counter, static_cast<double>(count),
                                    {{"action", key.first}, {"result", key.second}}));
    }
    add(std::move(family));
  }
  {
    auto family = Family("rasd_jobs", "Jobs rasd runs, by kind and state", MetricType::Gauge);
    for (const auto& [key, count] : snapshot.jobs) {
      family.metric.push_back(Value(MetricType::Gauge, static_cast<double>(count),
                                    {{"kind", key.first}, {"state", key.second}}));
    }
    add(std::move(family));
  }
  {
    auto family = Family("rasd_requests_total",
                         "Inference requests by job and outcome (served, requeued, lost, overloaded)",
                         MetricType::Counter);
    for (const auto& [key, count] : snapshot.requests) {
      family.metric.push_back(Value(MetricType::Counter, static_cast<double>(count),
                                    {{"job", key.first}, {"outcome", key.second}}));
    }
    add(std::move(family));
  }
  {
    auto blocks = Family("rasd_llm_kv_blocks",
                         "KV cache blocks of an LLM job's replica, by state (used, free, retired)",
                         MetricType::Gauge);
    auto sequences = Family("rasd_llm_sequences",
                            "Sequences of an LLM job's replica, by state (running in the batch, "
                            "waiting for room)",
                            MetricType::Gauge);
    auto events = Family("rasd_llm_sequence_events_total",
                         "Sequences of an LLM job's replica preempted for room (and of those, "
                         "caches swapped out to host memory; swapped in: back here), recomputed "
                         "after a memory fault took their KV blocks, or moved out to another "
                         "replica",
                         MetricType::Counter);
    for (const auto& [key, replica] : snapshot.llm_replicas) {
      const std::string device = std::to_string(key.second);
      for (const auto& [state, count] :
           {std::pair{"used", replica.kv_used}, std::pair{"free", replica.kv_free},
            std::pair{"retired", replica.kv_retired}}) {
        blocks.metric.push_back(Value(MetricType::Gauge, static_cast<double>(count),
                                      {{"job", key.first}, {"device", device}, {"state", state}}));
      }
      for (const auto& [state, count] :
           {std::pair{"running", replica.running}, std::pair{"waiting", replica.waiting}}) {
        sequences.metric.push_back(
            Value(MetricType::Gauge, static_cast<double>(count),
                  {{"job", key.first}, {"device", device}, {"state", state}}));
      }
      for (const auto& [event, count] :
           {std::pair{"preempted", replica.preempted}, std::pair{"recomputed", replica.recomputed},
            std::pair{"moved_out", replica.moved_out},
            std::pair{"swapped_out", replica.swapped_out},
            std::pair{"swapped_in", replica.swapped_in}}) {
        events.metric.push_back(Value(MetricType::Counter, static_cast<double>(count),
                                      {{"job", key.first}, {"device", device}, {"event", event}}));
      }
    }
    add(std::move(blocks));
    add(std::move(sequences));
    add(std::move(events));
  }
}

// EDAC's counters and the sources' own errors.
template <typename Add>
void AddHostErrorFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    // node_exporter's edac collector, same names after the prefix, same values
    // for the same tree; plus every counter that exists where it gives up.
    auto ce = Family("rasd_edac_correctable_errors_total",
                     "Correctable memory errors of a memory controller (mcN/ce_count)",
                     MetricType::Counter);
    auto ue = Family("rasd_edac_uncorrectable_errors_total",
                     "Uncorrectable memory errors of a memory controller (mcN/ue_count)",
                     MetricType::Counter);
    auto csrow_ce = Family("rasd_edac_csrow_correctable_errors_total",
                           "Correctable memory errors of a csrow; csrow=\"unknown\" for errors "
                           "no csrow could be named for",
                           MetricType::Counter);
    auto csrow_ue = Family("rasd_edac_csrow_uncorrectable_errors_total",
                           "Uncorrectable memory errors of a csrow; csrow=\"unknown\" as above",
                           MetricType::Counter);
    auto dimm_ce =
        Family("rasd_edac_dimm_correctable_errors_total",
               "Correctable memory errors of a DIMM or rank, with its label", MetricType::Counter);
    auto dimm_ue = Family("rasd_edac_dimm_uncorrectable_errors_total",
                          "Uncorrectable memory errors of a DIMM or rank, with its label",
                          MetricType::Counter);
    for (const auto& [mc, controller] : snapshot.edac.controllers) {
      const std::string name = std::to_string(mc);
      if (controller.has_ce)
        ce.metric.push_back(
            Value(MetricType::Counter, static_cast<double>(controller.ce), {{"controller", name}}));
      if (controller.has_ue)
        ue.metric.push_back(
            Value(MetricType::Counter, static_cast<double>(controller.ue), {{"controller", name}}));
      if (controller.has_ce_noinfo)
        csrow_ce.metric.push_back(Value(MetricType::Counter,
                                        static_cast<double>(controller.ce_noinfo),
                                        {{"controller", name}, {"csrow", "unknown"}}));
      if (controller.has_ue_noinfo)
        csrow_ue.metric.push_back(Value(MetricType::Counter,
                                        static_cast<double>(controller.ue_noinfo),
                                        {{"controller", name}, {"csrow", "unknown"}}));
    }
    for (const auto& unit : snapshot.edac.units) {
      const std::string mc = std::to_string(unit.mc), index = std::to_string(unit.index);
      if (unit.kind == "csrow") {
        if (unit.has_ce)
          csrow_ce.metric.push_back(Value(MetricType::Counter, static_cast<double>(unit.ce),
                                          {{"controller", mc}, {"csrow", index}}));
        if (unit.has_ue)
          csrow_ue.metric.push_back(Value(MetricType::Counter, static_cast<double>(unit.ue),
                                          {{"controller", mc}, {"csrow", index}}));
      } else {
        const std::vector<std::pair<std::string, std::string>> labels = {
            {"controller", mc}, {"dimm", unit.kind + index}, {"label", unit.label}};
        if (unit.has_ce)
          dimm_ce.metric.push_back(
              Value(MetricType::Counter, static_cast<double>(unit.ce), labels));
        if (unit.has_ue)
          dimm_ue.metric.push_back(
              Value(MetricType::Counter, static_cast<double>(unit.ue), labels));
      }
    }
    for (auto* family : {&ce, &ue, &csrow_ce, &csrow_ue, &dimm_ce, &dimm_ue})
      add(std::move(*family));
  }
  {
    auto family = Family("rasd_source_errors_total",
                         "Input a source could not decode (records that looked like RAS records)",
                         MetricType::Counter);
    for (const auto& [source, count] : snapshot.source_errors) {
      family.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(count), {{"source", source}}));
    }
    add(std::move(family));
  }
}

// Processes attached from outside, and what rasd sent them.
template <typename Add>
void AddWorkloadFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    auto family = Family("rasd_workloads",
                         "Processes outside rasd attached to its devices, by state (running, "
                         "draining, killed)",
                         MetricType::Gauge);
    for (const auto& [state, count] : snapshot.workloads) {
      family.metric.push_back(
          Value(MetricType::Gauge, static_cast<double>(count), {{"state", state}}));
    }
    add(std::move(family));
  }
  {
    auto family = Family("rasd_workload_signals_total",
                         "Signals rasd sent attached workloads: drain (their drain signal), "
                         "grace_kill (SIGKILL at the end of the grace), consumer_kill (SIGKILL: "
                         "an error named the process)",
                         MetricType::Counter);
    for (const auto& [reason, count] : snapshot.workload_signals) {
      family.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(count), {{"reason", reason}}));
    }
    add(std::move(family));
  }
  {
    auto family = Family("rasd_workload_attaches_total",
                         "Attach requests (rasctl run, attach) by result: ok, refused",
                         MetricType::Counter);
    for (const auto& [result, count] : snapshot.workload_attaches) {
      family.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(count), {{"result", result}}));
    }
    add(std::move(family));
  }
}

// The scheduler link's calls and its guard.
template <typename Add>
void AddSchedulerFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    auto family = Family("rasd_scheduler_actions_total",
                         "Calls to the cluster scheduler (drain/resume the node) by result: ok, "
                         "failed (retried with backoff), skipped (already in that state), "
                         "guarded (a drain the blast-radius guard held back)",
                         MetricType::Counter);
    for (const auto& [result, count] : snapshot.scheduler_actions) {
      family.metric.push_back(
          Value(MetricType::Counter, static_cast<double>(count), {{"result", result}}));
    }
    add(std::move(family));
  }
  {
    // No sample without a scheduler: "not guarded" would claim a guard.
    auto family = Family("rasd_scheduler_drain_guarded",
                         "1 while the blast-radius guard holds this node's drain back "
                         "(scheduler.max_drained_fraction)",
                         MetricType::Gauge);
    if (snapshot.scheduler_drain_guarded) {
      family.metric.push_back(
          Value(MetricType::Gauge, *snapshot.scheduler_drain_guarded ? 1.0 : 0.0));
    }
    add(std::move(family));
  }
  {
    auto family = Family("rasd_scheduler_node_drained",
                         "1 while the scheduler holds this node drained with rasd's reason",
                         MetricType::Gauge);
    if (snapshot.scheduler_node_drained) {
      family.metric.push_back(
          Value(MetricType::Gauge, *snapshot.scheduler_node_drained ? 1.0 : 0.0));
    }
    add(std::move(family));
  }
}

// The state store's health and the kernel log's gaps and trust.
template <typename Add>
void AddStoreAndKmsgFamilies(const MetricsSnapshot& snapshot, Add& add) {
  {
    auto up = Family("rasd_store_up", "1 when the state store's last write succeeded",
                     MetricType::Gauge);
    up.metric.push_back(Value(MetricType::Gauge, snapshot.store_ok ? 1.0 : 0.0));
    add(std::move(up));
    auto backlog = Family("rasd_store_backlog_events",
                          "RAS events waiting for the state store (kept in memory, retried)",
                          MetricType::Gauge);
    backlog.metric.push_back(
        Value(MetricType::Gauge, static_cast<double>(snapshot.store_backlog_events)));
    add(std::move(backlog));
    auto dropped = Family("rasd_store_dropped_errors_total",
                          "Errors lost because the store backlog reached its bound",
                          MetricType::Counter);
    dropped.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(snapshot.store_dropped_events)));
    add(std::move(dropped));
  }
  {
    auto family =
        Family("rasd_kmsg_gaps_total",
               "Times the kernel overwrote log records before rasd read them", MetricType::Counter);
    family.metric.push_back(Value(MetricType::Counter, static_cast<double>(snapshot.kmsg_gaps)));
    add(std::move(family));
  }
  {
    auto family = Family("rasd_kmsg_untrusted_records_total",
                         "Records user space wrote into /dev/kmsg (facility not kernel): counted, "
                         "never acted on",
                         MetricType::Counter);
    family.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(snapshot.kmsg_untrusted)));
    add(std::move(family));
  }
}

// The latencies rasd measures.
template <typename Add>
void AddHistogramFamilies(const MetricsSnapshot& snapshot, Add& add) {
  for (const auto& [name, help, histogram] :
       {std::tuple{"rasd_fault_to_isolation_seconds",
                   "From a fault reaching rasd to its device's gate closed",
                   &snapshot.fault_to_isolation},
        std::tuple{"rasd_drain_duration_seconds",
                   "From a device starting to drain to no job left on it",
                   &snapshot.drain_duration},
        std::tuple{"rasd_collective_abort_seconds",
                   "From a collective's failed step to every rank released",
                   &snapshot.collective_abort}}) {
    auto family = Family(name, help, MetricType::Histogram);
    family.metric.push_back(HistogramMetric(*histogram));
    add(std::move(family));
  }
}

std::vector<MetricFamily> Families(const MetricsSnapshot& snapshot) {
  std::vector<MetricFamily> families;
  auto add = [&families](MetricFamily family) {
    // An empty family is still declared: dashboards and alerts find the name.
    families.push_back(std::move(family));
  };
  {
    auto family = Family("rasd_build_info", "rasd's version; always 1", MetricType::Gauge);
    family.metric.push_back(Value(MetricType::Gauge, 1, {{"version", snapshot.version}}));
    add(std::move(family));
  }
  AddEventFamilies(snapshot, add);
  AddDeviceFamilies(snapshot, add);
  AddInfiniband(snapshot.infiniband, add);
  AddRecoveryFamilies(snapshot, add);
  AddActionAndJobFamilies(snapshot, add);
  AddHostErrorFamilies(snapshot, add);
  AddWorkloadFamilies(snapshot, add);
  AddSchedulerFamilies(snapshot, add);
  AddStoreAndKmsgFamilies(snapshot, add);
  AddHistogramFamilies(snapshot, add);
  return families;
}

class SnapshotCollectable final : public prometheus::Collectable {
 public:
  explicit SnapshotCollectable(std::function<MetricsSnapshot()> provide)
      : provide_(std::move(provide)) {}
  std::vector<MetricFamily> Collect() const override { return Families(provide_()); }

 private:
  std::function<MetricsSnapshot()> provide_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::Observe(double value) {
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[bucket];
  ++count_;
  sum_ += value;
}

std::string RenderText(const MetricsSnapshot& snapshot) {
  return prometheus::TextSerializer().Serialize(Families(snapshot));
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, std::function<MetricsSnapshot()> provide) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& error) {
    // A port in use, a bad address: civetweb says why in the exception.
    return Fail(ErrorCode::kUnavailable,
                fmt::format("cannot serve metrics on {}: {}", listen, error.what()));
  }
  server->collectable_ = std::make_shared<SnapshotCollectable>(std::move(provide));
  server->exposer_->RegisterCollectable(server->collectable_);
  const auto ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  if (auto parsed = ParseListenAddress(listen)) server->host_ = parsed->host;
  return server;
}

MetricsServer::~MetricsServer() {
  // civetweb (1.15) notices a stop only when its listening poll returns,
  // which takes up to 2 s on an idle socket: a connection wakes it, so that
  // rasd stops at once.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] { WakeWhileStopping(stopped); });
  exposer_.reset();
  stopped = true;
  waker.join();
}

void MetricsServer::WakeWhileStopping(const std::atomic<bool>& stopped) const {
  std::string host = host_;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0) return;
  for (int attempt = 0; attempt < 200 && !stopped.load(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    (void)::connect(fd, found->ai_addr, found->ai_addrlen);
    ::close(fd);
  }
  ::freeaddrinfo(found);
}

}  // namespace rasd::exporters
