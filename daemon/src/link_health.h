#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "device_health.h"
#include "ras_pipeline.h"
#include "rasd/common/event_loop.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/link_policy.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// Carries out ras::LinkPolicy's rules for the links an accelerator's
// collectives depend on (the RDMA ports it uses, from the sysfs poller; its
// NVLinks, from NVML; its HCCS / RoCE ports, from DCMI): the links-usable
// flag (Device::SetLinksUsable, read by CollectiveJob: the rank leaves, the
// job re-forms without it) and the link's Degraded hold in DeviceHealth
// (its compute is fine: not isolated). It decides on the link reports of
// the pipeline's batches, and the policy's state (by device UUID, under the
// node_state key "link_health") is saved in the same transaction as the
// holds it decided, so that a restart never finds one without the other.
// The policy's deadlines (a debounce ending) run on one timer; what they
// decide is committed through the pipeline too.
//
// Loop thread only. The loop, runtime, health, jobs, store and pipeline
// outlive it; it is the pipeline's link decider while it lives.
class LinkHealth final : public LinkDecider {
 public:
  using Options = ras::LinkPolicy::Options;
  LinkHealth(common::EventLoop& loop, runtime::Runtime& runtime, DeviceHealth& health,
             jobs::JobManager& jobs, ras::StateStore& store, RasPipeline& pipeline,
             Options options);
  ~LinkHealth() override;
  LinkHealth(const LinkHealth&) = delete;
  LinkHealth& operator=(const LinkHealth&) = delete;
  // At start: devices held for flapping, or Degraded by their link, when
  // rasd stopped stay out of collectives until the links prove themselves
  // again.
  void Load();
  // From the next link event on; a debounce already running keeps the
  // deadline it was armed with (and its messages quote that one).
  void SetOptions(Options options) { policy_.SetOptions(options); }
  // How long links settle after a boot or a driver load (0: not at all);
  // a window already running keeps its end.
  void SetSettle(std::chrono::seconds settle) { settle_ = settle; }
  // Links train from `start` (wall time: the boot, a driver load's record):
  // until `start` plus the settle time the sources' reports are kept, the
  // latest of each, and decided when the window ends. Extends a window
  // running; a start whose window has passed changes nothing.
  void SettleFrom(std::chrono::system_clock::time_point start);
  // When the window running ends; nullopt when none runs.
  std::optional<std::chrono::system_clock::time_point> SettlingUntil() const;

  // LinkDecider: one kind of link as its source last read it, in the
  // pipeline's batch (which commits what it decided).
  void Decide(const ras::LinkReport& report) override;
  void TakePending(ras::StoreBatch& batch) override;
  bool HasPending() const override { return unsaved_; }
  // An operator returned the device to service: a flapping hold ends.
  void OnOperatorReturned(int device);
  // What ends a link's Degraded, for `rasctl devices`' `clears`; nullopt
  // where the device's state is not the link's doing.
  std::optional<std::string> Clears(int device) const;
  // (device, source) -> links down now, for every source that listed the
  // device (the metrics' rasd_device_links_down).
  std::map<std::pair<int, std::string>, std::uint64_t> DownLinks() const {
    return policy_.DownLinks();
  }

 private:
  void Carry(const std::vector<ras::LinkPolicy::Decision>& decisions);
  void ArmDeadline();
  void EndSettle();

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  DeviceHealth& health_;
  jobs::JobManager& jobs_;
  ras::StateStore& store_;
  RasPipeline& pipeline_;
  ras::LinkPolicy policy_;
  bool unsaved_ = false;  // the policy's state changed since it was last taken
  std::unique_ptr<common::Timer> deadline_;
  std::chrono::seconds settle_{0};
  std::optional<std::chrono::system_clock::time_point> settle_until_;
  std::map<std::string, ras::LinkReport> settling_;  // by source: the latest report
  std::unique_ptr<common::Timer> settle_timer_;
};

}  // namespace rasd::daemon
