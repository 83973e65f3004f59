#include "plugin_service.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "rasd/common/logging.h"

namespace rasd::k8s {
namespace {

// How often a stream waiting for a change looks whether its client left:
// the sync API does not wake a handler on cancellation.
constexpr std::chrono::milliseconds kCancelPollPeriod{100};

grpc::Status ToGrpcStatus(const Error& error) {
  const auto code = error.code == ErrorCode::kInvalidArgument || error.code == ErrorCode::kNotFound
                        ? grpc::StatusCode::INVALID_ARGUMENT
                        : grpc::StatusCode::INTERNAL;
  return grpc::Status(code, error.message);
}

}  // namespace

void DeviceListSignal::Notify() {
  {
    std::lock_guard lock(mutex_);
    ++generation_;
  }
  changed_.notify_all();
}

void DeviceListSignal::Wake() {
  // Taking the lock orders the waker's flag store before a waiter's check.
  { std::lock_guard lock(mutex_); }
  changed_.notify_all();
}

std::uint64_t DeviceListSignal::Generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

std::uint64_t DeviceListSignal::WaitForChange(std::uint64_t seen, std::chrono::milliseconds timeout,
                                              const std::atomic<bool>& stopping) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return generation_ != seen || stopping.load(); });
  return generation_;
}

v1beta1::ListAndWatchResponse ToListAndWatchResponse(const std::vector<PluginDevice>& devices) {
  v1beta1::ListAndWatchResponse response;
  for (const auto& device : devices) {
    auto* out = response.add_devices();
    out->set_id(device.id);
    out->set_health(std::string(device.healthy ? kHealthy : kUnhealthy));
    if (device.numa_node) out->mutable_topology()->add_nodes()->set_id(*device.numa_node);
  }
  return response;
}

PluginService::PluginService(DeviceSource& source, DeviceListSignal& signal,
                             PluginCounters& counters, v1beta1::DevicePluginOptions options)
    : source_(source), signal_(signal), counters_(counters), options_(std::move(options)) {}

void PluginService::Stop() {
  stopping_.store(true);
  signal_.Wake();
}

grpc::Status PluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                   v1beta1::DevicePluginOptions* response) {
  *response = options_;
  return grpc::Status::OK;
}

grpc::Status PluginService::ListAndWatch(
    grpc::ServerContext* context, const v1beta1::Empty*,
    grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  counters_.list_and_watch_streams.fetch_add(1);
  counters_.list_and_watch_active.fetch_add(1);
  struct ActiveStream {
    std::atomic<std::uint64_t>& active;
    ~ActiveStream() { active.fetch_sub(1); }
  } active{counters_.list_and_watch_active};
  RASD_LOG_INFO("kubelet opened a ListAndWatch stream ({})", context->peer());
  // Read before Devices(): a change after the read wakes the wait below.
  std::uint64_t seen = signal_.Generation();
  std::optional<std::vector<PluginDevice>> sent;
  while (true) {
    auto devices = source_.Devices();
    if (!sent || devices != *sent) {
      if (!writer->Write(ToListAndWatchResponse(devices))) {
        RASD_LOG_INFO("ListAndWatch stream ended: the kubelet is gone");
        return grpc::Status::OK;
      }
      counters_.list_and_watch_updates.fetch_add(1);
      RASD_LOG_DEBUG("ListAndWatch sent {} devices", devices.size());
      sent = std::move(devices);
    }
    while (true) {
      if (stopping_.load()) {
        RASD_LOG_INFO("ListAndWatch stream ended: the plugin's server stops");
        return grpc::Status::OK;
      }
      if (context->IsCancelled()) {
        RASD_LOG_INFO("ListAndWatch stream ended: the kubelet cancelled it");
        return grpc::Status::OK;
      }
      const auto now = signal_.WaitForChange(seen, kCancelPollPeriod, stopping_);
      if (now != seen) {
        seen = now;
        break;
      }
    }
  }
}

grpc::Status PluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                   const v1beta1::PreferredAllocationRequest*,
                                                   v1beta1::PreferredAllocationResponse*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "rasd registers get_preferred_allocation_available=false");
}

grpc::Status PluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                     v1beta1::AllocateResponse* response) {
  auto status = AllocateOrRefuse(*request, response);
  if (status.ok()) {
    counters_.allocations.fetch_add(1);
  } else {
    counters_.allocation_failures.fetch_add(1);
    RASD_LOG_WARN("refused an Allocate: {}", status.error_message());
  }
  return status;
}

grpc::Status PluginService::AllocateOrRefuse(const v1beta1::AllocateRequest& request,
                                             v1beta1::AllocateResponse* response) {
  std::unordered_map<std::string, bool> healthy_by_id;
  for (auto& device : source_.Devices())
    healthy_by_id.emplace(std::move(device.id), device.healthy);
  for (const auto& container : request.container_requests()) {
    std::vector<std::string> ids(container.devices_ids().begin(), container.devices_ids().end());
    for (const auto& id : ids) {
      const auto found = healthy_by_id.find(id);
      if (found == healthy_by_id.end()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            fmt::format("unknown device id '{}'", id));
      }
      if (!found->second) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            fmt::format("device '{}' is unhealthy", id));
      }
    }
    auto envs = source_.AllocationEnvironment(ids);
    if (!envs) return ToGrpcStatus(envs.error());
    response->add_container_responses()->mutable_envs()->insert(envs->begin(), envs->end());
    RASD_LOG_INFO("allocated devices [{}] to a container", fmt::join(ids, ", "));
  }
  return grpc::Status::OK;
}

grpc::Status PluginService::PreStartContainer(grpc::ServerContext*,
                                              const v1beta1::PreStartContainerRequest*,
                                              v1beta1::PreStartContainerResponse*) {
  return grpc::Status::OK;
}

}  // namespace rasd::k8s
