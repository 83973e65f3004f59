#include "nvml_adapter.h"

#include <fmt/format.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

void NvmlAdapter::Start() {
  auto monitor = drivers::NvmlMonitor::Start(
      {.library = context_.options.nvml_library, .counter_poll = context_.options.nvml_poll},
      [this](const drivers::DriverErrorEvent& event) { reports_.Queue(event, "nvml"); });
  if (!monitor) {
    if (monitor.error().code == ErrorCode::kTimeout) {
      // Not a host without NVIDIA's driver: one that does not answer.
      RASD_LOG_WARN("NVML: not used: {}", monitor.error().message);
    } else {
      RASD_LOG_INFO("NVML: not used ({})", monitor.error().message);
    }
    state_ = SourceFailure(monitor.error());
    return;
  }
  nvml_ = std::move(*monitor);
  state_ = {"active", fmt::format("{} GPU(s)", nvml_->Gpus().size())};
  if (nvml_->PollsNvlinks()) reports_.WatchNvlinks(nvml_->Gpus());
  for (const auto& gpu : nvml_->Gpus()) {
    RASD_LOG_INFO("NVML: GPU {} {} at {} ({}), events {}", gpu.index, gpu.name, gpu.pci_bdf,
                  gpu.uuid, gpu.event_types != 0 ? "registered" : "unsupported: counters only");
  }
}

Result<std::vector<std::int64_t>> NvmlAdapter::ComputeProcesses(std::string_view pci_bdf) const {
  if (!nvml_)
    return Fail(ErrorCode::kUnavailable,
                fmt::format("NVML is not in use here ({})", state_.reason));
  return nvml_->ComputeProcesses(pci_bdf);
}

void NvmlAdapter::AddTo(IngestStats& stats) const {
  stats.nvml_gpus = nvml_ ? nvml_->Gpus().size() : 0;
  stats.nvml_reports = nvml_ ? nvml_->Reports() : 0;
}

}  // namespace rasd::daemon
