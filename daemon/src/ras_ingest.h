#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/daemon/config.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/edac_sysfs_source.h"
#include "rasd/ras/infiniband_sysfs_source.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"
#include "sources/bert_adapter.h"
#include "sources/driver_reports_adapter.h"
#include "sources/edac_adapter.h"
#include "sources/infiniband_adapter.h"
#include "sources/kmsg_adapter.h"
#include "sources/nvml_adapter.h"
#include "sources/pstore_adapter.h"
#include "sources/ras_source.h"
#include "sources/tracefs_adapter.h"

namespace rasd::daemon {

// Brings RAS events into the daemon: a loop over the sources of
// daemon/src/sources/ (the kernel log, tracefs, EDAC and RDMA sysfs, pstore
// and BERT, the drivers' and NVML's reports), each behind RasSource, started
// in the order of one table and reported by it in status. A source only
// decodes: each batch goes to the sink (the RasPipeline) with the kernel
// log's position after it.
//
// Runs on the event loop. A source that cannot start (no /dev/kmsg, no
// permission) is logged once and left out: the daemon never stops because
// of one. Sources not there at start that may appear later (EDAC, RDMA,
// pstore, BERT, tracefs) look again with a SourceBackoff (10 s doubling to
// 10 min), so one that appears (a module loaded) becomes active without a
// restart. Idle, nothing is armed but the polls of sources that are there
// and the backoff timers of those that are not. Retention is the
// pipeline's.
class RasIngest {
 public:
  // This boot's id (/proc/sys/kernel/random/boot_id), read once at start.
  const std::string& BootId() const { return boot_id_; }
  // Where each batch goes, with the sources' positions after it and the
  // link reports of the same look.
  using EventSink = std::function<void(SourceBatch batch)>;

  // Records decoded per loop callback under a storm.
  static constexpr std::size_t kKmsgSlice = KmsgAdapter::kSlice;

  // Reads nothing yet: Start() does.
  RasIngest(common::EventLoop& loop, const common::HostEnv& host, ras::StateStore& store,
            runtime::Runtime& runtime, const Config::Ras& options, EventSink sink);
  ~RasIngest();
  RasIngest(const RasIngest&) = delete;
  RasIngest& operator=(const RasIngest&) = delete;

  // Starts the sources in the table's order. The kernel log's first slice,
  // pstore and BERT are read, and delivered to the sink, before it returns:
  // call it once whatever the sink's batches reach (the recovery advisor,
  // the consumer killer, the process lister) is wired, so that the records
  // found at start are decided like any later one. kInternal when the
  // driver reports cannot start: without them no device fault is seen.
  Status Start();

  using Stats = IngestStats;
  Stats GetStats() const;

  // Decodes kernel-log text (one record or a block, any common form) as
  // the kmsg source would and delivers what it finds: `rasctl inject
  // kmsg|xid`. Returns how many events it made.
  std::size_t InjectKernelLog(std::string_view text);
  // Polls EDAC sysfs now (after `rasctl inject edac` wrote to it); a no-op
  // when EDAC polling is off.
  void PollEdacNow() { edac_.PollNow(); }
  // The EDAC counters as last polled (empty without EDAC).
  ras::EdacSnapshot EdacCounters() const { return edac_.Counters(); }
  // The RDMA ports as last read. Thread-safe (the metrics exposer reads it).
  ras::InfinibandSnapshot InfinibandPorts() const { return infiniband_.Ports(); }
  // The RDMA ports an accelerator uses ("mlx5_0 port 1"), with how that was
  // decided (the NIC behind the same PCIe switch, else on the same NUMA
  // node: ras::AcceleratorsOfNic). Loop thread.
  using RdmaPort = InfinibandAdapter::RdmaPort;
  std::vector<RdmaPort> RdmaPortsOf(int device) const { return infiniband_.PortsOf(device); }
  // The RDMA devices whose read is in flight now (on their readers).
  std::vector<std::string> RdmaReadsInFlight() const { return infiniband_.ReadsInFlight(); }
  // The processes NVML lists as computing on the GPU at `pci_bdf` now
  // (kill-consumer's evidence when a record names no process);
  // kUnavailable without NVML, kNotFound where NVML has no GPU there.
  Result<std::vector<std::int64_t>> ComputeProcesses(std::string_view pci_bdf) const;
  // NVML's calls about one GPU in progress now; empty without NVML.
  std::vector<drivers::ProbeCalls::Call> NvmlRunningCalls() const { return nvml_.RunningCalls(); }
  // NVML watches at least one GPU.
  bool NvmlActive() const { return nvml_.Active(); }
  // The runtime device an NVML call's device name is: a GPU's PCI address,
  // or "GPU <index>" for one whose opening did not return (by elimination,
  // DeviceOfUnopenedGpu); nullopt for a device rasd does not run.
  std::optional<int> NvmlDeviceOf(std::string_view name) const;
  // The classes of accelerator codes for records decoded from now on.
  void SetCodeTable(const ras::CodeTable& codes) { codes_ = codes; }
  // How long a device read off the loop may run before its device counts
  // as not answering (probe.deadline_ms); read at each poll.
  void SetReadDeadline(std::chrono::milliseconds deadline) { context_.read_deadline = deadline; }

 private:
  void Deliver(SourceBatch batch);

  // One row of the sources' table: a source the config turns off is
  // reported so, with the key that does it.
  struct Row {
    RasSource* source;
    bool enabled;
    std::string_view off_reason;
  };
  std::vector<Row> Table();
  SourceState StateOf(const Row& row) const;

  const common::HostEnv& host_;
  Config::Ras options_;
  EventSink sink_;
  ras::CodeTable codes_;
  std::string boot_id_;    // read once at start: it does not change while we run
  SourceContext context_;  // refers to the members above: declared after them

  // The sources; destroyed in reverse: NVML's thread stops before the
  // queue it writes to goes.
  KmsgAdapter kmsg_{context_};
  TracefsAdapter tracefs_{context_};
  EdacAdapter edac_{context_};
  InfinibandAdapter infiniband_{context_};
  PstoreAdapter pstore_{context_};
  BertAdapter bert_{context_};
  DriverReportsAdapter driver_reports_{context_};
  NvmlAdapter nvml_{context_, driver_reports_};
  std::vector<Row> table_;

  std::string saved_kmsg_position_;  // sent with the last batch
};

}  // namespace rasd::daemon
