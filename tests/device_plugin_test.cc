// The real rasd as a kubelet device plugin: a fake kubelet (a real gRPC
// server speaking the v1beta1 API, k8s/tests/fake_kubelet.h) in the fixture
// host root's /var/lib/kubelet/device-plugins. Registration, the device
// stream, an isolation reaching the kubelet as Unhealthy within 100 ms, an
// undrain as Healthy again, a kubelet restart, Allocate's variables.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fake_kubelet.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

using k8s::fake::DeviceList;
using k8s::fake::FakeKubelet;

std::string HealthOf(const DeviceList& list, const std::string& id) {
  for (const auto& device : list.devices)
    if (device.id == id) return device.health;
  return "absent";
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plugin_dir_ = rasd_.HostRoot() / "var/lib/kubelet/device-plugins";
    std::filesystem::create_directories(plugin_dir_);
    auto kubelet = FakeKubelet::Start(plugin_dir_);
    ASSERT_TRUE(kubelet) << kubelet.error().message;
    kubelet_ = std::move(*kubelet);
    rasd_.WriteConfig("kubernetes:\n  device_plugin: true\n  sim_resource: example.com/accel\n");
    std::string why;
    ASSERT_TRUE(rasd_.Start({}, {}, &why)) << why;
    const auto devices = rasd_.RasctlJson({"devices"})["devices"];
    for (const auto& device : devices) uuids_.push_back(device["uuid"].get<std::string>());
    ASSERT_EQ(uuids_.size(), 4u);
  }

  RasdInstance rasd_;
  std::filesystem::path plugin_dir_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::vector<std::string> uuids_;
};

TEST_F(DevicePluginTest, RegistersAndStreamsEveryDeviceHealthy) {
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, 10s)) << rasd_.Stderr();
  const auto registration = kubelet_->Registrations().front();
  EXPECT_EQ(registration.version, "v1beta1");
  EXPECT_EQ(registration.resource_name, "example.com/accel");
  EXPECT_EQ(registration.endpoint, "rasd-accel.sock");
  // Only the kubelet (root) may talk to it.
  const auto mode = std::filesystem::status(plugin_dir_ / registration.endpoint).permissions();
  EXPECT_EQ(mode & std::filesystem::perms::all, std::filesystem::perms::owner_read |
                                                    std::filesystem::perms::owner_write);
  auto client = kubelet_->Dial(registration.endpoint);
  ASSERT_TRUE(client);
  auto options = client->GetDevicePluginOptions();
  ASSERT_TRUE(options.ok()) << options.error.message;
  EXPECT_FALSE(options.value->pre_start_required);
  EXPECT_TRUE(client->PreStartContainer({uuids_[0]}).ok());
  client->Watch();
  const auto first = client->WaitForList(0, 5s);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->devices.size(), 4u);
  for (const auto& uuid : uuids_) EXPECT_EQ(HealthOf(*first, uuid), "Healthy") << uuid;
  // Status says the kubelet took it.
  const auto plugins = rasd_.RasctlJson({"status"})["kubernetes"]["plugins"];
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0]["registered"], true);
  EXPECT_EQ(plugins[0]["resource"], "example.com/accel");
}

TEST_F(DevicePluginTest, AnIsolationIsUnhealthyWithin100msAndAnUndrainHealthyAgain) {
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, 10s)) << rasd_.Stderr();
  auto client = kubelet_->Dial(kubelet_->Registrations().front().endpoint);
  ASSERT_TRUE(client);
  client->Watch();
  ASSERT_TRUE(client->WaitForList(0, 5s));
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_EQ(rasd_.Rasctl({"isolate", "2", "--reason", "test"}).exit_code, 0);
  const auto update = client->WaitForList(1, 5s);
  ASSERT_TRUE(update) << "no update after the isolation";
  EXPECT_EQ(HealthOf(*update, uuids_[2]), "Unhealthy");
  EXPECT_EQ(HealthOf(*update, uuids_[1]), "Healthy");
  const auto latency =
      std::chrono::duration_cast<std::chrono::milliseconds>(update->received - asked);
  // From the moment rasctl was started (its own start-up included).
  EXPECT_LT(latency.count(), 100) << "isolate to Unhealthy took " << latency.count() << " ms";
  std::cout << "isolate (rasctl start) to Unhealthy on the stream: " << latency.count() << " ms\n";

  ASSERT_EQ(rasd_.Rasctl({"undrain", "2"}).exit_code, 0) << rasd_.Stderr();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto lists = client->Lists();
        return !lists.empty() && HealthOf(lists.back(), uuids_[2]) == "Healthy";
      },
      5s));
}

TEST_F(DevicePluginTest, AKubeletRestartLeadsToANewRegistrationAndAFreshStream) {
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, 10s)) << rasd_.Stderr();
  ASSERT_EQ(rasd_.Rasctl({"isolate", "3"}).exit_code, 0);
  // What the kubelet does when it starts: every socket in the directory goes.
  ASSERT_TRUE(kubelet_->Restart());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, 10s)) << rasd_.Stderr();
  EXPECT_TRUE(std::filesystem::exists(plugin_dir_ / "rasd-accel.sock"));
  auto client = kubelet_->Dial(kubelet_->Registrations().back().endpoint);
  ASSERT_TRUE(client);
  client->Watch();
  const auto list = client->WaitForList(0, 5s);
  ASSERT_TRUE(list);
  EXPECT_EQ(HealthOf(*list, uuids_[3]), "Unhealthy");  // the state survived the restart
  EXPECT_EQ(rasd_.RasctlJson({"status"})["kubernetes"]["plugins"][0]["registrations"], 2);
}

TEST_F(DevicePluginTest, AllocateGivesTheVisibilityVariablesAndRefusesAnIsolatedDevice) {
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, 10s)) << rasd_.Stderr();
  auto client = kubelet_->Dial(kubelet_->Registrations().front().endpoint);
  ASSERT_TRUE(client);
  auto allocated = client->Allocate({{uuids_[3], uuids_[1]}, {uuids_[0]}});
  ASSERT_TRUE(allocated.ok()) << allocated.error.message;
  ASSERT_EQ(allocated.value->size(), 2u);
  EXPECT_EQ((*allocated.value)[0].at("RASD_DEVICES"), "1,3");
  EXPECT_EQ((*allocated.value)[1].at("RASD_DEVICES"), "0");
  ASSERT_EQ(rasd_.Rasctl({"isolate", "1"}).exit_code, 0);
  auto refused = client->Allocate({{uuids_[1]}});
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.error.message.find(uuids_[1]), std::string::npos) << refused.error.message;
  EXPECT_FALSE(client->Allocate({{"no-such-device"}}).ok());
  EXPECT_FALSE(client->Allocate({{uuids_[0], uuids_[0]}}).ok()) << "a device twice";
  EXPECT_FALSE(client->Allocate({{}}).ok()) << "no device";
}

// rasd may start before the kubelet made its directory: it says so, serves
// on, and registers once the directory and the kubelet are there.
TEST(DevicePluginStartTest, AMissingDirectoryIsRetriedUntilTheKubeletIsThere) {
  RasdInstance rasd;
  rasd.WriteConfig("kubernetes:\n  device_plugin: true\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto kubernetes = rasd.RasctlJson({"status"})["kubernetes"];
  ASSERT_TRUE(kubernetes["error"].is_string()) << kubernetes.dump();
  EXPECT_NE(kubernetes["error"].get<std::string>().find("does not exist"), std::string::npos);
  EXPECT_TRUE(kubernetes["plugins"].empty());
  const auto plugin_dir = rasd.HostRoot() / "var/lib/kubelet/device-plugins";
  std::filesystem::create_directories(plugin_dir);
  auto kubelet = k8s::fake::FakeKubelet::Start(plugin_dir);
  ASSERT_TRUE(kubelet) << kubelet.error().message;
  ASSERT_TRUE((*kubelet)->WaitForRegistrations(1, 20s)) << rasd.Stderr();
  // rasd marks the plugin registered once the kubelet's answer is back,
  // a moment after the kubelet has seen the request.
  EXPECT_TRUE(WaitUntil(
      [&] {
        kubernetes = rasd.RasctlJson({"status"})["kubernetes"];
        return kubernetes["error"].is_null() && kubernetes["plugins"].size() == 1 &&
               kubernetes["plugins"][0]["registered"] == true;
      },
      5s))
      << kubernetes.dump();
}

}  // namespace
}  // namespace rasd::testing
