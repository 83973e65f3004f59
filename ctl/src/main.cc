// rasctl: the command-line client of rasd. CLI11 lives in this file only
// (it costs ~12 s of compile time per file that includes it).
//
// Exit codes: 0 ok; 1 the daemon answered with an error; 2 usage;
// 3 cannot reach the daemon (no socket, refused, timed out, garbled reply).

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>

#include "control_client.h"
#include "rasd/common/default_paths.h"
#include "rasd/common/version.h"
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
int RunCommand(const GlobalOptions& options, const std::string& command,
               const std::function<std::string(const nlohmann::json&)>& render) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
  auto client = rasd::ctl::ControlClient::Connect(SocketPath(options), timeout);
  if (!client) {
    std::cerr << "rasctl: " << client.error().message << "\n";
    return kExitUnreachable;
  }
  auto reply = client->Call(command);
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
  CLI::App app{"rasctl: control and inspect the rasd health daemon"};
  app.require_subcommand(1);
  GlobalOptions options;
  app.add_option("--socket", options.socket,
                 "control socket (default: $RASD_SOCKET, else rasd's default path)");
  app.add_flag("--json", options.json, "print the daemon's JSON instead of text");
  app.add_option("--timeout", options.timeout_seconds, "seconds to wait for an answer")
      ->check(CLI::PositiveNumber);
  app.set_version_flag("--version", std::string("rasctl ") + rasd::kVersion);

  auto* status = app.add_subcommand("status", "show the daemon's state");
  auto* ping = app.add_subcommand("ping", "check that the daemon answers");
  auto* reload = app.add_subcommand("reload", "re-read the config file (like SIGHUP)");
  auto* scan = app.add_subcommand("scan", "list the RAS records in a saved kernel log (offline)");
  std::string scan_file = "-";
  scan->add_option("file", scan_file, "dmesg/journalctl/syslog/kmsg text; - for standard input");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int rc = app.exit(error);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (status->parsed()) return RunCommand(options, "status", rasd::ctl::FormatStatus);
  if (ping->parsed()) {
    return RunCommand(options, "ping", [](const nlohmann::json&) { return std::string("pong\n"); });
  }
  if (reload->parsed()) return RunCommand(options, "reload", RenderReload);
  if (scan->parsed()) {
    if (scan_file == "-") return rasd::ctl::RunScan(std::cin, options.json, std::cout);
    std::ifstream file(scan_file, std::ios::binary);
    if (!file) {
      std::cerr << "rasctl: scan: cannot read " << scan_file << "\n";
      return kExitDaemonError;
    }
    return rasd::ctl::RunScan(file, options.json, std::cout);
  }
  return kExitUsage;
}
