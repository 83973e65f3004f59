#include "dcmi_monitor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <map>

#include "rasd/common/logging.h"

namespace rasd::drivers::ascend {

Result<DcmiApi> DcmiApi::Load(const common::DynamicLibrary& library) {
  DcmiApi api;
  Status bound;
  auto require = [&](auto*& target, const char* symbol) {
    if (!bound) return;
    if (auto found = library.Bind(target, symbol); !found) {
      bound = Fail(ErrorCode::kUnavailable, fmt::format("{} has no {}", library.name(), symbol));
    }
  };
  auto optional = [&](auto*& target, const char* symbol) {
    if (!library.Bind(target, symbol)) target = nullptr;
  };
  require(api.init, "dcmi_init");
  require(api.get_card_num_list, "dcmi_get_card_num_list");
  require(api.get_device_num_in_card, "dcmi_get_device_num_in_card");
  require(api.get_device_logic_id, "dcmi_get_device_logic_id");
  require(api.get_device_health, "dcmi_get_device_health");
  require(api.get_device_errorcode, "dcmi_get_device_errorcode_v2");
  if (!bound) return Fail(bound.error());
  optional(api.get_device_pcie_info, "dcmi_get_device_pcie_info_v2");
  optional(api.get_device_die, "dcmi_get_device_die_v2");
  optional(api.get_device_network_health, "dcmi_get_device_network_health");
  return api;
}

namespace {

std::string_view HealthName(unsigned int health) {
  switch (health) {
    case 1:
      return "minor alarm";
    case 2:
      return "major alarm";
    case 3:
      return "critical alarm";
    case kDcmiHealthAbsent:
      return "chip absent";
    default:
      return "unknown level";
  }
}

}  // namespace

std::vector<DriverErrorEvent> DiffChipHealth(int device, ChipHealth& last, unsigned int health,
                                             std::span<const unsigned int> codes) {
  std::vector<DriverErrorEvent> events;
  if (health != 0 && health != last.health) {
    events.push_back({.device = device,
                      .kind = DriverErrorKind::kVendorCode,
                      .code_space = VendorCodeSpace::kAscend,
                      .message = fmt::format("DCMI health {} ({})", health, HealthName(health))});
  }
  last.health = health;
  std::set<unsigned int> current(codes.begin(), codes.end());
  for (unsigned int code : current) {
    if (last.codes.contains(code)) continue;
    // DCMI fault codes are 32-bit and often above INT_MAX (0x80E01801):
    // vendor_code carries the same bits, the message the code as DCMI
    // prints it.
    events.push_back({.device = device,
                      .kind = DriverErrorKind::kVendorCode,
                      .vendor_code = static_cast<int>(code),
                      .code_space = VendorCodeSpace::kAscend,
                      .message = fmt::format("DCMI error code 0x{:08X}", code)});
  }
  last.codes = std::move(current);
  return events;
}

std::optional<DriverErrorEvent> DiffNetworkHealth(int device, std::optional<bool>& last_up,
                                                  int result) {
  if (result == DCMI_RDFX_DETECT_INIT || result == DCMI_RDFX_DETECT_IP_SET) return std::nullopt;
  const bool up = result == DCMI_RDFX_DETECT_OK;
  if (last_up == up) return std::nullopt;
  last_up = up;
  return DriverErrorEvent{
      .device = device,
      .kind = up ? DriverErrorKind::kLinkUp : DriverErrorKind::kLinkDown,
      .message = up ? std::string("DCMI: RoCE network health OK: link up")
                    : fmt::format("DCMI: RoCE network health {}: link down", result),
      .link = DeviceLink{.kind = LinkKind::kRoce, .index = 0}};
}

// What the polling thread uses, shared with it: a thread left behind in a
// call keeps it alive.
struct DcmiMonitor::Poller {
  DcmiApi api;
  std::vector<Chip> chips;  // by ACL device; fixed after Create but for `last`, `roce_up`
  ProbeCalls calls;
  EmitFunction emit;

  std::mutex deliver_mutex;  // held while emit runs; before mutex
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;  // guarded by mutex and deliver_mutex (either to read)
  bool exited = false;    // guarded by mutex

  void Run(std::chrono::milliseconds period);
  void PollOnce();
  void Emit(DriverErrorEvent event);
  // A DCMI call about `chip`, seen in `calls` while it runs.
  template <typename Function, typename... Args>
  int Call(const Chip& chip, std::string_view name, Function function, Args... args) {
    const auto call = calls.Begin(chip.Name(), name);
    return function(args...);
  }
};

std::string DcmiMonitor::Chip::Name() const {
  return pci_bdf.empty() ? fmt::format("card {} chip {}", card, chip) : pci_bdf;
}

Result<std::unique_ptr<DcmiMonitor>> DcmiMonitor::Create(const std::string& library,
                                                         std::vector<int> logic_ids) {
  auto loaded = common::DynamicLibrary::Open(library);
  if (!loaded) return Fail(loaded.error());
  auto api = DcmiApi::Load(*loaded);
  if (!api) return Fail(api.error());
  if (const int rc = api->init(); rc != 0) {
    return Fail(ErrorCode::kUnavailable, fmt::format("dcmi_init failed with {}", rc));
  }
  auto poller = std::make_shared<Poller>();
  poller->api = *api;
  std::unique_ptr<DcmiMonitor> monitor(new DcmiMonitor(std::move(*loaded), std::move(poller)));
  monitor->Locate(logic_ids);
  return monitor;
}

DcmiMonitor::~DcmiMonitor() { (void)Stop(); }

void DcmiMonitor::Locate(const std::vector<int>& logic_ids) {
  const DcmiApi& api = poller_->api;
  std::vector<Chip>& chips = poller_->chips;
  chips.resize(logic_ids.size());
  std::array<int, kDcmiMaxCards> cards{};
  int card_count = 0;
  if (const int rc = api.get_card_num_list(&card_count, cards.data(), kDcmiMaxCards); rc != 0) {
    RASD_LOG_WARN("ascend: dcmi_get_card_num_list failed with {}: no DCMI health", rc);
    return;
  }
  card_count = std::clamp(card_count, 0, kDcmiMaxCards);
  std::map<int, std::pair<int, int>> by_logic_id;
  for (int i = 0; i < card_count; ++i) {
    int chip_count = 0;
    if (api.get_device_num_in_card(cards[static_cast<std::size_t>(i)], &chip_count) != 0) continue;
    for (int chip = 0; chip < chip_count; ++chip) {
      int logic_id = -1;
      if (api.get_device_logic_id(&logic_id, cards[static_cast<std::size_t>(i)], chip) == 0) {
        by_logic_id[logic_id] = {cards[static_cast<std::size_t>(i)], chip};
      }
    }
  }
  for (std::size_t device = 0; device < logic_ids.size(); ++device) {
    auto found = by_logic_id.find(logic_ids[device]);
    if (found == by_logic_id.end()) continue;
    Chip& chip = chips[device];
    chip.mapped = true;
    chip.card = found->second.first;
    chip.chip = found->second.second;
    if (api.get_device_pcie_info != nullptr) {
      dcmi_pcie_info_all pcie{};
      if (api.get_device_pcie_info(chip.card, chip.chip, &pcie) == 0) {
        chip.pci_bdf = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", static_cast<unsigned>(pcie.domain),
                                   pcie.bdf_busid, pcie.bdf_deviceid, pcie.bdf_funcid);
      }
    }
    if (api.get_device_die != nullptr) {
      dcmi_die_id die{};
      if (api.get_device_die(chip.card, chip.chip, VDIE, &die) == 0 &&
          std::any_of(std::begin(die.soc_die), std::end(die.soc_die),
                      [](unsigned int word) { return word != 0; })) {
        chip.uuid = fmt::format("ascend-{:08x}-{:08x}-{:08x}-{:08x}-{:08x}", die.soc_die[0],
                                die.soc_die[1], die.soc_die[2], die.soc_die[3], die.soc_die[4]);
      }
    }
  }
}

std::string DcmiMonitor::PciBdf(int device) const {
  const auto& chips = poller_->chips;
  if (device < 0 || static_cast<std::size_t>(device) >= chips.size()) return {};
  return chips[static_cast<std::size_t>(device)].pci_bdf;
}

std::string DcmiMonitor::Uuid(int device) const {
  const auto& chips = poller_->chips;
  if (device < 0 || static_cast<std::size_t>(device) >= chips.size()) return {};
  return chips[static_cast<std::size_t>(device)].uuid;
}

int DcmiMonitor::MappedDevices() const {
  const auto& chips = poller_->chips;
  return static_cast<int>(
      std::count_if(chips.begin(), chips.end(), [](const Chip& chip) { return chip.mapped; }));
}

std::vector<ProbeCalls::Call> DcmiMonitor::RunningCalls() const { return poller_->calls.Running(); }

void DcmiMonitor::Start(std::chrono::milliseconds period, EmitFunction emit,
                        std::chrono::milliseconds stop_wait) {
  if (thread_.joinable()) return;
  poller_->emit = std::move(emit);
  stop_wait_ = stop_wait;
  thread_ = std::thread([poller = poller_, period] {
    poller->Run(period);
    std::lock_guard lock(poller->mutex);
    poller->exited = true;
    poller->wake.notify_all();
  });
}

bool DcmiMonitor::Stop() {
  {
    std::scoped_lock lock(poller_->deliver_mutex, poller_->mutex);
    poller_->stopping = true;
  }
  poller_->wake.notify_all();
  if (!thread_.joinable()) return true;
  std::unique_lock lock(poller_->mutex);
  if (!poller_->wake.wait_for(lock, stop_wait_, [this] { return poller_->exited; })) {
    lock.unlock();
    const auto calls = poller_->calls.Running();
    RASD_LOG_WARN(
        "ascend: stopping without waiting for {} ({:.1f} s): left to return on its own",
        calls.empty() ? std::string("DCMI's polling thread")
                      : calls.front().function + " on " + calls.front().device,
        calls.empty() ? 0.0 : std::chrono::duration<double>(calls.front().running).count());
    // The thread may return into the library whenever the call ends.
    library_.KeepLoadedForever();
    thread_.detach();
    return false;
  }
  lock.unlock();
  thread_.join();
  return true;
}

void DcmiMonitor::Poller::Emit(DriverErrorEvent event) {
  std::lock_guard lock(deliver_mutex);
  if (stopping) return;  // nothing after Stop
  emit(std::move(event));
}

void DcmiMonitor::Poller::PollOnce() {
  std::array<unsigned int, kDcmiMaxErrorCodes> codes{};
  for (std::size_t device = 0; device < chips.size(); ++device) {
    Chip& chip = chips[device];
    if (!chip.mapped) continue;
    unsigned int health = 0;
    if (Call(chip, "dcmi_get_device_health", api.get_device_health, chip.card, chip.chip,
             &health) != 0)
      continue;
    int count = 0;
    std::span<const unsigned int> current;
    std::vector<unsigned int> unchanged;
    if (Call(chip, "dcmi_get_device_errorcode_v2", api.get_device_errorcode, chip.card, chip.chip,
             &count, codes.data(), static_cast<unsigned int>(codes.size())) == 0) {
      count = std::clamp(count, 0, kDcmiMaxErrorCodes);
      current = std::span<const unsigned int>(codes.data(), static_cast<std::size_t>(count));
    } else {
      // Unknown this round: neither new nor cleared.
      unchanged.assign(chip.last.codes.begin(), chip.last.codes.end());
      current = unchanged;
    }
    for (auto& event : DiffChipHealth(static_cast<int>(device), chip.last, health, current)) {
      event.message += fmt::format(" (card {} chip {})", chip.card, chip.chip);
      Emit(std::move(event));
    }
    dcmi_rdfx_detect_result network = DCMI_RDFX_DETECT_INIT;
    // A failed query says nothing about the link.
    if (api.get_device_network_health != nullptr &&
        Call(chip, "dcmi_get_device_network_health", api.get_device_network_health, chip.card,
             chip.chip, &network) == 0) {
      if (auto event = DiffNetworkHealth(static_cast<int>(device), chip.roce_up,
                                         static_cast<int>(network))) {
        event->message += fmt::format(" (card {} chip {})", chip.card, chip.chip);
        Emit(std::move(*event));
      }
    }
  }
}

void DcmiMonitor::Poller::Run(std::chrono::milliseconds period) {
  std::unique_lock lock(mutex);
  while (!stopping) {
    lock.unlock();
    PollOnce();
    lock.lock();
    wake.wait_for(lock, period, [this] { return stopping; });
  }
}

}  // namespace rasd::drivers::ascend
