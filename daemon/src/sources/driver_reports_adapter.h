#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "infiniband_adapter.h"
#include "ras_source.h"
#include "rasd/common/unique_fd.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/drivers_shim/nvml_monitor.h"

namespace rasd::daemon {

// The device drivers' asynchronous error reports: the runtime's backend
// (its error listener) and NVML's monitor thread queue them here from their
// own threads; an eventfd wakes the loop, which classes them (ras::
// EventFromDriver) and delivers them as one batch. Link reports also keep
// which links of each device are down, by kind: the batch carries a link
// report for each kind that changed; corrected link errors are counted per
// device, kind and counter.
class DriverReportsAdapter final : public RasSource {
 public:
  explicit DriverReportsAdapter(SourceContext& context) : context_(context) {}
  ~DriverReportsAdapter() override;

  std::string_view Name() const override { return "driver"; }
  // Subscribes to the runtime's reports; without an eventfd to wake the
  // loop the state is failed and nothing is subscribed.
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override;

  // A report from `reporter` ("sim", "cuda", "nvml"). Any thread. A report
  // without a time of its own is stamped now, on the HostEnv's clock.
  void Queue(const drivers::DriverErrorEvent& event, std::string_view reporter);
  // NVML watches these GPUs' NVLinks: every link is known now, up, or
  // inactive since before the start (uncabled, or down before rasd
  // started: the link policy decides). Loop thread.
  void WatchNvlinks(const std::vector<drivers::NvmlGpu>& gpus);

 private:
  void OnReady();
  void Drain();
  // A report's device in the runtime's numbering (NVML names it by PCI
  // address), or nullopt.
  std::optional<int> DeviceOf(const drivers::DriverErrorEvent& event) const;

  SourceContext& context_;
  SourceState state_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  common::UniqueFd eventfd_;
  std::unique_ptr<common::FdWatch> watch_;
  int subscription_ = 0;
  mutable std::mutex mutex_;
  // With the name of the reporter. Guarded by mutex_.
  std::deque<std::pair<drivers::DriverErrorEvent, std::string_view>> queued_;
  // The devices' own links down now, by link kind ("NVLink") and device.
  std::map<std::string, std::map<int, std::set<unsigned>>, std::less<>> links_down_;
  // Link kinds whose state the link policy has not been told yet (NVLink after
  // NVML's start: a device restored as down learns its links are up).
  std::set<std::string> kinds_unannounced_;
  // NVLinks inactive at NVML's start, by device, until a report names them.
  std::map<int, std::set<unsigned>> nvlinks_unconfirmed_;
  std::map<std::tuple<int, std::string, std::string>, std::uint64_t> link_errors_;
};

}  // namespace rasd::daemon
