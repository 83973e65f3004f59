// A stand-in for libnvidia-ml.so.1 with the entry points rasd's NVML
// monitor resolves, for tests on machines without an NVIDIA driver. Its
// GPUs and what happens to them come from the environment, so that a test
// can drive a real rasd process through it:
//   RASD_FAKE_NVML_GPUS    comma-separated PCI addresses, one GPU each
//   RASD_FAKE_NVML_INIT    a return code for nvmlInit_v2 (default 0)
//   RASD_FAKE_NVML_SCRIPT  a file the test appends lines to; each line is
//                          read once, in order, at the next NVML call:
//     xid GPU CODE | sbe GPU | dbe GPU         an event for the event set
//     xids GPU CODE COUNT                      COUNT Xid events at once (a flood)
//     ecc GPU CORRECTED UNCORRECTED           volatile ECC totals
//     retire GPU sbe|dbe ADDRESS               a retired page
//     remap GPU CORRECTED UNCORRECTED PENDING FAILED
//     replay GPU COUNT                         the PCIe replay counter
//     noevents GPU                             the GPU supports no events
//     procs GPU [PID...]                       the processes computing on it
//     nvlinks GPU COUNT                        the GPU has COUNT NVLinks (0..COUNT-1,
//                                              active); others are NOT_SUPPORTED
//     nvlink GPU LINK up|down                  a link's state
//     nvlinkerr GPU LINK COUNTER VALUE         an NVLink error counter (0 replay,
//                                              1 recovery, 2 CRC flit, 3 CRC data, 4 ECC)
//     block GPU FUNCTION                       FUNCTION (an nvml* name) on that GPU
//                                              does not return, as a wedged driver's
//     unblock GPU                              it returns again
//     recovery GPU ACTION                      the GPU's recovery-action field
//                                              (nvmlDeviceGetFieldValues, field 230)
//   RASD_FAKE_NVML_NVLINKS  NVLinks every GPU has at start (default 0)
// Built a second time with RASD_FAKE_NVML_NO_NVLINK as an older library
// that has no NVLink entry points at all.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct FakeGpu {
  std::string bdf;
  unsigned long long corrected = 0, uncorrected = 0;
  std::vector<unsigned long long> retired_sbe, retired_dbe;
  unsigned remap[4] = {};
  unsigned replays = 0;
  std::vector<unsigned> processes;
  bool events_supported = true;
  unsigned long long registered = 0;
  struct Link {
    bool active = true;
    unsigned long long counters[5] = {};
  };
  std::vector<Link> links;
  std::string blocked;  // an entry point that does not return for this GPU
  unsigned recovery_action = 0;
};

struct PendingEvent {
  unsigned gpu;
  unsigned long long type;
  unsigned long long data;
};

struct EventData {
  void* device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

std::mutex mutex;
std::vector<FakeGpu> gpus;
std::deque<PendingEvent> pending;
std::streamoff script_offset = 0;
int initialized = 0;
int event_sets = 0;

// Set as the process exits, before the state above is destroyed (globals
// go in reverse order): a call still blocked then (a thread its caller
// left behind, as a wedged driver's) stays blocked and touches none of it.
std::atomic<bool> exiting{false};
struct ExitMark {
  ~ExitMark() { exiting = true; }
} exit_mark;

// Reads the script lines appended since the last call. Caller holds `mutex`.
void ReadScript() {
  const char* path = std::getenv("RASD_FAKE_NVML_SCRIPT");
  if (path == nullptr) return;
  std::ifstream script(path);
  if (!script) return;
  script.seekg(script_offset);
  std::string line;
  while (std::getline(script, line)) {
    if (script.eof()) break;  // a line still being written: next time
    script_offset = script.tellg();
    std::istringstream words(line);
    std::string verb;
    unsigned gpu = 0;
    if (!(words >> verb >> gpu) || gpu >= gpus.size()) continue;
    FakeGpu& target = gpus[gpu];
    if (verb == "xid") {
      unsigned long long code = 0;
      words >> code;
      pending.push_back({gpu, 0x8, code});
    } else if (verb == "xids") {
      unsigned long long code = 0;
      unsigned long long count = 0;
      words >> code >> count;
      for (unsigned long long i = 0; i < count; ++i) pending.push_back({gpu, 0x8, code});
    } else if (verb == "sbe") {
      pending.push_back({gpu, 0x1, 0});
    } else if (verb == "dbe") {
      pending.push_back({gpu, 0x2, 0});
    } else if (verb == "ecc") {
      words >> target.corrected >> target.uncorrected;
    } else if (verb == "retire") {
      std::string cause;
      std::string address;
      words >> cause >> address;
      (cause == "dbe" ? target.retired_dbe : target.retired_sbe)
          .push_back(std::strtoull(address.c_str(), nullptr, 0));
    } else if (verb == "remap") {
      for (unsigned& value : target.remap) words >> value;
    } else if (verb == "replay") {
      words >> target.replays;
    } else if (verb == "noevents") {
      target.events_supported = false;
    } else if (verb == "nvlinks") {
      std::size_t count = 0;
      words >> count;
      target.links.resize(count);
    } else if (verb == "nvlink") {
      std::size_t link = 0;
      std::string state;
      if (words >> link >> state && link < target.links.size())
        target.links[link].active = state == "up";
    } else if (verb == "nvlinkerr") {
      std::size_t link = 0, counter = 0;
      unsigned long long value = 0;
      if (words >> link >> counter >> value && link < target.links.size() && counter < 5)
        target.links[link].counters[counter] = value;
    } else if (verb == "block") {
      words >> target.blocked;
    } else if (verb == "unblock") {
      target.blocked.clear();
    } else if (verb == "recovery") {
      words >> target.recovery_action;
    } else if (verb == "procs") {
      target.processes.clear();
      for (unsigned pid = 0; words >> pid;) target.processes.push_back(pid);
    }
  }
}

FakeGpu* Find(void* device) {
  for (auto& gpu : gpus) {
    if (static_cast<void*>(&gpu) == device) return &gpu;
  }
  return nullptr;
}

// The GPU `device`, once `function` may return for it: while the script
// has it blocked, waits (without the lock, so that other threads' calls go
// on) and reads the script again.
FakeGpu* FindWhenUnblocked(std::unique_lock<std::mutex>& lock, void* device, const char* function) {
  ReadScript();
  while (true) {
    FakeGpu* gpu = Find(device);
    if (gpu == nullptr || gpu->blocked != function) return gpu;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    while (exiting) std::this_thread::sleep_for(std::chrono::hours(1));
    lock.lock();
    ReadScript();
  }
}

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kInsufficientSize = 7,
              kTimeout = 10;

}  // namespace

extern "C" {

int nvmlInit_v2() {
  std::lock_guard lock(mutex);
  if (const char* code = std::getenv("RASD_FAKE_NVML_INIT"); code != nullptr && std::atoi(code)) {
    return std::atoi(code);
  }
  if (initialized++ == 0) {
    gpus.clear();
    pending.clear();
    script_offset = 0;
    if (const char* list = std::getenv("RASD_FAKE_NVML_GPUS")) {
      std::istringstream items(list);
      std::string bdf;
      while (std::getline(items, bdf, ',')) gpus.push_back(FakeGpu{.bdf = bdf});
    }
    if (const char* links = std::getenv("RASD_FAKE_NVML_NVLINKS")) {
      for (auto& gpu : gpus) gpu.links.resize(std::strtoul(links, nullptr, 10));
    }
  }
  return kSuccess;
}

int nvmlShutdown() {
  std::lock_guard lock(mutex);
  if (initialized == 0) return kUninitialized;
  --initialized;
  return kSuccess;
}

const char* nvmlErrorString(int code) {
  switch (code) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 9:
      return "Driver Not Loaded";
    case 10:
      return "Timeout";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard lock(mutex);
  if (initialized == 0) return kUninitialized;
  *count = static_cast<unsigned>(gpus.size());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  std::unique_lock lock(mutex);
  if (index >= gpus.size()) return kInvalidArgument;
  if (FindWhenUnblocked(lock, &gpus[index], "nvmlDeviceGetHandleByIndex_v2") == nullptr)
    return kInvalidArgument;
  *device = &gpus[index];
  return kSuccess;
}

int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  std::lock_guard lock(mutex);
  if (Find(device) == nullptr) return kInvalidArgument;
  std::snprintf(name, length, "Fake NVIDIA GPU");
  return kSuccess;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  std::lock_guard lock(mutex);
  FakeGpu* gpu = Find(device);
  if (gpu == nullptr) return kInvalidArgument;
  std::snprintf(uuid, length, "GPU-fa4e0000-0000-0000-0000-%012zx",
                static_cast<std::size_t>(gpu - gpus.data()));
  return kSuccess;
}

int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* info) {
  std::lock_guard lock(mutex);
  FakeGpu* gpu = Find(device);
  if (gpu == nullptr) return kInvalidArgument;
  *info = PciInfo{};
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  std::sscanf(gpu->bdf.c_str(), "%x:%x:%x.%x", &domain, &bus, &slot, &function);
  info->domain = domain;
  info->bus = bus;
  info->device = slot;
  // As the real library prints it: an eight-digit domain.
  std::snprintf(info->bus_id, sizeof info->bus_id, "%08x:%02x:%02x.%x", domain, bus, slot,
                function);
  std::snprintf(info->bus_id_legacy, sizeof info->bus_id_legacy, "%04x:%02x:%02x.%x", domain, bus,
                slot, function);
  return kSuccess;
}

int nvmlDeviceGetSupportedEventTypes(void* device, unsigned long long* types) {
  std::lock_guard lock(mutex);
  ReadScript();
  FakeGpu* gpu = Find(device);
  if (gpu == nullptr) return kInvalidArgument;
  *types = gpu->events_supported ? 0x1 | 0x2 | 0x4 | 0x8 : 0;
  return kSuccess;
}

int nvmlEventSetCreate(void** set) {
  std::lock_guard lock(mutex);
  ++event_sets;
  *set = &event_sets;
  return kSuccess;
}

int nvmlEventSetFree(void*) {
  std::lock_guard lock(mutex);
  --event_sets;
  return kSuccess;
}

int nvmlDeviceRegisterEvents(void* device, unsigned long long types, void*) {
  std::lock_guard lock(mutex);
  FakeGpu* gpu = Find(device);
  if (gpu == nullptr || !gpu->events_supported) return 3;  // not supported
  gpu->registered |= types;
  return kSuccess;
}

int nvmlEventSetWait_v2(void*, EventData* data, unsigned timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      std::lock_guard lock(mutex);
      ReadScript();
      while (!pending.empty()) {
        const PendingEvent event = pending.front();
        pending.pop_front();
        if ((gpus[event.gpu].registered & event.type) == 0) continue;
        *data = EventData{&gpus[event.gpu], event.type, event.data, 0xFFFFFFFF, 0xFFFFFFFF};
        return kSuccess;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return kTimeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

int nvmlDeviceGetTotalEccErrors(void* device, int error_type, int counter_type,
                                unsigned long long* count) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetTotalEccErrors");
  if (gpu == nullptr || counter_type != 0) return kInvalidArgument;
  *count = error_type == 0 ? gpu->corrected : gpu->uncorrected;
  return kSuccess;
}

int nvmlDeviceGetRetiredPages(void* device, int cause, unsigned* count,
                              unsigned long long* addresses) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetRetiredPages");
  if (gpu == nullptr) return kInvalidArgument;
  const auto& pages = cause == 1 ? gpu->retired_dbe : gpu->retired_sbe;
  if (addresses == nullptr || *count < pages.size()) {
    const bool asked_for_size = *count == 0;
    *count = static_cast<unsigned>(pages.size());
    return asked_for_size && pages.empty() ? kSuccess : kInsufficientSize;
  }
  for (std::size_t i = 0; i < pages.size(); ++i) addresses[i] = pages[i];
  *count = static_cast<unsigned>(pages.size());
  return kSuccess;
}

int nvmlDeviceGetRemappedRows(void* device, unsigned* corrected, unsigned* uncorrected,
                              unsigned* pending_remap, unsigned* failed) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetRemappedRows");
  if (gpu == nullptr) return kInvalidArgument;
  *corrected = gpu->remap[0];
  *uncorrected = gpu->remap[1];
  *pending_remap = gpu->remap[2];
  *failed = gpu->remap[3];
  return kSuccess;
}

int nvmlDeviceGetPcieReplayCounter(void* device, unsigned* value) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetPcieReplayCounter");
  if (gpu == nullptr) return kInvalidArgument;
  *value = gpu->replays;
  return kSuccess;
}

#ifndef RASD_FAKE_NVML_NO_NVLINK
constexpr int kNotSupported = 3;

int nvmlDeviceGetNvLinkState(void* device, unsigned link, int* active) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetNvLinkState");
  if (gpu == nullptr || active == nullptr) return kInvalidArgument;
  if (link >= 18) return kInvalidArgument;
  if (link >= gpu->links.size()) return kNotSupported;
  *active = gpu->links[link].active ? 1 : 0;
  return kSuccess;
}

int nvmlDeviceGetNvLinkErrorCounter(void* device, unsigned link, int counter,
                                    unsigned long long* value) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetNvLinkErrorCounter");
  if (gpu == nullptr || value == nullptr || counter < 0 || counter > 4) return kInvalidArgument;
  if (link >= 18) return kInvalidArgument;
  if (link >= gpu->links.size()) return kNotSupported;
  *value = gpu->links[link].counters[counter];
  return kSuccess;
}
#endif

struct ProcessInfoV2 {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

// As NVML: too small a buffer is kInsufficientSize with the count needed.
int nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned* count,
                                            ProcessInfoV2* infos) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetComputeRunningProcesses_v2");
  if (gpu == nullptr || count == nullptr) return kInvalidArgument;
  const auto needed = static_cast<unsigned>(gpu->processes.size());
  if (*count < needed) {
    *count = needed;
    return kInsufficientSize;
  }
  *count = needed;
  for (unsigned i = 0; i < needed; ++i)
    infos[i] = {gpu->processes[i], 1ULL << 30, 0xFFFFFFFFU, 0xFFFFFFFFU};
  return kSuccess;
}

#ifndef RASD_FAKE_NVML_NO_NVLINK
// nvmlFieldValue_t's layout; only the recovery action (field 230) is known,
// every other field answers NOT_SUPPORTED in its own return code.
struct FieldValue {
  unsigned field_id, scope_id;
  long long timestamp, latency_usec;
  int value_type;
  int nvml_return;
  union {
    unsigned ui;
    unsigned long long ull;
  } value;
};

int nvmlDeviceGetFieldValues(void* device, int count, FieldValue* values) {
  std::unique_lock lock(mutex);
  FakeGpu* gpu = FindWhenUnblocked(lock, device, "nvmlDeviceGetFieldValues");
  if (gpu == nullptr || count < 0 || values == nullptr) return kInvalidArgument;
  for (int i = 0; i < count; ++i) {
    FieldValue& field = values[i];
    field.value.ull = 0;
    if (field.field_id == 230) {
      field.value_type = 1;  // NVML_VALUE_TYPE_UNSIGNED_INT
      field.value.ui = gpu->recovery_action;
      field.nvml_return = kSuccess;
    } else {
      field.nvml_return = 3;  // NVML_ERROR_NOT_SUPPORTED
    }
  }
  return kSuccess;
}
#endif

}  // extern "C"
