// An Ascend chip's RoCE link through DCMI, with the real rasd on its Ascend
// backend over the stand-in libascendcl and libdcmi: the link going down
// takes the NPU out of collectives, Degraded, not isolated; it returns,
// Healthy, once the link has stayed up for the debounce. Nothing here has
// run on Ascend hardware.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace rasd::testing {
namespace {

TEST(AscendLinksTest, ARoceLinkDownDegradesItsNpuUntilTheLinkIsStable) {
  RasdInstance rasd;
  const auto script = rasd.HostRoot().parent_path() / "dcmi-script";
  std::ofstream(script) << "network 0 0\nnetwork 1 0\n";  // both RoCE ports answer OK
  rasd.WriteConfig(std::string("runtime:\n  driver: ascend\n  ascend_library: ") +
                   RASD_FAKE_ASCENDCL_PATH + "\n  dcmi_library: " + RASD_FAKE_DCMI_PATH +
                   "\npolicy:\n  link_up_debounce_s: 1\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {{"RASD_FAKE_DCMI_SCRIPT", script.string()}}, &why)) << why;
  ASSERT_EQ(rasd.RasctlJson({"devices"})["devices"].size(), 2u) << rasd.Stderr();

  std::ofstream(script, std::ios::app) << "network 1 3\n";  // DCMI_RDFX_DETECT_UNREACH
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "degraded"; }, 10s))
      << rasd.Stderr();
  auto device = DeviceOf(rasd, 1);
  EXPECT_EQ(device["links_usable"], false);
  EXPECT_NE(device["reason"].get<std::string>().find("RoCE link down (RoCE 0)"), std::string::npos)
      << device.dump();
  EXPECT_EQ(DeviceOf(rasd, 0)["state"], "healthy");
  EXPECT_EQ(DeviceOf(rasd, 0)["links_usable"], true);

  const auto up_at = std::chrono::steady_clock::now();
  std::ofstream(script, std::ios::app) << "network 1 0\n";
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "healthy"; }, 10s))
      << rasd.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - up_at, 900ms) << "rejoined before the debounce";
  EXPECT_EQ(DeviceOf(rasd, 1)["links_usable"], true);
}

}  // namespace
}  // namespace rasd::testing
