// libFuzzer target: arbitrary bytes as a ring-buffer page for the RAS
// tracepoint decoder (formats of a real 6.18 kernel from the test
// fixtures). It must never read outside the page or crash.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "rasd/ras/trace_event_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static auto decoder = rasd::ras::TraceEventDecoder::Load(
      RASD_TRACEFS_FIXTURES "/events", {"ras/mc_event", "ras/arm_event", "ras/non_standard_event"});
  if (!decoder) std::abort();
  for (const auto& event :
       (*decoder)->DecodePage(std::span(data, size), std::chrono::system_clock::time_point{})) {
    if (event.origin.empty()) std::abort();
  }
  return 0;
}
