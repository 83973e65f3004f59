#include "rasd/common/logging.h"

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
// sd_journal_sendv would otherwise add this file's own location.
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

#include <array>
#include <cstdio>
#include <mutex>
#include <string_view>
#include <vector>

#include "rasd/common/default_paths.h"

namespace rasd::common {
namespace {

int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return LOG_DEBUG;
    case spdlog::level::info:
      return LOG_INFO;
    case spdlog::level::warn:
      return LOG_WARNING;
    case spdlog::level::err:
      return LOG_ERR;
    case spdlog::level::critical:
      return LOG_CRIT;
    default:
      return LOG_INFO;
  }
}

// Writes each message as one journal entry with structured fields. spdlog's
// own systemd_sink does not carry the component, which is what operators
// filter on.
class JournalSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::vector<std::string> fields;
    fields.reserve(7);
    fields.push_back("MESSAGE=" + std::string(msg.payload.data(), msg.payload.size()));
    fields.push_back("PRIORITY=" + std::to_string(SyslogPriority(msg.level)));
    fields.push_back("SYSLOG_IDENTIFIER=rasd");
    fields.push_back(fmt::format(
        "RASD_COMPONENT={}",
        ComponentOf(std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                    msg.source.filename ? msg.source.filename : "")));
    if (!msg.source.empty()) {
      fields.push_back(fmt::format("CODE_FILE={}", msg.source.filename));
      fields.push_back(fmt::format("CODE_LINE={}", msg.source.line));
      fields.push_back(fmt::format("CODE_FUNC={}", msg.source.funcname ? msg.source.funcname : ""));
    }
    std::vector<iovec> iov;
    iov.reserve(fields.size());
    for (auto& field : fields) iov.push_back(iovec{field.data(), field.size()});
    // A missing journald drops the entry; there is nowhere better to report it.
    (void)sd_journal_sendv(iov.data(), static_cast<int>(iov.size()));
  }
  void flush_() override {}
};

// "[component]" in stderr's lines: the same name the journal gets.
class ComponentFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const auto component =
        ComponentOf(std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                    msg.source.filename ? msg.source.filename : "");
    dest.append(component.data(), component.data() + component.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<ComponentFlag>();
  }
};

std::unique_ptr<spdlog::formatter> LineFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<ComponentFlag>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%*] %v");
  return formatter;
}

std::mutex g_sinks_mutex;
std::vector<spdlog::sink_ptr> g_sinks;
spdlog::level::level_enum g_level = spdlog::level::info;

std::vector<spdlog::sink_ptr> Sinks() {
  std::lock_guard lock(g_sinks_mutex);
  if (g_sinks.empty()) g_sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  return g_sinks;
}

}  // namespace

std::string_view ComponentOf(std::string_view logger_name, std::string_view source_file) {
  if (!logger_name.empty() && logger_name != "rasd") return logger_name;
  // By file stem first (the daemon's parts), then by library directory.
  static constexpr std::pair<std::string_view, std::string_view> kByStem[] = {
      {"control_server", "control"},     {"control_api", "control"},
      {"ras_ingest", "ras"},             {"ras_pipeline", "ras"},
      {"actuator", "policy"},            {"subprocess", "policy"},
      {"scheduler", "scheduler"},        {"device_heartbeat", "liveness"},
      {"device_lifecycle", "lifecycle"}, {"fault_injection", "inject"},
      {"daemon_metrics", "metrics"},     {"state_store", "store"},
      {"write_ahead_log", "store"},      {"state_backup", "store"},
  };
  const auto slash = source_file.rfind('/');
  std::string_view stem = slash == std::string_view::npos ? source_file
                                                           : source_file.substr(slash + 1);
  stem = stem.substr(0, stem.find('.'));
  for (const auto& [file, component] : kByStem) {
    if (stem == file) return component;
  }
  static constexpr std::pair<std::string_view, std::string_view> kByDirectory[] = {
      {"ras/src/", "ras"},          {"runtime/src/", "runtime"},     {"jobs/src/", "jobs"},
      {"drivers_shim/", "driver"}, {"exporters/src/", "metrics"},     {"k8s/src/", "k8s"},
  };
  for (const auto& [directory, component] : kByDirectory) {
    const auto at = source_file.find(directory);
    if (at == 0 || (at != std::string_view::npos && source_file[at - 1] == '/')) return component;
  }
  return "daemon";
}

bool StderrIsJournal() {
  const auto stream = GetEnv("JOURNAL_STREAM");
  if (!stream) return false;
  unsigned long long device = 0, inode = 0;
  if (std::sscanf(stream->c_str(), "%llu:%llu", &device, &inode) != 2) return false;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return st.st_dev == device && st.st_ino == inode;
}

void InitLogging(spdlog::level::level_enum level) {
  std::vector<spdlog::sink_ptr> sinks;
  if (StderrIsJournal()) {
    sinks.push_back(std::make_shared<JournalSink>());
  } else {
    sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  }
  {
    std::lock_guard lock(g_sinks_mutex);
    g_sinks = sinks;
    g_level = level;
  }
  spdlog::drop_all();
  auto main_logger = std::make_shared<spdlog::logger>("rasd", sinks.begin(), sinks.end());
  main_logger->set_level(level);
  main_logger->set_formatter(LineFormatter());
  spdlog::set_default_logger(main_logger);
  spdlog::set_level(level);
}

std::shared_ptr<spdlog::logger> GetLogger(std::string_view component) {
  const std::string name(component);
  if (auto existing = spdlog::get(name)) return existing;
  const auto sinks = Sinks();
  auto logger = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  {
    std::lock_guard lock(g_sinks_mutex);
    logger->set_level(g_level);
  }
  logger->set_formatter(LineFormatter());
  // Two threads may race to create the same component; the loser uses the winner's.
  try {
    spdlog::register_logger(logger);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(name)) return existing;
  }
  return logger;
}

Result<spdlog::level::level_enum> ParseLogLevel(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 8> kLevels{{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warning", spdlog::level::warn},
      {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  }};
  for (const auto& [level_name, level] : kLevels) {
    if (level_name == name) return level;
  }
  return Fail(ErrorCode::kInvalidArgument,
              "unknown log level '" + std::string(name) +
                  "' (expected trace, debug, info, warning, error, critical or off)");
}

std::string_view LogLevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warning";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

void SetLogLevel(spdlog::level::level_enum level) {
  {
    std::lock_guard lock(g_sinks_mutex);
    g_level = level;
  }
  spdlog::set_level(level);  // applies to every registered logger
}

}  // namespace rasd::common
