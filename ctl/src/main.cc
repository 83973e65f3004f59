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
#include <set>
#include <thread>
#include <variant>

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
  // The events a query names, or the exit code of its failure (said).
  auto query_events = [&](const nlohmann::json& query) -> std::variant<nlohmann::json, int> {
    auto reply = fetching->Call("events", query);
    if (!reply) {
      std::cerr << "rasctl: " << reply.error().message << "\n";
      return kExitUnreachable;
    }
    if (!reply->value("ok", false)) {
      std::cerr << "rasctl: events: " << (*reply)["error"].value("message", "(no message)") << "\n";
      return kExitDaemonError;
    }
    return (*reply)["result"]["events"];
  };
  auto fetch = [&]() -> int {
    nlohmann::json query = args;
    if (last_id >= 0) {
      query["after_id"] = last_id;
      query.erase("since_seconds");
      query["limit"] = 10000;
    }
    auto events = query_events(query);
    if (const int* failed = std::get_if<int>(&events)) return *failed;
    for (const auto& event : std::get<nlohmann::json>(events)) {
      std::cout << (options.json ? event.dump() + "\n" : rasd::ctl::FormatEvent(event));
      last_id = std::max(last_id, event.value("id", last_id));
    }
    std::cout << std::flush;
    return kExitOk;
  };
  // Rows already printed that grew (a storm's row per component and
  // minute takes each batch's errors): printed again with their counts now,
  // at most once a second however often they grow.
  std::set<std::int64_t> grown;
  auto next_growth = std::chrono::steady_clock::now();
  auto fetch_grown = [&]() -> int {
    next_growth = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    // rasd takes at most 256 ids a query: the newest rows'.
    constexpr std::size_t kMaxIds = 256;
    std::vector<std::int64_t> ids(grown.begin(), grown.end());
    if (ids.size() > kMaxIds)
      ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(ids.size() - kMaxIds));
    grown.clear();
    nlohmann::json query = args;
    query.erase("since_seconds");
    query.erase("after_id");
    query["limit"] = ids.size();
    query["ids"] = std::move(ids);
    auto fetched = query_events(query);
    if (const int* failed = std::get_if<int>(&fetched)) return *failed;
    for (const auto& event : std::get<nlohmann::json>(fetched)) {  // oldest first
      if (options.json) {
        nlohmann::json updated = event;
        updated["updated"] = true;
        std::cout << updated.dump() << "\n";
      } else {
        std::string line = rasd::ctl::FormatEvent(event);
        if (!line.empty() && line.back() == '\n') line.pop_back();
        std::cout << line << " [updated]\n";
      }
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
    const auto now = std::chrono::steady_clock::now();
    const auto wait =
        grown.empty()
            ? std::chrono::milliseconds(std::chrono::hours(24))
            : std::max(std::chrono::milliseconds(0),
                       std::chrono::duration_cast<std::chrono::milliseconds>(next_growth - now));
    auto message = watching->Next(wait);
    if (!message) {
      std::cerr << "rasctl: rasd closed the connection\n";
      return kExitUnreachable;
    }
    if (!grown.empty() && std::chrono::steady_clock::now() >= next_growth)
      if (const int rc = fetch_grown(); rc != kExitOk) return rc;
    if (!*message) continue;
    const auto& notice = **message;
    const std::string event = notice.value("event", std::string());
    if (event == "events") {
      if (notice.contains("grown") && notice["grown"].is_array())
        for (const auto& id : notice["grown"])
          if (id.is_number_integer() && id.get<std::int64_t>() <= last_id)
            grown.insert(id.get<std::int64_t>());
      if (notice.value("last_id", std::int64_t{0}) > last_id)
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

// What a command runs once parsed: the global options, and the words after
// `--` (rasctl run's command).
struct Invocation {
  const GlobalOptions& options;
  const std::vector<std::string>& after_dashes;
};
using Action = std::function<int(const Invocation&)>;

std::chrono::milliseconds Timeout(const GlobalOptions& options) {
  return std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
}

CLI::Validator Duration() {
  return CLI::Validator(
      [](const std::string& text) {
        return rasd::ctl::ParseDuration(text) ? std::string()
                                              : std::string("not a duration: ") + text;
      },
      "DURATION");
}

const nlohmann::json kNoArgs = nlohmann::json::object();

// A command whose request takes no arguments and whose answer `render` prints.
Action Simple(std::string command, std::function<std::string(const nlohmann::json&)> render) {
  return [command = std::move(command), render = std::move(render)](const Invocation& call) {
    return RunCommand(call.options, command, kNoArgs, render);
  };
}

// The values an inject names, for the option's check and for completion.
const std::vector<std::string> kInjectKinds = {
    "ce",   "ucna",  "srao",    "srar", "uce", "fatal", "xid",  "link", "link-up",
    "hang", "wedge", "unwedge", "load", "sdc", "kmsg",  "edac", "einj", "hwpoison"};
const std::vector<std::string> kSeverities = {"CE", "UCNA", "SRAO", "SRAR", "UCE", "FATAL", "INFO"};

Action DefineEvents(CLI::App& command) {
  struct Args {
    std::string since, severity;
    int device = -1;
    int limit = 100;
    bool follow = false;
  };
  auto args = std::make_shared<Args>();
  command
      .add_option("--since", args->since, "only events newer than DURATION (90, 30s, 5m, 2h, 1d)")
      ->check(Duration());
  command.add_option("--severity", args->severity, "only this class")
      ->check(CLI::IsMember(kSeverities, CLI::ignore_case));
  command.add_option("--device", args->device, "only events of this device index")
      ->check(DeviceIndex());
  command.add_option("--limit", args->limit, "at most this many of the newest events")
      ->check(PositiveCount(10000))
      ->capture_default_str();
  command.add_flag("--follow", args->follow,
                   "keep printing new events as they arrive (Ctrl-C ends)");
  return [args](const Invocation& call) {
    nlohmann::json request = {{"limit", args->limit}};
    if (!args->since.empty()) request["since_seconds"] = *rasd::ctl::ParseDuration(args->since);
    if (!args->severity.empty()) request["severity"] = args->severity;
    if (args->device >= 0) request["device"] = args->device;
    if (!args->follow) return RunCommand(call.options, "events", request, rasd::ctl::FormatEvents);
    return Watch(call.options, request, /*with_devices=*/false);
  };
}

// `devices [N]`, `retired [N]`: one optional device index.
Action DefineOneDevice(CLI::App& command, std::string request_name,
                       std::function<std::string(const nlohmann::json&)> render) {
  auto device = std::make_shared<int>(-1);
  command.add_option("device", *device, "only this device index")->check(DeviceIndex());
  return [device, request_name = std::move(request_name),
          render = std::move(render)](const Invocation& call) {
    nlohmann::json request = nlohmann::json::object();
    if (*device >= 0) request["device"] = *device;
    return RunCommand(call.options, request_name, request, render);
  };
}

Action DefineCheck(CLI::App& command) {
  auto options = std::make_shared<rasd::ctl::CheckOptions>();
  command
      .add_option("--format", options->format,
                  "text; npd (node-problem-detector plugin: one line, at most 80 characters); "
                  "nhc (Slurm HealthCheckProgram: drains on a problem, resumes only rasd's "
                  "drains)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "npd", "nhc"}));
  command.add_option("--node", options->node,
                     "nhc: Slurm's name for this node (default: rasd's scheduler.node, else the "
                     "short host name)");
  command
      .add_option("--scontrol", options->scontrol,
                  "nhc: the scontrol to run; sinfo is taken from beside it")
      ->capture_default_str();
  command.footer(
      "A degraded device still takes work: the node is OK. A rasd that does not answer is "
      "unknown (exit 2), never healthy; nhc drains then, under the blast-radius guard.");
  return [options](const Invocation& call) {
    options->socket = SocketPath(call.options);
    options->timeout = Timeout(call.options);
    options->json = call.options.json;
    return rasd::ctl::RunCheck(*options, std::cout, std::cerr);
  };
}

Action DefineActions(CLI::App& command) {
  struct Args {
    int device = -1;
    int limit = 50;
  };
  auto args = std::make_shared<Args>();
  command.add_option("--device", args->device, "only actions on this device index")
      ->check(DeviceIndex());
  command.add_option("--limit", args->limit, "at most this many")
      ->check(PositiveCount(10000))
      ->capture_default_str();
  return [args](const Invocation& call) {
    nlohmann::json request = {{"limit", args->limit}};
    if (args->device >= 0) request["device"] = args->device;
    return RunCommand(call.options, "actions", request, rasd::ctl::FormatActions);
  };
}

// `job start` and `job stop`: a command of commands.
Action DefineJob(CLI::App& command) {
  command.require_subcommand(1);
  struct Args {
    std::string kind, name, stop_name;
    std::vector<int> devices;
    int load = 0, steps = 0, elements = 0, checkpoint = 0, min_ranks = 0, batch = 0;
    std::int64_t kv_bytes = 0;
    int tokens_per_block = 0;
    std::string preemption;
    bool no_grow = false;
  };
  auto args = std::make_shared<Args>();
  auto* start = command.add_subcommand("start", "start a job");
  start->add_option("kind", args->kind, "inference, llm or collective")
      ->required()
      ->check(CLI::IsMember({"inference", "llm", "collective"}));
  start->add_option("name", args->name, "the job's name")->required();
  start->add_option("--devices", args->devices, "device indexes (default: all)")->delimiter(',');
  start->add_option("--load", args->load, "inference: in-process requests per second")
      ->check(PositiveCount(1000000));
  start
      ->add_option("--max-batch", args->batch, "inference: largest batch; llm: sequences in a step")
      ->check(PositiveCount(4096));
  start->add_option("--kv-bytes", args->kv_bytes, "llm: the KV cache on each device, in bytes")
      ->check(CLI::Range(std::int64_t{4096}, std::int64_t{1} << 34));
  start->add_option("--tokens-per-block", args->tokens_per_block, "llm: tokens per KV block")
      ->check(PositiveCount(4096));
  start
      ->add_option("--preemption", args->preemption,
                   "llm: a full KV cache preempts by recompute (default) or swap (to host memory)")
      ->check(CLI::IsMember({"recompute", "swap"}));
  start->add_option("--steps", args->steps, "collective: steps to run")
      ->check(PositiveCount(100000000));
  start->add_option("--elements", args->elements, "collective: floats per rank")
      ->check(PositiveCount(67108864));
  start->add_option("--checkpoint-every", args->checkpoint, "collective: steps per checkpoint")
      ->check(PositiveCount(1000000));
  start->add_option("--min-ranks", args->min_ranks, "collective: fewest ranks it runs on")
      ->check(PositiveCount(1024));
  start->add_flag("--no-grow", args->no_grow,
                  "collective: stay on fewer ranks when a device returns to service");
  auto* stop = command.add_subcommand("stop", "stop a job");
  stop->add_option("name", args->stop_name, "the job's name")->required();
  return [args, start](const Invocation& call) {
    if (!start->parsed()) {
      return RunCommand(call.options, "job-stop", {{"name", args->stop_name}},
                        [](const nlohmann::json& result) {
                          return "job " + result.value("name", std::string("?")) + " stopped\n";
                        });
    }
    nlohmann::json request = {{"kind", args->kind}, {"name", args->name}};
    if (!args->devices.empty()) request["devices"] = args->devices;
    if (args->load > 0) request["load_rps"] = args->load;
    if (args->batch > 0) request["max_batch"] = args->batch;
    if (args->kv_bytes > 0) request["kv_bytes"] = args->kv_bytes;
    if (args->tokens_per_block > 0) request["tokens_per_block"] = args->tokens_per_block;
    if (!args->preemption.empty()) request["preemption"] = args->preemption;
    if (args->steps > 0) request["steps"] = args->steps;
    if (args->elements > 0) request["elements"] = args->elements;
    if (args->checkpoint > 0) request["checkpoint_every"] = args->checkpoint;
    if (args->min_ranks > 0) request["min_ranks"] = args->min_ranks;
    if (args->no_grow) request["grow_on_return"] = false;
    return RunCommand(call.options, "job-start", request, [](const nlohmann::json& result) {
      return "job " + result.value("name", std::string("?")) + " started\n";
    });
  };
}

Action DefineInject(CLI::App& command) {
  struct Args {
    std::string kind, value, address, job, via, call;
    int device = -1, peer = -1, mc = -1, dimm = -1;
    std::uint64_t count = 1;
    std::optional<double> rate;
    std::string kernel;
    std::optional<std::uint64_t> seed;
  };
  auto args = std::make_shared<Args>();
  command
      .add_option("kind", args->kind,
                  "ce, ucna, srao, srar, uce, fatal, xid, link, link-up, hang, wedge, unwedge, "
                  "load, sdc, kmsg, edac, einj, hwpoison")
      ->required()
      ->check(CLI::IsMember(kInjectKinds));
  command.add_option("value", args->value, "xid: the Xid number; kmsg: the record text");
  command.add_option("--device", args->device, "the device")->check(DeviceIndex());
  command.add_option("--address", args->address,
                     "hex address (default: inside a job's allocation on the device)");
  command.add_option("--count,--ce", args->count, "how many (edac: corrected errors to add)")
      ->check(PositiveCount(100000));
  command.add_option("--job", args->job, "memory faults: inside this job's allocation");
  command.add_option("--peer", args->peer, "link, link-up: the other device")->check(DeviceIndex());
  command
      .add_option("--via", args->via,
                  "link, link-up: nvlink (the simulator reports it as NVML reports an NVLink)")
      ->check(CLI::IsMember({"nvlink"}));
  command.add_option("--call", args->call,
                     "wedge: the one device query that stops returning (default: all of them)");
  command
      .add_option("--rate", args->rate,
                  "sdc: the fraction of elements kernels write with a bit flipped (0 ends it)")
      ->check(CLI::Range(0.0, 1.0));
  command.add_option("--kernel", args->kernel, "sdc: only this kernel's results (default: all)");
  command.add_option("--seed", args->seed, "sdc: where the flips fall, repeatably (default 1)");
  command.add_option("--mc", args->mc, "edac: memory controller")->check(DeviceIndex());
  command.add_option("--dimm", args->dimm, "edac: DIMM")->check(DeviceIndex());
  return [args](const Invocation& call) {
    nlohmann::json request = {{"kind", args->kind}};
    if (args->device >= 0) request["device"] = args->device;
    if (!args->address.empty()) request["address"] = args->address;
    if (args->count != 1) request["count"] = args->count;
    if (!args->job.empty()) request["job"] = args->job;
    if (args->peer >= 0) request["peer"] = args->peer;
    if (!args->via.empty()) request["via"] = args->via;
    if (!args->call.empty()) request["call"] = args->call;
    if (args->mc >= 0) request["mc"] = args->mc;
    if (args->dimm >= 0) request["dimm"] = args->dimm;
    if (args->rate) request["rate"] = *args->rate;
    if (!args->kernel.empty()) request["kernel"] = args->kernel;
    if (args->seed) request["seed"] = *args->seed;
    const std::string& value = args->value;
    if (args->kind == "xid") {
      int number = -1;
      if (value.empty() ||
          std::from_chars(value.data(), value.data() + value.size(), number).ec != std::errc()) {
        std::cerr
            << "rasctl: inject xid needs the Xid number, e.g. rasctl inject xid 79 --device 1\n";
        return kExitUsage;
      }
      request["xid"] = number;
    } else if (args->kind == "kmsg") {
      if (value.empty()) {
        std::cerr << "rasctl: inject kmsg needs the record text\n";
        return kExitUsage;
      }
      request["text"] = value;
    }
    return RunCommand(call.options, "inject", request, [](const nlohmann::json& result) {
      return "injected " + result.dump() + "\n";
    });
  };
}

Action DefineInfer(CLI::App& command) {
  struct Args {
    std::string job;
    std::vector<float> input;
    std::uint64_t seed = 0;
  };
  auto args = std::make_shared<Args>();
  command.add_option("job", args->job, "the inference job's name")->required();
  command.add_option("--input", args->input, "the input values (default: the load generator's)")
      ->delimiter(',');
  command.add_option("--seed", args->seed, "which load-generator input, without --input");
  return [args](const Invocation& call) {
    nlohmann::json request = {{"job", args->job}};
    if (!args->input.empty()) {
      request["input"] = args->input;
    } else {
      request["seed"] = args->seed;
    }
    return RunCommand(call.options, "infer", request, [](const nlohmann::json& result) {
      std::string text;
      for (const auto& value : result.value("output", nlohmann::json::array())) {
        if (!text.empty()) text += ' ';
        text += fmt::format("{:.6g}", value.get<double>());
      }
      return fmt::format("request {} ({:.2f} ms): {}\n", result.value("request", 0),
                         result.value("latency_ms", 0.0), text);
    });
  };
}

// isolate, drain, undrain: a device index, a reason, and the command's own.
Action DefineStateChange(CLI::App& command, std::string request_name) {
  struct Args {
    int device = -1;
    std::string reason;
    std::string deadline = "30s";  // drain
    bool force = false;            // undrain
  };
  auto args = std::make_shared<Args>();
  command.add_option("device", args->device, "device index")->required()->check(DeviceIndex());
  command.add_option("--reason", args->reason, "why (stored and shown)");
  if (request_name == "drain") {
    command.add_option("--deadline", args->deadline, "how long admitted work may run (30s, 5m)")
        ->capture_default_str()
        ->check(Duration());
  }
  if (request_name == "undrain")
    command.add_flag("--force", args->force, "return it even if the self-test fails");
  return [args, request_name = std::move(request_name)](const Invocation& call) {
    nlohmann::json request = {{"device", args->device}};
    if (request_name == "drain") {
      request["deadline_ms"] =
          static_cast<long long>(*rasd::ctl::ParseDuration(args->deadline) * 1000);
    }
    if (request_name == "undrain") request["force"] = args->force;
    if (!args->reason.empty()) request["reason"] = args->reason;
    return RunCommand(call.options, request_name, request, rasd::ctl::FormatStateChange);
  };
}

Action DefineBackup(CLI::App& command) {
  struct Args {
    std::string file;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  command.add_option("file", args->file, "where the copy goes (relative: to this directory)")
      ->required();
  command.add_flag("--force", args->force, "replace FILE if it exists");
  return [args](const Invocation& call) {
    // rasd writes it, from its own working directory: send an absolute path.
    std::error_code error;
    const auto file = std::filesystem::absolute(args->file, error);
    if (error) {
      std::cerr << "rasctl: backup: cannot resolve " << args->file << ": " << error.message()
                << "\n";
      return kExitUsage;
    }
    nlohmann::json request = {{"file", file.lexically_normal().string()}};
    if (args->force) request["force"] = true;
    return RunCommand(call.options, "backup", request, [](const nlohmann::json& result) {
      return fmt::format("backed up to {}: {} bytes, {} pages\n",
                         result.value("file", std::string("?")),
                         result.value("bytes", std::uint64_t{0}), result.value("pages", 0));
    });
  };
}

Action DefineRun(CLI::App& command) {
  struct Args {
    rasd::ctl::RunOptions options;
    std::vector<int> devices;
    std::string grace;
  };
  auto args = std::make_shared<Args>();
  command.add_option("--devices", args->devices, "these device indexes (each must take new work)")
      ->delimiter(',')
      ->check(DeviceIndex());
  command
      .add_option("--count", args->options.count,
                  "this many devices that take new work (default 1)")
      ->check(PositiveCount(1024));
  command.add_option("--name", args->options.name, "the workload's name (default: the command's)");
  command
      .add_option("--drain-signal", args->options.drain_signal,
                  "what rasd sends when a device leaves service (TERM, INT, USR1, ...)")
      ->capture_default_str();
  command
      .add_option("--grace", args->grace,
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
  command.footer("CMD [ARGS...] follows --: rasctl run --count 2 -- python3 serve.py --port 8000");
  command.get_option("--devices")->excludes(command.get_option("--count"));
  return [args](const Invocation& call) {
    rasd::ctl::RunOptions options = args->options;
    options.socket = SocketPath(call.options);
    options.timeout = Timeout(call.options);
    options.devices = args->devices;
    options.command = call.after_dashes;
    if (!args->grace.empty()) {
      options.grace = std::chrono::milliseconds(
          static_cast<long long>(*rasd::ctl::ParseDuration(args->grace) * 1000));
    }
    return rasd::ctl::RunWorkload(options);
  };
}

Action DefineScan(CLI::App& command) {
  struct Args {
    std::string file = "-";
    unsigned threads = 0;
  };
  auto args = std::make_shared<Args>();
  command.add_option("file", args->file, "dmesg/journalctl/syslog/kmsg text; - for standard input");
  command.add_option("--threads", args->threads,
                     "threads that scan a file's parts (default: one per CPU, at most 8)");
  return [args](const Invocation& call) {
    return rasd::ctl::RunScan(
        {.file = args->file, .json = call.options.json, .threads = args->threads}, std::cout,
        std::cerr);
  };
}

// Every command, once: its name, what it does (help), whether only an
// administrator may run it (rasd checks; the help says so), and how it
// defines its options and what it runs. Help, completion and
// `rasctl __commands` (which README's table is checked against) follow
// from this table.
struct CommandSpec {
  const char* name;
  const char* help;
  bool admin;
  std::function<Action(CLI::App&)> define;
};

std::vector<CommandSpec> Commands(const CLI::App& app) {
  return {
      {"help", "show this help", false,
       [&app](CLI::App&) -> Action {
         return [&app](const Invocation&) {
           // The whole program's help (App::help shows the parsed subcommand's).
           std::cout << app.get_formatter()->make_help(&app, "rasctl", CLI::AppFormatMode::Normal);
           return kExitOk;
         };
       }},
      {"version", "show rasctl's version", false,
       [](CLI::App&) -> Action {
         return [](const Invocation&) {
           std::cout << "rasctl " << rasd::kVersion << "\n";
           return kExitOk;
         };
       }},
      {"status", "show the daemon's state", false,
       [](CLI::App&) { return Simple("status", rasd::ctl::FormatStatus); }},
      {"ping", "check that the daemon answers", false,
       [](CLI::App&) {
         return Simple("ping", [](const nlohmann::json&) { return std::string("pong\n"); });
       }},
      {"reload", "re-read the config file (like SIGHUP)", true,
       [](CLI::App&) { return Simple("reload", RenderReload); }},
      {"events", "list the RAS events rasd has stored", false, DefineEvents},
      {"watch", "print new events and device state changes as rasd reports them (Ctrl-C ends)",
       false,
       [](CLI::App&) -> Action {
         return [](const Invocation& call) {
           return Watch(call.options, nlohmann::json::object(), /*with_devices=*/true);
         };
       }},
      {"summary", "event counts by origin and severity", false,
       [](CLI::App&) { return Simple("summary", rasd::ctl::FormatSummary); }},
      {"devices", "device health, reasons, memory, recent actions", false,
       [](CLI::App& command) {
         return DefineOneDevice(command, "devices", rasd::ctl::FormatDevices);
       }},
      {"check", "one health verdict for node agents: exit 0 OK, 1 problem, 2 unknown", false,
       DefineCheck},
      {"actions", "what rasd did about events, newest first", false, DefineActions},
      {"jobs", "the jobs rasd runs: kind, devices, state, progress", false,
       [](CLI::App&) { return Simple("jobs", rasd::ctl::FormatJobs); }},
      {"job", "start or stop a built-in job", true, DefineJob},
      {"inject", "inject a fault through the simulator or a source's input", true, DefineInject},
      {"infer", "send one request to an inference job", true, DefineInfer},
      {"retired", "device memory pages taken out of service", false,
       [](CLI::App& command) {
         return DefineOneDevice(command, "retired", rasd::ctl::FormatRetired);
       }},
      {"isolate", "take a device out of service now", true,
       [](CLI::App& command) { return DefineStateChange(command, "isolate"); }},
      {"drain", "stop new work on a device; admitted work may finish by the deadline", true,
       [](CLI::App& command) { return DefineStateChange(command, "drain"); }},
      {"undrain", "return a repaired device to service after a self-test passes", true,
       [](CLI::App& command) { return DefineStateChange(command, "undrain"); }},
      {"backup", "copy the live state database to FILE while rasd runs", true, DefineBackup},
      {"run", "run a command on healthy devices, drained by rasd when one leaves service", false,
       DefineRun},
      {"scan", "list the RAS records in a saved kernel log (offline)", false, DefineScan},
  };
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
  const std::vector<CommandSpec> specs = Commands(app);
  std::vector<std::pair<CLI::App*, Action>> defined;
  for (const auto& spec : specs) {
    auto* command =
        app.add_subcommand(spec.name, std::string(spec.help) + (spec.admin ? " (admin)" : ""));
    defined.emplace_back(command, spec.define(*command));
  }

  if (argc >= 2 && std::string_view(argv[1]) == "__commands") {
    // The table, for the check that README lists every command: name,
    // admin or anyone, help.
    for (const auto& spec : specs)
      std::cout << spec.name << "\t" << (spec.admin ? "admin" : "anyone") << "\t" << spec.help
                << "\n";
    return kExitOk;
  }
  if (argc >= 2 && std::string_view(argv[1]) == "__complete") {
    // For packaging/bash-completion/rasctl: candidates, one per line.
    rasd::ctl::CompletionHints hints;
    hints.option_values["--severity"] = kSeverities;
    hints.option_values["--format"] = {"text", "npd", "nhc"};
    hints.option_values["--drain-signal"] = {"TERM", "INT", "HUP", "QUIT", "USR1", "USR2"};
    hints.file_options = {"--socket"};
    hints.positional_values["inject"] = kInjectKinds;
    hints.positional_values["start"] = {"inference", "llm", "collective"};
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
  const Invocation call{options, command_after_dashes};
  for (const auto& [command, action] : defined) {
    if (!command->parsed()) continue;
    if (has_dashes && command->get_name() != "run") {
      std::cerr << "rasctl: `--` is for `rasctl run ... -- CMD [ARGS...]` only\n";
      return kExitUsage;
    }
    return action(call);
  }
  return kExitUsage;
}
