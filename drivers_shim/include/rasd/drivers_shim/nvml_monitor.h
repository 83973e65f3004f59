#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/drivers_shim/probe_calls.h"

namespace rasd::drivers {

struct NvmlMonitorOptions {
  // dlopen()ed at run time: rasd has no link-time dependency on NVIDIA's
  // libraries, so one binary runs on hosts with and without them.
  std::string library = "libnvidia-ml.so.1";
  // How often ECC counters, retired pages, remapped rows and PCIe replays
  // are read. Their first reading is the baseline: counts since the
  // driver loaded are not news.
  std::chrono::milliseconds counter_poll{10'000};
  // The longest nvmlEventSetWait call: bounds how long stopping takes.
  std::chrono::milliseconds event_wait{200};
  // How long a stop waits for an NVML call in progress; one that has not
  // returned by then (a wedged driver) is left behind, its thread detached,
  // so that rasd still stops within systemd's TimeoutStopSec.
  std::chrono::milliseconds stop_wait{2000};
  // How long Start waits for NVML to open (nvmlInit; then each GPU's first
  // queries, each GPU on a thread of its own), and ComputeProcesses for its
  // answer: a wedged nvmlInit fails Start with kTimeout (Start returns
  // within twice start_wait), a GPU whose opening has not returned 7/4
  // start_wait after the start is left out (Unopened), and a listing fails
  // with kTimeout, instead of holding the caller (rasd's start, its event
  // loop). The call is left to return on its own.
  std::chrono::milliseconds start_wait{5000};
  std::chrono::milliseconds query_wait{250};
  // A GPU flooding one event (tens of thousands of Xids a second): the
  // first of each GPU and code is reported at once, the rest of this window
  // as one report with their exact count when it ends, so that the work
  // the listener gets stays bounded and the counters are polled on time.
  std::chrono::milliseconds flood_window{1000};
};

// One GPU as NVML names it.
struct NvmlGpu {
  unsigned index = 0;
  std::string name;
  std::string pci_bdf;  // "0000:07:00.0", the form DeviceProperties and kernel records use
  std::string uuid;     // "GPU-8c3b..."
  // The NVML event types registered for this GPU (Xid, double-bit ECC);
  // 0 where the GPU or driver supports none.
  std::uint64_t event_types = 0;
  // The NVLinks NVML read as inactive at Start: not cabled, or down since
  // before rasd started (NVML cannot tell which). Empty without NVLink polling.
  std::vector<unsigned> nvlinks_inactive_at_start;
};

// NVIDIA's driver-side error reports, read through NVML:
//  - events (nvmlDeviceRegisterEvents + nvmlEventSetWait): an Xid critical
//    error becomes a kVendorCode report in the Xid code space (the daemon's
//    Xid table classifies it, as it does the kernel's "NVRM: Xid" lines);
//    a double-bit ECC event Xid 48;
//  - polled counters, as increases over the last reading: volatile
//    corrected ECC (kCorrectedEcc with the increase as `count`), volatile
//    uncorrected ECC (Xid 48, only where double-bit events are not
//    registered, so one error is not reported twice), newly retired pages
//    and remapped rows (Xid 63: recorded), a row-remap failure (Xid 64),
//    PCIe replays (a kVendorCode report with no code space: recorded, not
//    acted on; replays are retried by the link);
//  - NVLinks (nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkErrorCounter,
//    links 0..17; one NVML says the GPU lacks is skipped): a link that goes
//    down is kLinkDown, one that comes back kLinkUp (a link inactive at the
//    first reading is not reported: NVML reads an uncabled link, a PCIe
//    GPU's without its bridge, as inactive; it is listed in
//    NvmlGpu::nvlinks_inactive_at_start, and reported up if it comes up),
//    and an error counter's
//    increase (replay, recovery, CRC flit, CRC data, ECC data) kLinkCorrected
//    with the increase as `count`; `link` names the NVLink (and counter). A
//    counter that went down was reset and is re-based without a report; a
//    query that fails keeps the last reading. A library without those two
//    entry points polls no NVLinks (logged once) and reports the rest.
// Reports name the GPU by `pci_bdf` with device -1: NVML's numbering is not
// the runtime's, and the daemon attributes a report to the runtime device
// with that PCI address (whichever backend runs it).
//
// Thread-safety: Start() spawns one thread that calls `listener`; the
// listener must not block for long. Gpus() is fixed after Start().
// Destroying the monitor stops the thread (within `event_wait`), frees
// the event set and shuts NVML down; no report reaches the listener after
// that. A thread stuck in an NVML call for `stop_wait` is left behind
// instead: it frees what it holds if the call ever returns.
class NvmlMonitor {
 public:
  // kUnavailable when the library cannot be loaded, lacks a symbol, or
  // nvmlInit fails (no driver); the message says which.
  static Result<std::unique_ptr<NvmlMonitor>> Start(const NvmlMonitorOptions& options,
                                                    ErrorListener listener);
  virtual ~NvmlMonitor() = default;

  virtual const std::vector<NvmlGpu>& Gpus() const = 0;
  // The NVML indices of GPUs whose opening (handle, names, PCI address,
  // first counters) had not returned within start_wait: not watched, their
  // call in RunningCalls named "GPU <index>" until it returns. Fixed after
  // Start().
  virtual std::vector<unsigned> Unopened() const = 0;
  // The GPUs nvmlDeviceGetCount gave: opened, unopened, and those NVML
  // refused to open (lost, no permission). Fixed after Start().
  virtual unsigned Counted() const = 0;
  // Whether NVLinks are polled (the library has the NVLink queries).
  virtual bool PollsNvlinks() const = 0;
  // Reports delivered to the listener so far.
  virtual std::uint64_t Reports() const = 0;
  // The NVML calls about one GPU in progress now (the polled counters, the
  // NVLink queries, ComputeProcesses), named by the GPU's `pci_bdf` and the
  // NVML function, with how long each has run: a call that does not return
  // is a wedged driver, and the monitor's thread can no longer watch any
  // GPU. Any thread.
  virtual std::vector<ProbeCalls::Call> RunningCalls() const = 0;
  // The processes NVML lists as computing on the GPU at `pci_bdf` now
  // (nvmlDeviceGetComputeRunningProcesses), as host pids, sorted; a
  // process NVML names without a pid (one in another pid namespace) is left
  // out. kNotFound: no GPU there; kUnavailable: the library has no such
  // call, or it failed; kTimeout: it has not returned within `query_wait`,
  // or an earlier one of the GPU has still not returned (it runs on a
  // thread of its own, left to return on its own: at most one per GPU).
  // Any thread (NVML is thread-safe).
  virtual Result<std::vector<std::int64_t>> ComputeProcesses(std::string_view pci_bdf) const = 0;
};

}  // namespace rasd::drivers
