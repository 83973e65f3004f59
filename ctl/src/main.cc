// rasctl: the command-line client of rasd. CLI11 lives in this file only
// (it costs ~12 s of compile time per file that includes it).
//
// Exit codes: 0 ok; 1 the daemon answered with an error (scan: the log
// cannot be read); 2 usage; 3 cannot reach the daemon (no socket, refused,
// timed out, garbled reply).

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "check_command.h"
#include "completion.h"
#include "control_client.h"
#include "device_text.h"
#include "event_text.h"
#include "rasd/common/default_paths.h"
#include "rasd/common/version.h"
#include "run_command.h"
#include "scan_command.h"
#include "status_text.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitDaemonError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

struct GlobalOptions {
  std::string socket;
  bool json = false;
  double timeout_seconds = 10;
};

std::filesystem::path SocketPath(const GlobalOptions& options) {
  if (!options.socket.empty()) return options.socket;
  if (auto from_env = rasd::common::GetEnv("RASD_SOCKET")) return *from_env;
  return rasd::common::ComputeDefaultPaths().socket;
}

// Sends one command and prints the answer. `render` turns a successful
// result into text for people; --json prints the daemon's reply as is.
int RunCommand(const GlobalOptions& options, const std::string& command, const nlohmann::json& args,
               const std::function<std::string(const nlohmann::json&)>& render) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
  auto client = rasd::ctl::ControlClient::Connect(SocketPath(options), timeout);
  if (!client) {
    std::cerr << "rasctl: " << client.error().message << "\n";
    return kExitUnreachable;
  }
  auto reply = client->Call(command, args);
  if (!reply) {
    std::cerr << "rasctl: " << reply.error().message << "\n";
    return kExitUnreachable;
  }
  const bool ok = reply->value("ok", false);
  if (options.json) {
    std::cout << (ok && reply->contains("result") ? (*reply)["result"] : *reply).dump(2) << "\n";
  }
  if (!ok) {
    const auto& error = (*reply)["error"];
    const std::string code = error.is_object() ? error.value("code", "unknown") : "unknown";
    const std::string message =
        error.is_object() ? error.value("message", "(no message)") : "(no message)";
    std::cerr << "rasctl: " << command << ": " << message << " [" << code << "]\n";
    return kExitDaemonError;
  }
  if (!options.json) std::cout << render(reply->value("result", nlohmann::json::object()));
  return kExitOk;
}

// --follow: asks for events after the last one seen, once a second.
// `events --follow` and `watch`: rasd pushes a notice on a `watch`
// connection when events are stored and when a device changes state; the
// events themselves are fetched on a second connection with the caller's
// filters (after the last id seen), so nothing polls. `with_devices` prints
// the device changes too (watch). Ends when rasd goes away (exit 3).
int Watch(const GlobalOptions& options, nlohmann::json args, bool with_devices) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
  auto watching = rasd::ctl::ControlClient::Connect(SocketPath(options), timeout);
  auto fetching = rasd::ctl::ControlClient::Connect(SocketPath(options), timeout);
  if (!watching || !fetching) {
    std::cerr << "rasctl: " << (watching ? fetching : watching).error().message << "\n";
    return kExitUnreachable;
  }
  auto subscribed = watching->Call("watch");
  if (!subscribed) {
    std::cerr << "rasctl: " << subscribed.error().message << "\n";
    return kExitUnreachable;
  }
  if (!subscribed->value("ok", false)) {
    std::cerr << "rasctl: watch: " << (*subscribed)["error"].value("message", "(no message)")
              << "\n";
    return kExitDaemonError;
  }
  std::int64_t last_id = -1;  // -1: the first fetch takes the caller's --since/--limit
  auto fetch = [&]() -> int {
    nlohmann::json query = args;
    if (last_id >= 0) {
      query["after_id"] = last_id;
      query.erase("since_seconds");
      query["limit"] = 10000;
    }
    auto reply = fetching->Call("events", query);
    if (!reply) {
      std::cerr << "rasctl: " << reply.error().message << "\n";
      return kExitUnreachable;
    }
    if (!reply->value("ok", false)) {
      std::cerr << "rasctl: events: " << (*reply)["error"].value("message", "(no message)") << "\n";
      return kExitDaemonError;
    }
    for (const auto& event : (*reply)["result"]["events"]) {
      std::cout << (options.json ? event.dump() + "\n" : rasd::ctl::FormatEvent(event));
      last_id = std::max(last_id, event.value("id", last_id));
    }
    std::cout << std::flush;
    return kExitOk;
  };
  if (with_devices) {
    // Watch starts from now: only what happens next.
    last_id = (*subscribed)["result"].value("last_id", std::int64_t{0});
  } else if (const int rc = fetch(); rc != kExitOk) {
    return rc;
  }
  // Nothing matched the first fetch: later ones start after the newest id.
  if (last_id < 0) last_id = (*subscribed)["result"].value("last_id", std::int64_t{0});
  for (;;) {
    auto message = watching->Next(std::chrono::hours(24));
    if (!message) {
      std::cerr << "rasctl: rasd closed the connection\n";
      return kExitUnreachable;
    }
    if (!*message) continue;
    const auto& notice = **message;
    const std::string event = notice.value("event", std::string());
    if (event == "events" && notice.value("last_id", std::int64_t{0}) > last_id) {
      if (const int rc = fetch(); rc != kExitOk) return rc;
    } else if (event == "device" && with_devices) {
      std::cout << (options.json ? notice.dump() + "\n"
                                 : fmt::format("device {}: {} -> {} ({})\n",
                                               notice.value("device", -1),
                                               notice.value("from", std::string("?")),
                                               notice.value("state", std::string("?")),
                                               notice.value("reason", std::string())))
                << std::flush;
    }
  }
}

// Validators that say what is wanted: CLI11's numeric ones print the
// type's whole range ("Value 0 not in range 0.000000 to 1797...").
CLI::Validator DeviceIndex() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int value = -1;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size() || value < 0)
          return fmt::format("a device index (0, 1, ...) is wanted, not '{}'", text);
        return {};
      },
      "INDEX");
}

CLI::Validator PositiveSeconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size() || !(value > 0) ||
            value > 86400)
          return fmt::format("a number of seconds above 0 (at most 86400) is wanted, not '{}'",
                             text);
        return {};
      },
      "SECONDS");
}

CLI::Validator PositiveCount(long long most) {
  return CLI::Validator(
      [most](std::string& text) -> std::string {
        long long value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > most)
          return fmt::format("a whole number from 1 to {} is wanted, not '{}'", most, text);
        return {};
      },
      "N");
}

// Edit distance, for "did you mean".
std::size_t Distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The first word that is not a global option or its value: the command.
std::optional<std::string> CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--socket" || word == "--timeout") {
      ++i;
      continue;
    }
    if (word.starts_with("-")) continue;
    return std::string(word);
  }
  return std::nullopt;
}

// An unknown command gets a clear error and the nearest commands, not
// CLI11's "A subcommand is required".
int UnknownCommand(const CLI::App& app, const std::string& word) {
  std::vector<std::string> near;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string& name = sub->get_name();
    if (Distance(word, name) <= 2 || (word.size() >= 3 && name.starts_with(word)))
      near.push_back(name);
  }
  std::cerr << "rasctl: unknown command '" << word << "'";
  if (!near.empty()) {
    std::cerr << "; did you mean";
    for (std::size_t i = 0; i < near.size(); ++i)
      std::cerr << (i == 0 ? " " : i + 1 == near.size() ? " or " : ", ") << near[i];
    std::cerr << "?";
  }
  std::cerr << "\nrasctl --help lists the commands\n";
  return kExitUsage;
}

std::string RenderReload(const nlohmann::json& result) {
  std::string text = "configuration reloaded (generation " +
                     result.value("generation", nlohmann::json()).dump() + ")\n";
  if (result.contains("restart_required") && result["restart_required"].is_array()) {
    for (const auto& key : result["restart_required"]) {
      text += "  " + (key.is_string() ? key.get<std::string>() : key.dump()) +
              " changed: takes effect when rasd restarts\n";
    }
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rasctl: control and inspect the rasd health daemon", "rasctl"};
  app.require_subcommand(1);
  // Global options work before or after the command (rasctl status --json),
  // as in systemctl and kubectl: a command passes what it does not know up.
  app.fallthrough();
  GlobalOptions options;
  app.add_option("--socket", options.socket,
                 "control socket (default: $RASD_SOCKET, else rasd's default path)");
  app.add_flag("--json", options.json, "print the daemon's JSON instead of text");
  app.add_option("--timeout", options.timeout_seconds, "seconds to wait for an answer")
      ->check(PositiveSeconds())
      ->capture_default_str();
  app.set_version_flag("-v,--version", std::string("rasctl ") + rasd::kVersion);
  auto* help = app.add_subcommand("help", "show this help");
  auto* version = app.add_subcommand("version", "show rasctl's version");

  auto* status = app.add_subcommand("status", "show the daemon's state");
  auto* ping = app.add_subcommand("ping", "check that the daemon answers");
  auto* reload = app.add_subcommand("reload", "re-read the config file (like SIGHUP)");
  auto* events = app.add_subcommand("events", "list the RAS events rasd has stored");
  std::string events_since, events_severity;
  int events_device = -1;
  int events_limit = 100;
  bool events_follow = false;
  events
      ->add_option("--since", events_since, "only events newer than DURATION (90, 30s, 5m, 2h, 1d)")
      ->check([](const std::string& text) {
        return rasd::ctl::ParseDuration(text) ? std::string()
                                              : std::string("not a duration: ") + text;
      });
  events->add_option("--severity", events_severity, "only this class")
      ->check(
          CLI::IsMember({"CE", "UCNA", "SRAO", "SRAR", "UCE", "FATAL", "INFO"}, CLI::ignore_case));
  events->add_option("--device", events_device, "only events of this device index")
      ->check(DeviceIndex());
  events->add_option("--limit", events_limit, "at most this many of the newest events")
      ->check(PositiveCount(10000))->capture_default_str();
  events->add_flag("--follow", events_follow,
                   "keep printing new events as they arrive (Ctrl-C ends)");
  auto* watch = app.add_subcommand(
      "watch", "print new events and device state changes as rasd reports them (Ctrl-C ends)");
  auto* summary = app.add_subcommand("summary", "event counts by origin and severity");
  auto* devices = app.add_subcommand("devices", "device health, reasons, memory, recent actions");
  int devices_device = -1;
  devices->add_option("device", devices_device, "only this device index")
      ->check(DeviceIndex());
  auto* check = app.add_subcommand(
      "check", "one health verdict for node agents: exit 0 OK, 1 problem, 2 unknown");
  rasd::ctl::CheckOptions check_options;
  check->add_option("--format", check_options.format,
                    "text; npd (node-problem-detector plugin: one line, at most 80 characters); "
                    "nhc (Slurm HealthCheckProgram: drains on a problem, resumes only rasd's "
                    "drains)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "npd", "nhc"}));
  check->add_option("--node", check_options.node,
                    "nhc: Slurm's name for this node (default: rasd's scheduler.node, else the "
                    "short host name)");
  check->add_option("--scontrol", check_options.scontrol,
                    "nhc: the scontrol to run; sinfo is taken from beside it")
      ->capture_default_str();
  check->footer(
      "A degraded device still takes work: the node is OK. A rasd that does not answer is "
      "unknown (exit 2), never healthy; nhc drains then, under the blast-radius guard.");
  auto* actions = app.add_subcommand("actions", "what rasd did about events, newest first");
  int actions_device = -1;
  int actions_limit = 50;
  actions->add_option("--device", actions_device, "only actions on this device index")
      ->check(DeviceIndex());
  actions->add_option("--limit", actions_limit, "at most this many")->check(PositiveCount(10000))->capture_default_str();
  auto* jobs = app.add_subcommand("jobs", "the jobs rasd runs: kind, devices, state, progress");
  auto* job = app.add_subcommand("job", "start or stop a built-in job (admin)");
  job->require_subcommand(1);
  auto* job_start = job->add_subcommand("start", "start a job");
  std::string job_kind, job_name;
  std::vector<int> job_devices;
  int job_load = 0, job_steps = 0, job_elements = 0, job_checkpoint = 0, job_min_ranks = 0,
      job_batch = 0;
  job_start->add_option("kind", job_kind, "inference or collective")
      ->required()
      ->check(CLI::IsMember({"inference", "collective"}));
  job_start->add_option("name", job_name, "the job's name")->required();
  job_start->add_option("--devices", job_devices, "device indexes (default: all)")->delimiter(',');
  job_start->add_option("--load", job_load, "inference: in-process requests per second")
      ->check(PositiveCount(1000000));
  job_start->add_option("--max-batch", job_batch, "inference: largest batch")
      ->check(PositiveCount(4096));
  job_start->add_option("--steps", job_steps, "collective: steps to run")
      ->check(PositiveCount(100000000));
  job_start->add_option("--elements", job_elements, "collective: floats per rank")
      ->check(PositiveCount(67108864));
  job_start->add_option("--checkpoint-every", job_checkpoint, "collective: steps per checkpoint")
      ->check(PositiveCount(1000000));
  job_start->add_option("--min-ranks", job_min_ranks, "collective: fewest ranks it runs on")
      ->check(PositiveCount(1024));
  bool job_no_grow = false;
  job_start->add_flag("--no-grow", job_no_grow,
                      "collective: stay on fewer ranks when a device returns to service");
  auto* job_stop = job->add_subcommand("stop", "stop a job");
  std::string stop_name;
  job_stop->add_option("name", stop_name, "the job's name")->required();
  auto* inject = app.add_subcommand(
      "inject", "inject a fault through the simulator or a source's input (admin)");
  std::string inject_kind, inject_value, inject_address, inject_job;
  int inject_device = -1, inject_peer = -1, inject_mc = -1, inject_dimm = -1;
  std::string inject_via;
  std::uint64_t inject_count = 1;
  const std::vector<std::string> kInjectKinds = {"ce",   "ucna", "srao", "srar", "uce",
                                                 "fatal", "xid", "link", "link-up", "hang", "load", "kmsg",
                                                 "edac", "einj", "hwpoison"};
  inject
      ->add_option("kind", inject_kind,
                   "ce, ucna, srao, srar, uce, fatal, xid, link, link-up, hang, load, kmsg, edac, einj, "
                   "hwpoison")
      ->required()
      ->check(CLI::IsMember(kInjectKinds));
  inject->add_option("value", inject_value, "xid: the Xid number; kmsg: the record text");
  inject->add_option("--device", inject_device, "the device")->check(DeviceIndex());
  inject->add_option("--address", inject_address,
                     "hex address (default: inside a job's allocation on the device)");
  inject->add_option("--count,--ce", inject_count, "how many (edac: corrected errors to add)")
      ->check(PositiveCount(100000));
  inject->add_option("--job", inject_job, "memory faults: inside this job's allocation");
  inject->add_option("--peer", inject_peer, "link, link-up: the other device")
      ->check(DeviceIndex());
  inject
      ->add_option("--via", inject_via,
                   "link, link-up: nvlink (the simulator reports it as NVML reports an NVLink)")
      ->check(CLI::IsMember({"nvlink"}));
  inject->add_option("--mc", inject_mc, "edac: memory controller")->check(DeviceIndex());
  inject->add_option("--dimm", inject_dimm, "edac: DIMM")->check(DeviceIndex());
  auto* infer = app.add_subcommand("infer", "send one request to an inference job (admin)");
  std::string infer_job;
  std::vector<float> infer_input;
  std::uint64_t infer_seed = 0;
  infer->add_option("job", infer_job, "the inference job's name")->required();
  infer->add_option("--input", infer_input, "the input values (default: the load generator's)")
      ->delimiter(',');
  infer->add_option("--seed", infer_seed, "which load-generator input, without --input");
  auto* retired = app.add_subcommand("retired", "device memory pages taken out of service");
  int retired_device = -1;
  retired->add_option("device", retired_device, "only this device index")
      ->check(DeviceIndex());
  auto* isolate = app.add_subcommand("isolate", "take a device out of service now (admin)");
  int isolate_device = -1;
  std::string isolate_reason;
  isolate->add_option("device", isolate_device, "device index")
      ->required()
      ->check(DeviceIndex());
  isolate->add_option("--reason", isolate_reason, "why (stored and shown)");
  auto* drain = app.add_subcommand(
      "drain", "stop new work on a device; admitted work may finish by the deadline (admin)");
  int drain_device = -1;
  std::string drain_reason, drain_deadline = "30s";
  drain->add_option("device", drain_device, "device index")
      ->required()
      ->check(DeviceIndex());
  drain->add_option("--reason", drain_reason, "why (stored and shown)");
  drain->add_option("--deadline", drain_deadline, "how long admitted work may run (30s, 5m)")
      ->capture_default_str()
      ->check([](const std::string& text) {
        return rasd::ctl::ParseDuration(text) ? std::string()
                                              : std::string("not a duration: ") + text;
      });
  auto* undrain = app.add_subcommand(
      "undrain", "return a repaired device to service after a self-test passes (admin)");
  int undrain_device = -1;
  std::string undrain_reason;
  bool undrain_force = false;
  undrain->add_option("device", undrain_device, "device index")
      ->required()
      ->check(DeviceIndex());
  undrain->add_option("--reason", undrain_reason, "why (stored and shown)");
  undrain->add_flag("--force", undrain_force, "return it even if the self-test fails");
  auto* backup = app.add_subcommand(
      "backup", "copy the live state database to FILE while rasd runs (admin)");
  std::string backup_file;
  bool backup_force = false;
  backup->add_option("file", backup_file, "where the copy goes (relative: to this directory)")
      ->required();
  backup->add_flag("--force", backup_force, "replace FILE if it exists");
  auto* run = app.add_subcommand(
      "run", "run a command on healthy devices, drained by rasd when one leaves service");
  rasd::ctl::RunOptions run_options;
  std::vector<int> run_devices;
  std::string run_grace;
  run->add_option("--devices", run_devices, "these device indexes (each must take new work)")
      ->delimiter(',')
      ->check(DeviceIndex());
  run->add_option("--count", run_options.count, "this many devices that take new work (default 1)")
      ->check(PositiveCount(1024));
  run->add_option("--name", run_options.name, "the workload's name (default: the command's)");
  run->add_option("--drain-signal", run_options.drain_signal,
                  "what rasd sends when a device leaves service (TERM, INT, USR1, ...)")
      ->capture_default_str();
  run->add_option("--grace", run_grace,
                  "how long it may run on after that before SIGKILL (default: rasd's "
                  "workloads.grace_ms; at most 1h)")
      ->check([](const std::string& text) {
        const auto seconds = rasd::ctl::ParseDuration(text);
        if (!seconds) return std::string("not a duration: ") + text;
        // "500" could be seconds or rasd's milliseconds (workloads.grace_ms).
        const bool unit = !text.empty() && std::isalpha(static_cast<unsigned char>(text.back()));
        if (!unit && *seconds != 0) return "give a unit (500ms, 30s, 2m), not " + text;
        if (*seconds > 3600) return "at most 1h (3600s), not " + text;
        if (*seconds > 0 && *seconds < 0.001) return "at least 1ms (or 0), not " + text;
        return std::string();
      });
  // CMD [ARGS...] is everything after `--`, taken off before CLI11 parses
  // (its options are the command's own, whatever they look like).
  run->footer("CMD [ARGS...] follows --: rasctl run --count 2 -- python3 serve.py --port 8000");
  run->get_option("--devices")->excludes(run->get_option("--count"));
  auto* scan = app.add_subcommand("scan", "list the RAS records in a saved kernel log (offline)");
  std::string scan_file = "-";
  scan->add_option("file", scan_file, "dmesg/journalctl/syslog/kmsg text; - for standard input");
  unsigned scan_threads = 0;
  scan->add_option("--threads", scan_threads,
                   "threads that scan a file's parts (default: one per CPU, at most 8)");
  if (argc >= 2 && std::string_view(argv[1]) == "__complete") {
    // For packaging/bash-completion/rasctl: candidates, one per line.
    rasd::ctl::CompletionHints hints;
    hints.option_values["--severity"] = {"CE", "UCNA", "SRAO", "SRAR", "UCE", "FATAL", "INFO"};
    hints.option_values["--format"] = {"text", "npd", "nhc"};
    hints.option_values["--drain-signal"] = {"TERM", "INT", "HUP", "QUIT", "USR1", "USR2"};
    hints.file_options = {"--socket"};
    hints.positional_values["inject"] = kInjectKinds;
    hints.positional_values["start"] = {"inference", "collective"};
    hints.file_positionals = {"scan", "backup"};
    const std::vector<std::string> words(argv + 2, argv + argc);
    for (const auto& candidate : rasd::ctl::Complete(app, words, hints))
      std::cout << candidate << "\n";
    return kExitOk;
  }
  if (argc == 1) {
    // No command is a usage error, answered with the help.
    std::cout << app.help();
    return kExitUsage;
  }
  try {
    if (const auto word = CommandWord(argc, argv)) (void)app.get_subcommand(*word);
  } catch (const CLI::OptionNotFound&) {
    return UnknownCommand(app, *CommandWord(argc, argv));
  }
  // `rasctl run ... -- CMD [ARGS...]`: the command is not rasctl's to parse.
  std::vector<std::string> command_after_dashes;
  bool has_dashes = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    command_after_dashes.assign(argv + i + 1, argv + argc);
    has_dashes = true;
    argc = i;
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int rc = app.exit(error);
    if (rc != 0 && !has_dashes && CommandWord(argc, argv) == std::optional<std::string>("run")) {
      std::cerr << "rasctl run: the command goes after --: rasctl run [OPTIONS] -- CMD [ARGS...]\n";
    }
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (has_dashes && !run->parsed()) {
    std::cerr << "rasctl: `--` is for `rasctl run ... -- CMD [ARGS...]` only\n";
    return kExitUsage;
  }
  if (help->parsed()) {
    // The whole program's help (App::help shows the parsed subcommand's).
    std::cout << app.get_formatter()->make_help(&app, "rasctl", CLI::AppFormatMode::Normal);
    return kExitOk;
  }
  if (version->parsed()) {
    std::cout << "rasctl " << rasd::kVersion << "\n";
    return kExitOk;
  }
  const nlohmann::json no_args = nlohmann::json::object();
  if (status->parsed()) return RunCommand(options, "status", no_args, rasd::ctl::FormatStatus);
  if (check->parsed()) {
    check_options.socket = SocketPath(options);
    check_options.timeout =
        std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
    check_options.json = options.json;
    return rasd::ctl::RunCheck(check_options, std::cout, std::cerr);
  }
  if (ping->parsed()) {
    return RunCommand(options, "ping", no_args,
                      [](const nlohmann::json&) { return std::string("pong\n"); });
  }
  if (reload->parsed()) return RunCommand(options, "reload", no_args, RenderReload);
  if (summary->parsed()) return RunCommand(options, "summary", no_args, rasd::ctl::FormatSummary);
  if (watch->parsed()) return Watch(options, nlohmann::json::object(), /*with_devices=*/true);
  if (events->parsed()) {
    nlohmann::json args = {{"limit", events_limit}};
    if (!events_since.empty()) args["since_seconds"] = *rasd::ctl::ParseDuration(events_since);
    if (!events_severity.empty()) args["severity"] = events_severity;
    if (events_device >= 0) args["device"] = events_device;
    if (!events_follow) return RunCommand(options, "events", args, rasd::ctl::FormatEvents);
    return Watch(options, args, /*with_devices=*/false);
  }
  if (devices->parsed()) {
    nlohmann::json args = nlohmann::json::object();
    if (devices_device >= 0) args["device"] = devices_device;
    return RunCommand(options, "devices", args, rasd::ctl::FormatDevices);
  }
  if (inject->parsed()) {
    nlohmann::json args = {{"kind", inject_kind}};
    if (inject_device >= 0) args["device"] = inject_device;
    if (!inject_address.empty()) args["address"] = inject_address;
    if (inject_count != 1) args["count"] = inject_count;
    if (!inject_job.empty()) args["job"] = inject_job;
    if (inject_peer >= 0) args["peer"] = inject_peer;
    if (!inject_via.empty()) args["via"] = inject_via;
    if (inject_mc >= 0) args["mc"] = inject_mc;
    if (inject_dimm >= 0) args["dimm"] = inject_dimm;
    if (inject_kind == "xid") {
      int number = -1;
      if (inject_value.empty() ||
          std::from_chars(inject_value.data(), inject_value.data() + inject_value.size(), number)
                  .ec != std::errc()) {
        std::cerr
            << "rasctl: inject xid needs the Xid number, e.g. rasctl inject xid 79 --device 1\n";
        return kExitUsage;
      }
      args["xid"] = number;
    } else if (inject_kind == "kmsg") {
      if (inject_value.empty()) {
        std::cerr << "rasctl: inject kmsg needs the record text\n";
        return kExitUsage;
      }
      args["text"] = inject_value;
    }
    return RunCommand(options, "inject", args, [](const nlohmann::json& result) {
      return "injected " + result.dump() + "\n";
    });
  }
  if (infer->parsed()) {
    nlohmann::json args = {{"job", infer_job}};
    if (!infer_input.empty()) {
      args["input"] = infer_input;
    } else {
      args["seed"] = infer_seed;
    }
    return RunCommand(options, "infer", args, [](const nlohmann::json& result) {
      std::string text;
      for (const auto& value : result.value("output", nlohmann::json::array())) {
        if (!text.empty()) text += ' ';
        text += fmt::format("{:.6g}", value.get<double>());
      }
      return fmt::format("request {} ({:.2f} ms): {}\n", result.value("request", 0),
                         result.value("latency_ms", 0.0), text);
    });
  }
  if (jobs->parsed()) return RunCommand(options, "jobs", no_args, rasd::ctl::FormatJobs);
  if (job_start->parsed()) {
    nlohmann::json args = {{"kind", job_kind}, {"name", job_name}};
    if (!job_devices.empty()) args["devices"] = job_devices;
    if (job_load > 0) args["load_rps"] = job_load;
    if (job_batch > 0) args["max_batch"] = job_batch;
    if (job_steps > 0) args["steps"] = job_steps;
    if (job_elements > 0) args["elements"] = job_elements;
    if (job_checkpoint > 0) args["checkpoint_every"] = job_checkpoint;
    if (job_min_ranks > 0) args["min_ranks"] = job_min_ranks;
    if (job_no_grow) args["grow_on_return"] = false;
    return RunCommand(options, "job-start", args, [](const nlohmann::json& result) {
      return "job " + result.value("name", std::string("?")) + " started\n";
    });
  }
  if (job_stop->parsed()) {
    return RunCommand(options, "job-stop", {{"name", stop_name}}, [](const nlohmann::json& result) {
      return "job " + result.value("name", std::string("?")) + " stopped\n";
    });
  }
  if (actions->parsed()) {
    nlohmann::json args = {{"limit", actions_limit}};
    if (actions_device >= 0) args["device"] = actions_device;
    return RunCommand(options, "actions", args, rasd::ctl::FormatActions);
  }
  if (retired->parsed()) {
    nlohmann::json args = nlohmann::json::object();
    if (retired_device >= 0) args["device"] = retired_device;
    return RunCommand(options, "retired", args, rasd::ctl::FormatRetired);
  }
  if (isolate->parsed()) {
    nlohmann::json args = {{"device", isolate_device}};
    if (!isolate_reason.empty()) args["reason"] = isolate_reason;
    return RunCommand(options, "isolate", args, rasd::ctl::FormatStateChange);
  }
  if (drain->parsed()) {
    nlohmann::json args = {
        {"device", drain_device},
        {"deadline_ms", static_cast<long long>(*rasd::ctl::ParseDuration(drain_deadline) * 1000)}};
    if (!drain_reason.empty()) args["reason"] = drain_reason;
    return RunCommand(options, "drain", args, rasd::ctl::FormatStateChange);
  }
  if (undrain->parsed()) {
    nlohmann::json args = {{"device", undrain_device}, {"force", undrain_force}};
    if (!undrain_reason.empty()) args["reason"] = undrain_reason;
    return RunCommand(options, "undrain", args, rasd::ctl::FormatStateChange);
  }
  if (backup->parsed()) {
    // rasd writes it, from its own working directory: send an absolute path.
    std::error_code error;
    const auto file = std::filesystem::absolute(backup_file, error);
    if (error) {
      std::cerr << "rasctl: backup: cannot resolve " << backup_file << ": " << error.message()
                << "\n";
      return kExitUsage;
    }
    nlohmann::json args = {{"file", file.lexically_normal().string()}};
    if (backup_force) args["force"] = true;
    return RunCommand(options, "backup", args, [](const nlohmann::json& result) {
      return fmt::format("backed up to {}: {} bytes, {} pages\n",
                         result.value("file", std::string("?")),
                         result.value("bytes", std::uint64_t{0}), result.value("pages", 0));
    });
  }
  if (run->parsed()) {
    run_options.socket = SocketPath(options);
    run_options.timeout =
        std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
    run_options.devices = run_devices;
    run_options.command = command_after_dashes;
    if (!run_grace.empty()) {
      run_options.grace = std::chrono::milliseconds(
          static_cast<long long>(*rasd::ctl::ParseDuration(run_grace) * 1000));
    }
    return rasd::ctl::RunWorkload(run_options);
  }
  if (scan->parsed()) {
    return rasd::ctl::RunScan({.file = scan_file, .json = options.json, .threads = scan_threads},
                              std::cout, std::cerr);
  }
  return kExitUsage;
}
