#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "driver_reports_adapter.h"
#include "ras_source.h"
#include "rasd/drivers_shim/nvml_monitor.h"

namespace rasd::daemon {

// NVIDIA's management library (ras.nvml): Xid and ECC events and counters,
// NVLink state, from NVML's own thread, queued with the drivers' reports.
// Most hosts have no NVIDIA GPU: one line, and the other sources serve.
// Destroying it stops NVML's thread; `reports` must outlive it.
// The runtime device of a GPU NVML names by its index alone ("GPU 1": its
// opening did not return, so its PCI address is not known). NVML numbers
// GPUs in PCI bus order, so index i is the i-th of the runtime's NVIDIA
// devices (`nvidia`: PCI address, runtime index) in PCI order; that is
// trusted only where it is borne out: the runtime has as many NVIDIA
// devices as NVML `counted`, and every GPU NVML opened (`opened`: NVML
// index, the runtime device at its PCI address) sits at its index in that
// order. nullopt otherwise (a GPU NVML refused, one without a PCI address,
// a GPU rasd does not run), and for any other name: no guess.
std::optional<int> DeviceOfUnopenedGpu(
    std::string_view name, unsigned counted,
    const std::vector<std::pair<unsigned, std::optional<int>>>& opened,
    std::vector<std::pair<std::string, int>> nvidia);

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
  // NVML watches a GPU, or was left inside one's opening.
  bool Active() const { return nvml_ && (!nvml_->Gpus().empty() || !nvml_->Unopened().empty()); }
  // The GPUs NVML opened, and the indices of those whose opening did not
  // return (empty without NVML).
  std::vector<drivers::NvmlGpu> Gpus() const {
    return nvml_ ? nvml_->Gpus() : std::vector<drivers::NvmlGpu>{};
  }
  std::vector<unsigned> Unopened() const {
    return nvml_ ? nvml_->Unopened() : std::vector<unsigned>{};
  }
  unsigned Counted() const { return nvml_ ? nvml_->Counted() : 0; }

 private:
  SourceContext& context_;
  DriverReportsAdapter& reports_;
  SourceState state_{"disabled", "not started"};
  std::unique_ptr<drivers::NvmlMonitor> nvml_;
};

}  // namespace rasd::daemon
