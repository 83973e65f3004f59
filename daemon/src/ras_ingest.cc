#include "ras_ingest.h"

#include "ras_pipeline.h"
#include "rasd/common/logging.h"
#include "rasd/ras/kernel_log_scanner.h"

namespace rasd::daemon {
namespace {

std::string ReadBootId(const common::HostEnv& host) {
  auto boot_id = host.ReadFile("/proc/sys/kernel/random/boot_id", 128);
  if (!boot_id) return "unknown";
  std::string id = *boot_id;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id.empty() ? "unknown" : id;
}

}  // namespace

RasIngest::RasIngest(common::EventLoop& loop, const common::HostEnv& host, ras::StateStore& store,
                     runtime::Runtime& runtime, const Config::Ras& options, EventSink sink)
    : host_(host),
      options_(options),
      sink_(std::move(sink)),
      codes_(options.codes),
      boot_id_(ReadBootId(host)),
      context_{.loop = loop,
               .host = host,
               .store = store,
               .runtime = runtime,
               .options = options_,
               .boot_id = boot_id_,
               .codes = codes_,
               .deliver = [this](SourceBatch batch) { Deliver(std::move(batch)); }} {}

RasIngest::~RasIngest() = default;

std::optional<int> RasIngest::NvmlDeviceOf(std::string_view name) const {
  if (auto device = RasPipeline::DeviceAtPciAddress(context_.runtime, name)) return device;
  if (nvml_.Unopened().empty()) return std::nullopt;
  std::vector<std::pair<unsigned, std::optional<int>>> opened;
  for (const auto& gpu : nvml_.Gpus()) {
    opened.emplace_back(gpu.index, gpu.pci_bdf.empty() ? std::nullopt
                                                       : RasPipeline::DeviceAtPciAddress(
                                                             context_.runtime, gpu.pci_bdf));
  }
  std::vector<std::pair<std::string, int>> nvidia;
  for (const auto& device : context_.runtime.Devices()) {
    const auto& properties = device->Properties();
    if (properties.vendor == "nvidia" && !properties.pci_bdf.empty())
      nvidia.emplace_back(properties.pci_bdf, device->Index());
  }
  return DeviceOfUnopenedGpu(name, nvml_.Counted(), opened, std::move(nvidia));
}

std::vector<RasIngest::Row> RasIngest::Table() {
  // The order they start in: the drivers' queue first (NVML feeds it), the
  // kernel log before tracefs, crash records last.
  return {
      {&driver_reports_, true, ""},
      {&nvml_, options_.nvml, "ras.nvml is off"},
      {&kmsg_, options_.kmsg, "ras.kmsg is off"},
      {&tracefs_, options_.tracefs, "ras.tracefs is off"},
      {&pstore_, true, ""},
      {&bert_, true, ""},
      {&infiniband_, options_.infiniband_poll.count() > 0, "ras.infiniband_poll_ms is 0"},
      {&edac_, options_.edac_poll.count() > 0, "ras.edac_poll_ms is 0"},
  };
}

Status RasIngest::Start() {
  table_ = Table();
  for (const auto& row : table_) {
    if (!row.enabled) continue;
    row.source->Start();
    // The drivers' queue is the first row. Without it no device fault would
    // ever be seen: that one is fatal, before any other source reads (and
    // has decided) anything.
    if (row.source == &driver_reports_ && driver_reports_.State().state != "active")
      return Fail(ErrorCode::kInternal, "driver reports: " + driver_reports_.State().reason);
  }
  return {};
}

SourceState RasIngest::StateOf(const Row& row) const {
  if (!row.enabled) return {"disabled", std::string(row.off_reason)};
  return row.source->State();
}

RasIngest::Stats RasIngest::GetStats() const {
  Stats stats;
  for (const auto& row : table_) {
    stats.sources[std::string(row.source->Name())] = StateOf(row);
    if (row.enabled) row.source->AddTo(stats);
  }
  return stats;
}

Result<std::vector<std::int64_t>> RasIngest::ComputeProcesses(std::string_view pci_bdf) const {
  if (!options_.nvml)
    return Fail(ErrorCode::kUnavailable, "NVML is not in use here (ras.nvml is off)");
  return nvml_.ComputeProcesses(pci_bdf);
}

void RasIngest::Deliver(SourceBatch batch) {
  const auto kmsg_cursor = kmsg_.Cursor();
  const std::string position = kmsg_cursor ? kmsg_cursor->position : std::string();
  const bool moved =
      !batch.events.empty() || !batch.cursors.empty() || position != saved_kmsg_position_;
  if (!moved && batch.links.empty()) return;
  // A look that found only the links' state writes no cursor.
  if (kmsg_cursor && moved) batch.cursors.push_back(*kmsg_cursor);
  saved_kmsg_position_ = position;
  sink_(std::move(batch));
}

std::size_t RasIngest::InjectKernelLog(std::string_view text) {
  std::vector<ras::RasEvent> events;
  const auto now = host_.GetClock().Wall();
  for (const auto& record : ras::ScanKernelLog(text, codes_))
    events.push_back(ras::EventFromRecord(record, "inject", now));
  const std::size_t count = events.size();
  Deliver({.events = std::move(events)});
  return count;
}

}  // namespace rasd::daemon
