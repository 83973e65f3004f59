#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {

// ACPI BERT: the firmware's record of the errors that ended the previous
// boot, as one or more Generic Error Status Blocks (ACPI 6.x, table 18-391)
// holding UEFI CPER sections (UEFI spec, appendix N). Decoded sections:
// platform memory errors (physical address, node/card/module/bank/row/
// column), PCIe errors (the device's segment:bus:device.function) and
// anything else by its severity and type. Every event is historical.
//
// Pure: bytes and the time of reading in, events out (each stamped `now`:
// the records carry no time rasd can trust); truncated or inconsistent data
// ends decoding where it stops making sense, never reads past the buffer.
std::vector<RasEvent> DecodeBert(std::span<const std::uint8_t> data,
                                 std::chrono::system_clock::time_point now);

// Reads <root>/sys/firmware/acpi/tables/data/BERT (root only, usually),
// stamped with the host's wall clock. A host without it, or without
// permission, gives no events.
std::vector<RasEvent> ReadBertEvents(const common::HostEnv& host);

}  // namespace rasd::ras
