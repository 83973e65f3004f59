#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "driver_reports_adapter.h"
#include "ras_source.h"
#include "rasd/drivers_shim/nvml_monitor.h"

namespace rasd::daemon {

// NVIDIA's management library (ras.nvml): Xid and ECC events and counters,
// NVLink state, from NVML's own thread, queued with the drivers' reports.
// Most hosts have no NVIDIA GPU: one line, and the other sources serve.
// Destroying it stops NVML's thread; `reports` must outlive it.
class NvmlAdapter final : public RasSource {
 public:
  NvmlAdapter(SourceContext& context, DriverReportsAdapter& reports)
      : context_(context), reports_(reports) {}
  ~NvmlAdapter() override { nvml_.reset(); }

  std::string_view Name() const override { return "nvml"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override;

  // The processes NVML lists as computing on the GPU at `pci_bdf` now;
  // kUnavailable without NVML, kNotFound where NVML has no GPU there.
  Result<std::vector<std::int64_t>> ComputeProcesses(std::string_view pci_bdf) const;
  std::vector<drivers::ProbeCalls::Call> RunningCalls() const {
    return nvml_ ? nvml_->RunningCalls() : std::vector<drivers::ProbeCalls::Call>{};
  }
  bool Active() const { return nvml_ && !nvml_->Gpus().empty(); }

 private:
  SourceContext& context_;
  DriverReportsAdapter& reports_;
  SourceState state_{"disabled", "not started"};
  std::unique_ptr<drivers::NvmlMonitor> nvml_;
};

}  // namespace rasd::daemon
