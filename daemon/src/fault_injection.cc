#include "fault_injection.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "arg_reader.h"
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

Status FaultInjection::NeedDevice(const InjectArgs& args, bool into_driver) const {
  if (!args.device)
    return Fail(ErrorCode::kInvalidArgument, "inject " + args.kind + " needs --device");
  if (!runtime_.GetDevice(*args.device))
    return Fail(ErrorCode::kNotFound, fmt::format("no device {}", *args.device));
  if (into_driver && runtime_.Driver().Faults() == nullptr)
    return Fail(ErrorCode::kNotSupported,
                fmt::format("runtime.driver {} cannot inject device faults (the simulator can)",
                            runtime_.DriverName()));
  return {};
}

Result<drivers::DeviceAddress> FaultInjection::Target(const InjectArgs& args) const {
  // Where a memory fault lands: --address, else inside one of --job's
  // allocations (any job's without --job).
  if (args.address) {
    const auto parsed = ras::ParsePrintedAddress(*args.address);
    if (!parsed) return Fail(ErrorCode::kInvalidArgument, "address must be hex, e.g. 0x10000004000");
    return parsed->value;
  }
  if (args.job && job_target_) {
    if (const auto target = job_target_(*args.job, *args.device)) return *target;
  }
  auto pool = runtime_.Pool(*args.device);
  if (!pool) return Fail(pool.error());
  for (const auto& allocation : (*pool)->Allocations()) {
    if (args.job ? allocation.owner == *args.job : !allocation.owner.empty())
      return allocation.address + std::min<std::uint64_t>(allocation.size / 2, 4096);
  }
  if (args.job) {
    return Fail(ErrorCode::kNotFound,
                fmt::format("job '{}' holds no memory on device {}", *args.job, *args.device));
  }
  return Fail(ErrorCode::kNotFound,
              fmt::format("nothing is allocated on device {}: give --address", *args.device));
}

Result<nlohmann::json> FaultInjection::Inject(const nlohmann::json& request) {
  ArgReader reader("inject", request);
  InjectArgs args;
  args.kind = reader.Required(reader.String("kind", 32), "kind").value_or("");
  auto small = [&reader](std::string_view key) -> std::optional<int> {
    auto value = reader.Int(key, 0, 99'999'999);
    return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
  };
  args.device = small("device");
  args.peer = small("peer");
  args.xid = small("xid");
  args.mc = small("mc");
  args.dimm = small("dimm");
  args.address = reader.String("address", 64);
  args.job = reader.String("job", 128);
  args.text = reader.String("text", 16384);
  args.via = reader.String("via", 16).value_or("");
  args.call = reader.String("call", 128).value_or("");
  args.count = static_cast<std::uint64_t>(reader.Int("count", 1, 100'000).value_or(1));
  args.rate = reader.Number("rate", 0, 1);
  args.kernel = reader.String("kernel", 64).value_or("");
  args.seed = static_cast<std::uint64_t>(reader.Int("seed", 0, 1LL << 62).value_or(1));
  if (auto ok = reader.Finish(); !ok) return Fail(ok.error());
  if ((args.rate || !args.kernel.empty()) && args.kind != "sdc") {
    return Fail(ErrorCode::kInvalidArgument, "inject: --rate and --kernel go with sdc");
  }
  if (!args.via.empty() && args.via != "nvlink") {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("inject: --via '{}': the one link kind to name is nvlink", args.via));
  }
  if (!args.via.empty() && args.kind != "link" && args.kind != "link-up") {
    return Fail(ErrorCode::kInvalidArgument, "inject: --via goes with link and link-up");
  }
  if (!args.call.empty() && args.kind != "wedge") {
    return Fail(ErrorCode::kInvalidArgument, "inject: --call goes with wedge");
  }

  using Handler = Result<nlohmann::json> (FaultInjection::*)(const InjectArgs&);
  static const std::map<std::string, Handler, std::less<>> kHandlers = {
      {"ce", &FaultInjection::InjectDeviceMemory},
      {"ucna", &FaultInjection::InjectDeviceMemory},
      {"srao", &FaultInjection::InjectDeviceMemory},
      {"srar", &FaultInjection::InjectDeviceMemory},
      {"uce", &FaultInjection::InjectDeviceFault},
      {"fatal", &FaultInjection::InjectDeviceFault},
      {"hang", &FaultInjection::InjectDeviceFault},
      {"load", &FaultInjection::InjectDeviceFault},
      {"link", &FaultInjection::InjectLink},
      {"link-up", &FaultInjection::InjectLink},
      {"xid", &FaultInjection::InjectXid},
      {"kmsg", &FaultInjection::InjectKmsg},
      {"edac", &FaultInjection::InjectEdac},
      {"einj", &FaultInjection::InjectEinj},
      {"hwpoison", &FaultInjection::InjectHwpoison},
      {"wedge", &FaultInjection::InjectWedge},
      {"unwedge", &FaultInjection::InjectWedge},
      {"sdc", &FaultInjection::InjectSilentCorruption},
  };
  auto handler = kHandlers.find(args.kind);
  if (handler == kHandlers.end()) {
    return Fail(ErrorCode::kInvalidArgument,
                "bad argument 'kind' for inject: must be one of ce, ucna, srao, srar, uce, fatal, "
                "xid, link, link-up, hang, load, sdc, wedge, unwedge, kmsg, edac, einj, hwpoison");
  }
  auto done = (this->*handler->second)(args);
  if (!done) return done;
  (*done)["kind"] = args.kind;
  RASD_LOG_WARN("fault injected: {}", done->dump());
  return done;
}

Result<nlohmann::json> FaultInjection::InjectDeviceMemory(const InjectArgs& args) {
  nlohmann::json done;
  drivers::FaultInjector* faults = runtime_.Driver().Faults();
  if (auto ok = NeedDevice(args); !ok) return Fail(ok.error());
  auto at = Target(args);
  if (!at) return Fail(at.error());
  for (std::uint64_t i = 0; i < args.count; ++i) {
    Status injected =
        args.kind == "ce"     ? faults->InjectCorrectedEcc(*args.device, *at)
        : args.kind == "srao" ? faults->InjectActionOptionalEcc(*args.device, *at)
        : args.kind == "srar" ? faults->InjectLatentUncorrectedEcc(*args.device, *at)
                              : faults->InjectUncorrectedEcc(*args.device, *at);
    if (!injected) return Fail(injected.error());
  }
  done["device"] = *args.device;
  done["address"] = fmt::format("0x{:x}", *at);
  done["count"] = args.count;
  if (args.kind == "srar") {
    // The page is poisoned silently; the owner's next read consumes it, and
    // that read is the one report (SRAR), as with a real action-required error.
    done["note"] = "poisoned; the owner's next read consumes it (SRAR)";
  }
  return done;
}

Result<nlohmann::json> FaultInjection::InjectDeviceFault(const InjectArgs& args) {
  nlohmann::json done;
  drivers::FaultInjector* faults = runtime_.Driver().Faults();
  if (auto ok = NeedDevice(args); !ok) return Fail(ok.error());
  Status injected = args.kind == "uce"     ? faults->InjectStickyFault(*args.device)
                    : args.kind == "fatal" ? faults->InjectFallOffBus(*args.device)
                    : args.kind == "load"  ? faults->InjectLoadFault(*args.device)
                                           : faults->InjectHang(*args.device);
  if (!injected) return Fail(injected.error());
  done["device"] = *args.device;
  if (args.kind == "load") {
    done["note"] = "wrong results only under load, reported by nothing: the self-test's load "
                   "phase finds it (rasctl drain, then undrain)";
  }
  return done;
}

Result<nlohmann::json> FaultInjection::InjectWedge(const InjectArgs& args) {
  nlohmann::json done;
  drivers::FaultInjector* faults = runtime_.Driver().Faults();
  if (auto ok = NeedDevice(args); !ok) return Fail(ok.error());
  if (args.kind == "unwedge") {
    if (auto cleared = faults->ClearWedge(*args.device); !cleared) return Fail(cleared.error());
    done["device"] = *args.device;
    done["note"] =
        "its queries return again: a drain by the probe deadline lifts after a "
        "deadline; an isolation stays until rasctl undrain";
    return done;
  }
  if (auto wedged = faults->InjectWedge(*args.device, args.call); !wedged)
    return Fail(wedged.error());
  done["device"] = *args.device;
  if (!args.call.empty()) done["call"] = args.call;
  done["note"] =
      "its driver queries no longer return: past probe.deadline_ms it drains, past "
      "probe.isolate_after deadlines it is isolated; rasctl inject unwedge ends it";
  return done;
}

Result<nlohmann::json> FaultInjection::InjectSilentCorruption(const InjectArgs& args) {
  if (auto ok = NeedDevice(args); !ok) return Fail(ok.error());
  if (!args.rate) {
    return Fail(ErrorCode::kInvalidArgument,
                "inject sdc needs --rate, the fraction of elements written with a bit flipped "
                "(0 to 1; 0 ends it)");
  }
  if (auto injected = runtime_.Driver().Faults()->InjectSilentCorruption(*args.device, *args.rate,
                                                                         args.kernel, args.seed);
      !injected)
    return Fail(injected.error());
  nlohmann::json done;
  done["device"] = *args.device;
  done["rate"] = *args.rate;
  if (!args.kernel.empty()) done["kernel"] = args.kernel;
  done["seed"] = args.seed;
  done["note"] = *args.rate > 0
                     ? "its kernels now write wrong bits and nothing reports it; rasctl inject sdc "
                       "--device N --rate 0 ends it"
                     : "its kernels compute right again";
  return done;
}

Result<nlohmann::json> FaultInjection::InjectLink(const InjectArgs& args) {
  nlohmann::json done;
  drivers::FaultInjector* faults = runtime_.Driver().Faults();
  if (auto ok = NeedDevice(args); !ok) return Fail(ok.error());
  if (!args.peer || !runtime_.GetDevice(*args.peer))
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("inject {} needs --peer, another device", args.kind));
  const bool up = args.kind == "link-up";
  done["device"] = *args.device;
  done["peer"] = *args.peer;
  if (args.via == "nvlink") {
    // As NVML's poll reports a real NVLink: typed link reports of both
    // devices, which LinkHealth takes as it takes a GPU's.
    if (auto set = faults->InjectNvlinkState(*args.device, *args.peer, up); !set)
      return Fail(set.error());
    done["via"] = "nvlink";
    done["note"] = up ? "NVLink reported active on both devices: they rejoin once it stayed up "
                        "policy.link_up_debounce_s"
                      : "NVLink reported inactive on both devices: out of collectives "
                        "(Degraded); rasctl inject link-up --via nvlink brings it back";
    return done;
  }
  if (sim_links_ != nullptr) {
    // The real path: the simulator's copies between the two fail (or work
    // again), and both devices' NIC ports change state in the sysfs tree,
    // which the RDMA poller reads.
    Status silent = faults->SetLinkState(*args.device, *args.peer, up);
    if (silent) {
      for (int device : {*args.device, *args.peer}) {
        if (auto flipped = sim_links_->SetPortUp(device, up); !flipped)
          return Fail(flipped.error());
      }
      done["ports"] = {sim_links_->PortName(*args.device), sim_links_->PortName(*args.peer)};
      done["note"] = up ? "ports up in the simulated sysfs tree: the devices rejoin once they "
                          "stayed up policy.link_up_debounce_s"
                        : "ports down in the simulated sysfs tree: the RDMA poller takes both "
                          "devices out of collectives (Degraded); rasctl inject link-up brings "
                          "them back";
      return done;
    }
    if (silent.error().code != ErrorCode::kNotSupported) return Fail(silent.error());
  }
  if (up) {
    return Fail(ErrorCode::kNotSupported,
                "inject link-up needs simulator.link_sysfs under a host.root other than / (the "
                "simulator's link-error report lasts until a reset)");
  }
  if (auto injected = faults->InjectLinkError(*args.device, *args.peer); !injected)
    return Fail(injected.error());
  done["note"] =
      "the simulator's link-error report (UCE: isolating); simulator.link_sysfs under "
      "a fixture host.root takes the sysfs path instead";
  return done;
}

Result<nlohmann::json> FaultInjection::InjectXid(const InjectArgs& args) {
  nlohmann::json done;
  // A kernel-log record, not a device fault: any backend's device with a
  // PCI address will do (on a real GPU this is how its gate is tested).
  if (auto ok = NeedDevice(args, /*into_driver=*/false); !ok) return Fail(ok.error());
  if (!args.xid) return Fail(ErrorCode::kInvalidArgument, "inject xid needs the Xid number");
  // The driver's own kernel-log line, naming the device by its PCI address.
  const std::string bdf = (*runtime_.GetDevice(*args.device))->Properties().pci_bdf;
  if (bdf.empty()) {
    return Fail(ErrorCode::kNotSupported,
                fmt::format("device {} has no PCI address for an Xid record", *args.device));
  }
  const std::string line =
      fmt::format("NVRM: Xid (PCI:{}): {}, pid=0, name=rasctl-inject, injected by rasctl",
                  bdf.size() > 2 ? bdf.substr(0, bdf.size() - 2) : bdf, *args.xid);
  done["device"] = *args.device;
  done["events"] = ingest_.InjectKernelLog(line);
  return done;
}

Result<nlohmann::json> FaultInjection::InjectKmsg(const InjectArgs& args) {
  nlohmann::json done;
  if (!options_.allow_sources)
    return Fail(ErrorCode::kPermissionDenied,
                "inject kmsg needs inject.allow_sources: true in the config");
  if (!args.text) return Fail(ErrorCode::kInvalidArgument, "inject kmsg needs the record text");
  done["events"] = ingest_.InjectKernelLog(*args.text);
  return done;
}

Result<nlohmann::json> FaultInjection::InjectEdac(const InjectArgs& args) {
  nlohmann::json done;
  if (!options_.allow_sources)
    return Fail(ErrorCode::kPermissionDenied,
                "inject edac needs inject.allow_sources: true in the config");
  std::error_code same_error;
  if (std::filesystem::equivalent(host_.Root(), "/", same_error))
    return Fail(ErrorCode::kPermissionDenied,
                "inject edac writes a simulated EDAC tree under host.root; with host.root / "
                "it would write the real sysfs, which rasd never does");
  if (!args.mc || !args.dimm)
    return Fail(ErrorCode::kInvalidArgument, "inject edac needs --mc and --dimm");
  const std::string base =
      fmt::format("/sys/devices/system/edac/mc/mc{}/dimm{}", *args.mc, *args.dimm);
  const auto current = host_.ReadFile(base + "/dimm_ce_count", 64);
  std::uint64_t value = 0;
  if (current) {
    const std::string trimmed = current->substr(0, current->find_first_of(" \n"));
    (void)std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), value);
  }
  value += args.count;
  if (auto written = host_.WriteFile(base + "/dimm_ce_count", fmt::format("{}\n", value), true);
      !written)
    return Fail(written.error());
  if (!host_.Exists(base + "/dimm_label")) {
    if (auto labelled = host_.WriteFile(base + "/dimm_label",
                                        fmt::format("MC{}_DIMM{}\n", *args.mc, *args.dimm), true);
        !labelled)
      return Fail(labelled.error());
  }
  done["mc"] = *args.mc;
  done["dimm"] = *args.dimm;
  done["dimm_ce_count"] = value;
  ingest_.PollEdacNow();
  return done;
}

Result<nlohmann::json> FaultInjection::InjectEinj(const InjectArgs& args) {
  nlohmann::json done;
  if (auto allowed = HardwareAllowed(); !allowed) return Fail(allowed.error());
  const std::string einj = "/sys/kernel/debug/apei/einj";
  const auto available = host_.ReadFile(einj + "/available_error_type", 4096);
  if (!available) {
    return Fail(ErrorCode::kNotSupported,
                "this kernel has no ACPI EINJ (" + host_.Resolve(einj).string() +
                    " is missing: CONFIG_ACPI_APEI_EINJ, debugfs, and firmware support needed)");
  }
  if (!args.address) return Fail(ErrorCode::kInvalidArgument, "inject einj needs --address (physical)");
  const auto at = ras::ParsePrintedAddress(*args.address);
  if (!at) return Fail(ErrorCode::kInvalidArgument, "address must be hex, e.g. 0x10000004000");
  // 0x8: memory correctable; the firmware lists what it supports.
  for (const auto& [file, value] : {std::pair<std::string, std::string>{"error_type", "0x8"},
                                    {"param1", ras::HexText(at->value)},
                                    {"param2", "0xfffffffffffff000"},
                                    {"error_inject", "1"}}) {
    if (auto written = host_.WriteFile(einj + "/" + file, value + "\n"); !written)
      return Fail(written.error());
  }
  done["address"] = at->printed;
  done["available_error_type"] = *available;
  return done;
}

Result<nlohmann::json> FaultInjection::InjectHwpoison(const InjectArgs& /*args*/) {
  nlohmann::json done;
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
  return done;
}

}  // namespace rasd::daemon
