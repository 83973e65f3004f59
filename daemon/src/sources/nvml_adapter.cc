#include "nvml_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "rasd/common/logging.h"

namespace rasd::daemon {

std::optional<int> DeviceOfUnopenedGpu(
    std::string_view name, unsigned counted,
    const std::vector<std::pair<unsigned, std::optional<int>>>& opened,
    std::vector<std::pair<std::string, int>> nvidia) {
  constexpr std::string_view kPrefix = "GPU ";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  unsigned index = 0;
  const std::string_view digits = name.substr(kPrefix.size());
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (nvidia.size() != counted || index >= counted) return std::nullopt;
  for (auto& [address, device] : nvidia) {
    std::transform(address.begin(), address.end(), address.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  }
  std::sort(nvidia.begin(), nvidia.end());
  for (const auto& [at, device] : opened) {
    if (!device || at >= nvidia.size() || nvidia[at].second != *device) return std::nullopt;
  }
  return nvidia[index].second;
}

void NvmlAdapter::Start() {
  auto monitor = drivers::NvmlMonitor::Start(
      {.library = context_.options.nvml_library,
       .counter_poll = context_.options.nvml_poll,
       .start_wait = context_.read_deadline},
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
  for (const unsigned index : nvml_->Unopened()) {
    state_.reason += fmt::format(
        "; GPU {} not watched: its opening did not return within {} ms (until a restart)", index,
        context_.read_deadline.count());
  }
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
