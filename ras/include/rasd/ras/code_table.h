#pragma once

#include <map>
#include <optional>
#include <string_view>

#include "rasd/ras/severity.h"

namespace rasd::ras {

// The classes of accelerator error codes: data, not code. The daemon loads
// overrides from its config (ras.codes) and applies them on reload.
struct CodeTable {
  std::map<int, Severity> nvidia_xid;
  std::map<int, Severity> ascend;

  // docs/architecture.md's mapping: Xid 13/31/32/43/45/68/69/109 INFO (the job failed,
  // not the hardware); 63 and 92 CE; 94 SRAR; 48, 64, 95 UCE; 62, 79, 119,
  // 120 FATAL. Ascend 507053 SRAR; 507054, the task failures and the
  // device's internal, link and suspected memory errors UCE; 507010 (lost
  // heartbeat), 507033 (device setup) and 507901 (channel closed) FATAL
  // (code_table.cc lists them). Codes not in
  // the table (NVLink Xids 144-150, 154) are classed from their text.
  static const CodeTable& Default();

  std::optional<Severity> Xid(int code) const;
  std::optional<Severity> Ascend(int code) const;
  bool operator==(const CodeTable&) const = default;
};

}  // namespace rasd::ras
