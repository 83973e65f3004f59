#include "rasd/ras/pci_topology.h"

#include <gtest/gtest.h>

#include <fstream>

namespace rasd::ras {
namespace {

// A fixture host: two PCIe switches under one root port each, a GPU and a
// NIC behind the first switch, a GPU behind the second, a NIC straight on
// a root port of NUMA node 1 with a GPU of node 1 elsewhere.
class PciTopologyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("rasd-pci-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "sys/bus/pci/devices");
    Add("0000:05:00.0", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0", 0);  // GPU 0
    Add("0000:06:00.0", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:06:00.0", 0);  // NIC A
    Add("0000:45:00.0", "pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:08.0/0000:45:00.0", 1);  // GPU 1
    Add("0000:81:00.0", "pci0000:80/0000:80:03.0/0000:81:00.0", 1);                            // NIC B
    Add("0000:c1:00.0", "pci0000:c0/0000:c0:03.0/0000:c1:00.0", -1);                           // NIC C
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Add(const std::string& bdf, const std::string& path, int numa) {
    const auto device = root_ / "sys/devices" / path;
    std::filesystem::create_directories(device);
    std::ofstream(device / "numa_node") << numa << "\n";
    std::filesystem::create_directory_symlink("../../../devices/" + path,
                                              root_ / "sys/bus/pci/devices" / bdf);
  }

  PciPlacement Read(const std::string& bdf) {
    common::HostEnv host(root_, std::make_shared<common::SystemClock>());
    auto placement = ReadPciPlacement(host, bdf);
    EXPECT_TRUE(placement.has_value()) << bdf;
    return placement.value_or(PciPlacement{});
  }

  std::filesystem::path root_;
};

TEST_F(PciTopologyTest, ReadsTheBridgesAndTheNumaNode) {
  const auto gpu = Read("0000:05:00.0");
  EXPECT_EQ(gpu.root, "pci0000:00");
  EXPECT_EQ(gpu.path, (std::vector<std::string>{"0000:00:01.0", "0000:01:00.0", "0000:02:08.0",
                                                 "0000:05:00.0"}));
  EXPECT_EQ(gpu.numa_node, 0);
  EXPECT_FALSE(Read("0000:c1:00.0").numa_node.has_value()) << "-1: the kernel does not say";
  common::HostEnv host(root_, std::make_shared<common::SystemClock>());
  EXPECT_FALSE(ReadPciPlacement(host, "0000:99:00.0").has_value()) << "no such device";
  EXPECT_FALSE(ReadPciPlacement(host, "../../etc").has_value()) << "not a BDF";
}

TEST_F(PciTopologyTest, ANicServesTheAcceleratorsBehindItsSwitchElseItsNumaNode) {
  const std::vector<std::pair<int, PciPlacement>> gpus = {{0, Read("0000:05:00.0")},
                                                          {1, Read("0000:45:00.0")}};
  auto a = AcceleratorsOfNic(Read("0000:06:00.0"), gpus);
  EXPECT_EQ(a.devices, std::vector<int>{0});
  EXPECT_EQ(a.how, "same PCIe switch");
  auto b = AcceleratorsOfNic(Read("0000:81:00.0"), gpus);
  EXPECT_EQ(b.devices, std::vector<int>{1});
  EXPECT_EQ(b.how, "same NUMA node 1");
  auto c = AcceleratorsOfNic(Read("0000:c1:00.0"), gpus);
  EXPECT_TRUE(c.devices.empty());
  EXPECT_EQ(c.how, "none");
}

}  // namespace
}  // namespace rasd::ras
