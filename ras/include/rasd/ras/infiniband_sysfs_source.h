#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {

// A port state file's "<id>: <name>" ("4: ACTIVE", "5: LinkUp").
struct InfinibandPortState {
  int id = 0;
  std::string name;
  bool operator==(const InfinibandPortState&) const = default;
};

// The RDMA devices (InfiniBand HCAs, RoCE NICs) of one moment, read from
// <root>/sys/class/infiniband as node_exporter reads them. Values a driver
// does not provide, or provides as "N/A (no PMA)", are absent, not zero.
struct InfinibandSnapshot {
  struct Port {
    int number = 0;
    // Absent where the file is missing or does not read as "<id>: <name>".
    std::optional<InfinibandPortState> state;            // ports/N/state
    std::optional<InfinibandPortState> phys_state;       // ports/N/phys_state
    std::optional<std::uint64_t> rate_bytes_per_second;  // ports/N/rate
    std::string link_layer;  // InfiniBand | Ethernet; empty where not given
    // Every counter file that reads as a number, keyed by its path under
    // the port: "counters/symbol_error", "counters_ext/port_rcv_data_64",
    // "hw_counters/out_of_buffer". Raw values as the kernel gives them
    // (data counters in 4-octet words; see NodeExporterValue).
    std::map<std::string, std::uint64_t> counters;
  };
  struct Device {
    std::string name;                        // mlx5_0, i40iw0
    std::string board_id, fw_ver, hca_type;  // empty where not given
    // The PCI function behind the device (its `device` link, else the PCI
    // directory its class entry links into), for pairing a NIC with the
    // accelerators beside it; absent where neither names one.
    std::optional<std::string> pci_bdf;
    std::map<int, Port> ports;
  };
  std::map<std::string, Device> devices;
  // The class directory exists but could not be listed (permissions): the
  // snapshot holds nothing, and that means nothing about the hardware.
  bool unreadable = false;
};

// "4: ACTIVE" -> {4, "ACTIVE"}; surrounding white space is ignored. nullopt
// for anything else (no colon, no number before it).
std::optional<InfinibandPortState> ParseInfinibandPortState(std::string_view text);

// "40 Gb/sec (4X QDR)" -> 5'000'000'000 bytes per second; "2.5 Gb/sec (1X
// SDR)" -> 312'500'000. The kernel prints whole or half Gb/sec; more
// decimals are taken exactly up to nine digits. nullopt for anything that is
// not "<number> Gb/sec...".
std::optional<std::uint64_t> ParseInfinibandRate(std::string_view text);

// The RDMA devices' names under the class directory, sorted; nullopt when
// the directory exists but cannot be listed (permissions). Listing reads no
// device: it never waits on a driver.
std::optional<std::vector<std::string>> ListInfinibandDevices(const common::HostEnv& host);

// The PCI function behind RDMA device `name` (InfinibandSnapshot::Device::
// pci_bdf), from its links alone: reads no device file.
std::optional<std::string> InfinibandPciAddress(const common::HostEnv& host,
                                                const std::string& name);

// Reads one device and its ports; nullopt when it is not there (gone since
// it was listed). Its counter and port-state files go through the driver,
// for mlx5 through the NIC's firmware: a read can block for as long as the
// firmware does not answer.
std::optional<InfinibandSnapshot::Device> ReadInfinibandDevice(const common::HostEnv& host,
                                                               const std::string& name);

// Reads every device and port. A host without /sys/class/infiniband gives
// an empty snapshot, not an error: most hosts have no RDMA device. A device
// or port that vanishes while being read is read as far as it went.
InfinibandSnapshot ReadInfinibandSnapshot(const common::HostEnv& host);

// Whether a counter (a key of Port::counters) counts errors, as opposed to
// traffic (data, packets) or congestion (port_xmit_wait): only these become
// events.
bool IsInfinibandErrorCounter(std::string_view counter);

// How node_exporter's infiniband collector (procfs sysfs/class_infiniband.go)
// names and scales a counter, so an exporter can publish the same series:
// the family name after "node_infiniband_" ("counters/port_rcv_data" ->
// "port_data_received_bytes_total", "counters/symbol_error" ->
// "symbol_error_total"), nullopt for a counter node_exporter does not
// publish (every hw_counters one).
inline constexpr std::string_view kNodeExporterInfinibandPrefix = "node_infiniband_";
std::optional<std::string_view> NodeExporterName(std::string_view counter);
// The value node_exporter publishes for `raw`: the four data counters
// (port_{rcv,xmit}_data and their _64 forms) count 4-octet words and are
// multiplied by 4 into bytes; the rest pass unchanged.
std::uint64_t NodeExporterValue(std::string_view counter, std::uint64_t raw);

// Turns successive snapshots into events, origin "infiniband":
//   - an error counter that went up: severity CE, count = the increase;
//   - a port that leaves ACTIVE (4) + LinkUp (5): UCE "link down: ...";
//     one that comes back to both: INFO "link up: ...";
//   - a port or device that disappears: UCE "port gone" / "device gone";
//     one that appears: INFO, and its values become its baseline.
// The first poll only takes a baseline (counts since boot are not news); a
// counter that went down was reset and is re-based without an event; a
// counter that appears later is baselined. A port whose state cannot be read
// or parsed gives no link event: the last state that could be read stays
// the reference until one can be read again.
// Events carry the device's PCI address (pci_bdf) where known; the device
// name and port number are in the summary and raw text (RasEvent has no
// field for a NIC port).
// Not thread-safe: one poller. `host` must outlive the source.
class InfinibandSysfsSource {
 public:
  static constexpr std::string_view kSourceName = "infiniband_sysfs";
  static constexpr std::string_view kOrigin = "infiniband";

  explicit InfinibandSysfsSource(const common::HostEnv& host) : host_(host) {}
  // Reads the tree (ReadInfinibandSnapshot) and advances to it.
  std::vector<RasEvent> Poll();
  // Advances to a snapshot read elsewhere (off the caller's thread, one
  // device at a time): the events from the last snapshot to `current`.
  std::vector<RasEvent> Advance(InfinibandSnapshot current);
  const InfinibandSnapshot& Last() const { return last_; }

 private:
  const common::HostEnv& host_;
  bool have_baseline_ = false;
  InfinibandSnapshot last_;
  // Whether each (device, port) was last seen up; ports whose state was
  // never readable are not in it.
  std::map<std::tuple<std::string, int>, bool> link_up_;
};

}  // namespace rasd::ras
