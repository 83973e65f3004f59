#include "ras_ingest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "rasd/common/logging.h"
#include "rasd/ras/bert_source.h"
#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/pstore_source.h"

namespace rasd::daemon {
namespace {

// A source that could not start, as status shows it.
RasIngest::Stats::SourceState SourceFailure(const Error& error) {
  switch (error.code) {
    case ErrorCode::kNotFound:
      return {"absent", error.message};
    case ErrorCode::kPermissionDenied:
      return {"no_permission", error.message};
    case ErrorCode::kUnavailable:
      return {"in_use", error.message};
    default:
      return {"failed", error.message};
  }
}

constexpr std::string_view kBertTable = "/sys/firmware/acpi/tables/data/BERT";

std::string ReadBootId(const common::HostEnv& host) {
  auto boot_id = host.ReadFile("/proc/sys/kernel/random/boot_id", 128);
  if (!boot_id) return "unknown";
  std::string id = *boot_id;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id.empty() ? "unknown" : id;
}

}  // namespace

Result<std::unique_ptr<RasIngest>> RasIngest::Create(common::EventLoop& loop,
                                                     const common::HostEnv& host,
                                                     ras::StateStore& store,
                                                     runtime::Runtime& runtime,
                                                     const Config::Ras& options, EventSink sink) {
  std::unique_ptr<RasIngest> ingest(
      new RasIngest(loop, host, store, runtime, options, std::move(sink)));
  if (auto started = ingest->Start(); !started) return Fail(started.error());
  return ingest;
}

RasIngest::RasIngest(common::EventLoop& loop, const common::HostEnv& host, ras::StateStore& store,
                     runtime::Runtime& runtime, const Config::Ras& options, EventSink sink)
    : loop_(loop),
      host_(host),
      store_(store),
      runtime_(runtime),
      options_(options),
      sink_(std::move(sink)),
      codes_(options.codes) {}

RasIngest::~RasIngest() {
  *alive_ = false;
  if (driver_subscription_ != 0) runtime_.Unsubscribe(driver_subscription_);
  nvml_.reset();  // stops its thread before the queue it writes to goes
  tracefs_watches_.clear();
  tracefs_.reset();  // removes the tracing instance
}

Status RasIngest::Start() {
  boot_id_ = ReadBootId(host_);
  driver_eventfd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!driver_eventfd_) return Fail(ErrnoError("eventfd", errno));
  auto driver_watch =
      loop_.WatchFd(driver_eventfd_.Get(), EPOLLIN, [this](std::uint32_t) { OnDriverEvents(); });
  if (!driver_watch) {
    return Fail(driver_watch.error().code, "driver events: " + driver_watch.error().message);
  }
  driver_watch_ = std::move(*driver_watch);
  const std::string_view driver_name = runtime_.DriverName();
  driver_subscription_ =
      runtime_.SubscribeErrors([this, driver_name](const drivers::DriverErrorEvent& event) {
        QueueDriverEvent(event, driver_name);
      });
  if (options_.nvml) StartNvml();
  stats_.sources["kmsg"] = {"disabled", "ras.kmsg is off"};
  stats_.sources["tracefs"] = {"disabled", "ras.tracefs is off"};
  stats_.sources["edac"] = {"disabled", "ras.edac_poll_ms is 0"};
  stats_.sources["nvml"] = {"disabled", "ras.nvml is off"};
  stats_.sources["infiniband"] = {"disabled", "ras.infiniband_poll_ms is 0"};
  if (options_.kmsg) StartKmsg();
  if (options_.tracefs) {
    tracefs_retry_timer_ = loop_.CreateTimer([this] { StartTracefs(); });
    StartTracefs();
  }
  pstore_timer_ = loop_.CreateTimer([this] { CheckPstore(); });
  CheckPstore();
  bert_timer_ = loop_.CreateTimer([this] { CheckBert(); });
  CheckBert();
  if (options_.infiniband_poll.count() > 0) {
    infiniband_ = std::make_unique<ras::InfinibandSysfsSource>(host_);
    (void)infiniband_->Poll();  // the baseline: counts since boot are not news
    UpdateNicAffinity();
    {
      std::lock_guard lock(infiniband_mutex_);
      infiniband_published_ = infiniband_->Last();
    }
    infiniband_timer_ = loop_.CreateTimer([this] { PollInfiniband(); });
    ArmInfiniband();
  }
  if (options_.edac_poll.count() > 0) {
    edac_ = std::make_unique<ras::EdacSysfsSource>(host_);
    (void)edac_->Poll();  // the baseline: counts since boot are not news
    stats_.edac_controllers = edac_->Last().controllers.size();
    edac_timer_ = loop_.CreateTimer([this] { PollEdac(); });
    RASD_LOG_INFO("EDAC sysfs: {} memory controller(s), polled every {} ms", stats_.edac_controllers,
                 options_.edac_poll.count());
    ArmEdac();
  }
  return {};
}

void RasIngest::QueueDriverEvent(const drivers::DriverErrorEvent& event,
                                 std::string_view reporter) {
  {
    std::lock_guard lock(driver_mutex_);
    driver_events_.emplace_back(event, reporter);
    // Stamped on arrival when the driver has no time of its own; the
    // HostEnv's clock is thread-safe.
    if (event.time == std::chrono::system_clock::time_point{}) {
      driver_events_.back().first.time = host_.GetClock().Wall();
    }
  }
  const std::uint64_t one = 1;
  (void)::write(driver_eventfd_.Get(), &one, sizeof one);
}

void RasIngest::StartNvml() {
  auto monitor = drivers::NvmlMonitor::Start(
      {.library = options_.nvml_library, .counter_poll = options_.nvml_poll},
      [this](const drivers::DriverErrorEvent& event) { QueueDriverEvent(event, "nvml"); });
  if (!monitor) {
    // Most hosts have no NVIDIA GPU: one line, then the other sources.
    RASD_LOG_INFO("NVML: not used ({})", monitor.error().message);
    stats_.sources["nvml"] = SourceFailure(monitor.error());
    return;
  }
  stats_.sources["nvml"] = {"active", fmt::format("{} GPU(s)", monitor.value()->Gpus().size())};
  nvml_ = std::move(*monitor);
  stats_.nvml_gpus = nvml_->Gpus().size();
  if (nvml_->PollsNvlinks()) {
    // Every GPU's NVLinks are known now: up, or inactive since before the
    // start (uncabled, or down before rasd started: LinkHealth decides).
    for (const auto& gpu : nvml_->Gpus()) {
      drivers::DriverErrorEvent probe;
      probe.device = -1;
      probe.pci_bdf = gpu.pci_bdf;
      if (auto device = LinkDevice(probe)) {
        (void)device_links_down_["NVLink"][*device];
        nvlinks_unconfirmed_[*device].insert(gpu.nvlinks_inactive_at_start.begin(),
                                             gpu.nvlinks_inactive_at_start.end());
      }
    }
    link_kinds_unannounced_.insert("NVLink");
    loop_.Post([this, alive = alive_] {
      if (*alive) DrainDriverEvents();
    });
  }
  for (const auto& gpu : nvml_->Gpus()) {
    RASD_LOG_INFO("NVML: GPU {} {} at {} ({}), events {}", gpu.index, gpu.name, gpu.pci_bdf,
                 gpu.uuid, gpu.event_types != 0 ? "registered" : "unsupported: counters only");
  }
}

void RasIngest::StartKmsg() {
  auto cursor = store_.LoadCursor(ras::KmsgSource::kSourceName);
  if (!cursor) {
    RASD_LOG_WARN("kmsg: cannot read the saved position ({}); reading the whole log",
                 cursor.error().message);
  }
  kmsg_ =
      std::make_unique<ras::KmsgSource>(host_, boot_id_, cursor ? *cursor : std::nullopt, codes_);
  if (auto opened = kmsg_->Open(); !opened) {
    RASD_LOG_WARN("kmsg source disabled: {}", opened.error().message);
    stats_.sources["kmsg"] = SourceFailure(opened.error());
    kmsg_.reset();
    return;
  }
  // The character device wakes the loop when a record arrives; a file
  // (replays, tests) is followed by inotify.
  if (kmsg_->IsCharacterDevice()) {
    auto watch = loop_.WatchFd(kmsg_->Fd(), EPOLLIN, [this](std::uint32_t) { ReadKmsg(); });
    if (!watch) {
      RASD_LOG_WARN("kmsg source disabled: cannot poll it: {}", watch.error().message);
      stats_.sources["kmsg"] = {"failed", "cannot poll it: " + watch.error().message};
      kmsg_.reset();
      return;
    }
    kmsg_watch_ = std::move(*watch);
  } else {
    FollowKmsgFile();
  }
  kmsg_quiet_timer_ = loop_.CreateTimer([this] { OnKmsgQuiet(); });
  stats_.kmsg_active = true;
  stats_.sources["kmsg"] = {
      "active", kmsg_->IsCharacterDevice()
                    ? "the kernel's records from " + host_.Resolve("/dev/kmsg").string()
                    : "a file, followed as it grows: " + host_.Resolve("/dev/kmsg").string()};
  RASD_LOG_INFO("kmsg source: reading {}{}", host_.Resolve("/dev/kmsg").string(),
               kmsg_->IsCharacterDevice() ? "" : " (a file: followed as it grows)");
  ReadKmsg();
}

void RasIngest::FollowKmsgFile() {
  const auto path = host_.Resolve("/dev/kmsg");
  kmsg_inotify_.Reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (kmsg_inotify_ &&
      ::inotify_add_watch(kmsg_inotify_.Get(), path.c_str(), IN_MODIFY | IN_CLOSE_WRITE) >= 0) {
    auto watch =
        loop_.WatchFd(kmsg_inotify_.Get(), EPOLLIN, [this](std::uint32_t) { OnKmsgFileChanged(); });
    if (watch) {
      kmsg_inotify_watch_ = std::move(*watch);
      return;
    }
  }
  kmsg_inotify_.Reset();
  RASD_LOG_INFO("kmsg: {} cannot be watched; re-read every {} ms", path.string(),
               options_.kmsg_file_poll.count());
  kmsg_poll_timer_ = loop_.CreateTimer([this] {
    ReadKmsg();
    kmsg_poll_timer_->ArmAfter(options_.kmsg_file_poll);
  });
  kmsg_poll_timer_->ArmAfter(options_.kmsg_file_poll);
}

void RasIngest::OnKmsgFileChanged() {
  char buffer[4096];
  while (::read(kmsg_inotify_.Get(), buffer, sizeof buffer) > 0) {
  }
  ReadKmsg();
}

void RasIngest::ReadKmsg() {
  const std::uint64_t before = kmsg_->RecordsRead();
  Deliver(kmsg_->Poll(kKmsgSlice));
  kmsg_records_since_trim_ += kmsg_->RecordsRead() - before;
  if (kmsg_->RecordsRead() != before) {
    // Records may be open (a GHES block waits for its next line): complete
    // them once the log has been quiet for a while.
    kmsg_quiet_timer_->ArmAfter(options_.kmsg_quiet_flush);
  }
  stats_.kmsg_records = kmsg_->RecordsRead();
  stats_.kmsg_lost = kmsg_->LostRecords();
  stats_.kmsg_untrusted = kmsg_->UntrustedRecords();
  stats_.kmsg_before_start = kmsg_->BeforeStartEvents();
  stats_.kmsg_gaps = kmsg_->Gaps();
  stats_.kmsg_undecoded = kmsg_->UndecodedLines();
  if (kmsg_->Exhausted() && kmsg_records_since_trim_ > kKmsgSlice) {
    // A storm is over: hand the memory its batches used back to the
    // system, so that RSS after a storm is what rasd needs idle.
    ::malloc_trim(0);
    kmsg_records_since_trim_ = 0;
  }
  if (!kmsg_->Exhausted() && !kmsg_continuation_posted_) {
    // More is there: the rest after whatever else is ready.
    kmsg_continuation_posted_ = true;
    loop_.Post([this, alive = alive_] {
      if (!*alive) return;
      kmsg_continuation_posted_ = false;
      ReadKmsg();
    });
  }
}

void RasIngest::OnKmsgQuiet() {
  // Nothing new for kmsg_quiet_flush: whatever is open is complete.
  Deliver(kmsg_->Flush());
  stats_.kmsg_before_start = kmsg_->BeforeStartEvents();
}

void RasIngest::StartTracefs() {
  auto opened =
      ras::TracefsSource::Open(host_, options_.tracefs_instance, ras::TracefsSource::RasEvents());
  if (!opened) {
    // No tracefs, no RAS events in this kernel, or no privilege: the kernel
    // log still carries the same errors, in text. Another rasd owning the
    // instance is an operator's mistake worth a warning.
    const auto level =
        opened.error().code == ErrorCode::kUnavailable ? spdlog::level::warn : spdlog::level::info;
    // Logged once; the retries only update status.
    if (stats_.sources["tracefs"].state == "disabled") {
      RASD_LOG(level, "tracefs source not used for now: {}", opened.error().message);
    }
    NoteMissing("tracefs", opened.error(), tracefs_backoff_, *tracefs_retry_timer_);
    return;
  }
  tracefs_ = std::move(*opened);
  tracefs_backoff_.Reset();
  for (std::size_t index = 0; index < tracefs_->CpuCount(); ++index) {
    auto watch = loop_.WatchFd(tracefs_->CpuFd(index), EPOLLIN,
                               [this, index](std::uint32_t) { ReadTracefs(index); });
    if (!watch) {
      RASD_LOG_WARN("tracefs source disabled: cannot poll cpu{}: {}", index, watch.error().message);
      stats_.sources["tracefs"] = {
          "failed", fmt::format("cannot poll cpu{}: {}", index, watch.error().message)};
      tracefs_watches_.clear();
      tracefs_.reset();
      return;
    }
    tracefs_watches_.push_back(std::move(*watch));
  }
  std::string events;
  for (const auto& name : tracefs_->Events()) events += (events.empty() ? "" : ", ") + name;
  RASD_LOG_INFO("tracefs source: {} ({} CPUs): {}", tracefs_->InstanceDir().string(),
               tracefs_->CpuCount(), events);
  stats_.tracefs_active = true;
  stats_.sources["tracefs"] = {"active", tracefs_->InstanceDir().string() + ": " + events};
}

void RasIngest::ReadTracefs(std::size_t cpu) {
  Deliver(tracefs_->ReadEvents(cpu));
  stats_.tracefs_pages = tracefs_->GetStats().pages;
  stats_.tracefs_events = tracefs_->GetStats().events;
}

bool RasIngest::SeenFile(const std::string& key) const {
  // A store that cannot answer: report again rather than lose a crash.
  auto cursor = store_.LoadCursor(std::string(kSeenFilePrefix) + key);
  return cursor && cursor->has_value();
}

void RasIngest::NoteMissing(const std::string& name, const Error& error, SourceBackoff& backoff,
                            common::Timer& retry) {
  const auto delay = backoff.Next();
  auto state = SourceFailure(error);
  state.reason += fmt::format("; looked for again in {} s", delay.count());
  stats_.sources[name] = std::move(state);
  retry.ArmAfter(delay);
}

void RasIngest::CheckPstore() {
  auto records = ras::FindPstoreRecords(host_);
  if (!records) {
    NoteMissing("pstore", records.error(), pstore_backoff_, *pstore_timer_);
    return;
  }
  // Found: read once. Dumps appear only at boot, and systemd-pstore moving
  // them after this read is harmless: a moved file keeps its key.
  pstore_backoff_.Reset();
  std::vector<ras::RasEvent> events;
  std::vector<ras::SourceCursor> seen;
  std::size_t fresh = 0;
  const auto now = host_.GetClock().Wall();
  for (const auto& record : *records) {
    if (record.IsNew([this](const std::string& key) { return SeenFile(key); })) {
      ++fresh;
      auto decoded = ras::DecodePstoreRecord(record, codes_, now);
      events.insert(events.end(), std::make_move_iterator(decoded.begin()),
                    std::make_move_iterator(decoded.end()));
    }
    for (const auto& key : record.AllKeys()) {
      if (!SeenFile(key)) seen.push_back({std::string(kSeenFilePrefix) + key, boot_id_, "read"});
    }
  }
  stats_.crash_records_read += fresh;
  stats_.sources["pstore"] = {
      "active", fmt::format("{} crash dump(s) in {} and {}, {} new: {} RAS record(s)",
                            records->size(), host_.Resolve(ras::kPstoreDir).string(),
                            host_.Resolve(ras::kPstoreArchiveDir).string(), fresh, events.size())};
  if (!events.empty()) {
    RASD_LOG_WARN("pstore: {} RAS record(s) from a previous boot in {} new crash dump(s)",
                 events.size(), fresh);
  }
  Deliver(std::move(events), std::move(seen));
}

void RasIngest::CheckBert() {
  auto table = host_.ReadFile(kBertTable, 16 << 20);
  if (!table) {
    NoteMissing("bert", table.error(), bert_backoff_, *bert_timer_);
    return;
  }
  bert_backoff_.Reset();
  const std::string key = ras::ContentKey("BERT", *table);
  if (SeenFile(key)) {
    stats_.sources["bert"] = {"active", fmt::format("{}: read before ({} bytes)",
                                                    host_.Resolve(kBertTable).string(),
                                                    table->size())};
    return;
  }
  auto events = ras::DecodeBert(
      std::span(reinterpret_cast<const std::uint8_t*>(table->data()), table->size()),
      host_.GetClock().Wall());
  ++stats_.crash_records_read;
  stats_.sources["bert"] = {"active", fmt::format("{}: {} error record(s) from the previous boot",
                                                  host_.Resolve(kBertTable).string(),
                                                  events.size())};
  if (!events.empty()) RASD_LOG_WARN("BERT: {} error record(s) from the previous boot", events.size());
  Deliver(std::move(events), {{std::string(kSeenFilePrefix) + key, boot_id_, "read"}});
}

void RasIngest::ArmEdac() {
  if (stats_.edac_controllers > 0) {
    edac_backoff_.Reset();
    stats_.sources["edac"] = {"active", fmt::format("{} memory controller(s) polled every {} ms",
                                                    stats_.edac_controllers,
                                                    options_.edac_poll.count())};
    edac_timer_->ArmAfter(options_.edac_poll);
    return;
  }
  // EDAC has no notification: without controllers, look now and then
  // whether a driver has brought some.
  const auto delay = edac_backoff_.Next();
  stats_.sources["edac"] = {
      "absent", fmt::format("no memory controller under {}; looked for again in {} s",
                            host_.Resolve("/sys/devices/system/edac/mc").string(), delay.count())};
  edac_timer_->ArmAfter(delay);
}

void RasIngest::PollEdac() {
  Deliver(edac_->Poll());
  stats_.edac_controllers = edac_->Last().controllers.size();
  ArmEdac();
}

void RasIngest::ArmInfiniband() {
  const std::size_t devices = infiniband_->Last().devices.size();
  if (infiniband_->Last().unreadable) {
    stats_.sources["infiniband"] = {
        "failed", fmt::format("cannot list {} (permissions?): the last reading stands, looked at "
                              "again in {} ms",
                              host_.Resolve("/sys/class/infiniband").string(),
                              options_.infiniband_poll.count())};
    infiniband_timer_->ArmAfter(options_.infiniband_poll);
    return;
  }
  if (devices > 0) {
    infiniband_backoff_.Reset();
    std::size_t ports = 0;
    for (const auto& [name, device] : infiniband_->Last().devices) ports += device.ports.size();
    stats_.sources["infiniband"] = {
        "active", fmt::format("{} RDMA device(s), {} port(s), polled every {} ms", devices, ports,
                              options_.infiniband_poll.count())};
    infiniband_timer_->ArmAfter(options_.infiniband_poll);
    return;
  }
  const auto delay = infiniband_backoff_.Next();
  stats_.sources["infiniband"] = {
      "absent", fmt::format("no RDMA device under {}; looked for again in {} s",
                            host_.Resolve("/sys/class/infiniband").string(), delay.count())};
  infiniband_timer_->ArmAfter(delay);
}

void RasIngest::UpdateNicAffinity() {
  std::set<std::string> names;
  for (const auto& [name, device] : infiniband_->Last().devices) names.insert(name);
  if (names == affinity_of_) return;
  affinity_of_ = names;
  nic_affinity_.clear();
  std::vector<std::pair<int, ras::PciPlacement>> accelerators;
  for (const auto& device : runtime_.Devices()) {
    if (auto placement = ras::ReadPciPlacement(host_, device->Properties().pci_bdf))
      accelerators.emplace_back(device->Index(), std::move(*placement));
  }
  for (const auto& [name, device] : infiniband_->Last().devices) {
    if (!device.pci_bdf) continue;
    auto nic = ras::ReadPciPlacement(host_, *device.pci_bdf);
    if (!nic) continue;
    auto affinity = ras::AcceleratorsOfNic(*nic, accelerators);
    if (!affinity.devices.empty()) {
      RASD_LOG_INFO("RDMA device {} ({}) serves device(s) {}: {}", name, *device.pci_bdf,
                    fmt::join(affinity.devices, ", "), affinity.how);
    }
    nic_affinity_[name] = std::move(affinity);
  }
}

std::vector<RasIngest::RdmaPort> RasIngest::RdmaPortsOf(int device) const {
  std::vector<RdmaPort> ports;
  if (!infiniband_) return ports;
  for (const auto& [name, affinity] : nic_affinity_) {
    if (std::find(affinity.devices.begin(), affinity.devices.end(), device) ==
        affinity.devices.end())
      continue;
    auto found = infiniband_->Last().devices.find(name);
    if (found == infiniband_->Last().devices.end()) continue;
    for (const auto& [number, port] : found->second.ports)
      ports.push_back({name, number, affinity.how});
  }
  return ports;
}

void RasIngest::PollInfiniband() {
  auto events = infiniband_->Poll();
  UpdateNicAffinity();
  // People see which accelerators a NIC's fault reaches (the event names
  // the NIC by its PCI address).
  for (auto& event : events) {
    if (!event.pci_bdf) continue;
    for (const auto& [name, device] : infiniband_->Last().devices) {
      if (device.pci_bdf != event.pci_bdf) continue;
      auto affinity = nic_affinity_.find(name);
      if (affinity == nic_affinity_.end() || affinity->second.devices.empty()) break;
      event.summary += fmt::format(" [serves device(s) {}: {}]",
                                   fmt::join(affinity->second.devices, ", "), affinity->second.how);
      break;
    }
  }
  Deliver(std::move(events));
  {
    std::lock_guard lock(infiniband_mutex_);
    infiniband_published_ = infiniband_->Last();
  }
  if (link_observer_ && !infiniband_->Last().unreadable) {
    std::map<int, std::vector<std::string>> down;
    for (const auto& [name, affinity] : nic_affinity_) {
      auto device = infiniband_->Last().devices.find(name);
      if (device == infiniband_->Last().devices.end()) continue;
      for (int accelerator : affinity.devices) {
        auto& ports = down[accelerator];
        for (const auto& [number, port] : device->second.ports) {
          // Unreadable state: not evidence either way.
          if (!port.state || !port.phys_state) continue;
          if (port.state->id != 4 || port.phys_state->id != 5)
            ports.push_back(fmt::format("{} port {}", name, number));
        }
      }
    }
    link_observer_("RDMA", down, {});
  }
  ArmInfiniband();
}

ras::InfinibandSnapshot RasIngest::InfinibandPorts() const {
  std::lock_guard lock(infiniband_mutex_);
  return infiniband_published_;
}

void RasIngest::OnDriverEvents() {
  std::uint64_t count = 0;
  (void)::read(driver_eventfd_.Get(), &count, sizeof count);
  DrainDriverEvents();
}

void RasIngest::DrainDriverEvents() {
  std::deque<std::pair<drivers::DriverErrorEvent, std::string_view>> pending;
  {
    std::lock_guard lock(driver_mutex_);
    pending.swap(driver_events_);
  }
  std::vector<ras::RasEvent> events;
  events.reserve(pending.size());
  std::set<std::string> links_changed;
  links_changed.swap(link_kinds_unannounced_);
  for (const auto& [event, reporter] : pending) {
    events.push_back(ras::EventFromDriver(event, reporter, codes_));
    if (event.kind == drivers::DriverErrorKind::kLinkCorrected && event.link) {
      if (const auto device = LinkDevice(event)) {
        stats_.link_errors[{*device, std::string(drivers::LinkKindName(event.link->kind)),
                            event.link->counter}] += event.count;
      }
      continue;
    }
    if ((event.kind != drivers::DriverErrorKind::kLinkDown &&
         event.kind != drivers::DriverErrorKind::kLinkUp) ||
        !event.link)
      continue;
    const auto device = LinkDevice(event);
    if (!device) continue;
    const std::string kind(drivers::LinkKindName(event.link->kind));
    auto& down = device_links_down_[kind][*device];
    if (event.kind == drivers::DriverErrorKind::kLinkDown) {
      down.insert(event.link->index);
    } else {
      down.erase(event.link->index);
    }
    if (event.link->kind == drivers::LinkKind::kNvlink)
      nvlinks_unconfirmed_[*device].erase(event.link->index);
    links_changed.insert(kind);
  }
  // Stored before LinkHealth acts on them.
  Deliver(std::move(events));
  if (!link_observer_) return;
  for (const auto& kind : links_changed) {
    std::map<int, std::vector<std::string>> down, unconfirmed;
    for (const auto& [device, links] : device_links_down_[kind]) {
      auto& names = down[device];
      for (unsigned link : links) names.push_back(fmt::format("{} {}", kind, link));
    }
    if (kind == drivers::LinkKindName(drivers::LinkKind::kNvlink)) {
      for (const auto& [device, links] : nvlinks_unconfirmed_) {
        for (unsigned link : links) unconfirmed[device].push_back(fmt::format("{} {}", kind, link));
      }
    }
    link_observer_(kind, down, unconfirmed);
  }
}

std::optional<int> RasIngest::LinkDevice(const drivers::DriverErrorEvent& event) const {
  if (event.device >= 0) {
    if (runtime_.GetDevice(event.device)) return event.device;
    return std::nullopt;
  }
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& device : runtime_.Devices()) {
    const auto& bdf = device->Properties().pci_bdf;
    if (!bdf.empty() && same(bdf, event.pci_bdf)) return device->Index();
  }
  return std::nullopt;
}

void RasIngest::Deliver(std::vector<ras::RasEvent> events, std::vector<ras::SourceCursor> seen) {
  std::vector<ras::SourceCursor> cursors = std::move(seen);
  const std::string position = kmsg_ ? kmsg_->Cursor().position : std::string();
  if (events.empty() && cursors.empty() && position == saved_kmsg_position_) return;
  if (kmsg_) cursors.push_back(kmsg_->Cursor());
  saved_kmsg_position_ = position;
  sink_(std::move(events), std::move(cursors));
}

nlohmann::json RasIngest::Stats::ToJson() const {
  nlohmann::json source_states = nlohmann::json::object();
  for (const auto& [name, source] : sources)
    source_states[name] = {{"state", source.state}, {"reason", source.reason}};
  nlohmann::json json = {{"kmsg_active", kmsg_active},
                         {"kmsg_records", kmsg_records},
                         {"kmsg_lost", kmsg_lost},
                         {"kmsg_untrusted", kmsg_untrusted},
                         {"kmsg_before_start", kmsg_before_start},
                         {"tracefs_active", tracefs_active},
                         {"tracefs_pages", tracefs_pages},
                         {"tracefs_events", tracefs_events},
                         {"nvml_gpus", nvml_gpus},
                         {"nvml_reports", nvml_reports},
                         {"edac_controllers", edac_controllers},
                         {"crash_records_read", crash_records_read}};
  json["sources"] = std::move(source_states);
  return json;
}

Result<std::vector<std::int64_t>> RasIngest::ComputeProcesses(std::string_view pci_bdf) const {
  if (!nvml_) {
    const auto source = stats_.sources.find("nvml");
    return Fail(ErrorCode::kUnavailable,
                fmt::format("NVML is not in use here ({})", source != stats_.sources.end()
                                                                ? source->second.reason
                                                                : "not started"));
  }
  return nvml_->ComputeProcesses(pci_bdf);
}

RasIngest::Stats RasIngest::GetStats() const {
  Stats stats = stats_;
  if (nvml_) stats.nvml_reports = nvml_->Reports();
  return stats;
}

std::size_t RasIngest::InjectKernelLog(std::string_view text) {
  std::vector<ras::RasEvent> events;
  const auto now = host_.GetClock().Wall();
  for (const auto& record : ras::ScanKernelLog(text, codes_))
    events.push_back(ras::EventFromRecord(record, "inject", now));
  const std::size_t count = events.size();
  Deliver(std::move(events));
  return count;
}

ras::EdacSnapshot RasIngest::EdacCounters() const {
  return edac_ ? edac_->Last() : ras::EdacSnapshot{};
}

}  // namespace rasd::daemon
