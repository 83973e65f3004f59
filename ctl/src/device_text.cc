#include "device_text.h"

#include <fmt/format.h>

#include "event_text.h"
#include "json_text.h"

namespace rasd::ctl {
namespace {

std::uint64_t Number(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number_unsigned()) return 0;
  return object[key].get<std::uint64_t>();
}

std::string MiB(std::uint64_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

// The last screening for silent data corruption in a word: "-" (none
// yet), ok, wrong, and suspect (a wrong result waits for confirmation) or
// overdue over either.
std::string ScreeningWord(const nlohmann::json& device) {
  if (!device.contains("screening") || !device["screening"].is_object()) return "-";
  const auto& screening = device["screening"];
  if (screening.value("suspect", false)) return "suspect";
  if (screening.value("overdue", false)) return "overdue";
  if (!screening.contains("last") || !screening["last"].is_object()) return "-";
  return screening["last"].value("passed", false) ? "ok" : "wrong";
}

}  // namespace

std::string FormatDevices(const nlohmann::json& result) {
  if (!result.contains("devices") || !result["devices"].is_array() || result["devices"].empty())
    return "no devices\n";
  std::string out =
      fmt::format("{:<4} {:<9} {:<13} {:>10} {:>10} {:>8} {:<8}  {}\n", "DEV", "STATE", "PCI",
                  "ALLOC MiB", "TOTAL MiB", "RETIRED", "SCREEN", "SINCE / REASON");
  for (const auto& device : result["devices"]) {
    const auto& pool = device.contains("pool") ? device["pool"] : nlohmann::json::object();
    std::string why = JsonText(device, "reason");
    if (!JsonText(device, "since").empty()) why = JsonText(device, "since") + "  " + why;
    out +=
        fmt::format("{:<4} {:<9} {:<13} {:>10} {:>10} {:>8} {:<8}  {}\n", JsonText(device, "index"),
                    JsonText(device, "state"), JsonText(device, "pci_bdf"),
                    MiB(Number(pool, "allocated_bytes")), MiB(Number(device, "memory_bytes")),
                    Number(pool, "retired_pages"), ScreeningWord(device), why.empty() ? "-" : why);
  }
  for (const auto& device : result["devices"]) {
    const std::string suggested = JsonText(device, "suggested_action");
    const std::string clears = JsonText(device, "clears");
    const bool has_advice = (!suggested.empty() && suggested != "none") || !clears.empty();
    const bool has_rdma = device.contains("rdma_ports") && device["rdma_ports"].is_array() &&
                          !device["rdma_ports"].empty();
    const bool has_history =
        has_advice || has_rdma || device.contains("store_error") ||
        (device.contains("recent_actions") && !device["recent_actions"].empty()) ||
        (device.contains("self_test") && !device["self_test"].is_null()) ||
        ScreeningWord(device) == "wrong" || ScreeningWord(device) == "suspect" ||
        (device.contains("jobs") && !device["jobs"].empty()) ||
        (device.contains("workloads") && !device["workloads"].empty());
    if (!has_history) continue;
    out += fmt::format("\ndevice {} ({} {}):\n", JsonText(device, "index"),
                       JsonText(device, "name"), JsonText(device, "uuid"));
    if (!suggested.empty() && suggested != "none") {
      out += fmt::format("  suggested: {}\n", JsonText(device, "suggested_why"));
    }
    if (!clears.empty()) out += "  clears by: " + clears + "\n";
    if (has_rdma) {
      std::string ports;
      for (const auto& port : device["rdma_ports"]) {
        if (!ports.empty()) ports += ", ";
        ports += fmt::format("{} port {}", JsonText(port, "device"), JsonText(port, "port"));
      }
      out += fmt::format("  RDMA: {} ({})\n", ports, JsonText(device["rdma_ports"][0], "how"));
    }
    if (device.contains("jobs") && !device["jobs"].empty()) {
      std::string jobs;
      for (const auto& job : device["jobs"]) {
        if (!jobs.empty()) jobs += ", ";
        jobs += job.is_string() ? job.get<std::string>() : job.dump();
      }
      out += "  jobs: " + jobs + "\n";
    }
    if (device.contains("workloads") && device["workloads"].is_array() &&
        !device["workloads"].empty()) {
      std::string workloads;
      for (const auto& workload : device["workloads"]) {
        if (!workloads.empty()) workloads += ", ";
        workloads += fmt::format("{} (pid {}, {})", JsonText(workload, "name"),
                                 JsonText(workload, "pid"), JsonText(workload, "state"));
      }
      out += "  workloads outside rasd: " + workloads + "\n";
    }
    if (device.contains("self_test") && device["self_test"].is_object()) {
      out += fmt::format("  last self-test {}: {}\n", JsonText(device["self_test"], "time"),
                         JsonText(device["self_test"], "summary"));
    }
    if (device.contains("screening") && device["screening"].is_object() &&
        device["screening"].contains("last") && device["screening"]["last"].is_object()) {
      const auto& screening = device["screening"];
      out += fmt::format(
          "  last screening {}: {} ({} screening(s), {} wrong kernel(s), {:.3f}% "
          "of device time)\n",
          JsonText(screening["last"], "time"), JsonText(screening["last"], "summary"),
          Number(screening, "screenings"), Number(screening, "mismatches"),
          100 * screening.value("budget_used", 0.0));
    }
    if (device.contains("store_error")) {
      out += "  history not readable: " + JsonText(device, "store_error") + "\n";
    }
    if (device.contains("recent_actions")) {
      for (const auto& action : device["recent_actions"]) {
        const std::string detail = JsonText(action, "detail");
        const std::string address = JsonText(action, "address");
        out += fmt::format("  {} {}{}{}: {} ({}){}{}\n", JsonText(action, "time"),
                           JsonText(action, "action"), address.empty() ? "" : " ", address,
                           JsonText(action, "result"), JsonText(action, "reason"),
                           detail.empty() ? "" : ": ", detail);
      }
    }
    if (device.contains("recent_events")) {
      for (const auto& event : device["recent_events"]) {
        out += "  ";
        out += FormatEvent(event);
      }
    }
  }
  return out;
}

std::string FormatActions(const nlohmann::json& result) {
  if (!result.contains("actions") || !result["actions"].is_array() || result["actions"].empty())
    return "no actions\n";
  std::string out = fmt::format("{:<20} {:<18} {:<4} {:<9} {:<20} {}\n", "TIME", "ACTION", "DEV",
                                "RESULT", "RULE", "REASON / DETAIL");
  for (const auto& action : result["actions"]) {
    const std::string device = JsonText(action, "device"), detail = JsonText(action, "detail");
    out += fmt::format("{:<20} {:<18} {:<4} {:<9} {:<20} {}{}{}\n", JsonText(action, "time"),
                       JsonText(action, "action"), device.empty() ? "-" : device,
                       JsonText(action, "result"), JsonText(action, "rule"),
                       JsonText(action, "reason"), detail.empty() ? "" : ": ", detail);
  }
  return out;
}

namespace {

std::string DeviceList(const nlohmann::json& entry) {
  std::string devices;
  if (entry.contains("devices") && entry["devices"].is_array()) {
    for (const auto& device : entry["devices"]) {
      if (!devices.empty()) devices += ",";
      devices += device.dump();
    }
  }
  return devices.empty() ? "-" : devices;
}

// Processes outside rasd (`rasctl run`, attach), after the built-in jobs.
std::string FormatWorkloads(const nlohmann::json& result) {
  if (!result.contains("workloads") || !result["workloads"].is_array() ||
      result["workloads"].empty())
    return "";
  std::string out = fmt::format("\n{:<16} {:<8} {:<10} {:<12} {}\n", "WORKLOAD", "PID", "STATE",
                                "DEVICES", "ON DRAIN");
  for (const auto& workload : result["workloads"]) {
    const std::string then = workload.value("kill_after_grace", true)
                                 ? fmt::format(", SIGKILL after {} ms", JsonText(workload, "grace_ms"))
                                 : std::string(", never killed");
    out += fmt::format("{:<16} {:<8} {:<10} {:<12} {}{}{}\n", JsonText(workload, "name"),
                       JsonText(workload, "pid"), JsonText(workload, "state"),
                       DeviceList(workload), JsonText(workload, "drain_signal"), then,
                       workload.value("connected", false) ? "" : " (not connected)");
  }
  return out;
}

}  // namespace

std::string FormatJobs(const nlohmann::json& result) {
  if (!result.contains("jobs") || !result["jobs"].is_array() || result["jobs"].empty())
    return "no jobs\n" + FormatWorkloads(result);
  std::string out = fmt::format("{:<16} {:<10} {:<10} {:<12} {}\n", "JOB", "KIND", "STATE",
                                "DEVICES", "PROGRESS");
  for (const auto& job : result["jobs"]) {
    std::string devices;
    if (job.contains("devices") && job["devices"].is_array()) {
      for (const auto& device : job["devices"]) {
        if (!devices.empty()) devices += ",";
        devices += device.dump();
      }
    }
    out += fmt::format("{:<16} {:<10} {:<10} {:<12} {}\n", JsonText(job, "name"),
                       JsonText(job, "kind"), JsonText(job, "state"),
                       devices.empty() ? "-" : devices, JsonText(job, "progress"));
    if (job.contains("replicas") && job["replicas"].is_array()) {
      for (const auto& replica : job["replicas"]) {
        if (!replica.is_object() || !replica.contains("kv_blocks") ||
            !replica.contains("sequences"))
          continue;
        const auto& blocks = replica["kv_blocks"];
        const auto& sequences = replica["sequences"];
        out += fmt::format(
            "{:<16} device {}{}: KV blocks {} used, {} free, {} retired of {}; sequences {} "
            "running, {} waiting, {} preempted, {} recomputed, {} moved{}\n",
            "", JsonText(replica, "device"),
            replica.value("serving", false) ? "" : " (not serving)", JsonText(blocks, "used"),
            JsonText(blocks, "free"), JsonText(blocks, "retired"), JsonText(blocks, "total"),
            JsonText(sequences, "running"), JsonText(sequences, "waiting"),
            JsonText(sequences, "preempted"), JsonText(sequences, "recomputed"),
            JsonText(sequences, "moved"),
            job.value("preemption", std::string()) == "swap"
                ? fmt::format(", {} swapped out, {} in", JsonText(sequences, "swapped_out"),
                              JsonText(sequences, "swapped_in"))
                : std::string());
      }
    }
    if (job.contains("load") && job["load"].value("sent", 0) > 0) {
      const auto& load = job["load"];
      out += fmt::format("{:<16} load: {} sent, {} wrong, latency p50 {:.2f} ms, p99 {:.2f} ms\n",
                         "", JsonText(load, "sent"), JsonText(load, "wrong"),
                         load.value("p50_ms", 0.0), load.value("p99_ms", 0.0));
    }
  }
  return out + FormatWorkloads(result);
}

std::string FormatRetired(const nlohmann::json& result) {
  if (!result.contains("pages") || !result["pages"].is_array() || result["pages"].empty())
    return "no retired pages\n";
  std::string out = fmt::format("{:<4} {:<20} {:<20} {}\n", "DEV", "ADDRESS", "SINCE", "REASON");
  for (const auto& page : result["pages"]) {
    const std::string device = JsonText(page, "device");
    out += fmt::format("{:<4} {:<20} {:<20} {}\n", device.empty() ? "?" : device,
                       JsonText(page, "address"), JsonText(page, "time"), JsonText(page, "reason"));
  }
  return out;
}

std::string FormatStateChange(const nlohmann::json& result) {
  std::string out =
      JsonText(result, "was") == JsonText(result, "state")
          ? fmt::format("device {}: already {}\n", JsonText(result, "device"),
                        JsonText(result, "state"))
          : fmt::format("device {}: {} -> {}\n", JsonText(result, "device"),
                        JsonText(result, "was"), JsonText(result, "state"));
  if (result.contains("self_test") && result["self_test"].is_object()) {
    out += "self-test " + JsonText(result["self_test"], "summary") + "\n";
  }
  if (result.value("forced", false)) out += "returned to service by --force\n";
  if (result.contains("deadline_ms")) {
    out += fmt::format("admitted work may run {} ms more", JsonText(result, "deadline_ms"));
    if (result.contains("jobs") && result["jobs"].is_array() && !result["jobs"].empty())
      out += fmt::format(" ({} job(s) there now)", result["jobs"].size());
    out += "\n";
  }
  return out;
}

}  // namespace rasd::ctl
