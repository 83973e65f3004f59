#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/common/unique_fd.h"
#include "rasd/daemon/config.h"
#include "rasd/drivers_shim/nvml_monitor.h"
#include "rasd/ras/driver_events.h"
#include "rasd/ras/edac_sysfs_source.h"
#include "rasd/ras/infiniband_sysfs_source.h"
#include "rasd/ras/kmsg_source.h"
#include "rasd/ras/pci_topology.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/state_store.h"
#include "rasd/ras/tracefs_source.h"
#include "rasd/runtime/runtime.h"
#include "source_backoff.h"

namespace rasd::daemon {

// The store's cursor rows that remember crash-record files already read
// (pstore's, BERT): "<kSeenFilePrefix><ContentKey>", position "read", the
// boot it was read in. Kept forever: a few rows per crash.
inline constexpr std::string_view kSeenFilePrefix = "seen-file:";

// Brings RAS events into the daemon: the kernel log (kmsg), tracefs, EDAC
// sysfs, pstore/BERT and the device drivers' asynchronous error reports.
// A source only decodes: each batch goes to the sink (the RasPipeline)
// with the kmsg position after it.
//
// Runs on the event loop. Driver reports arrive on driver threads and are
// handed over through a queue and an eventfd. A source that cannot start
// (no /dev/kmsg, no permission) is logged once and left out: the daemon
// never stops because of one. EDAC, pstore, BERT and tracefs are looked for
// at start and, while they are not there, again with a SourceBackoff (10 s
// doubling to 10 min), so that one that appears later (a module loaded)
// becomes active without a restart. Status names every source's state and
// why (Stats::sources).
//
// Crash records (pstore's dumps, wherever systemd-pstore moved them, and
// the firmware's BERT) are decoded once: each file's ContentKey is stored
// with the events it gave, in the same transaction, and a file seen again
// (in this boot, after a restart, or in a later boot: systemd's archive
// keeps them) is not reported again.
//
// Storms: the kernel log is taken in slices of at most kKmsgSlice records;
// what is left waits behind whatever else is ready on the loop (the control
// socket first of all). Idle, nothing is armed but, where EDAC controllers
// exist, their poll, and the backoff timers of sources not there (at most
// one look each per 10 minutes). Retention is the pipeline's.
class RasIngest {
 public:
  // This boot's id (/proc/sys/kernel/random/boot_id), read once at start.
  const std::string& BootId() const { return boot_id_; }
  // Where each batch goes, with the sources' positions after it.
  using EventSink =
      std::function<void(std::vector<ras::RasEvent> events, std::vector<ras::SourceCursor>)>;

  // Records decoded per loop callback under a storm.
  static constexpr std::size_t kKmsgSlice = 4096;

  static Result<std::unique_ptr<RasIngest>> Create(common::EventLoop& loop,
                                                   const common::HostEnv& host,
                                                   ras::StateStore& store,
                                                   runtime::Runtime& runtime,
                                                   const Config::Ras& options, EventSink sink);
  ~RasIngest();
  RasIngest(const RasIngest&) = delete;
  RasIngest& operator=(const RasIngest&) = delete;

  struct Stats {
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
    // Each source's state (active | absent | no_permission | in_use |
    // disabled | failed) and why, by source name.
    struct SourceState {
      std::string state;
      std::string reason;
    };
    std::map<std::string, SourceState> sources;

    // Status's "ras" view of these (the pipeline adds its own).
    nlohmann::json ToJson() const;
  };
  // Decodes kernel-log text (one record or a block, any common form) as
  // the kmsg source would and delivers what it finds: `rasctl inject
  // kmsg|xid`. Returns how many events it made.
  std::size_t InjectKernelLog(std::string_view text);
  // Polls EDAC sysfs now (after `rasctl inject edac` wrote to it); a no-op
  // when EDAC polling is off.
  void PollEdacNow() {
    if (edac_) PollEdac();
  }
  // The EDAC counters as last polled (empty without EDAC).
  ras::EdacSnapshot EdacCounters() const;
  // The RDMA ports as last read. Thread-safe (the metrics exposer reads it).
  ras::InfinibandSnapshot InfinibandPorts() const;
  // The RDMA ports an accelerator uses ("mlx5_0 port 1"), with how that was
  // decided (the NIC behind the same PCIe switch, else on the same NUMA
  // node: ras::AcceleratorsOfNic). Loop thread.
  struct RdmaPort {
    std::string device;
    int port = 0;
    std::string how;
  };
  std::vector<RdmaPort> RdmaPortsOf(int device) const;
  // One kind of link as last read: `source` "RDMA" after each RDMA poll
  // (every accelerator that uses RDMA ports, with those of its ports that
  // are down, not ACTIVE and LinkUp, now); "NVLink", "HCCS" or "RoCE" after
  // a driver's or NVML's link report (every device that has reported a link
  // of that kind, with its links down now: "NVLink 2"). Loop thread.
  // The third map: links the source cannot tell down from absent (NVML's
  // NVLinks inactive at its start) and has heard nothing of since.
  using LinkObserver = std::function<void(
      std::string_view source, const std::map<int, std::vector<std::string>>& down,
      const std::map<int, std::vector<std::string>>& unconfirmed)>;
  void SetLinkObserver(LinkObserver observer) { link_observer_ = std::move(observer); }
  Stats GetStats() const;
  // The processes NVML lists as computing on the GPU at `pci_bdf` now
  // (kill-consumer's evidence when a record names no process);
  // kUnavailable without NVML, kNotFound where NVML has no GPU there.
  Result<std::vector<std::int64_t>> ComputeProcesses(std::string_view pci_bdf) const;
  // The classes of accelerator codes for records decoded from now on.
  void SetCodeTable(const ras::CodeTable& codes) { codes_ = codes; }

 private:
  RasIngest(common::EventLoop& loop, const common::HostEnv& host, ras::StateStore& store,
            runtime::Runtime& runtime, const Config::Ras& options, EventSink sink);
  Status Start();
  void StartKmsg();
  // Follows a kmsg that epoll cannot watch (a regular file) with inotify,
  // else with a poll timer.
  void FollowKmsgFile();
  void ReadKmsg();
  void OnKmsgQuiet();
  void OnKmsgFileChanged();
  void StartTracefs();
  void ReadTracefs(std::size_t cpu);
  // `seen` are cursors stored with the events (crash-record files read).
  void Deliver(std::vector<ras::RasEvent> events, std::vector<ras::SourceCursor> seen = {});
  void DrainDriverEvents();
  void StartNvml();
  void QueueDriverEvent(const drivers::DriverErrorEvent& event, std::string_view reporter);

  // Crash dumps in pstore and the firmware's BERT records describe a
  // previous boot: each file is read once (see kSeenFilePrefix).
  void CheckPstore();
  void CheckBert();
  bool SeenFile(const std::string& key) const;
  // stats_.sources[name] for a source that is not there, and the timer to
  // look again after `backoff`'s next delay.
  void NoteMissing(const std::string& name, const Error& error, SourceBackoff& backoff,
                   common::Timer& retry);
  void PollEdac();
  // The EDAC timer: every edac_poll while controllers exist, else backoff.
  void ArmEdac();
  void PollInfiniband();
  // Which accelerators each RDMA device serves, from the PCI topology; read
  // again when the set of RDMA devices changes.
  void UpdateNicAffinity();
  void ArmInfiniband();
  void OnDriverEvents();
  // A kLinkDown / kLinkUp report's device in the runtime's numbering
  // (NVML's name it by PCI address), or nullopt.
  std::optional<int> LinkDevice(const drivers::DriverErrorEvent& event) const;

  common::EventLoop& loop_;
  const common::HostEnv& host_;
  ras::StateStore& store_;
  runtime::Runtime& runtime_;
  Config::Ras options_;
  EventSink sink_;
  ras::CodeTable codes_;
  std::string boot_id_;  // read once at start: it does not change while we run  // sources keep a
                         // reference: its address never changes

  // Cleared by the destructor: a posted continuation that runs later (it
  // cannot: the loop outlives us and drops tasks with itself) finds it false.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

  std::unique_ptr<ras::KmsgSource> kmsg_;
  std::unique_ptr<common::FdWatch> kmsg_watch_;
  common::UniqueFd kmsg_inotify_;
  std::unique_ptr<common::FdWatch> kmsg_inotify_watch_;
  std::unique_ptr<common::Timer> kmsg_poll_timer_;   // only where nothing can watch the file
  std::unique_ptr<common::Timer> kmsg_quiet_timer_;  // armed while records may be open
  bool kmsg_continuation_posted_ = false;
  std::uint64_t kmsg_records_since_trim_ = 0;

  std::unique_ptr<ras::TracefsSource> tracefs_;
  std::vector<std::unique_ptr<common::FdWatch>> tracefs_watches_;
  std::unique_ptr<common::Timer> tracefs_retry_timer_;
  SourceBackoff tracefs_backoff_;

  std::unique_ptr<common::Timer> pstore_timer_;
  SourceBackoff pstore_backoff_;
  std::unique_ptr<common::Timer> bert_timer_;
  SourceBackoff bert_backoff_;
  SourceBackoff edac_backoff_;

  std::unique_ptr<ras::EdacSysfsSource> edac_;
  std::unique_ptr<common::Timer> edac_timer_;
  std::unique_ptr<ras::InfinibandSysfsSource> infiniband_;
  std::unique_ptr<common::Timer> infiniband_timer_;
  SourceBackoff infiniband_backoff_;
  std::set<std::string> affinity_of_;  // the RDMA devices nic_affinity_ was made for
  std::map<std::string, ras::NicAffinity> nic_affinity_;  // by RDMA device
  LinkObserver link_observer_;
  // The devices' own links down now, by link kind ("NVLink") and device.
  std::map<std::string, std::map<int, std::set<unsigned>>, std::less<>> device_links_down_;
  // Link kinds whose state LinkHealth has not been told yet (NVLink after
  // NVML's start: a device restored as down learns its links are up).
  std::set<std::string> link_kinds_unannounced_;
  // NVLinks inactive at NVML's start, by device, until a report names them.
  std::map<int, std::set<unsigned>> nvlinks_unconfirmed_;
  mutable std::mutex infiniband_mutex_;
  ras::InfinibandSnapshot infiniband_published_;  // guarded by infiniband_mutex_

  common::UniqueFd driver_eventfd_;
  std::unique_ptr<common::FdWatch> driver_watch_;
  int driver_subscription_ = 0;
  mutable std::mutex driver_mutex_;
  // Reports of the runtime's driver and of NVML, with the name of the
  // reporter ("sim", "cuda", "nvml"). Guarded by driver_mutex_.
  std::deque<std::pair<drivers::DriverErrorEvent, std::string_view>> driver_events_;
  std::unique_ptr<drivers::NvmlMonitor> nvml_;

  Stats stats_;
  std::string saved_kmsg_position_;  // sent with the last batch
};

}  // namespace rasd::daemon
