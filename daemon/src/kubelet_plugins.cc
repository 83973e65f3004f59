#include "kubelet_plugins.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "rasd/common/device_visibility.h"
#include "rasd/common/logging.h"

namespace rasd::daemon {

namespace {

constexpr std::chrono::seconds kPollPeriod{1};

// The kubelet's device id: the vendor's UUID where there is one that fits
// (stable across reboots and driver reloads), else "<vendor>-<index>".
std::string PluginDeviceId(const drivers::DeviceProperties& properties) {
  if (!properties.uuid.empty() && properties.uuid.size() <= 63) return properties.uuid;
  return fmt::format("{}-{}", properties.vendor, properties.index);
}

}  // namespace

class KubeletPlugins::VendorDevices final : public k8s::DeviceSource {
 public:
  VendorDevices(runtime::Runtime& runtime, std::string vendor)
      : runtime_(runtime), vendor_(std::move(vendor)) {}

  std::vector<k8s::PluginDevice> Devices() override {
    std::vector<k8s::PluginDevice> devices;
    for (const auto& device : runtime_.Devices()) {
      if (device->Properties().vendor != vendor_) continue;
      devices.push_back({.id = PluginDeviceId(device->Properties()),
                         .healthy = runtime::TakesNewWork(device->Health())});
    }
    return devices;
  }

  Result<std::map<std::string, std::string>> AllocationEnvironment(
      const std::vector<std::string>& ids) override {
    std::vector<common::VisibleDevice> all;
    std::map<std::string, int> index_by_id;
    for (const auto& device : runtime_.Devices()) {
      const auto& properties = device->Properties();
      all.push_back({.index = properties.index, .vendor = properties.vendor, .uuid = properties.uuid});
      if (properties.vendor == vendor_) index_by_id[PluginDeviceId(properties)] = properties.index;
    }
    if (ids.empty()) return Fail(ErrorCode::kInvalidArgument, "no device ids to allocate");
    std::vector<int> chosen;
    for (const auto& id : ids) {
      const auto found = index_by_id.find(id);
      if (found == index_by_id.end())
        return Fail(ErrorCode::kNotFound, fmt::format("no {} device '{}'", vendor_, id));
      if (std::find(chosen.begin(), chosen.end(), found->second) != chosen.end())
        return Fail(ErrorCode::kInvalidArgument, fmt::format("device '{}' asked twice", id));
      chosen.push_back(found->second);
    }
    auto environment = common::VisibilityEnvironment(all, chosen);
    if (const auto cuda = environment.find("CUDA_VISIBLE_DEVICES"); cuda != environment.end())
      environment["NVIDIA_VISIBLE_DEVICES"] = cuda->second.empty() ? "void" : cuda->second;
    return environment;
  }

 private:
  runtime::Runtime& runtime_;
  const std::string vendor_;
};

Result<std::unique_ptr<KubeletPlugins>> KubeletPlugins::Start(common::EventLoop& loop,
                                                              runtime::Runtime& runtime,
                                                              Options options) {
  std::unique_ptr<KubeletPlugins> plugins(new KubeletPlugins());
  std::set<std::string> vendors;
  for (const auto& device : runtime.Devices()) vendors.insert(device->Properties().vendor);
  for (const auto& vendor : vendors) {
    const auto resource = options.resource_by_vendor.find(vendor);
    if (resource == options.resource_by_vendor.end()) {
      RASD_LOG_WARN("kubernetes: no resource name for {} devices: not offered to the kubelet",
                    vendor);
      continue;
    }
    // "rasd.io/gpu" -> rasd-gpu.sock
    const std::string name = resource->second.substr(resource->second.find('/') + 1);
    Served served;
    served.resource = resource->second;
    served.source = std::make_unique<VendorDevices>(runtime, vendor);
    auto plugin = k8s::DevicePlugin::Start(
        k8s::DevicePlugin::Options{.plugin_dir = options.plugin_dir,
                                   .resource_name = resource->second,
                                   .endpoint = "rasd-" + name + ".sock"},
        *served.source);
    if (!plugin) {
      return Fail(plugin.error().code, fmt::format("kubernetes device plugin {}: {}",
                                                   resource->second, plugin.error().message));
    }
    served.plugin = std::move(*plugin);
    RASD_LOG_INFO("kubernetes: device plugin {} serves {} {} device(s) at {}", resource->second,
                  served.source->Devices().size(), vendor, served.plugin->SocketPath().string());
    plugins->served_.push_back(std::move(served));
  }
  KubeletPlugins* self = plugins.get();
  plugins->poll_ = loop.CreateTimer([self] {
    self->DevicesChanged();
    self->poll_->ArmAfter(kPollPeriod);
  });
  plugins->poll_->ArmAfter(kPollPeriod);
  return plugins;
}

KubeletPlugins::~KubeletPlugins() {
  poll_.reset();
  // Plugins first: their threads read the sources.
  for (auto& served : served_) served.plugin.reset();
}

void KubeletPlugins::DevicesChanged() {
  for (auto& served : served_) served.plugin->DevicesChanged();
}

nlohmann::json KubeletPlugins::View() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& served : served_) {
    const auto stats = served.plugin->GetStats();
    list.push_back({{"resource", served.resource},
                    {"socket", served.plugin->SocketPath().string()},
                    {"registered", served.plugin->Registered()},
                    {"registrations", stats.registrations},
                    {"registration_failures", stats.registration_failures},
                    {"streams", stats.list_and_watch_active},
                    {"allocations", stats.allocations},
                    {"allocation_failures", stats.allocation_failures}});
  }
  return list;
}

}  // namespace rasd::daemon
