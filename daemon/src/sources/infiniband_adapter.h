#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ras_source.h"
#include "rasd/ras/infiniband_sysfs_source.h"
#include "rasd/ras/pci_topology.h"

namespace rasd::daemon {

// What a source of link state hands on after each look: by device, the
// links down now ("NVLink 2", "mlx5_0 port 1"); and the links the source
// cannot tell down from absent and has heard nothing of since (NVML's
// NVLinks inactive at its start). `kind` names the links: "RDMA", "NVLink",
// "HCCS", "RoCE".
using LinkObserver =
    std::function<void(std::string_view kind, const std::map<int, std::vector<std::string>>& down,
                       const std::map<int, std::vector<std::string>>& unconfirmed)>;

// The RDMA NICs' ports and error counters in sysfs, polled every
// ras.infiniband_poll_ms (the first reading is the baseline). Which
// accelerators a NIC serves comes from the PCI topology
// (ras::AcceleratorsOfNic), read again when the set of RDMA devices
// changes; after each poll the ports down are handed to the link observer
// by accelerator. No RDMA device: looked for again with a SourceBackoff.
class InfinibandAdapter final : public RasSource {
 public:
  explicit InfinibandAdapter(SourceContext& context) : context_(context) {}

  std::string_view Name() const override { return "infiniband"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats&) const override {}

  void SetLinkObserver(LinkObserver observer) { link_observer_ = std::move(observer); }
  // The ports as last read. Thread-safe (the metrics exposer reads it).
  ras::InfinibandSnapshot Ports() const;
  struct RdmaPort {
    std::string device;
    int port = 0;
    std::string how;
  };
  // The ports an accelerator uses, with how that was decided.
  std::vector<RdmaPort> PortsOf(int device) const;

 private:
  void Poll();
  void Arm();
  void UpdateNicAffinity();
  void Publish();

  SourceContext& context_;
  SourceState state_;
  std::unique_ptr<ras::InfinibandSysfsSource> infiniband_;
  std::unique_ptr<common::Timer> timer_;
  SourceBackoff backoff_;
  std::set<std::string> affinity_of_;  // the RDMA devices nic_affinity_ was made for
  std::map<std::string, ras::NicAffinity> nic_affinity_;  // by RDMA device
  LinkObserver link_observer_;
  mutable std::mutex published_mutex_;
  ras::InfinibandSnapshot published_;  // guarded by published_mutex_
};

}  // namespace rasd::daemon
