// libFuzzer target: arbitrary bytes as an ACPI BERT region. The decoder
// must stay inside the buffer and never crash.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "rasd/ras/bert_source.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (const auto& event :
       rasd::ras::DecodeBert(std::span(data, size), std::chrono::system_clock::time_point{})) {
    if (!event.historical || event.source != "bert") std::abort();
  }
  return 0;
}
