#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"

namespace rasd::k8s {

// One device as the kubelet sees it: an id it hands back in Allocate, a
// health bit ("Healthy"/"Unhealthy" on the wire) and, when known, the NUMA
// node it hangs off (the kubelet's topology manager uses it).
struct PluginDevice {
  std::string id;  // at most 63 characters (the kubelet's limit)
  bool healthy = true;
  std::optional<int> numa_node;

  friend bool operator==(const PluginDevice&, const PluginDevice&) = default;
};

// What the daemon provides to the plugin. Both functions are called from
// gRPC threads, concurrently with each other and with themselves: they must
// be thread-safe, and quick (no blocking on device I/O).
class DeviceSource {
 public:
  virtual ~DeviceSource() = default;

  // Every device of the resource, healthy or not, in a stable order.
  virtual std::vector<PluginDevice> Devices() = 0;

  // The environment a container gets for these device ids (e.g.
  // RASD_DEVICES, CUDA_VISIBLE_DEVICES). An unknown id is an error
  // (kInvalidArgument or kNotFound). The plugin has already refused ids
  // that Devices() does not list as healthy.
  virtual Result<std::map<std::string, std::string>> AllocationEnvironment(
      const std::vector<std::string>& ids) = 0;
};

// A kubelet device plugin (API v1beta1) for one extended resource.
//
// It serves the DevicePlugin service on <plugin_dir>/<endpoint> and
// registers that endpoint with the kubelet at <plugin_dir>/kubelet.sock.
// A watcher thread keeps it registered: when the kubelet restarts (it
// deletes every socket in plugin_dir and creates kubelet.sock anew) or our
// socket disappears, the plugin serves on a fresh socket and registers
// again. A kubelet that is not there (yet) or refuses the registration is
// retried with exponential backoff, from kubelet_check_period up to
// max_registration_backoff; that is logged and counted, never fatal.
//
// The RPCs:
// - ListAndWatch sends Devices() at once, then again after each
//   DevicesChanged() that changed the list. A stream ends (status OK) when
//   the plugin stops or restarts its server, or when the client cancels.
// - Allocate answers each container request with
//   DeviceSource::AllocationEnvironment as its envs. A request naming an id
//   that Devices() does not list, or lists as unhealthy, fails the whole
//   call with INVALID_ARGUMENT naming the id: the kubelet only hands out
//   healthy devices, so such a request is a stale view and must not put a
//   bad device into a container. Errors of AllocationEnvironment map to
//   INVALID_ARGUMENT (kInvalidArgument, kNotFound) or INTERNAL (others).
// - GetDevicePluginOptions returns the options registered (both false).
// - GetPreferredAllocation answers UNIMPLEMENTED: the plugin registers
//   get_preferred_allocation_available=false, so the kubelet never calls it.
// - PreStartContainer answers an empty response (pre_start_required=false).
//
// Thread safety: every member function may be called from any thread at
// any time. Lifetime: the DeviceSource must outlive the plugin.
// Destruction ends every stream, cancels a Register in flight, stops the
// server and the watcher, and removes the plugin's socket (when it is still
// the one it created). It waits for running handlers: a DeviceSource call
// still running after 2 s has its RPC cancelled, and is waited for.
class DevicePlugin {
 public:
  struct Options {
    // The kubelet's device-plugins directory (<host root>/var/lib/kubelet/
    // device-plugins on a node): kubelet.sock is there, our socket goes
    // there. Must exist.
    std::filesystem::path plugin_dir;
    // The extended resource, "domain/name" as the kubelet requires (e.g.
    // rasd.io/gpu): a DNS subdomain outside kubernetes.io, a slash, and a
    // name of at most 63 characters of [A-Za-z0-9._-] that starts and ends
    // alphanumeric.
    std::string resource_name;
    // Our socket's file name inside plugin_dir (e.g. rasd-gpu.sock): no
    // slash, not kubelet.sock. plugin_dir/endpoint must fit a unix socket
    // address (107 bytes).
    std::string endpoint;
    // How often the watcher looks at kubelet.sock and our socket.
    std::chrono::milliseconds kubelet_check_period{500};
    // The longest wait between two registration attempts.
    std::chrono::milliseconds max_registration_backoff{std::chrono::seconds(30)};
    // Deadline of one Register call.
    std::chrono::milliseconds register_timeout{std::chrono::seconds(5)};
  };

  // Counters since Start; each but list_and_watch_active only grows.
  struct Stats {
    std::uint64_t registrations = 0;           // Register calls the kubelet accepted
    std::uint64_t registration_failures = 0;   // Register calls that failed or were refused
    std::uint64_t server_starts = 0;           // sockets served: 1 + restarts
    std::uint64_t list_and_watch_streams = 0;  // ListAndWatch streams opened
    std::uint64_t list_and_watch_active = 0;   // of which still open
    std::uint64_t list_and_watch_updates = 0;  // device lists sent on them
    std::uint64_t allocations = 0;             // Allocate calls answered OK
    std::uint64_t allocation_failures = 0;     // Allocate calls refused
  };

  // Validates the options, serves the socket and starts the watcher, which
  // makes the first registration attempt at once; Start does not wait for
  // the kubelet. Fails with kInvalidArgument for bad options, kNotFound when
  // plugin_dir is not a directory, kUnavailable when the server cannot
  // listen.
  static Result<std::unique_ptr<DevicePlugin>> Start(Options options, DeviceSource& source);

  ~DevicePlugin();
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Tells every ListAndWatch stream to send the device list again. Returns
  // at once; the streams send from their own threads (within milliseconds).
  // Call it whenever a device's health changes.
  void DevicesChanged();

  Stats GetStats() const;

  // True while the kubelet behind the current kubelet.sock has accepted our
  // registration.
  bool Registered() const;

  // <plugin_dir>/<endpoint>.
  std::filesystem::path SocketPath() const;

 private:
  class Impl;
  explicit DevicePlugin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `name` is a resource name the kubelet accepts from a device
// plugin ("domain/name", see Options::resource_name); the error says why not.
Status ValidateResourceName(std::string_view name);

// The wire strings of PluginDevice::healthy.
inline constexpr std::string_view kHealthy = "Healthy";
inline constexpr std::string_view kUnhealthy = "Unhealthy";
// The API version registered.
inline constexpr std::string_view kApiVersion = "v1beta1";
// The kubelet's registration socket's file name inside plugin_dir.
inline constexpr std::string_view kKubeletSocketName = "kubelet.sock";

}  // namespace rasd::k8s
