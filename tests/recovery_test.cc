// What to do next, with the real rasd: the recovery table's suggestion per
// device, its escalation across recoveries (an undrain, a reboot counted
// through the boot id, an automatic recovery), kept across restarts;
// rasctl devices, the metric and a hook's RASD_SUGGESTED_ACTION.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"

namespace rasd::testing {
namespace {

nlohmann::json Device(RasdInstance& rasd, int index) {
  return rasd.RasctlJson({"devices", std::to_string(index)})["devices"][0];
}

bool WaitForState(RasdInstance& rasd, int index, const std::string& state) {
  return WaitUntil([&] { return Device(rasd, index)["state"] == state; }, 10s);
}

TEST(RecoveryTest, AnXid79SuggestsARebootAndTwoRecoveriesEscalateToHardwareInspection) {
  RasdInstance rasd;
  const auto hook_file = rasd.Dir() / "suggested";
  rasd.WriteConfig(fmt::format(R"(policy:
  rules:
    - name: off-the-bus
      match: {{origin: nvidia_xid, vendor_code: 79}}
      actions: [run-hook, drain-device, isolate-device]
      hook: [/bin/sh, -c, 'echo "$RASD_SUGGESTED_ACTION" >> {}']
)",
                               hook_file.string()));
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "1"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 1, "isolated"));
  auto device = Device(rasd, 1);
  EXPECT_EQ(device["suggested_action"], "reboot-node");
  EXPECT_NE(device["suggested_why"].get<std::string>().find("NVIDIA Xid catalog"), std::string::npos)
      << device["suggested_why"];
  EXPECT_EQ(device["clears"], "reboot of the node, then rasctl undrain (self-test)");
  ASSERT_TRUE(WaitUntil([&] { return ReadText(hook_file) == "reboot-node\n"; }, 10s))
      << ReadText(hook_file);
  auto text = rasd.Rasctl({"devices", "1"});
  EXPECT_NE(text.out.find("suggested: reboot-node"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("clears by: reboot of the node"), std::string::npos) << text.out;
  const int port = rasd.RasctlJson({"status"})["metrics"]["port"];
  const std::string metrics = Http(port, "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_device_suggested_action{device=\"1\",action=\"reboot-node\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("rasd_device_suggested_action{device=\"0\",action=\"none\"} 1"),
            std::string::npos);

  // The node reboots (a new boot id); rasd counts the reboot once, and the
  // undrain after it is the same recovery.
  ASSERT_TRUE(rasd.Stop().has_value());
  WriteText(rasd.HostRoot() / "proc/sys/kernel/random/boot_id",
            "0f0f0f0f-1111-2222-3333-444444444444\n");
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  device = Device(rasd, 1);
  EXPECT_EQ(device["state"], "isolated");  // only an operator returns it
  EXPECT_EQ(device["suggested_action"], "none");
  EXPECT_EQ(device["recoveries_24h"], 1);
  EXPECT_EQ(device["clears"], "self-test: rasctl undrain");
  ASSERT_EQ(rasd.Rasctl({"undrain", "1"}).exit_code, 0);
  EXPECT_EQ(Device(rasd, 1)["recoveries_24h"], 1);

  // Again: still a reboot (one recovery); the undrain without a reboot
  // counts; the third time it is hardware.
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "1"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 1, "isolated"));
  EXPECT_EQ(Device(rasd, 1)["suggested_action"], "reboot-node");
  ASSERT_EQ(rasd.Rasctl({"undrain", "1"}).exit_code, 0);
  EXPECT_EQ(Device(rasd, 1)["recoveries_24h"], 2);
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "1"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 1, "isolated"));
  device = Device(rasd, 1);
  EXPECT_EQ(device["suggested_action"], "hardware-inspection");
  EXPECT_NE(device["suggested_why"].get<std::string>().find("2 recoveries of this device in 24 h"),
            std::string::npos)
      << device["suggested_why"];
  ASSERT_TRUE(WaitUntil([&] {
    return ReadText(hook_file) == "reboot-node\nreboot-node\nhardware-inspection\n";
  }, 10s)) << ReadText(hook_file);

  // Kept across a restart in the same boot.
  ASSERT_TRUE(rasd.Stop().has_value());
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  device = Device(rasd, 1);
  EXPECT_EQ(device["suggested_action"], "hardware-inspection");
  EXPECT_EQ(device["clears"], "repair or replacement, then rasctl undrain (self-test)");
}

// Automatic recovery resets and tests a device while a reset is what is
// suggested; once the suggestion has escalated past a reset it stops, so
// it never loops.
TEST(RecoveryTest, AutomaticRecoveryStopsOnceTheSuggestionIsMoreThanAReset) {
  RasdInstance rasd;
  rasd.WriteConfig(
      "policy:\n  auto_recover: true\n  auto_recover_delay_ms: 50\n  auto_recover_window_s: 1\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  for (int round = 1; round <= 2; ++round) {
    ASSERT_EQ(rasd.Rasctl({"inject", "xid", "95", "--device", "2"}).exit_code, 0);
    ASSERT_TRUE(WaitUntil([&] { return Device(rasd, 2)["recoveries_24h"] == round; }, 15s))
        << "round " << round << ": " << Device(rasd, 2).dump(2) << rasd.Stderr();
    ASSERT_TRUE(WaitForState(rasd, 2, "healthy"));
    std::this_thread::sleep_for(1100ms);  // past auto_recover_window_s
  }
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "95", "--device", "2"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 2, "isolated"));
  EXPECT_EQ(Device(rasd, 2)["suggested_action"], "hardware-inspection");
  ASSERT_TRUE(WaitUntil(
      [&] { return rasd.Stderr().find("no automatic recovery: hardware-inspection") !=
                   std::string::npos; },
      5s))
      << rasd.Stderr();
  // Decided with the isolation: nothing is armed that could recover it later.
  EXPECT_EQ(Device(rasd, 2)["auto_recovery_scheduled"], false);
  EXPECT_EQ(Device(rasd, 2)["state"], "isolated");
  EXPECT_EQ(Device(rasd, 2)["recoveries_24h"], 2);
}

// A fault during the recovery's delay is looked at when the delay ends: an
// Xid 79 after an Xid 48 makes the reset pointless (helper's find).
TEST(RecoveryTest, AFaultDuringTheRecoveryDelayIsLookedAtWhenItEnds) {
  RasdInstance rasd;
  rasd.WriteConfig("policy:\n  auto_recover: true\n  auto_recover_delay_ms: 1500\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "48", "--device", "3"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 3, "isolated"));
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "3"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil(
      [&] { return rasd.Stderr().find("no automatic recovery: reboot-node is suggested now") !=
                   std::string::npos; },
      10s))
      << rasd.Stderr();
  EXPECT_EQ(Device(rasd, 3)["state"], "isolated");
  EXPECT_EQ(Device(rasd, 3)["suggested_action"], "reboot-node");
  EXPECT_EQ(Device(rasd, 3)["recoveries_24h"], 0);
}

// A boot id rasd cannot read is no proof of a reboot.
TEST(RecoveryTest, AnUnreadableBootIdCountsNoReboot) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "0"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 0, "isolated"));
  ASSERT_TRUE(rasd.Stop().has_value());
  std::filesystem::remove(rasd.HostRoot() / "proc/sys/kernel/random/boot_id");
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_EQ(Device(rasd, 0)["suggested_action"], "reboot-node");
  EXPECT_EQ(Device(rasd, 0)["recoveries_24h"], 0);
  EXPECT_NE(rasd.Stderr().find("the boot id is unknown"), std::string::npos);
}

// A GPU fallen off the bus (Xid 79) needs the node rebooted: a reset and a
// self-test would prove nothing, so automatic recovery leaves it alone.
TEST(RecoveryTest, AnXidThatSuggestsARebootIsNotResetAutomatically) {
  RasdInstance rasd;
  rasd.WriteConfig("policy:\n  auto_recover: true\n  auto_recover_delay_ms: 50\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_EQ(rasd.Rasctl({"inject", "xid", "79", "--device", "3"}).exit_code, 0);
  ASSERT_TRUE(WaitForState(rasd, 3, "isolated"));
  ASSERT_TRUE(WaitUntil(
      [&] { return rasd.Stderr().find("no automatic recovery: reboot-node") != std::string::npos; },
      5s))
      << rasd.Stderr();
  EXPECT_EQ(Device(rasd, 3)["auto_recovery_scheduled"], false);
  EXPECT_EQ(Device(rasd, 3)["state"], "isolated");
  EXPECT_EQ(Device(rasd, 3)["suggested_action"], "reboot-node");
}

// Xid 154 carries the driver's own recovery action: the kernel line's
// "to 0x2 (Node Reboot Required)" becomes the device's suggestion.
TEST(RecoveryTest, AnXid154FollowsTheDriversRecoveryAction) {
  RasdInstance rasd;
  rasd.WriteConfig("inject:\n  allow_sources: true\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  std::string bdf = Device(rasd, 2)["pci_bdf"].get<std::string>();
  ASSERT_GT(bdf.size(), 2u);
  bdf.resize(bdf.size() - 2);  // the Xid line prints the BDF without its function
  const auto injected = rasd.Rasctl(
      {"inject", "kmsg",
       fmt::format("NVRM: Xid (PCI:{}): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
                   "(Node Reboot Required)",
                   bdf)});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  ASSERT_TRUE(WaitForState(rasd, 2, "isolated")) << rasd.Stderr();
  const auto device = Device(rasd, 2);
  EXPECT_EQ(device["suggested_action"], "reboot-node") << device.dump(2);
  EXPECT_NE(device["suggested_why"].get<std::string>().find("GPU_RECOVERY_ACTION_NODE_REBOOT"),
            std::string::npos)
      << device["suggested_why"];
  EXPECT_EQ(Device(rasd, 1)["suggested_action"], "none");
}

}  // namespace
}  // namespace rasd::testing
