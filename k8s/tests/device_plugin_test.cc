#include "rasd/k8s/device_plugin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include "fake_kubelet.h"
#include "rasd/testing/eventually.h"

namespace rasd::k8s {
namespace {

using ::rasd::k8s::fake::FakeKubelet;
using ::rasd::k8s::fake::PluginClient;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr milliseconds kCheckPeriod{20};
constexpr milliseconds kWait{3000};      // a deadline that only a failure reaches
constexpr int kGrpcInvalidArgument = 3;  // grpc::StatusCode::INVALID_ARGUMENT
constexpr int kGrpcUnimplemented = 12;   // grpc::StatusCode::UNIMPLEMENTED

// A device source the test sets health on. Thread-safe, as the contract wants.
class FakeDeviceSource final : public DeviceSource {
 public:
  explicit FakeDeviceSource(std::vector<PluginDevice> devices) : devices_(std::move(devices)) {}

  std::vector<PluginDevice> Devices() override {
    std::lock_guard lock(mutex_);
    return devices_;
  }

  Result<std::map<std::string, std::string>> AllocationEnvironment(
      const std::vector<std::string>& ids) override {
    std::lock_guard lock(mutex_);
    std::string joined;
    for (const auto& id : ids) {
      const bool known = std::any_of(devices_.begin(), devices_.end(),
                                     [&](const PluginDevice& device) { return device.id == id; });
      if (!known) return Fail(ErrorCode::kNotFound, "no device " + id);
      joined += (joined.empty() ? "" : ",") + id;
    }
    return std::map<std::string, std::string>{{"RASD_DEVICES", joined},
                                              {"CUDA_VISIBLE_DEVICES", joined}};
  }

  void SetHealthy(const std::string& id, bool healthy) {
    std::lock_guard lock(mutex_);
    for (auto& device : devices_) {
      if (device.id == id) device.healthy = healthy;
    }
  }

 private:
  std::mutex mutex_;
  std::vector<PluginDevice> devices_;
};

// Polls `done` until it holds or `timeout` passes: for state with no
// notification (a file, a counter). Returns whether it held.
template <typename Predicate>
bool WaitUntil(Predicate done, milliseconds timeout = kWait) {
  return rasd::testing::Eventually(done, timeout, milliseconds(2));
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rasd-k8s-XXXXXX";  // short: unix socket paths are limited
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    plugin_.reset();
    kubelet_.reset();
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  void StartKubelet() {
    auto kubelet = FakeKubelet::Start(dir_);
    ASSERT_TRUE(kubelet) << kubelet.error().ToString();
    kubelet_ = std::move(*kubelet);
  }

  DevicePlugin::Options PluginOptions() const {
    return {.plugin_dir = dir_,
            .resource_name = "rasd.io/gpu",
            .endpoint = "rasd-gpu.sock",
            .kubelet_check_period = kCheckPeriod,
            .max_registration_backoff = milliseconds(100)};
  }

  void StartPlugin() {
    auto plugin = DevicePlugin::Start(PluginOptions(), source_);
    ASSERT_TRUE(plugin) << plugin.error().ToString();
    plugin_ = std::move(*plugin);
  }

  // Kubelet and plugin up, registered, and a stream open with its first list.
  std::unique_ptr<PluginClient> StartAndWatch() {
    StartKubelet();
    StartPlugin();
    EXPECT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
    auto client = kubelet_->Dial("rasd-gpu.sock");
    client->Watch();
    EXPECT_TRUE(client->WaitForList(0, kWait));
    return client;
  }

  std::filesystem::path dir_;
  FakeDeviceSource source_{
      {{.id = "gpu0", .numa_node = 0}, {.id = "gpu1", .numa_node = 1}, {.id = "gpu2"}}};
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<DevicePlugin> plugin_;
};

TEST_F(DevicePluginTest, RegistersItsEndpointResourceAndOptions) {
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  const auto registration = kubelet_->Registrations().at(0);
  EXPECT_EQ(registration.version, "v1beta1");
  EXPECT_EQ(registration.endpoint, "rasd-gpu.sock");
  EXPECT_EQ(registration.resource_name, "rasd.io/gpu");
  EXPECT_FALSE(registration.pre_start_required);
  EXPECT_FALSE(registration.get_preferred_allocation_available);
  EXPECT_TRUE(WaitUntil([&] { return plugin_->Registered(); }));
  EXPECT_EQ(plugin_->GetStats().registrations, 1u);  // Registered() is set after the count
  EXPECT_EQ(plugin_->GetStats().registration_failures, 0u);
  EXPECT_EQ(plugin_->SocketPath(), dir_ / "rasd-gpu.sock");
  EXPECT_TRUE(std::filesystem::is_socket(dir_ / "rasd-gpu.sock"));
}

TEST_F(DevicePluginTest, ListAndWatchSendsTheWholeListFirstWithHealthAndNumaNode) {
  auto client = StartAndWatch();
  const auto list = client->WaitForList(0, kWait);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->devices.size(), 3u);
  EXPECT_EQ(list->devices[0].id, "gpu0");
  EXPECT_EQ(list->devices[0].health, "Healthy");
  EXPECT_THAT(list->devices[0].numa_nodes, ::testing::ElementsAre(0));
  EXPECT_EQ(list->devices[1].id, "gpu1");
  EXPECT_THAT(list->devices[1].numa_nodes, ::testing::ElementsAre(1));
  EXPECT_EQ(list->devices[2].id, "gpu2");
  EXPECT_TRUE(list->devices[2].numa_nodes.empty());
  EXPECT_EQ(plugin_->GetStats().list_and_watch_streams, 1u);
  EXPECT_EQ(plugin_->GetStats().list_and_watch_active, 1u);
}

TEST_F(DevicePluginTest, UnhealthyDeviceReachesTheStreamWithin100msAndHealthyAgain) {
  auto client = StartAndWatch();

  source_.SetHealthy("gpu1", false);
  const auto changed = std::chrono::steady_clock::now();
  plugin_->DevicesChanged();
  const auto unhealthy = client->WaitForList(1, kWait);
  ASSERT_TRUE(unhealthy);
  const auto latency = unhealthy->received - changed;
  EXPECT_LT(latency, milliseconds(100))
      << std::chrono::duration_cast<std::chrono::microseconds>(latency).count() << " us";
  ASSERT_EQ(unhealthy->devices.size(), 3u);
  EXPECT_EQ(unhealthy->devices[0].health, "Healthy");
  EXPECT_EQ(unhealthy->devices[1].health, "Unhealthy");
  EXPECT_EQ(unhealthy->devices[2].health, "Healthy");

  source_.SetHealthy("gpu1", true);
  const auto recovered_at = std::chrono::steady_clock::now();
  plugin_->DevicesChanged();
  const auto healthy = client->WaitForList(2, kWait);
  ASSERT_TRUE(healthy);
  EXPECT_LT(healthy->received - recovered_at, milliseconds(100));
  EXPECT_EQ(healthy->devices[1].health, "Healthy");
}

TEST_F(DevicePluginTest, DevicesChangedWithoutAChangeSendsNothing) {
  auto client = StartAndWatch();
  plugin_->DevicesChanged();  // nothing changed
  source_.SetHealthy("gpu2", false);
  plugin_->DevicesChanged();
  const auto next = client->WaitForList(1, kWait);
  ASSERT_TRUE(next);
  // The list after the first is the changed one: the no-op sent nothing.
  EXPECT_EQ(next->devices[2].health, "Unhealthy");
  // The counter follows the write the client already read.
  EXPECT_TRUE(WaitUntil([&] { return plugin_->GetStats().list_and_watch_updates == 2; }));
  EXPECT_EQ(client->Lists().size(), 2u);
}

TEST_F(DevicePluginTest, KubeletRestartEndsTheStreamAndLeadsToReRegistrationAndAFreshStream) {
  auto old_client = StartAndWatch();
  const auto first_socket = std::filesystem::status(dir_ / "rasd-gpu.sock").type();
  ASSERT_EQ(first_socket, std::filesystem::file_type::socket);

  ASSERT_TRUE(kubelet_->Restart());
  EXPECT_TRUE(old_client->WaitForStreamEnd(kWait).has_value());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, kWait));
  EXPECT_EQ(kubelet_->Registrations().at(1).endpoint, "rasd-gpu.sock");
  EXPECT_GE(plugin_->GetStats().server_starts, 2u);
  // The counter follows the call the kubelet already answered.
  EXPECT_TRUE(WaitUntil([&] { return plugin_->GetStats().registrations >= 2; }));

  auto client = kubelet_->Dial("rasd-gpu.sock");
  client->Watch();
  ASSERT_TRUE(client->WaitForList(0, kWait));
  source_.SetHealthy("gpu0", false);
  plugin_->DevicesChanged();
  const auto update = client->WaitForList(1, kWait);
  ASSERT_TRUE(update);
  EXPECT_EQ(update->devices[0].health, "Unhealthy");
}

TEST_F(DevicePluginTest, OwnSocketDeletedLeadsToAFreshSocketAndReRegistration) {
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  ASSERT_TRUE(std::filesystem::remove(dir_ / "rasd-gpu.sock"));
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, kWait));
  EXPECT_TRUE(std::filesystem::is_socket(dir_ / "rasd-gpu.sock"));
  auto client = kubelet_->Dial("rasd-gpu.sock");
  const auto options = client->GetDevicePluginOptions();
  EXPECT_TRUE(options.ok()) << options.error.message;
}

TEST_F(DevicePluginTest, AllocateAnswersEachContainerWithTheSourcesEnvironment) {
  auto client = StartAndWatch();
  const auto result = client->Allocate({{"gpu0", "gpu2"}, {"gpu1"}});
  ASSERT_TRUE(result.ok()) << result.error.message;
  ASSERT_EQ(result.value->size(), 2u);
  EXPECT_EQ(result.value->at(0).at("RASD_DEVICES"), "gpu0,gpu2");
  EXPECT_EQ(result.value->at(0).at("CUDA_VISIBLE_DEVICES"), "gpu0,gpu2");
  EXPECT_EQ(result.value->at(1).at("RASD_DEVICES"), "gpu1");
  EXPECT_EQ(plugin_->GetStats().allocations, 1u);
}

TEST_F(DevicePluginTest, AllocateOfAnUnknownOrUnhealthyDeviceIsInvalidArgument) {
  auto client = StartAndWatch();
  const auto unknown = client->Allocate({{"gpu0"}, {"gpu7"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error.code, kGrpcInvalidArgument);
  EXPECT_THAT(unknown.error.message, HasSubstr("gpu7"));

  source_.SetHealthy("gpu1", false);
  const auto unhealthy = client->Allocate({{"gpu1"}});
  ASSERT_FALSE(unhealthy.ok());
  EXPECT_EQ(unhealthy.error.code, kGrpcInvalidArgument);
  EXPECT_THAT(unhealthy.error.message, HasSubstr("gpu1"));
  EXPECT_THAT(unhealthy.error.message, HasSubstr("unhealthy"));

  EXPECT_EQ(plugin_->GetStats().allocation_failures, 2u);
  EXPECT_EQ(plugin_->GetStats().allocations, 0u);
}

TEST_F(DevicePluginTest, OptionsPreStartAndPreferredAllocation) {
  auto client = StartAndWatch();
  const auto options = client->GetDevicePluginOptions();
  ASSERT_TRUE(options.ok()) << options.error.message;
  EXPECT_FALSE(options.value->pre_start_required);
  EXPECT_FALSE(options.value->get_preferred_allocation_available);
  const auto pre_start = client->PreStartContainer({"gpu0"});
  EXPECT_TRUE(pre_start.ok()) << pre_start.error.message;
  EXPECT_EQ(client->GetPreferredAllocationCode(), kGrpcUnimplemented);
}

TEST_F(DevicePluginTest, RegistersOnceTheKubeletAppears) {
  StartPlugin();  // no kubelet.sock yet
  EXPECT_FALSE(plugin_->Registered());
  EXPECT_EQ(plugin_->GetStats().registrations, 0u);
  StartKubelet();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  EXPECT_TRUE(WaitUntil([&] { return plugin_->Registered(); }));
  EXPECT_EQ(plugin_->GetStats().registrations, 1u);
}

TEST_F(DevicePluginTest, KubeletDownIsNotRegisteredAndBackRegistersAgain) {
  StartKubelet();
  StartPlugin();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  ASSERT_TRUE(WaitUntil([&] { return plugin_->Registered(); }));
  kubelet_->Stop();  // kubelet.sock goes
  EXPECT_TRUE(WaitUntil([&] { return !plugin_->Registered(); }));
  ASSERT_TRUE(kubelet_->Resume());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, kWait));
  EXPECT_TRUE(WaitUntil([&] { return plugin_->Registered(); }));
}

TEST_F(DevicePluginTest, RefusedRegistrationIsRetriedAndCounted) {
  StartKubelet();
  kubelet_->RefuseRegistrations(true);
  StartPlugin();
  EXPECT_TRUE(WaitUntil([&] { return plugin_->GetStats().registration_failures >= 2; }));
  EXPECT_FALSE(plugin_->Registered());
  kubelet_->RefuseRegistrations(false);
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, kWait));
  EXPECT_TRUE(WaitUntil([&] { return plugin_->Registered(); }));
}

TEST_F(DevicePluginTest, ClientCancelEndsTheStream) {
  auto client = StartAndWatch();
  ASSERT_EQ(plugin_->GetStats().list_and_watch_active, 1u);
  client.reset();  // cancels
  EXPECT_TRUE(WaitUntil([&] { return plugin_->GetStats().list_and_watch_active == 0; }));
}

TEST_F(DevicePluginTest, DestructionEndsStreamsAndRemovesTheSocket) {
  auto client = StartAndWatch();
  ASSERT_TRUE(std::filesystem::is_socket(dir_ / "rasd-gpu.sock"));
  plugin_.reset();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "rasd-gpu.sock"));
  const auto end = client->WaitForStreamEnd(kWait);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(*end, 0);  // OK: the plugin ended it, nothing broke
  EXPECT_TRUE(std::filesystem::is_socket(dir_ / "kubelet.sock"));  // not ours to remove
}

TEST_F(DevicePluginTest, StartRefusesBadOptions) {
  auto bad_name = PluginOptions();
  bad_name.resource_name = "gpu";
  auto result = DevicePlugin::Start(bad_name, source_);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);

  auto bad_endpoint = PluginOptions();
  bad_endpoint.endpoint = "../rasd.sock";
  result = DevicePlugin::Start(bad_endpoint, source_);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);

  auto kubelets_own = PluginOptions();
  kubelets_own.endpoint = "kubelet.sock";
  result = DevicePlugin::Start(kubelets_own, source_);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);

  auto too_long = PluginOptions();
  too_long.endpoint = std::string(120, 'x') + ".sock";
  result = DevicePlugin::Start(too_long, source_);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);

  auto no_dir = PluginOptions();
  no_dir.plugin_dir = dir_ / "missing";
  result = DevicePlugin::Start(no_dir, source_);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace rasd::k8s
