// RDMA ports with the real rasd: node_exporter's infiniband fixture as the
// host's /sys/class/infiniband; the metrics, a counter's increase as a CE
// event, a port going down as a UCE event, the source's state in status.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace rasd::testing {
namespace {

std::filesystem::path Fixture() {
  return std::filesystem::path(RASD_SOURCE_DIR) /
         "../shared/corpus/infiniband_sysfs/node_exporter-fixture/sys/class/infiniband";
}

nlohmann::json InfinibandEvents(RasdInstance& rasd) {
  nlohmann::json found = nlohmann::json::array();
  const nlohmann::json reply = rasd.RasctlJson({"events", "--limit", "1000"});
  for (const auto& event : reply["events"]) {
    if (event["origin"] == "infiniband") found.push_back(event);
  }
  return found;
}

TEST(InfinibandTest, PortsAreMetricsCounterIncreasesAndLinkDownsAreEvents) {
  ASSERT_TRUE(std::filesystem::exists(Fixture())) << Fixture() << " (../shared beside the checkout)";
  RasdInstance rasd;
  const auto tree = rasd.HostRoot() / "sys/class/infiniband";
  std::filesystem::create_directories(tree.parent_path());
  std::filesystem::copy(Fixture(), tree,
                        std::filesystem::copy_options::recursive |
                            std::filesystem::copy_options::copy_symlinks);
  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto status = rasd.RasctlJson({"status"});
  EXPECT_EQ(status["ras"]["sources"]["infiniband"]["state"], "active") << status["ras"].dump();
  const int port = status["metrics"]["port"];
  const std::string metrics = Http(port, "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_infiniband_state_id{device=\"mlx4_0\",port=\"1\"} 4\n"),
            std::string::npos)
      << metrics.substr(0, 2000);
  EXPECT_NE(metrics.find("rasd_infiniband_port_discards_transmitted_total{device=\"mlx4_0\","
                         "port=\"1\"} 5\n"),
            std::string::npos);
  // The baseline is not news.
  EXPECT_TRUE(InfinibandEvents(rasd).empty());

  WriteText(tree / "mlx4_0/ports/1/counters/port_xmit_discards", "8\n");
  ASSERT_TRUE(WaitUntil([&] { return InfinibandEvents(rasd).size() == 1; }, 10s))
      << InfinibandEvents(rasd).dump(2) << rasd.Stderr();
  auto event = InfinibandEvents(rasd)[0];
  EXPECT_EQ(event["severity"], "CE");
  EXPECT_EQ(event["count"], 3);
  EXPECT_NE(event["summary"].get<std::string>().find("port_xmit_discards"), std::string::npos);

  WriteText(tree / "mlx4_0/ports/2/state", "1: DOWN\n");
  WriteText(tree / "mlx4_0/ports/2/phys_state", "3: Disabled\n");
  ASSERT_TRUE(WaitUntil([&] { return InfinibandEvents(rasd).size() == 2; }, 10s))
      << InfinibandEvents(rasd).dump(2);
  event = InfinibandEvents(rasd)[1];
  EXPECT_EQ(event["severity"], "UCE");
  EXPECT_NE(event["summary"].get<std::string>().find("link down: mlx4_0 port 2"),
            std::string::npos)
      << event.dump();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Http(port, "GET", "/metrics")
                   .find("rasd_infiniband_state_id{device=\"mlx4_0\",port=\"2\"} 1\n") !=
               std::string::npos;
      },
      10s));
  // rasd's own devices are not touched by a NIC's port.
  const nlohmann::json devices = rasd.RasctlJson({"devices"});
  for (const auto& device : devices["devices"]) {
    EXPECT_EQ(device["state"], "healthy") << device.dump();
  }
}

// The NIC behind the same PCIe switch as simulated device 1 serves it: the
// devices view says so, and a port's fault names the device it reaches.
TEST(InfinibandTest, APortsFaultNamesTheAcceleratorsBehindItsSwitch) {
  RasdInstance rasd;
  const auto host = rasd.HostRoot();
  const auto tree = host / "sys/class/infiniband";
  std::filesystem::create_directories(tree.parent_path());
  std::filesystem::copy(Fixture(), tree,
                        std::filesystem::copy_options::recursive |
                            std::filesystem::copy_options::copy_symlinks);
  // Simulated device 1 is ffff:c2:00.0; the NIC sits on the same switch.
  auto add = [&](const std::string& bdf, const std::string& path) {
    std::filesystem::create_directories(host / "sys/devices" / path);
    WriteText(host / "sys/devices" / path / "numa_node", "0\n");
    std::filesystem::create_directories(host / "sys/bus/pci/devices");
    std::filesystem::create_directory_symlink("../../../devices/" + path,
                                              host / "sys/bus/pci/devices" / bdf);
  };
  add("ffff:c2:00.0", "pciffff:00/ffff:00:01.0/ffff:01:00.0/ffff:02:08.0/ffff:c2:00.0");
  add("ffff:c9:00.0", "pciffff:00/ffff:00:01.0/ffff:01:00.0/ffff:02:10.0/ffff:c9:00.0");
  std::filesystem::create_directory_symlink(
      "../../../devices/pciffff:00/ffff:00:01.0/ffff:01:00.0/ffff:02:10.0/ffff:c9:00.0",
      tree / "mlx4_0/device");
  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const nlohmann::json devices = rasd.RasctlJson({"devices"});
  EXPECT_EQ(devices["devices"][1]["rdma_ports"],
            nlohmann::json::parse(R"([{"device": "mlx4_0", "port": 1, "how": "same PCIe switch"},
                                      {"device": "mlx4_0", "port": 2, "how": "same PCIe switch"}])"));
  EXPECT_TRUE(devices["devices"][0]["rdma_ports"].empty());
  EXPECT_NE(rasd.Rasctl({"devices", "1"}).out.find("RDMA: mlx4_0 port 1, mlx4_0 port 2 (same PCIe "
                                                   "switch)"),
            std::string::npos);
  WriteText(tree / "mlx4_0/ports/1/state", "1: DOWN\n");
  ASSERT_TRUE(WaitUntil([&] { return InfinibandEvents(rasd).size() == 1; }, 10s))
      << rasd.Stderr();
  EXPECT_NE(InfinibandEvents(rasd)[0]["summary"].get<std::string>().find(
                "[serves device(s) 1: same PCIe switch]"),
            std::string::npos)
      << InfinibandEvents(rasd)[0].dump();
}

}  // namespace
}  // namespace rasd::testing
