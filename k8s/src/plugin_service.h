#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "k8s/proto/api.grpc.pb.h"
#include "rasd/k8s/device_plugin.h"

namespace rasd::k8s {

// The plugin's counters, shared by every server instance it runs.
struct PluginCounters {
  std::atomic<std::uint64_t> registrations{0};
  std::atomic<std::uint64_t> registration_failures{0};
  std::atomic<std::uint64_t> server_starts{0};
  std::atomic<std::uint64_t> list_and_watch_streams{0};
  std::atomic<std::uint64_t> list_and_watch_active{0};
  std::atomic<std::uint64_t> list_and_watch_updates{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> allocation_failures{0};
};

// "The device list may have changed": a generation number that streams wait
// on. Thread-safe.
class DeviceListSignal {
 public:
  void Notify();
  // Wakes the waiters without a change, so they look at their stop flag.
  void Wake();
  std::uint64_t Generation() const;
  // Returns the generation once it differs from `seen`, `stopping` is set
  // (set it before Wake()), or `timeout` passed: whichever comes first.
  std::uint64_t WaitForChange(std::uint64_t seen, std::chrono::milliseconds timeout,
                              const std::atomic<bool>& stopping) const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::uint64_t generation_ = 0;
};

// The wire form of a device list.
v1beta1::ListAndWatchResponse ToListAndWatchResponse(const std::vector<PluginDevice>& devices);

// The DevicePlugin gRPC service of one server instance. Its handlers run on
// gRPC threads. Stop() ends its ListAndWatch streams; the instance must
// outlive the grpc::Server it is registered with. `source`, `signal` and
// `counters` must outlive it.
class PluginService final : public v1beta1::DevicePlugin::Service {
 public:
  PluginService(DeviceSource& source, DeviceListSignal& signal, PluginCounters& counters,
                v1beta1::DevicePluginOptions options);

  // Ends every ListAndWatch stream (status OK) within milliseconds; new
  // ones end at once. Call before shutting the server down, which waits for
  // the handlers.
  void Stop();

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* context,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;
  grpc::Status PreStartContainer(grpc::ServerContext* context,
                                 const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse* response) override;

 private:
  grpc::Status AllocateOrRefuse(const v1beta1::AllocateRequest& request,
                                v1beta1::AllocateResponse* response);

  DeviceSource& source_;
  DeviceListSignal& signal_;
  PluginCounters& counters_;
  const v1beta1::DevicePluginOptions options_;
  std::atomic<bool> stopping_{false};
};

}  // namespace rasd::k8s
