#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ras_source.h"
#include "rasd/ras/infiniband_sysfs_source.h"
#include "rasd/ras/pci_topology.h"
#include "rdma_device_readers.h"

namespace rasd::daemon {

// The RDMA NICs' ports and error counters in sysfs, polled every
// ras.infiniband_poll_ms (the first reading is the baseline). Which
// accelerators a NIC serves comes from the PCI topology
// (ras::AcceleratorsOfNic), read again when the set of RDMA devices
// changes; each poll's batch carries the "RDMA" link report: by
// accelerator, the ports it uses that are down. No RDMA device: looked for
// again with a SourceBackoff.
//
// Each NIC is read off the loop, on a thread of its own (RdmaDeviceReaders):
// mlx5 answers its counter and state files from firmware. A poll is one
// round, delivered when every NIC has answered. A NIC whose read has run
// past the read deadline (probe.deadline_ms) closes the round without it:
// it keeps its last reading (no counter news, not "gone"), its ports count
// as down in the link report, with the file and how long, and it is not
// asked again until that read returns.
class InfinibandAdapter final : public RasSource {
 public:
  explicit InfinibandAdapter(SourceContext& context) : context_(context) {}

  std::string_view Name() const override { return "infiniband"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats&) const override {}

  // The ports as last read. Thread-safe (the metrics exposer reads it).
  ras::InfinibandSnapshot Ports() const;
  struct RdmaPort {
    std::string device;
    int port = 0;
    std::string how;
  };
  // The ports an accelerator uses, with how that was decided.
  std::vector<RdmaPort> PortsOf(int device) const;
  // The RDMA devices whose read is in flight now, by name.
  std::vector<std::string> ReadsInFlight() const;

 private:
  void Poll();
  void ReadsFinished();
  void CloseRound();
  void Arm();
  void UpdateNicAffinity();
  void Publish();
  // The ports down by accelerator; nullopt when the ports were unreadable
  // (not evidence either way).
  std::optional<ras::LinkReport> LinksDown() const;
  // Each NIC's longest read past the read deadline now.
  std::map<std::string, drivers::ProbeCalls::Call> StuckReads() const;

  SourceContext& context_;
  SourceState state_;
  std::unique_ptr<ras::InfinibandSysfsSource> infiniband_;
  std::unique_ptr<RdmaDeviceReaders> readers_;
  // The round in progress: the NICs listed, those asked and not yet
  // answered, and what the answered ones read.
  bool round_open_ = false;
  std::chrono::nanoseconds round_began_{0};
  std::vector<std::string> listed_;
  std::set<std::string> waiting_for_;
  std::map<std::string, std::optional<ras::InfinibandSnapshot::Device>> answered_;
  std::map<std::string, drivers::ProbeCalls::Call> stuck_;  // as of the last round
  std::unique_ptr<common::Timer> timer_;
  SourceBackoff backoff_;
  std::set<std::string> affinity_of_;  // the RDMA devices nic_affinity_ was made for
  std::map<std::string, ras::NicAffinity> nic_affinity_;  // by RDMA device
  mutable std::mutex published_mutex_;
  ras::InfinibandSnapshot published_;  // guarded by published_mutex_
};

}  // namespace rasd::daemon
