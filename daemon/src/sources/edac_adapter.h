#pragma once

#include <memory>

#include "ras_source.h"
#include "rasd/ras/edac_sysfs_source.h"

namespace rasd::daemon {

// EDAC's memory-controller counters in sysfs, polled every
// ras.edac_poll_ms; the first reading is the baseline (counts since boot are
// not news). EDAC has no notification: without controllers, it looks again
// with a SourceBackoff whether a driver has brought some.
class EdacAdapter final : public RasSource {
 public:
  explicit EdacAdapter(SourceContext& context) : context_(context) {}

  std::string_view Name() const override { return "edac"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override;

  // Polls now (after `rasctl inject edac` wrote to the tree); a no-op
  // before Start.
  void PollNow();
  // The counters as last polled (empty before Start).
  ras::EdacSnapshot Counters() const;

 private:
  void Arm();

  SourceContext& context_;
  SourceState state_;
  std::unique_ptr<ras::EdacSysfsSource> edac_;
  std::unique_ptr<common::Timer> timer_;
  SourceBackoff backoff_;
};

}  // namespace rasd::daemon
