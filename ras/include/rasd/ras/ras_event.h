#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rasd/ras/address.h"
#include "rasd/ras/severity.h"

namespace rasd::ras {

struct ScannedRecord;

// One hardware-error report after decoding, before any action. Sources fill
// it; the store, the exporters and the policy read it. A plain value.
struct RasEvent {
  std::chrono::system_clock::time_point time;
  // What `time` is: when the device failed (a driver's report, read as it
  // happens), or when a record was logged, which may be long before rasd
  // read it (a kernel log, a sysfs counter). Not stored.
  enum class TimeIs : std::uint8_t { kLogged, kFailure };
  TimeIs time_is = TimeIs::kLogged;
  std::string source;  // kmsg | edac_sysfs | infiniband_sysfs | driver | bert | pstore | tracefs
  std::string origin;  // edac | mce | ghes | aer | memory_failure | nvidia_xid | ... | sim
  Severity severity = Severity::kInfo;
  std::optional<int> device;  // runtime device index, for accelerator events
  std::optional<int> mc;      // memory controller
  std::optional<std::string> pci_bdf;
  std::optional<Address> address;
  std::optional<int> vendor_code;  // Xid number, Ascend code
  // The record's own recovery instruction in its vendor's numbering (Xid
  // 154: nvmlDeviceGpuRecoveryAction_t); the recovery table follows it. Not
  // stored.
  std::optional<int> vendor_action;
  // The process the source names as the one that met the error (an Xid's
  // pid=): kill-consumer's target where no device address names one. Not
  // stored.
  std::optional<std::int64_t> pid;
  std::uint64_t count = 1;         // errors this event stands for
  bool historical = false;         // from a previous boot (BERT, pstore)
  // Logged in this boot before rasd's first start in it: the kernel's ring
  // as rasd found it then (see KmsgSource). Acted on only where the state
  // it describes still holds (StillActsBeforeStart in policy.h).
  bool before_start = false;
  std::string summary;             // one line for people
  std::string raw;                 // the record as the source read it
};

// Under a storm (a batch of more than `threshold` events) events that
// differ only in time within the same minute and component are merged into
// one with the summed count, so the store grows with the variety of errors,
// not their number; counts stay exact. Smaller batches pass unchanged.
// Order: first occurrence.
std::vector<RasEvent> CoalesceStorm(std::vector<RasEvent> events, std::size_t threshold);

// A scanned kernel-log record as an event of `source`. The overload for an
// rvalue moves the record's text into the event instead of copying it.
RasEvent EventFromRecord(const ScannedRecord& record, std::string source,
                         std::chrono::system_clock::time_point time);
RasEvent EventFromRecord(ScannedRecord&& record, std::string source,
                         std::chrono::system_clock::time_point time);

}  // namespace rasd::ras
