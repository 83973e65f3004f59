// libFuzzer target: any text through the kernel-log scanner, as `rasctl
// scan` reads it. The scanner must never crash, hang or produce a record
// without an origin, whatever the bytes; a line's message, whatever
// prefixes were peeled, is a part of the line.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/log_line.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto records = rasd::ras::ScanKernelLog(text);
  for (const auto& record : records) {
    if (record.origin.empty() || record.lines.empty()) std::abort();
    (void)record.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  (void)rasd::ras::MainRecord(records);
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t newline = rest.find('\n');
    const std::string_view raw = rest.substr(0, newline);
    const auto line = rasd::ras::SplitLogLine(raw);
    if (!line.text.empty() &&
        (line.text.data() < raw.data() || line.text.data() + line.text.size() > raw.data() + raw.size()))
      std::abort();
    if (newline == std::string_view::npos) break;
    rest.remove_prefix(newline + 1);
  }
  return 0;
}
