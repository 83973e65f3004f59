#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>

#include "rasd/common/result.h"

namespace rasd::common {

// rasd's log calls: spdlog's, with the caller's file, line and function
// attached (spdlog's free functions carry none), so that the journal's
// CODE_FILE/CODE_LINE/CODE_FUNC name the caller and RASD_COMPONENT can be
// told from its file. Files are named relative to the source tree (the
// build maps the prefix away).
#define RASD_LOGGER_LOG(logger, level, ...) SPDLOG_LOGGER_CALL(logger, level, __VA_ARGS__)
#define RASD_LOG(level, ...) RASD_LOGGER_LOG(::spdlog::default_logger_raw(), level, __VA_ARGS__)
#define RASD_LOG_TRACE(...) RASD_LOG(::spdlog::level::trace, __VA_ARGS__)
#define RASD_LOG_DEBUG(...) RASD_LOG(::spdlog::level::debug, __VA_ARGS__)
#define RASD_LOG_INFO(...) RASD_LOG(::spdlog::level::info, __VA_ARGS__)
#define RASD_LOG_WARN(...) RASD_LOG(::spdlog::level::warn, __VA_ARGS__)
#define RASD_LOG_ERROR(...) RASD_LOG(::spdlog::level::err, __VA_ARGS__)
#define RASD_LOG_CRITICAL(...) RASD_LOG(::spdlog::level::critical, __VA_ARGS__)

// The component a line belongs to, for RASD_COMPONENT and the "[...]" of
// stderr: the logger's own name when it has one other than "rasd", else
// told from the caller's source file ("daemon/src/control_server.cc" ->
// "control"). One of: daemon, control, ras, store, policy, scheduler,
// liveness, lifecycle, inject, metrics, jobs, runtime, driver, k8s.
std::string_view ComponentOf(std::string_view logger_name, std::string_view source_file);

// Sets up the process-wide logging once, before threads start. Messages go
// to stderr, or, when JOURNAL_STREAM says stderr is connected to journald,
// straight to the journal with structured fields (PRIORITY, RASD_COMPONENT,
// CODE_FILE/CODE_LINE/CODE_FUNC) so `journalctl RASD_COMPONENT=control`
// works. Not thread-safe against itself; loggers are thread-safe after.
void InitLogging(spdlog::level::level_enum level);

// True when JOURNAL_STREAM names the device and inode of our stderr.
bool StderrIsJournal();

// A logger for one component ("control", "store"), sharing the sinks set up
// by InitLogging. Cheap to call repeatedly.
std::shared_ptr<spdlog::logger> GetLogger(std::string_view component);

// "trace" | "debug" | "info" | "warning" | "error" | "critical" | "off".
Result<spdlog::level::level_enum> ParseLogLevel(std::string_view name);
std::string_view LogLevelName(spdlog::level::level_enum level);

// Changes the level of every logger (SIGHUP reload).
void SetLogLevel(spdlog::level::level_enum level);

}  // namespace rasd::common
