// libFuzzer target: /dev/kmsg records and the block joiner under arbitrary
// interleavings of lines, partial takes and quiet-period flushes, as the
// daemon's follower drives them. Every line handed in must come out in
// exactly one record or in none, never twice.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/kmsg_source.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rasd::ras::KernelLogScanner scanner;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t lines_in = 0, lines_out = 0;
  while (!input.empty()) {
    // The first byte of each chunk steers: take, flush, or neither.
    const auto control = static_cast<unsigned char>(input.front());
    input.remove_prefix(1);
    const std::size_t newline = input.find('\n');
    const std::string_view record = input.substr(0, newline);
    input.remove_prefix(newline == std::string_view::npos ? input.size() : newline + 1);
    if (auto decoded = rasd::ras::DecodeKmsgRecord(record)) {
      scanner.AddLine(decoded->text, decoded->usec);
    } else {
      scanner.AddLine(record);
    }
    ++lines_in;
    if (control % 7 == 0) {
      for (const auto& taken : scanner.TakeCompleted()) lines_out += taken.lines.size();
    }
    if (control % 11 == 0) scanner.CloseOpenBlocks();
  }
  for (const auto& taken : scanner.Finish()) lines_out += taken.lines.size();
  if (lines_out > lines_in) std::abort();  // a line attached twice
  return 0;
}
