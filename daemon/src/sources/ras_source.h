#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/daemon/config.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/link_policy.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"
#include "source_backoff.h"

namespace rasd::daemon {

// The store's cursor rows that remember crash-record files already read
// (pstore's, BERT): "<kSeenFilePrefix><ContentKey>", position "read", the
// boot it was read in. Kept forever: a few rows per crash.
inline constexpr std::string_view kSeenFilePrefix = "seen-file:";

// A source's state as status shows it (active | absent | no_permission |
// in_use | disabled | failed) and why.
struct SourceState {
  std::string state;
  std::string reason;
};

// A source that could not start, as status shows it: the error's code
// decides the state, its message is the reason.
SourceState SourceFailure(const Error& error);

// A source not there now: its state says so and when it is looked for
// again, `retry` is armed for the backoff's next delay.
SourceState LookAgainLater(const Error& error, SourceBackoff& backoff, common::Timer& retry);

// What the sources have read so far, for status and the metrics.
struct IngestStats {
  std::uint64_t kmsg_records = 0;
  std::uint64_t kmsg_lost = 0;
  bool kmsg_active = false;
  bool tracefs_active = false;
  std::size_t nvml_gpus = 0;  // GPUs NVML watches; 0 without NVML
  std::uint64_t nvml_reports = 0;
  std::uint64_t tracefs_pages = 0;
  std::uint64_t tracefs_events = 0;
  std::size_t edac_controllers = 0;
  std::uint64_t kmsg_gaps = 0;
  std::uint64_t kmsg_undecoded = 0;
  std::uint64_t kmsg_untrusted = 0;  // user space's records in /dev/kmsg, never acted on
  // Events of records logged before rasd's first start in this boot
  // (stored, acted on only as StillActsBeforeStart allows).
  std::uint64_t kmsg_before_start = 0;
  std::uint64_t crash_records_read = 0;  // pstore dumps and BERT tables decoded (new ones)
  // (device, link kind, counter) -> errors the device's links corrected,
  // from the kLinkCorrected reports since start.
  std::map<std::tuple<int, std::string, std::string>, std::uint64_t> link_errors;
  // Each source's state and why, by source name.
  using SourceState = daemon::SourceState;
  std::map<std::string, SourceState> sources;

  // Status's "ras" view of these (the pipeline adds its own).
  nlohmann::json ToJson() const;
};

// What one look at a source found, for the pipeline: one batch, one
// transaction.
struct SourceBatch {
  std::vector<ras::RasEvent> events;
  // Stored with the events: the crash-record files read (RasIngest adds
  // the kernel log's position).
  std::vector<ras::SourceCursor> cursors;
  std::vector<ras::LinkReport> links;  // decided on after the events
};

// What every source is given: the loop it runs on, the host and the store
// (cursors, crash files seen), the runtime (devices, driver reports), the
// config, this boot's id, the code table, and where its batches go.
// Owned by RasIngest, which outlives every source.
struct SourceContext {
  common::EventLoop& loop;
  const common::HostEnv& host;
  ras::StateStore& store;
  runtime::Runtime& runtime;
  const Config::Ras& options;
  const std::string& boot_id;
  // The classes of accelerator codes, as now (RasIngest::SetCodeTable).
  const ras::CodeTable& codes;
  // Hands a batch to the pipeline.
  std::function<void(SourceBatch batch)> deliver;
  // How long a read that can wait on a device (an RDMA NIC's firmware) may
  // run before the device counts as not answering (probe.deadline_ms).
  std::chrono::milliseconds read_deadline{5000};

  // The crash-record file with this key was read before (in any boot). A
  // store that cannot answer says no: report again rather than lose a crash.
  bool SeenFile(const std::string& key) const;
};

// One source of RAS events. Adapters live in daemon/src/sources/, one file
// pair each, and RasIngest starts them in the order of its table. A source
// that is not there (no EDAC driver, no permission, another rasd holding the
// tracing instance) is no error: it says so in State() and, where it may
// appear later, looks again itself (SourceBackoff).
//
// Loop thread only, like the loop it is started on.
class RasSource {
 public:
  virtual ~RasSource() = default;
  // Status's name for it: "kmsg", "tracefs", "edac", ...
  virtual std::string_view Name() const = 0;
  // Opens the source and reads what is there already. Called once.
  virtual void Start() = 0;
  virtual SourceState State() const = 0;
  // Its counters into `stats` (each source owns its own fields).
  virtual void AddTo(IngestStats& stats) const = 0;
};

}  // namespace rasd::daemon
