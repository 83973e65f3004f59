#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ras_ingest.h"
#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/daemon/config.h"
#include "rasd/runtime/runtime.h"
#include "sim_link_tree.h"

namespace rasd::daemon {

// `rasctl inject`: device faults through the driver's FaultInjector (the
// simulator's, or a composite's that routes to the backend owning the
// device; refused where the backend has none), kernel-log records through
// the ingest's decoder, EDAC counters into a fixture tree, and the
// hardware's own injection (ACPI EINJ, MADV_HWPOISON) where the config
// allows it. Host files are written through HostEnv, so a fixture root
// takes every write.
//
// Loop thread only. Runtime, host and ingest must outlive it.
class FaultInjection {
 public:
  FaultInjection(runtime::Runtime& runtime, const common::HostEnv& host, RasIngest& ingest,
                 Config::Inject options);
  void SetOptions(Config::Inject options) { options_ = options; }
  // The simulator's sysfs tree of RDMA NICs (simulator.link_sysfs), or
  // null: `inject link` then is the simulator's own link-error report.
  // It must outlive this.
  void SetSimLinkTree(SimLinkTree* tree) { sim_links_ = tree; }
  // Where a memory fault with --job and no --address lands when the job
  // names a better place than any of its allocations (an LLM job: a KV
  // block in use); unset, or a job that names none: its first allocation.
  using JobFaultTarget =
      std::function<std::optional<drivers::DeviceAddress>(std::string_view job, int device)>;
  void SetJobFaultTarget(JobFaultTarget target) { job_target_ = std::move(target); }

  // The arguments of the `inject` command; the JSON answer says what was
  // injected where.
  Result<nlohmann::json> Inject(const nlohmann::json& args);

 private:
  struct InjectArgs {
    std::string kind;
    std::optional<int> device, peer, xid, mc, dimm;
    std::optional<std::string> address, job, text;
    std::string call;  // wedge: the one query that stops returning; empty: all of them
    std::string via;  // link, link-up: "nvlink", or empty for the configured path
    std::uint64_t count = 1;
    // sdc: bits flipped per element written, the kernel (empty: all), the seed.
    std::optional<double> rate;
    std::string kernel;
    std::uint64_t seed = 1;
  };
  Status HardwareAllowed() const;
  // The device exists and, `into_driver`, its backend can inject faults.
  Status NeedDevice(const InjectArgs& args, bool into_driver = true) const;
  Result<drivers::DeviceAddress> Target(const InjectArgs& args) const;
  Result<nlohmann::json> InjectDeviceMemory(const InjectArgs& args);  // ce, ucna, srao, srar
  Result<nlohmann::json> InjectDeviceFault(const InjectArgs& args);   // uce, fatal, hang
  Result<nlohmann::json> InjectLink(const InjectArgs& args);          // link, link-up
  Result<nlohmann::json> InjectWedge(const InjectArgs& args);         // wedge, unwedge
  Result<nlohmann::json> InjectSilentCorruption(const InjectArgs& args);  // sdc
  Result<nlohmann::json> InjectXid(const InjectArgs& args);
  Result<nlohmann::json> InjectKmsg(const InjectArgs& args);
  Result<nlohmann::json> InjectEdac(const InjectArgs& args);
  Result<nlohmann::json> InjectEinj(const InjectArgs& args);
  Result<nlohmann::json> InjectHwpoison(const InjectArgs& args);

  runtime::Runtime& runtime_;
  const common::HostEnv& host_;
  RasIngest& ingest_;
  Config::Inject options_;
  SimLinkTree* sim_links_ = nullptr;
  JobFaultTarget job_target_;
};

}  // namespace rasd::daemon
