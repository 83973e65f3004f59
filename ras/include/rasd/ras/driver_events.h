#pragma once

#include <string_view>

#include "rasd/drivers_shim/driver.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {

// A driver's asynchronous error report (DriverErrorEvent) as a RAS event of
// origin `driver_name`: its severity class from the report's kind, and for
// a vendor code from `codes` (the same tables and origins as the kernel-log
// lines of those drivers, so a site rule for "nvidia_xid" covers both
// paths). Its time is the failure's (RasEvent::TimeIs::kFailure). Pure.
RasEvent EventFromDriver(const drivers::DriverErrorEvent& event, std::string_view driver_name,
                         const CodeTable& codes);

}  // namespace rasd::ras
