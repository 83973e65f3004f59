#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rasd/common/host_env.h"

namespace rasd::ras {

// Where a PCI function sits: the bridges from its root complex down to it,
// as the kernel's <root>/sys/bus/pci/devices/<bdf> link shows them
// (../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/...),
// and its NUMA node.
struct PciPlacement {
  std::string bdf;                 // "0000:05:00.0"
  std::string root;                // "pci0000:00"
  std::vector<std::string> path;   // the BDFs below the root, the function itself last
  std::optional<int> numa_node;    // unset: the kernel does not say (-1) or no file
};

// Unset when the device is not under <root>/sys/bus/pci/devices. Reads the
// link and numa_node only.
std::optional<PciPlacement> ReadPciPlacement(const common::HostEnv& host, std::string_view bdf);

// Which accelerators use a NIC (an RDMA device): those behind the same PCIe
// switch as the NIC (the two paths share the root port and the switch's
// upstream port: GPUDirect RDMA's fast path), else those on the NIC's NUMA
// node, else none. `accelerators`: rasd's device index with its placement.
// Pure.
struct NicAffinity {
  std::vector<int> devices;  // ascending
  std::string how;           // "same PCIe switch", "same NUMA node 1", "none"
};
NicAffinity AcceleratorsOfNic(const PciPlacement& nic,
                              const std::vector<std::pair<int, PciPlacement>>& accelerators);

}  // namespace rasd::ras
