#include "fault_injection.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "rasd/common/logging.h"
#include "rasd/ras/ras_event.h"

namespace rasd::daemon {

FaultInjection::FaultInjection(runtime::Runtime& runtime, const common::HostEnv& host,
                               RasIngest& ingest, Config::Inject options)
    : runtime_(runtime), host_(host), ingest_(ingest), options_(options) {}

Status FaultInjection::HardwareAllowed() const {
  if (!options_.allow_hardware)
    return Fail(ErrorCode::kPermissionDenied,
                "hardware injection is off (inject.allow_hardware: false)");
  if (::geteuid() != 0)
    return Fail(ErrorCode::kPermissionDenied, "hardware injection needs rasd to run as root");
  return {};
}

Result<nlohmann::json> FaultInjection::Inject(const nlohmann::json& args) {
  std::string kind;
  std::optional<int> device, peer, xid, mc, dimm;
  std::optional<std::string> address, job, text;
  std::uint64_t count = 1;
  for (const auto& [key, value] : args.items()) {
    if (key == "kind" && value.is_string()) {
      kind = value.get<std::string>();
    } else if ((key == "device" || key == "peer" || key == "xid" || key == "mc" || key == "dimm") &&
               value.is_number_integer() && value.get<long long>() >= 0 &&
               value.get<long long>() < 100'000'000) {
      const int number = value.get<int>();
      (key == "device" ? device
       : key == "peer" ? peer
       : key == "xid"  ? xid
       : key == "mc"   ? mc
                       : dimm) = number;
    } else if (key == "address" && value.is_string()) {
      address = value.get<std::string>();
    } else if (key == "job" && value.is_string()) {
      job = value.get<std::string>();
    } else if (key == "text" && value.is_string() && value.get<std::string>().size() <= 16384) {
      text = value.get<std::string>();
    } else if (key == "count" && value.is_number_integer() && value.get<long long>() >= 1 &&
               value.get<long long>() <= 100'000) {
      count = value.get<std::uint64_t>();
    } else {
      return Fail(ErrorCode::kInvalidArgument, "bad argument '" + key + "' for inject");
    }
  }
  drivers::FaultInjector* faults = runtime_.Driver().Faults();
  auto need_device = [&](bool into_driver = true) -> Status {
    if (!device) return Fail(ErrorCode::kInvalidArgument, "inject " + kind + " needs --device");
    if (!runtime_.GetDevice(*device))
      return Fail(ErrorCode::kNotFound, fmt::format("no device {}", *device));
    if (into_driver && faults == nullptr)
      return Fail(ErrorCode::kNotSupported,
                  fmt::format("runtime.driver {} cannot inject device faults (the simulator can)",
                              runtime_.DriverName()));
    return {};
  };
  // Where a memory fault lands: --address, else inside one of --job's
  // allocations (any job's without --job), else the pool's first page.
  auto target = [&]() -> Result<drivers::DeviceAddress> {
    if (address) {
      const auto value = ras::ParseAddress(address);
      if (!value)
        return Fail(ErrorCode::kInvalidArgument, "address must be hex, e.g. 0x10000004000");
      return *value;
    }
    auto pool = runtime_.Pool(*device);
    if (!pool) return Fail(pool.error());
    for (const auto& allocation : (*pool)->Allocations()) {
      if (job ? allocation.owner == *job : !allocation.owner.empty())
        return allocation.address + std::min<std::uint64_t>(allocation.size / 2, 4096);
    }
    if (job) {
      return Fail(ErrorCode::kNotFound,
                  fmt::format("job '{}' holds no memory on device {}", *job, *device));
    }
    return Fail(ErrorCode::kNotFound,
                fmt::format("nothing is allocated on device {}: give --address", *device));
  };
  nlohmann::json done = {{"kind", kind}};
  if (kind == "ce" || kind == "ucna" || kind == "srao" || kind == "srar") {
    if (auto ok = need_device(); !ok) return Fail(ok.error());
    auto at = target();
    if (!at) return Fail(at.error());
    for (std::uint64_t i = 0; i < count; ++i) {
      Status injected = kind == "ce"     ? faults->InjectCorrectedEcc(*device, *at)
                        : kind == "srao" ? faults->InjectActionOptionalEcc(*device, *at)
                                         : faults->InjectUncorrectedEcc(*device, *at);
      if (!injected) return Fail(injected.error());
    }
    done["device"] = *device;
    done["address"] = fmt::format("0x{:x}", *at);
    done["count"] = count;
    if (kind == "srar") {
      // The page is poisoned now (reported as UCNA); the owner's next read
      // consumes it, and that read is the SRAR.
      done["note"] = "poisoned; the owner's next read consumes it (SRAR)";
    }
  } else if (kind == "uce" || kind == "fatal" || kind == "hang") {
    if (auto ok = need_device(); !ok) return Fail(ok.error());
    Status injected = kind == "uce"     ? faults->InjectStickyFault(*device)
                      : kind == "fatal" ? faults->InjectFallOffBus(*device)
                                        : faults->InjectHang(*device);
    if (!injected) return Fail(injected.error());
    done["device"] = *device;
  } else if (kind == "link") {
    if (auto ok = need_device(); !ok) return Fail(ok.error());
    if (!peer || !runtime_.GetDevice(*peer))
      return Fail(ErrorCode::kInvalidArgument, "inject link needs --peer, another device");
    if (auto injected = faults->InjectLinkError(*device, *peer); !injected)
      return Fail(injected.error());
    done["device"] = *device;
    done["peer"] = *peer;
  } else if (kind == "xid") {
    // A kernel-log record, not a device fault: any backend's device with a
    // PCI address will do (on a real GPU this is how its gate is tested).
    if (auto ok = need_device(/*into_simulator=*/false); !ok) return Fail(ok.error());
    if (!xid) return Fail(ErrorCode::kInvalidArgument, "inject xid needs the Xid number");
    // The driver's own kernel-log line, naming the device by its PCI address.
    const std::string bdf = (*runtime_.GetDevice(*device))->Properties().pci_bdf;
    if (bdf.empty()) {
      return Fail(ErrorCode::kNotSupported,
                  fmt::format("device {} has no PCI address for an Xid record", *device));
    }
    const std::string line =
        fmt::format("NVRM: Xid (PCI:{}): {}, pid=0, name=rasctl-inject, injected by rasctl",
                    bdf.size() > 2 ? bdf.substr(0, bdf.size() - 2) : bdf, *xid);
    done["device"] = *device;
    done["events"] = ingest_.InjectKernelLog(line);
  } else if (kind == "kmsg") {
    if (!options_.allow_sources)
      return Fail(ErrorCode::kPermissionDenied,
                  "inject kmsg needs inject.allow_sources: true in the config");
    if (!text) return Fail(ErrorCode::kInvalidArgument, "inject kmsg needs the record text");
    done["events"] = ingest_.InjectKernelLog(*text);
  } else if (kind == "edac") {
    if (!options_.allow_sources)
      return Fail(ErrorCode::kPermissionDenied,
                  "inject edac needs inject.allow_sources: true in the config");
    std::error_code same_error;
    if (std::filesystem::equivalent(host_.Root(), "/", same_error))
      return Fail(ErrorCode::kPermissionDenied,
                  "inject edac writes a simulated EDAC tree under host.root; with host.root / "
                  "it would write the real sysfs, which rasd never does");
    if (!mc || !dimm) return Fail(ErrorCode::kInvalidArgument, "inject edac needs --mc and --dimm");
    const std::string base = fmt::format("/sys/devices/system/edac/mc/mc{}/dimm{}", *mc, *dimm);
    const auto current = host_.ReadFile(base + "/dimm_ce_count", 64);
    std::uint64_t value = 0;
    if (current) {
      const std::string trimmed = current->substr(0, current->find_first_of(" \n"));
      (void)std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), value);
    }
    value += count;
    if (auto written = host_.WriteFile(base + "/dimm_ce_count", fmt::format("{}\n", value), true);
        !written)
      return Fail(written.error());
    if (!host_.Exists(base + "/dimm_label")) {
      if (auto labelled =
              host_.WriteFile(base + "/dimm_label", fmt::format("MC{}_DIMM{}\n", *mc, *dimm), true);
          !labelled)
        return Fail(labelled.error());
    }
    done["mc"] = *mc;
    done["dimm"] = *dimm;
    done["dimm_ce_count"] = value;
    ingest_.PollEdacNow();
  } else if (kind == "einj") {
    if (auto allowed = HardwareAllowed(); !allowed) return Fail(allowed.error());
    const std::string einj = "/sys/kernel/debug/apei/einj";
    const auto available = host_.ReadFile(einj + "/available_error_type", 4096);
    if (!available) {
      return Fail(ErrorCode::kNotSupported,
                  "this kernel has no ACPI EINJ (" + host_.Resolve(einj).string() +
                      " is missing: CONFIG_ACPI_APEI_EINJ, debugfs, and firmware support needed)");
    }
    auto at = address ? std::optional<std::string>(*address) : std::nullopt;
    if (!at) return Fail(ErrorCode::kInvalidArgument, "inject einj needs --address (physical)");
    // 0x8: memory correctable; the firmware lists what it supports.
    for (const auto& [file, value] : {std::pair<std::string, std::string>{"error_type", "0x8"},
                                      {"param1", *at},
                                      {"param2", "0xfffffffffffff000"},
                                      {"error_inject", "1"}}) {
      if (auto written = host_.WriteFile(einj + "/" + file, value + "\n"); !written)
        return Fail(written.error());
    }
    done["address"] = *at;
    done["available_error_type"] = *available;
  } else if (kind == "hwpoison") {
    if (auto allowed = HardwareAllowed(); !allowed) return Fail(allowed.error());
    // A page of rasd's own, poisoned by the kernel's memory-failure code as
    // if the hardware had found it bad: its "Memory failure:" record comes
    // back through the kernel log. The page is never touched again.
    const long page_size = ::sysconf(_SC_PAGESIZE);
    void* page = ::mmap(nullptr, static_cast<std::size_t>(page_size), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (page == MAP_FAILED) return Fail(ErrnoError("mmap a page to poison", errno));
    std::memset(page, 0x5a, static_cast<std::size_t>(page_size));
    if (::madvise(page, static_cast<std::size_t>(page_size), MADV_HWPOISON) != 0) {
      const int error = errno;
      ::munmap(page, static_cast<std::size_t>(page_size));
      return Fail(error == EINVAL ? ErrorCode::kNotSupported : ErrorCode::kPermissionDenied,
                  fmt::format("madvise(MADV_HWPOISON): {} (the kernel needs "
                              "CONFIG_MEMORY_FAILURE, and rasd CAP_SYS_ADMIN)",
                              std::strerror(error)));
    }
    done["poisoned"] = fmt::format("{}", page);
  } else {
    return Fail(ErrorCode::kInvalidArgument,
                "kind must be one of ce, ucna, srao, srar, uce, fatal, xid, link, hang, kmsg, "
                "edac, einj, hwpoison");
  }
  spdlog::warn("fault injected: {}", done.dump());
  return done;
}

}  // namespace rasd::daemon
