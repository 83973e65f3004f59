#include "rasd/ras/ras_event.h"

#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::ras {

RasEvent EventFromRecord(const ScannedRecord& record, std::string source,
                         std::chrono::system_clock::time_point time) {
  RasEvent event;
  event.time = time;
  event.source = std::move(source);
  event.origin = record.origin;
  event.severity = record.severity;
  event.mc = record.mc;
  event.pci_bdf = record.pci_bdf;
  event.address = record.address;
  event.vendor_code = record.xid;
  event.count = record.count;
  event.historical = record.historical;
  event.summary = record.message;
  for (const auto& line : record.lines) {
    if (!event.raw.empty()) event.raw += '\n';
    event.raw += line;
  }
  return event;
}

}  // namespace rasd::ras
