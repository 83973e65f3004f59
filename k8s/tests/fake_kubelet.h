#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rasd/common/result.h"

// A fake kubelet for tests: the Registration service over real gRPC on
// <dir>/kubelet.sock, and a client of a plugin's DevicePlugin service. No
// gRPC in this header, so that any test can include it.
namespace rasd::k8s::fake {

// One RegisterRequest as received.
struct Registration {
  std::string version;
  std::string endpoint;
  std::string resource_name;
  bool pre_start_required = false;
  bool get_preferred_allocation_available = false;
};

// A device as ListAndWatch sent it: the health string exactly as on the
// wire, and the NUMA nodes of its topology (empty when none was sent).
struct ListedDevice {
  std::string id;
  std::string health;
  std::vector<std::int64_t> numa_nodes;
};

struct DeviceList {
  std::vector<ListedDevice> devices;
  std::chrono::steady_clock::time_point received;
};

// A failed call: the gRPC status code (its number) and message.
struct CallError {
  int code = 0;
  std::string message;
};

template <typename T>
struct CallResult {
  std::optional<T> value;  // set when the call succeeded
  CallError error;         // when it did not
  bool ok() const { return value.has_value(); }
};

struct PluginOptions {
  bool pre_start_required = false;
  bool get_preferred_allocation_available = false;
};

// A connection to one plugin socket, as the kubelet dials it. Calls block
// up to `timeout` each. Thread-safe except that Watch is called at most once.
class PluginClient {
 public:
  ~PluginClient();  // cancels the stream and joins its reader

  CallResult<PluginOptions> GetDevicePluginOptions();
  // One ContainerAllocateRequest per element of `containers`; the envs of
  // each ContainerAllocateResponse, in order.
  CallResult<std::vector<std::map<std::string, std::string>>> Allocate(
      const std::vector<std::vector<std::string>>& containers);
  CallResult<bool> PreStartContainer(const std::vector<std::string>& ids);
  // The status code GetPreferredAllocation answers (0 = OK).
  int GetPreferredAllocationCode();

  // Opens ListAndWatch; a reader thread records every list received, and
  // calls on_list with each and on_end with the stream's final status code
  // (both optional, on the reader thread).
  void Watch(std::function<void(const DeviceList&)> on_list = {},
             std::function<void(int)> on_end = {});
  std::vector<DeviceList> Lists() const;
  // Waits until the `index`-th list (0-based) has arrived; nullopt at the
  // deadline.
  std::optional<DeviceList> WaitForList(std::size_t index, std::chrono::milliseconds timeout) const;
  // Waits until the stream has ended; its status code, or nullopt at the
  // deadline.
  std::optional<int> WaitForStreamEnd(std::chrono::milliseconds timeout) const;

  class Impl;
  explicit PluginClient(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// The kubelet side. Thread-safe.
class FakeKubelet {
 public:
  // Serves Registration on <dir>/kubelet.sock (dir must exist).
  static Result<std::unique_ptr<FakeKubelet>> Start(std::filesystem::path dir);
  ~FakeKubelet();  // stops serving and removes kubelet.sock

  // What a restarting kubelet does: stop serving, delete every socket in
  // the directory (the plugins' too), serve a new kubelet.sock.
  Status Restart();
  // Stop serving and remove kubelet.sock (a kubelet that is down).
  void Stop();
  // Serve again after Stop().
  Status Resume();

  // Refuse (FAILED_PRECONDITION) every Register from now on, or accept again.
  void RefuseRegistrations(bool refuse);

  std::vector<Registration> Registrations() const;
  // Waits until `count` registrations have arrived; false at the deadline.
  bool WaitForRegistrations(std::size_t count, std::chrono::milliseconds timeout) const;
  // Called on a gRPC thread for each accepted registration, after it is
  // recorded (the executable uses it to dial the plugin as the kubelet does).
  void OnRegistration(std::function<void(const Registration&)> callback);

  // Dials <dir>/<endpoint>.
  std::unique_ptr<PluginClient> Dial(
      const std::string& endpoint,
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  const std::filesystem::path& Dir() const;

  class Impl;
  explicit FakeKubelet(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rasd::k8s::fake
