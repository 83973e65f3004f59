#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>

#include "rasd/common/result.h"

namespace rasd::common {

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
