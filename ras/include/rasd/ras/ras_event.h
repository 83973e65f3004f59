#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "rasd/ras/severity.h"

namespace rasd::ras {

// One hardware-error report after decoding, before any action. Sources fill
// it; classify sets the severity; the store, the exporters and the policy
// read it. A plain value: copy freely.
struct RasEvent {
  std::chrono::system_clock::time_point time;
  std::string origin;  // edac | mce | ghes | aer | memory_failure | nvidia_xid | ...
  Severity severity = Severity::kInfo;
  std::optional<int> device;             // runtime device index, for accelerator events
  std::optional<std::uint64_t> address;  // physical or device address, where the record has one
  std::string summary;                   // one line for people
  std::string raw;                       // the record as the source read it
};

}  // namespace rasd::ras
