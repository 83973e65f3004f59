#include "rasd/drivers_shim/nvml_monitor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "nvml_api.h"
#include "rasd/common/logging.h"
#include "rasd/common/real_time.h"

namespace rasd::drivers {
namespace nvml {

Result<Api> Api::Load(const std::string& library_name) {
  auto library = common::DynamicLibrary::Open(library_name);
  if (!library) return Fail(library.error());
  Api api{.library = std::move(*library)};
  const struct {
    Status bound;
  } bindings[] = {
      {api.library.Bind(api.Init, "nvmlInit_v2")},
      {api.library.Bind(api.Shutdown, "nvmlShutdown")},
      {api.library.Bind(api.ErrorString, "nvmlErrorString")},
      {api.library.Bind(api.DeviceGetCount, "nvmlDeviceGetCount_v2")},
      {api.library.Bind(api.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2")},
      {api.library.Bind(api.DeviceGetName, "nvmlDeviceGetName")},
      {api.library.Bind(api.DeviceGetUuid, "nvmlDeviceGetUUID")},
      {api.library.Bind(api.DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3")},
      {api.library.Bind(api.DeviceGetSupportedEventTypes, "nvmlDeviceGetSupportedEventTypes")},
      {api.library.Bind(api.DeviceRegisterEvents, "nvmlDeviceRegisterEvents")},
      {api.library.Bind(api.EventSetCreate, "nvmlEventSetCreate")},
      {api.library.Bind(api.EventSetWait, "nvmlEventSetWait_v2")},
      {api.library.Bind(api.EventSetFree, "nvmlEventSetFree")},
      {api.library.Bind(api.DeviceGetTotalEccErrors, "nvmlDeviceGetTotalEccErrors")},
      {api.library.Bind(api.DeviceGetRetiredPages, "nvmlDeviceGetRetiredPages")},
      {api.library.Bind(api.DeviceGetRemappedRows, "nvmlDeviceGetRemappedRows")},
      {api.library.Bind(api.DeviceGetPcieReplayCounter, "nvmlDeviceGetPcieReplayCounter")},
  };
  for (const auto& binding : bindings) {
    if (!binding.bound) {
      return Fail(ErrorCode::kUnavailable, fmt::format("{} is not a usable NVML: {}", library_name,
                                                       binding.bound.error().message));
    }
  }
  // The process list is evidence for kill-consumer only: a library without
  // it still reports errors.
  if (!api.library.Bind(api.DeviceGetComputeRunningProcessesV2,
                        "nvmlDeviceGetComputeRunningProcesses_v2")) {
    api.DeviceGetComputeRunningProcessesV2 = nullptr;
    if (!api.library.Bind(api.DeviceGetComputeRunningProcessesV1,
                          "nvmlDeviceGetComputeRunningProcesses"))
      api.DeviceGetComputeRunningProcessesV1 = nullptr;
  }
  // NVLink polling only: a library from before NVLink (or a stand-in
  // without it) still reports everything else.
  if (!api.library.Bind(api.DeviceGetNvLinkState, "nvmlDeviceGetNvLinkState") ||
      !api.library.Bind(api.DeviceGetNvLinkErrorCounter, "nvmlDeviceGetNvLinkErrorCounter")) {
    api.DeviceGetNvLinkState = nullptr;
    api.DeviceGetNvLinkErrorCounter = nullptr;
  }
  // The recovery action only: older drivers report the rest without it.
  if (!api.library.Bind(api.DeviceGetFieldValues, "nvmlDeviceGetFieldValues"))
    api.DeviceGetFieldValues = nullptr;
  return api;
}

std::string Api::Describe(const char* call, Return code) const {
  const char* text = ErrorString != nullptr ? ErrorString(code) : nullptr;
  return fmt::format("{}: {} ({})", call, text != nullptr ? text : "unknown error", code);
}

}  // namespace nvml

namespace {

// NVML prints "00000000:07:00.0"; rasd and the kernel print "0000:07:00.0".
std::string NormalizeBdf(const nvml::PciInfo& info) {
  unsigned function = 0;
  const char* dot = std::strrchr(info.bus_id, '.');
  if (dot != nullptr) function = static_cast<unsigned>(std::strtoul(dot + 1, nullptr, 16));
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", info.domain, info.bus, info.device, function);
}

// PCI addresses as NVML and the runtime print them may differ in case.
bool EqualBdf(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The pids of nvmlDeviceGetComputeRunningProcesses (either version): asked
// with room for 64, then again with the size NVML says it needs, as the
// list may grow between two calls.
template <typename Info>
Result<std::vector<std::int64_t>> ListProcesses(nvml::Return (*list)(nvml::Device, unsigned int*,
                                                                     Info*),
                                                nvml::Device handle) {
  std::vector<Info> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto count = static_cast<unsigned int>(infos.size());
    const nvml::Return rc = list(handle, &count, infos.data());
    if (rc == nvml::kErrorInsufficientSize) {
      infos.resize(std::max<std::size_t>(count + 16, infos.size() * 2));
      continue;
    }
    if (rc != nvml::kSuccess) {
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("nvmlDeviceGetComputeRunningProcesses failed ({})", rc));
    }
    std::vector<std::int64_t> pids;
    for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
      if (infos[i].pid != 0) pids.push_back(infos[i].pid);  // 0: a process out of our sight
    }
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    return pids;
  }
  return Fail(ErrorCode::kUnavailable,
              "nvmlDeviceGetComputeRunningProcesses: the list kept growing");
}

// What one GPU's counters read last time; absent values were unsupported.
struct CounterBaseline {
  std::optional<unsigned long long> corrected;
  std::optional<unsigned long long> uncorrected;
  // Per retirement cause (multiple single-bit, double-bit).
  std::set<unsigned long long> retired_pages[2];
  bool retired_known[2] = {false, false};
  std::optional<unsigned> remapped_rows;  // corrected + uncorrected
  bool remap_failed = false;
  std::optional<unsigned> pcie_replays;
  // The driver's recovery action (nvml::kFieldGpuRecoveryAction); 0 until
  // read: unlike a counter, a pending action at start is news.
  unsigned recovery_action = 0;
  // By NVLink number, the links the GPU has (state readable at least once).
  struct Link {
    std::optional<bool> up;  // absent: never read
    std::optional<unsigned long long> counters[nvml::kNvlinkErrorCounters];
  };
  std::map<unsigned, Link> nvlinks;
};

// Shared by the monitor's handle and its thread: a thread stuck in an NVML
// call that never returns is left behind at stop, and what it uses lives
// until it returns (if ever).
class NvmlMonitorImpl final : public NvmlMonitor,
                              public std::enable_shared_from_this<NvmlMonitorImpl> {
 public:
  NvmlMonitorImpl(nvml::Api api, const NvmlMonitorOptions& options, ErrorListener listener)
      : api_(std::move(api)), options_(options), listener_(std::move(listener)) {}

  // Runs on the handle's owner, or on a thread left behind as it returns.
  ~NvmlMonitorImpl() override {
    if (events_ != nullptr) (void)api_.EventSetFree(events_);
    if (initialized_) (void)api_.Shutdown();
  }

  // Ends the thread; one stuck in a call past `stop_wait` is left behind
  // (detached), and returns false. No report reaches the listener after
  // this returns.
  bool Stop() {
    {
      std::scoped_lock lock(deliver_mutex_, mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (!thread_.joinable()) return true;
    std::unique_lock lock(mutex_);
    if (!exited_cv_.wait_for(lock, options_.stop_wait,
                             [this] { return exited_ && pollers_alive_ == 0; })) {
      lock.unlock();
      const auto calls = calls_.Running();
      RASD_LOG_WARN(
          "NVML: stopping without waiting for {} ({} s): left to return on its own",
          calls.empty() ? std::string("the monitor's thread")
                        : calls.front().function + " on " + calls.front().device,
          calls.empty() ? 0.0 : std::chrono::duration<double>(calls.front().running).count());
      // The thread may return into the library and free what it holds
      // (event set, NVML) whenever the call ends; the library itself is
      // never unloaded under it.
      api_.library.KeepLoadedForever();
      thread_.detach();
      lock.lock();
      for (auto& poller : pollers_) poller.detach();
      return false;
    }
    lock.unlock();
    thread_.join();
    for (auto& poller : pollers_) poller.join();
    return true;
  }

  // Starts the monitor's thread, which opens NVML and then watches it, and
  // waits `start_wait` for the opening: a driver wedged in nvmlInit or in a
  // GPU's first query must not hold rasd's start. Past it the thread is
  // left behind, as a stop leaves it, and the start fails with kTimeout
  // naming the call.
  Status Open() {
    open_began_ = std::chrono::steady_clock::now();  // before the thread: it reads it
    thread_ = std::thread([self = shared_from_this()] {
      Status opened = self->Initialize();
      bool run = false;
      {
        std::lock_guard lock(self->mutex_);
        self->opened_ = std::move(opened);
        run = self->opened_->has_value() && !self->stopping_;
        self->exited_cv_.notify_all();
      }
      if (run) {
        self->StartPollers();
        self->Run();
      }
      std::lock_guard lock(self->mutex_);
      self->exited_ = true;
      self->exited_cv_.notify_all();
    });
    std::unique_lock lock(mutex_);
    // The GPUs' opening ends by 7/4 start_wait (OpenGpus), whatever
    // nvmlInit took: Start returns within twice start_wait.
    if (exited_cv_.wait_for(lock, options_.start_wait * 2,
                            [this] { return opened_.has_value(); })) {
      Status opened = *opened_;
      lock.unlock();
      if (!opened) thread_.join();
      return opened;
    }
    stopping_ = true;
    lock.unlock();
    const auto calls = calls_.Running();
    const std::string stuck =
        calls.empty() ? std::string("opening NVML")
                      : calls.front().function +
                            (calls.front().device.empty() ? "" : " on " + calls.front().device);
    api_.library.KeepLoadedForever();
    thread_.detach();
    return Fail(ErrorCode::kTimeout,
                fmt::format("{} has not returned within {} ms: a wedged driver; left to return "
                            "on its own, and NVML is not used",
                            stuck, (options_.start_wait * 2).count()));
  }

  Status Initialize() {
    nvml::Return init_rc = nvml::kSuccess;
    {
      const auto call = calls_.Begin("", "nvmlInit_v2");
      init_rc = api_.Init();
    }
    if (init_rc != nvml::kSuccess) {
      return Fail(ErrorCode::kUnavailable, api_.Describe("nvmlInit", init_rc));
    }
    initialized_ = true;
    unsigned count = 0;
    nvml::Return count_rc = nvml::kSuccess;
    {
      const auto call = calls_.Begin("", "nvmlDeviceGetCount_v2");
      count_rc = api_.DeviceGetCount(&count);
    }
    if (nvml::Return rc = count_rc; rc != nvml::kSuccess) {
      return Fail(ErrorCode::kUnavailable, api_.Describe("nvmlDeviceGetCount", rc));
    }
    if (api_.DeviceGetNvLinkState == nullptr) {
      RASD_LOG_INFO(
          "NVML: {} has no NVLink queries (nvmlDeviceGetNvLinkState, "
          "nvmlDeviceGetNvLinkErrorCounter): NVLinks are not polled",
          api_.library.name());
    }
    if (nvml::Return rc = api_.EventSetCreate(&events_); rc != nvml::kSuccess) {
      RASD_LOG_WARN("NVML: no event set ({}); reading counters only",
                   api_.Describe("nvmlEventSetCreate", rc));
      events_ = nullptr;
    }
    counted_ = count;
    OpenGpus(count);
    return {};
  }

  // What opening one GPU found.
  struct OpenedGpu {
    nvml::Device handle = nullptr;
    NvmlGpu gpu;
    CounterBaseline baseline;
  };
  // What the GPUs' opening threads share with the monitor's: a thread left
  // inside a call keeps it (and the monitor) alive until the call returns.
  struct Opening {
    std::mutex mutex;
    std::condition_variable done;
    // By NVML index: unset while opening, nullopt where NVML refused the GPU.
    std::vector<std::optional<std::optional<OpenedGpu>>> results;  // guarded by mutex
    bool abandoned = false;  // the monitor went on without the rest; guarded by mutex
  };

  // Opens each GPU on a thread of its own and waits for them (up to 7/4
  // start_wait after the start):
  // a GPU whose first call does not return (a wedged driver) is left
  // unopened, its call in RunningCalls named "GPU <index>", and the others
  // are watched. Only the monitor's thread, in Initialize.
  void OpenGpus(unsigned count) {
    auto opening = std::make_shared<Opening>();
    opening->results.resize(count);
    for (unsigned index = 0; index < count; ++index) {
      std::thread([self = shared_from_this(), opening, index] {
        auto opened = self->OpenGpu(index, *opening);
        std::lock_guard lock(opening->mutex);
        opening->results[index] = std::move(opened);
        opening->done.notify_all();
      }).detach();
    }
    // Until 7/4 start_wait after the start, whatever nvmlInit took: Open
    // waits twice start_wait for all of it, and must find the opening over.
    const auto until = open_began_ + options_.start_wait * 7 / 4;
    std::unique_lock lock(opening->mutex);
    opening->done.wait_until(lock, until, [&] {
      return std::all_of(opening->results.begin(), opening->results.end(),
                         [](const auto& result) { return result.has_value(); });
    });
    opening->abandoned = true;
    for (unsigned index = 0; index < count; ++index) {
      auto& result = opening->results[index];
      if (!result) {
        unopened_.push_back(index);
        RASD_LOG_WARN(
            "NVML: GPU {} not watched: its opening has not returned within {} ms (a "
            "wedged driver)",
            index, options_.start_wait.count());
        continue;
      }
      if (!*result) continue;
      handles_.push_back((*result)->handle);
      gpus_.push_back(std::move((*result)->gpu));
      baselines_.push_back(std::move((*result)->baseline));
    }
  }

  // One GPU's handle, names, PCI address, events and first counters; on a
  // thread of its own. nullopt where NVML refuses the GPU.
  std::optional<OpenedGpu> OpenGpu(unsigned index, Opening& opening) {
    OpenedGpu opened;
    opened.gpu.index = index;
    NvmlGpu& gpu = opened.gpu;
    // Until its PCI address is known the GPU is named by NVML's index.
    const std::string by_index = fmt::format("GPU {}", index);
    nvml::Return handle_rc = nvml::kSuccess;
    {
      const auto call = calls_.Begin(by_index, "nvmlDeviceGetHandleByIndex_v2");
      handle_rc = api_.DeviceGetHandleByIndex(index, &opened.handle);
    }
    if (handle_rc != nvml::kSuccess) {
      // A GPU NVML cannot open (lost, no permission) is not a reason to
      // watch none of the others.
      RASD_LOG_WARN("NVML: GPU {} skipped: {}", index,
                    api_.Describe("nvmlDeviceGetHandleByIndex", handle_rc));
      return std::nullopt;
    }
    char text[96] = {};
    {
      const auto call = calls_.Begin(by_index, "nvmlDeviceGetName");
      if (api_.DeviceGetName(opened.handle, text, sizeof text - 1) == nvml::kSuccess)
        gpu.name = text;
    }
    std::memset(text, 0, sizeof text);
    {
      const auto call = calls_.Begin(by_index, "nvmlDeviceGetUuid");
      if (api_.DeviceGetUuid(opened.handle, text, sizeof text - 1) == nvml::kSuccess)
        gpu.uuid = text;
    }
    nvml::PciInfo pci{};
    nvml::Return pci_rc = nvml::kSuccess;
    {
      const auto call = calls_.Begin(by_index, "nvmlDeviceGetPciInfo");
      pci_rc = api_.DeviceGetPciInfo(opened.handle, &pci);
    }
    if (pci_rc == nvml::kSuccess) {
      gpu.pci_bdf = NormalizeBdf(pci);
    } else {
      RASD_LOG_WARN("NVML: GPU {} has no PCI address ({}); its reports name no device", index,
                    api_.Describe("nvmlDeviceGetPciInfo", pci_rc));
    }
    {
      std::lock_guard lock(opening.mutex);
      if (opening.abandoned) return std::nullopt;
    }
    // A GPU that answers after the monitor went on without it may still be
    // registered here (the check above and the registration are not one
    // step, and an NVML call is never made under a lock the monitor waits
    // on): its events name a handle the monitor does not watch, and are
    // dropped (WaitForEvent). It is not watched until a restart.
    if (events_ != nullptr) gpu.event_types = Register(opened.handle, gpu);
    opened.baseline = ReadCounters(opened.handle, {}, /*report=*/false, gpu);
    for (const auto& [link, state] : opened.baseline.nvlinks) {
      if (state.up == false) gpu.nvlinks_inactive_at_start.push_back(link);
    }
    return opened;
  }

  std::vector<unsigned> Unopened() const override { return unopened_; }
  unsigned Counted() const override { return counted_; }
  const std::vector<NvmlGpu>& Gpus() const override { return gpus_; }
  bool PollsNvlinks() const override { return api_.DeviceGetNvLinkState != nullptr; }
  std::uint64_t Reports() const override { return reports_.load(std::memory_order_relaxed); }
  std::vector<ProbeCalls::Call> RunningCalls() const override { return calls_.Running(); }

  Result<std::vector<std::int64_t>> ComputeProcesses(std::string_view pci_bdf) const override {
    std::size_t at = 0;
    while (at < gpus_.size() && !EqualBdf(gpus_[at].pci_bdf, pci_bdf)) ++at;
    if (at == gpus_.size()) {
      return Fail(ErrorCode::kNotFound, fmt::format("NVML has no GPU at {}", pci_bdf));
    }
    // On a thread of its own: the caller (the actuator, on rasd's loop)
    // waits query_wait at most, and a call that does not return holds that
    // thread alone. One per GPU at a time, so a wedged GPU holds one.
    struct Listing {
      std::mutex mutex;
      std::condition_variable done;
      std::optional<Result<std::vector<std::int64_t>>> result;  // guarded by mutex
    };
    {
      std::lock_guard lock(mutex_);
      if (listing_.contains(at)) {
        return Fail(ErrorCode::kTimeout,
                    fmt::format("an earlier nvmlDeviceGetComputeRunningProcesses on {} has not "
                                "returned",
                                gpus_[at].pci_bdf));
      }
      listing_.insert(at);
    }
    auto listing = std::make_shared<Listing>();
    std::thread([self = shared_from_this(), at, listing] {
      auto listed = self->ListProcessesNow(at);
      {
        // Before the answer: a caller that has it may ask again at once.
        std::lock_guard lock(self->mutex_);
        self->listing_.erase(at);
      }
      {
        std::lock_guard lock(listing->mutex);
        listing->result = std::move(listed);
      }
      listing->done.notify_all();
    }).detach();
    std::unique_lock lock(listing->mutex);
    if (!listing->done.wait_for(lock, options_.query_wait,
                                [&] { return listing->result.has_value(); })) {
      // The thread keeps this monitor, and so the library, alive until
      // the call returns.
      return Fail(ErrorCode::kTimeout,
                  fmt::format("nvmlDeviceGetComputeRunningProcesses on {} has not returned "
                              "within {} ms",
                              gpus_[at].pci_bdf, options_.query_wait.count()));
    }
    return std::move(*listing->result);
  }

 private:
  Result<std::vector<std::int64_t>> ListProcessesNow(std::size_t at) const {
    const auto call = calls_.Begin(gpus_[at].pci_bdf, "nvmlDeviceGetComputeRunningProcesses");
    if (api_.DeviceGetComputeRunningProcessesV2 != nullptr) {
      return ListProcesses(api_.DeviceGetComputeRunningProcessesV2, handles_[at]);
    }
    if (api_.DeviceGetComputeRunningProcessesV1 != nullptr) {
      return ListProcesses(api_.DeviceGetComputeRunningProcessesV1, handles_[at]);
    }
    return Fail(ErrorCode::kUnavailable,
                fmt::format("{} lists no processes (no nvmlDeviceGetComputeRunningProcesses)",
                            api_.library.name()));
  }

  // An NVML call about `gpu`, seen in calls_ while it runs.
  template <typename Function, typename... Args>
  nvml::Return Probe(const NvmlGpu& gpu, std::string_view name, Function function,
                     Args... args) const {
    const auto call = calls_.Begin(gpu.pci_bdf, name);
    return function(args...);
  }

  std::uint64_t Register(nvml::Device handle, const NvmlGpu& gpu) {
    // Not single-bit ECC events: the corrected counter gives their exact
    // number, and both would report each error twice.
    constexpr unsigned long long kWanted =
        nvml::kEventTypeXidCriticalError | nvml::kEventTypeDoubleBitEccError;
    unsigned long long supported = 0;
    if (nvml::Return rc = Probe(gpu, "nvmlDeviceGetSupportedEventTypes",
                                api_.DeviceGetSupportedEventTypes, handle, &supported);
        rc != nvml::kSuccess) {
      RASD_LOG_INFO("NVML: GPU {} ({}) reports no event types ({}); counters only", gpu.index,
                   gpu.pci_bdf, api_.Describe("nvmlDeviceGetSupportedEventTypes", rc));
      return 0;
    }
    const unsigned long long types = supported & kWanted;
    if (types == 0) return 0;
    if (nvml::Return rc = Probe(gpu, "nvmlDeviceRegisterEvents", api_.DeviceRegisterEvents, handle,
                                types, events_);
        rc != nvml::kSuccess) {
      RASD_LOG_WARN("NVML: GPU {} ({}): {}; counters only", gpu.index, gpu.pci_bdf,
                   api_.Describe("nvmlDeviceRegisterEvents", rc));
      return 0;
    }
    return types;
  }

  // The events, on the monitor's thread; each GPU's counters on a thread of
  // its own (StartPollers), so that a call that does not return on one GPU
  // leaves the others polled on time, and holds one thread.
  void Run() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        if (stopping_) return;
        if (events_ == nullptr) {
          wake_.wait(lock, [this] { return stopping_; });
          return;
        }
      }
      WaitForEvent();
      FlushFloods();
    }
  }

  // Called once, on the monitor's thread, before Run.
  void StartPollers() {
    // Under the lock: a stop that gives up waiting detaches them under it.
    std::lock_guard starting(mutex_);
    pollers_alive_ = handles_.size();
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      pollers_.emplace_back([self = shared_from_this(), i] {
        self->Poll(i);
        std::lock_guard lock(self->mutex_);
        --self->pollers_alive_;
        self->exited_cv_.notify_all();
      });
    }
  }

  // One GPU's counters every counter_poll, until the stop.
  void Poll(std::size_t i) {
    // Real time: this thread owns its waits.
    while (true) {
      {
        const auto next_poll = common::Deadline::After(options_.counter_poll);
        std::unique_lock lock(mutex_);
        wake_.wait_until(lock, next_poll.When(), [this] { return stopping_; });
        if (stopping_) return;
      }
      baselines_[i] = ReadCounters(handles_[i], baselines_[i], /*report=*/true, gpus_[i]);
    }
  }

  void WaitForEvent() {
    nvml::EventData data{};
    const nvml::Return rc =
        api_.EventSetWait(events_, &data, static_cast<unsigned>(options_.event_wait.count()));
    if (rc == nvml::kErrorTimeout) return;
    if (rc != nvml::kSuccess) {
      // NVML reports a GPU lost here too; the counters and the kernel log
      // carry on. Do not spin on a persistent error.
      if (++wait_failures_ <= 3) {
        RASD_LOG_WARN("NVML: {}", api_.Describe("nvmlEventSetWait", rc));
      }
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, options_.event_wait, [this] { return stopping_; });
      return;
    }
    const NvmlGpu* gpu = nullptr;
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == data.device) gpu = &gpus_[i];
    }
    if (gpu == nullptr) return;
    DriverErrorEvent event = Report(*gpu);
    if (data.event_type & nvml::kEventTypeXidCriticalError) {
      event.kind = DriverErrorKind::kVendorCode;
      event.code_space = VendorCodeSpace::kNvidiaXid;
      event.vendor_code = static_cast<int>(data.event_data);
      event.message =
          fmt::format("NVML: Xid {} on GPU {} ({})", data.event_data, gpu->index, gpu->pci_bdf);
    } else if (data.event_type & nvml::kEventTypeDoubleBitEccError) {
      event.kind = DriverErrorKind::kVendorCode;
      event.code_space = VendorCodeSpace::kNvidiaXid;
      event.vendor_code = 48;  // the Xid the driver logs for a double-bit ECC error
      event.message =
          fmt::format("NVML: double-bit ECC error on GPU {} ({})", gpu->index, gpu->pci_bdf);
    } else if (data.event_type & nvml::kEventTypeSingleBitEccError) {
      event.kind = DriverErrorKind::kCorrectedEcc;
      event.message =
          fmt::format("NVML: single-bit ECC error on GPU {} ({})", gpu->index, gpu->pci_bdf);
    } else {
      return;
    }
    // One GPU flooding one code: counted, reported once a window.
    const auto at = static_cast<std::size_t>(gpu - gpus_.data());
    const auto key = std::make_pair(at, event.vendor_code.value_or(-1));
    if (auto flood = floods_.find(key); flood != floods_.end() && !flood->second.ends.Expired()) {
      ++flood->second.pending;
      return;
    }
    FlushFlood(key);
    floods_[key] = Flood{
        .ends = common::Deadline::After(options_.flood_window), .pending = 0, .sample = event};
    Deliver(event);
  }

  // Reports what a flood's window counted after its first (one report,
  // the exact count), and ends the window.
  void FlushFlood(const std::pair<std::size_t, int>& key) {
    auto flood = floods_.find(key);
    if (flood == floods_.end()) return;
    if (flood->second.pending > 0) {
      DriverErrorEvent event = flood->second.sample;
      event.count = flood->second.pending;
      event.message += fmt::format(" (and {} more within {} ms)", flood->second.pending,
                                   options_.flood_window.count());
      Deliver(event);
    }
    floods_.erase(flood);
  }

  // Ends the windows that are over.
  void FlushFloods() {
    std::vector<std::pair<std::size_t, int>> over;
    for (const auto& [key, flood] : floods_)
      if (flood.ends.Expired()) over.push_back(key);
    for (const auto& key : over) FlushFlood(key);
  }

  DriverErrorEvent Report(const NvmlGpu& gpu) const {
    DriverErrorEvent event;
    event.device = -1;
    event.pci_bdf = gpu.pci_bdf;
    return event;
  }

  void Deliver(const DriverErrorEvent& event) {
    std::lock_guard deliver(deliver_mutex_);  // Stop waits for a report being delivered
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;  // a call that returned after the stop: its listener is gone
    }
    reports_.fetch_add(1, std::memory_order_relaxed);
    if (listener_) listener_(event);
  }

  void DeliverCode(const NvmlGpu& gpu, VendorCodeSpace space, std::optional<int> code,
                   std::uint64_t count, std::string message) {
    DriverErrorEvent event = Report(gpu);
    event.kind = DriverErrorKind::kVendorCode;
    event.code_space = space;
    event.vendor_code = code;
    event.count = count;
    event.message = std::move(message);
    Deliver(event);
  }

  // The pages NVML lists as retired for `cause`; nullopt when it cannot say.
  std::optional<std::vector<unsigned long long>> RetiredPages(nvml::Device handle, int cause,
                                                              const NvmlGpu& gpu) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      unsigned count = 0;
      unsigned long long none = 0;  // NVML refuses a null buffer even to report the size
      const nvml::Return sized = Probe(gpu, "nvmlDeviceGetRetiredPages", api_.DeviceGetRetiredPages,
                                       handle, cause, &count, &none);
      if (sized == nvml::kSuccess && count == 0) return std::vector<unsigned long long>{};
      if (count == 0 || count > 65536) return std::nullopt;
      std::vector<unsigned long long> pages(count);
      unsigned filled = count;
      if (Probe(gpu, "nvmlDeviceGetRetiredPages", api_.DeviceGetRetiredPages, handle, cause,
                &filled, pages.data()) == nvml::kSuccess) {
        pages.resize(std::min<std::size_t>(filled, pages.size()));
        return pages;
      }
    }
    return std::nullopt;
  }

  // Reads every counter of one GPU; with `report`, increases over `last`
  // become reports. Unsupported counters stay absent.
  CounterBaseline ReadCounters(nvml::Device handle, const CounterBaseline& last, bool report,
                               const NvmlGpu& gpu) {
    CounterBaseline now;
    unsigned long long value = 0;
    if (Probe(gpu, "nvmlDeviceGetTotalEccErrors", api_.DeviceGetTotalEccErrors, handle,
              nvml::kMemoryErrorCorrected, nvml::kVolatileEcc, &value) == nvml::kSuccess) {
      now.corrected = value;
      if (report && last.corrected && value > *last.corrected) {
        DriverErrorEvent event = Report(gpu);
        event.kind = DriverErrorKind::kCorrectedEcc;
        event.count = value - *last.corrected;
        event.message = fmt::format("NVML: {} corrected ECC error(s) on GPU {} ({})", event.count,
                                    gpu.index, gpu.pci_bdf);
        Deliver(event);
      }
    }
    if (Probe(gpu, "nvmlDeviceGetTotalEccErrors", api_.DeviceGetTotalEccErrors, handle,
              nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &value) == nvml::kSuccess) {
      now.uncorrected = value;
      const bool events_cover_it = gpu.event_types & nvml::kEventTypeDoubleBitEccError;
      if (report && last.uncorrected && value > *last.uncorrected && !events_cover_it) {
        DeliverCode(gpu, VendorCodeSpace::kNvidiaXid, 48, value - *last.uncorrected,
                    fmt::format("NVML: {} uncorrected ECC error(s) on GPU {} ({})",
                                value - *last.uncorrected, gpu.index, gpu.pci_bdf));
      }
    }
    for (int cause : {nvml::kRetiredMultipleSbe, nvml::kRetiredDoubleBitEcc}) {
      const auto slot = static_cast<std::size_t>(cause);
      auto pages = RetiredPages(handle, cause, gpu);
      if (!pages) {
        // Unsupported, or the list grew between the size query and the
        // read: keep what was known, so nothing is reported twice.
        now.retired_pages[slot] = last.retired_pages[slot];
        now.retired_known[slot] = last.retired_known[slot];
        continue;
      }
      now.retired_known[slot] = true;
      for (unsigned long long page : *pages) {
        now.retired_pages[slot].insert(page);
        if (report && last.retired_known[slot] && !last.retired_pages[slot].contains(page)) {
          DeliverCode(gpu, VendorCodeSpace::kNvidiaXid, 63, 1,
                      fmt::format("NVML: GPU {} ({}) retired page 0x{:x} ({})", gpu.index,
                                  gpu.pci_bdf, page,
                                  cause == nvml::kRetiredDoubleBitEcc ? "double-bit ECC"
                                                                      : "repeated single-bit ECC"));
        }
      }
    }
    unsigned corrected_rows = 0, uncorrected_rows = 0, pending = 0, failed = 0;
    if (Probe(gpu, "nvmlDeviceGetRemappedRows", api_.DeviceGetRemappedRows, handle, &corrected_rows,
              &uncorrected_rows, &pending, &failed) == nvml::kSuccess) {
      now.remapped_rows = corrected_rows + uncorrected_rows;
      now.remap_failed = failed != 0;
      if (report && last.remapped_rows && *now.remapped_rows > *last.remapped_rows) {
        DeliverCode(gpu, VendorCodeSpace::kNvidiaXid, 63, *now.remapped_rows - *last.remapped_rows,
                    fmt::format("NVML: GPU {} ({}) remapped {} row(s){}", gpu.index, gpu.pci_bdf,
                                *now.remapped_rows - *last.remapped_rows,
                                pending != 0 ? "; a GPU reset is pending to apply them" : ""));
      }
      if (report && now.remap_failed && !last.remap_failed) {
        DeliverCode(gpu, VendorCodeSpace::kNvidiaXid, 64, 1,
                    fmt::format("NVML: GPU {} ({}) row remapping failed", gpu.index, gpu.pci_bdf));
      }
    }
    unsigned replays = 0;
    if (Probe(gpu, "nvmlDeviceGetPcieReplayCounter", api_.DeviceGetPcieReplayCounter, handle,
              &replays) == nvml::kSuccess) {
      now.pcie_replays = replays;
      if (report && last.pcie_replays && replays > *last.pcie_replays) {
        DeliverCode(gpu, VendorCodeSpace::kNone, std::nullopt, replays - *last.pcie_replays,
                    fmt::format("NVML: GPU {} ({}) PCIe replays +{}", gpu.index, gpu.pci_bdf,
                                replays - *last.pcie_replays));
      }
    }
    if (api_.DeviceGetNvLinkState != nullptr) ReadNvlinks(handle, last, report, gpu, now);
    now.recovery_action = last.recovery_action;
    nvml::FieldValue field{};
    field.field_id = nvml::kFieldGpuRecoveryAction;
    if (report && api_.DeviceGetFieldValues != nullptr &&
        Probe(gpu, "nvmlDeviceGetFieldValues", api_.DeviceGetFieldValues, handle, 1, &field) ==
            nvml::kSuccess &&
        field.nvml_return == nvml::kSuccess) {
      now.recovery_action = field.value.uiVal;
      // The same evidence as the Xid 154 the driver prints when the action
      // changes (the recovery table follows its action), also where that
      // line never reaches the kernel log rasd reads.
      if (now.recovery_action != 0 && now.recovery_action != last.recovery_action) {
        DriverErrorEvent event = Report(gpu);
        event.kind = DriverErrorKind::kVendorCode;
        event.code_space = VendorCodeSpace::kNvidiaXid;
        event.vendor_code = 154;
        event.vendor_action = static_cast<int>(now.recovery_action);
        event.message = fmt::format("NVML: GPU {} ({}) recovery action {}", gpu.index, gpu.pci_bdf,
                                    now.recovery_action);
        Deliver(event);
      }
    }
    return now;
  }

  DriverErrorEvent LinkReport(const NvmlGpu& gpu, DriverErrorKind kind, unsigned link) const {
    DriverErrorEvent event = Report(gpu);
    event.kind = kind;
    event.link = DeviceLink{.kind = LinkKind::kNvlink, .index = link};
    return event;
  }

  // Each NVLink's state and error counters. A link NVML says the GPU does
  // not have (NOT_SUPPORTED, INVALID_ARGUMENT) is skipped; one that fails
  // otherwise (the GPU lost) keeps its last reading, so that nothing is
  // reported twice and a failed query is not a link down. A link inactive
  // at the first reading is not reported: NVML reads a link that is not
  // cabled (a PCIe GPU without its bridge) as inactive, and such a GPU must
  // not leave its collectives; it is listed in NvmlGpu::nvlinks_inactive_at_start
  // and reported up if it comes up. A counter that went down was reset and is
  // re-based.
  void ReadNvlinks(nvml::Device handle, const CounterBaseline& last, bool report,
                   const NvmlGpu& gpu, CounterBaseline& now) {
    for (unsigned link = 0; link < nvml::kNvlinkMaxLinks; ++link) {
      const auto before = last.nvlinks.find(link);
      const CounterBaseline::Link* was = before != last.nvlinks.end() ? &before->second : nullptr;
      int active = 0;
      const nvml::Return rc =
          Probe(gpu, "nvmlDeviceGetNvLinkState", api_.DeviceGetNvLinkState, handle, link, &active);
      if (rc == nvml::kErrorNotSupported || rc == nvml::kErrorInvalidArgument) continue;
      CounterBaseline::Link& reading = now.nvlinks[link];
      if (rc != nvml::kSuccess) {
        if (was != nullptr) reading = *was;
        continue;
      }
      reading.up = active == nvml::kEnableStateEnabled;
      const bool first = was == nullptr || !was->up;
      if (first ? *reading.up && report : *reading.up != *was->up) {
        DriverErrorEvent event = LinkReport(
            gpu, *reading.up ? DriverErrorKind::kLinkUp : DriverErrorKind::kLinkDown, link);
        event.message = fmt::format("NVML: GPU {} ({}) NVLink {} {}", gpu.index, gpu.pci_bdf, link,
                                    *reading.up ? "up" : "down");
        Deliver(event);
      }
      for (int counter = 0; counter < nvml::kNvlinkErrorCounters; ++counter) {
        const auto slot = static_cast<std::size_t>(counter);
        unsigned long long value = 0;
        if (Probe(gpu, "nvmlDeviceGetNvLinkErrorCounter", api_.DeviceGetNvLinkErrorCounter, handle,
                  link, counter, &value) != nvml::kSuccess) {
          if (was != nullptr) reading.counters[slot] = was->counters[slot];
          continue;
        }
        reading.counters[slot] = value;
        if (!report || was == nullptr || !was->counters[slot] || value <= *was->counters[slot])
          continue;
        DriverErrorEvent event = LinkReport(gpu, DriverErrorKind::kLinkCorrected, link);
        event.link->counter = nvml::kNvlinkErrorCounterNames[slot];
        event.count = value - *was->counters[slot];
        event.message = fmt::format("NVML: GPU {} ({}) NVLink {} {} errors +{}", gpu.index,
                                    gpu.pci_bdf, link, event.link->counter, event.count);
        Deliver(event);
      }
    }
  }

  nvml::Api api_;
  const NvmlMonitorOptions options_;
  const ErrorListener listener_;
  bool initialized_ = false;  // nvmlInit succeeded: shut NVML down at the end
  nvml::EventSet events_ = nullptr;
  std::vector<nvml::Device> handles_;
  std::vector<NvmlGpu> gpus_;
  std::vector<unsigned> unopened_;  // NVML indices whose opening did not return; fixed after Start
  unsigned counted_ = 0;            // nvmlDeviceGetCount's; fixed after Start
  std::chrono::steady_clock::time_point open_began_;  // set before the monitor's thread starts
  // By GPU: each its poller's, after Start.
  std::vector<CounterBaseline> baselines_;
  // The monitor thread's: by GPU (its place in gpus_) and code, the event
  // window open.
  struct Flood {
    common::Deadline ends = common::Deadline::Now();
    std::uint64_t pending = 0;  // after the first, reported when it ends
    DriverErrorEvent sample;
  };
  std::map<std::pair<std::size_t, int>, Flood> floods_;
  std::atomic<std::uint64_t> reports_{0};
  mutable ProbeCalls calls_;  // the per-GPU calls in progress, on any thread
  int wait_failures_ = 0;
  std::mutex deliver_mutex_;  // held while the listener runs; before mutex_
  mutable std::mutex mutex_;
  mutable std::set<std::size_t>
      listing_;  // GPUs with a ComputeProcesses call running; guarded by mutex_
  std::condition_variable wake_;
  std::condition_variable exited_cv_;
  bool stopping_ = false;
  std::optional<Status> opened_;  // Initialize's outcome, once it returned; guarded by mutex_
  bool exited_ = false;           // Run() returned
  std::size_t pollers_alive_ = 0;  // pollers not yet returned; guarded by mutex_
  std::thread thread_;
  std::vector<std::thread> pollers_;  // guarded by mutex_ until the monitor's thread returned
};

// What Start hands out: stops the shared monitor when destroyed.
class NvmlMonitorHandle final : public NvmlMonitor {
 public:
  explicit NvmlMonitorHandle(std::shared_ptr<NvmlMonitorImpl> impl) : impl_(std::move(impl)) {}
  ~NvmlMonitorHandle() override { (void)impl_->Stop(); }
  const std::vector<NvmlGpu>& Gpus() const override { return impl_->Gpus(); }
  bool PollsNvlinks() const override { return impl_->PollsNvlinks(); }
  std::vector<unsigned> Unopened() const override { return impl_->Unopened(); }
  unsigned Counted() const override { return impl_->Counted(); }
  std::uint64_t Reports() const override { return impl_->Reports(); }
  std::vector<ProbeCalls::Call> RunningCalls() const override { return impl_->RunningCalls(); }
  Result<std::vector<std::int64_t>> ComputeProcesses(std::string_view pci_bdf) const override {
    return impl_->ComputeProcesses(pci_bdf);
  }

 private:
  std::shared_ptr<NvmlMonitorImpl> impl_;
};

}  // namespace

Result<std::unique_ptr<NvmlMonitor>> NvmlMonitor::Start(const NvmlMonitorOptions& options,
                                                        ErrorListener listener) {
  if (options.counter_poll.count() <= 0 || options.event_wait.count() <= 0) {
    return Fail(ErrorCode::kInvalidArgument, "NVML poll and wait intervals must be positive");
  }
  auto api = nvml::Api::Load(options.library);
  if (!api) return Fail(api.error());
  auto monitor = std::make_shared<NvmlMonitorImpl>(std::move(*api), options, std::move(listener));
  if (auto opened = monitor->Open(); !opened) return Fail(opened.error());
  return std::unique_ptr<NvmlMonitor>(std::make_unique<NvmlMonitorHandle>(std::move(monitor)));
}

}  // namespace rasd::drivers
