#pragma once

#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {

// The kernel log that survived a crash in persistent storage
// (<root>/sys/fs/pstore/dmesg-*: ERST, EFI, ramoops back ends): the RAS
// records in it describe a previous boot, so they come out as historical
// events (source "pstore"). Read once per boot; the caller keeps the cursor.
// Unreadable or missing entries are skipped: pstore is optional.
std::vector<RasEvent> ReadPstoreEvents(const common::HostEnv& host,
                                       const CodeTable& codes = CodeTable::Default());

}  // namespace rasd::ras
