#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/common/result.h"
#include "rasd/k8s/device_plugin.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// rasd's devices as kubelet extended resources: one k8s::DevicePlugin per
// vendor present (rasd.io/gpu for NVIDIA, rasd.io/npu for Ascend,
// rasd.io/sim for the simulator, as configured), each device Healthy while
// it takes new work (healthy or degraded) and Unhealthy while it drains or
// is isolated. Allocate gives a container the variables `rasctl run` sets
// (common::VisibilityEnvironment), with NVIDIA_VISIBLE_DEVICES beside
// CUDA_VISIBLE_DEVICES for the NVIDIA container runtime.
//
// Health reaches the kubelet two ways: DevicesChanged() from the loop
// after any state change (at once), and a poll every second as a backstop
// for changes that are not announced (a self-test's own drain). A plugin
// sends only when its list changed.
//
// Created and destroyed on the loop thread; the plugins' gRPC threads read
// the devices' atomic gates. The runtime outlives this.
class KubeletPlugins {
 public:
  struct Options {
    std::filesystem::path plugin_dir;  // <host.root>/var/lib/kubelet/device-plugins
    std::map<std::string, std::string> resource_by_vendor;  // "nvidia" -> "rasd.io/gpu"
  };
  // Errors: kNotFound when plugin_dir is missing (no kubelet here), or a
  // plugin that cannot serve its socket.
  static Result<std::unique_ptr<KubeletPlugins>> Start(common::EventLoop& loop,
                                                       runtime::Runtime& runtime, Options options);
  ~KubeletPlugins();

  void DevicesChanged();
  // Per resource: its socket, whether the kubelet registered it, the counts.
  nlohmann::json View() const;

 private:
  class VendorDevices;
  struct Served {
    std::string resource;
    std::unique_ptr<VendorDevices> source;
    std::unique_ptr<k8s::DevicePlugin> plugin;
  };
  KubeletPlugins() = default;

  std::vector<Served> served_;
  std::unique_ptr<common::Timer> poll_;
};

}  // namespace rasd::daemon
