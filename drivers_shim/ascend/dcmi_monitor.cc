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

Result<std::unique_ptr<DcmiMonitor>> DcmiMonitor::Create(const std::string& library,
                                                         std::vector<int> logic_ids) {
  auto loaded = common::DynamicLibrary::Open(library);
  if (!loaded) return Fail(loaded.error());
  auto api = DcmiApi::Load(*loaded);
  if (!api) return Fail(api.error());
  if (const int rc = api->init(); rc != 0) {
    return Fail(ErrorCode::kUnavailable, fmt::format("dcmi_init failed with {}", rc));
  }
  std::unique_ptr<DcmiMonitor> monitor(new DcmiMonitor(std::move(*loaded), *api));
  monitor->Locate(logic_ids);
  return monitor;
}

DcmiMonitor::~DcmiMonitor() { Stop(); }

void DcmiMonitor::Locate(const std::vector<int>& logic_ids) {
  chips_.resize(logic_ids.size());
  std::array<int, kDcmiMaxCards> cards{};
  int card_count = 0;
  if (const int rc = api_.get_card_num_list(&card_count, cards.data(), kDcmiMaxCards); rc != 0) {
    RASD_LOG_WARN("ascend: dcmi_get_card_num_list failed with {}: no DCMI health", rc);
    return;
  }
  card_count = std::clamp(card_count, 0, kDcmiMaxCards);
  std::map<int, std::pair<int, int>> by_logic_id;
  for (int i = 0; i < card_count; ++i) {
    int chips = 0;
    if (api_.get_device_num_in_card(cards[static_cast<std::size_t>(i)], &chips) != 0) continue;
    for (int chip = 0; chip < chips; ++chip) {
      int logic_id = -1;
      if (api_.get_device_logic_id(&logic_id, cards[static_cast<std::size_t>(i)], chip) == 0) {
        by_logic_id[logic_id] = {cards[static_cast<std::size_t>(i)], chip};
      }
    }
  }
  for (std::size_t device = 0; device < logic_ids.size(); ++device) {
    auto found = by_logic_id.find(logic_ids[device]);
    if (found == by_logic_id.end()) continue;
    Chip& chip = chips_[device];
    chip.mapped = true;
    chip.card = found->second.first;
    chip.chip = found->second.second;
    if (api_.get_device_pcie_info != nullptr) {
      dcmi_pcie_info_all pcie{};
      if (api_.get_device_pcie_info(chip.card, chip.chip, &pcie) == 0) {
        chip.pci_bdf = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", static_cast<unsigned>(pcie.domain),
                                   pcie.bdf_busid, pcie.bdf_deviceid, pcie.bdf_funcid);
      }
    }
    if (api_.get_device_die != nullptr) {
      dcmi_die_id die{};
      if (api_.get_device_die(chip.card, chip.chip, VDIE, &die) == 0 &&
          std::any_of(std::begin(die.soc_die), std::end(die.soc_die),
                      [](unsigned int word) { return word != 0; })) {
        chip.uuid = fmt::format("ascend-{:08x}-{:08x}-{:08x}-{:08x}-{:08x}", die.soc_die[0],
                                die.soc_die[1], die.soc_die[2], die.soc_die[3], die.soc_die[4]);
      }
    }
  }
}

std::string DcmiMonitor::PciBdf(int device) const {
  if (device < 0 || static_cast<std::size_t>(device) >= chips_.size()) return {};
  return chips_[static_cast<std::size_t>(device)].pci_bdf;
}

std::string DcmiMonitor::Uuid(int device) const {
  if (device < 0 || static_cast<std::size_t>(device) >= chips_.size()) return {};
  return chips_[static_cast<std::size_t>(device)].uuid;
}

int DcmiMonitor::MappedDevices() const {
  return static_cast<int>(
      std::count_if(chips_.begin(), chips_.end(), [](const Chip& chip) { return chip.mapped; }));
}

void DcmiMonitor::Start(std::chrono::milliseconds period, EmitFunction emit) {
  Stop();
  emit_ = std::move(emit);
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this, period] { Run(period); });
}

void DcmiMonitor::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DcmiMonitor::PollOnce() {
  std::array<unsigned int, kDcmiMaxErrorCodes> codes{};
  for (std::size_t device = 0; device < chips_.size(); ++device) {
    Chip& chip = chips_[device];
    if (!chip.mapped) continue;
    unsigned int health = 0;
    if (api_.get_device_health(chip.card, chip.chip, &health) != 0) continue;
    int count = 0;
    std::span<const unsigned int> current;
    std::vector<unsigned int> unchanged;
    if (api_.get_device_errorcode(chip.card, chip.chip, &count, codes.data(),
                                  static_cast<unsigned int>(codes.size())) == 0) {
      count = std::clamp(count, 0, kDcmiMaxErrorCodes);
      current = std::span<const unsigned int>(codes.data(), static_cast<std::size_t>(count));
    } else {
      // Unknown this round: neither new nor cleared.
      unchanged.assign(chip.last.codes.begin(), chip.last.codes.end());
      current = unchanged;
    }
    for (auto& event : DiffChipHealth(static_cast<int>(device), chip.last, health, current)) {
      event.message += fmt::format(" (card {} chip {})", chip.card, chip.chip);
      emit_(std::move(event));
    }
    dcmi_rdfx_detect_result network = DCMI_RDFX_DETECT_INIT;
    // A failed query says nothing about the link.
    if (api_.get_device_network_health != nullptr &&
        api_.get_device_network_health(chip.card, chip.chip, &network) == 0) {
      if (auto event = DiffNetworkHealth(static_cast<int>(device), chip.roce_up,
                                         static_cast<int>(network))) {
        event->message += fmt::format(" (card {} chip {})", chip.card, chip.chip);
        emit_(std::move(*event));
      }
    }
  }
}

void DcmiMonitor::Run(std::chrono::milliseconds period) {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    PollOnce();
    lock.lock();
    wake_.wait_for(lock, period, [this] { return stopping_; });
  }
}

}  // namespace rasd::drivers::ascend
