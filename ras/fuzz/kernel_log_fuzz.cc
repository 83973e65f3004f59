// libFuzzer target: any text through the kernel-log scanner, as `rasctl
// scan` reads it. The scanner must never crash, hang or produce a record
// without an origin, whatever the bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rasd/ras/kernel_log_scanner.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto records = rasd::ras::ScanKernelLog(text);
  for (const auto& record : records) {
    if (record.origin.empty() || record.lines.empty()) std::abort();
    (void)record.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  (void)rasd::ras::MainRecord(records);
  return 0;
}
