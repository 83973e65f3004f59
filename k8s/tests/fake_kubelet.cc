#include "fake_kubelet.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "k8s/proto/api.grpc.pb.h"

namespace rasd::k8s::fake {
namespace {

CallError ToCallError(const grpc::Status& status) {
  return CallError{static_cast<int>(status.error_code()), status.error_message()};
}

std::shared_ptr<grpc::Channel> UnixChannel(const std::filesystem::path& path) {
  // Own subchannels: a shared pool may hold a dead connection to an earlier
  // server at the same path, and its reconnect backoff would slow the test.
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix:" + path.string(), grpc::InsecureChannelCredentials(),
                                   arguments);
}

}  // namespace

// ---- PluginClient ----

class PluginClient::Impl {
 public:
  Impl(const std::filesystem::path& socket, std::chrono::milliseconds timeout)
      : stub_(v1beta1::DevicePlugin::NewStub(UnixChannel(socket))), timeout_(timeout) {}

  ~Impl() {
    stream_context_.TryCancel();
    if (reader_.joinable()) reader_.join();
  }

  void Deadline(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() + timeout_);
  }

  void Watch(std::function<void(const DeviceList&)> on_list, std::function<void(int)> on_end) {
    reader_ = std::thread([this, on_list = std::move(on_list), on_end = std::move(on_end)] {
      // No deadline: the stream lives until cancelled or ended.
      auto reader = stub_->ListAndWatch(&stream_context_, v1beta1::Empty{});
      v1beta1::ListAndWatchResponse response;
      while (reader->Read(&response)) {
        DeviceList list{.received = std::chrono::steady_clock::now()};
        for (const auto& device : response.devices()) {
          ListedDevice listed{.id = device.id(), .health = device.health()};
          for (const auto& node : device.topology().nodes()) listed.numa_nodes.push_back(node.id());
          list.devices.push_back(std::move(listed));
        }
        if (on_list) on_list(list);
        {
          std::lock_guard lock(mutex_);
          lists_.push_back(std::move(list));
        }
        changed_.notify_all();
      }
      const auto status = reader->Finish();
      {
        std::lock_guard lock(mutex_);
        stream_end_ = static_cast<int>(status.error_code());
      }
      changed_.notify_all();
      if (on_end) on_end(static_cast<int>(status.error_code()));
    });
  }

  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  const std::chrono::milliseconds timeout_;
  grpc::ClientContext stream_context_;
  std::thread reader_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<DeviceList> lists_;
  std::optional<int> stream_end_;
};

PluginClient::PluginClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PluginClient::~PluginClient() = default;

CallResult<PluginOptions> PluginClient::GetDevicePluginOptions() {
  grpc::ClientContext context;
  impl_->Deadline(context);
  v1beta1::DevicePluginOptions response;
  const auto status = impl_->stub_->GetDevicePluginOptions(&context, v1beta1::Empty{}, &response);
  if (!status.ok()) return {.error = ToCallError(status)};
  return {.value = PluginOptions{response.pre_start_required(),
                                 response.get_preferred_allocation_available()}};
}

CallResult<std::vector<std::map<std::string, std::string>>> PluginClient::Allocate(
    const std::vector<std::vector<std::string>>& containers) {
  grpc::ClientContext context;
  impl_->Deadline(context);
  v1beta1::AllocateRequest request;
  for (const auto& ids : containers) {
    auto* container = request.add_container_requests();
    for (const auto& id : ids) container->add_devices_ids(id);
  }
  v1beta1::AllocateResponse response;
  const auto status = impl_->stub_->Allocate(&context, request, &response);
  if (!status.ok()) return {.error = ToCallError(status)};
  std::vector<std::map<std::string, std::string>> envs;
  for (const auto& container : response.container_responses()) {
    envs.emplace_back(container.envs().begin(), container.envs().end());
  }
  return {.value = std::move(envs)};
}

CallResult<bool> PluginClient::PreStartContainer(const std::vector<std::string>& ids) {
  grpc::ClientContext context;
  impl_->Deadline(context);
  v1beta1::PreStartContainerRequest request;
  for (const auto& id : ids) request.add_devices_ids(id);
  v1beta1::PreStartContainerResponse response;
  const auto status = impl_->stub_->PreStartContainer(&context, request, &response);
  if (!status.ok()) return {.error = ToCallError(status)};
  return {.value = true};
}

int PluginClient::GetPreferredAllocationCode() {
  grpc::ClientContext context;
  impl_->Deadline(context);
  v1beta1::PreferredAllocationRequest request;
  request.add_container_requests()->set_allocation_size(1);
  v1beta1::PreferredAllocationResponse response;
  return static_cast<int>(
      impl_->stub_->GetPreferredAllocation(&context, request, &response).error_code());
}

void PluginClient::Watch(std::function<void(const DeviceList&)> on_list,
                         std::function<void(int)> on_end) {
  impl_->Watch(std::move(on_list), std::move(on_end));
}

std::vector<DeviceList> PluginClient::Lists() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->lists_;
}

std::optional<DeviceList> PluginClient::WaitForList(std::size_t index,
                                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex_);
  if (!impl_->changed_.wait_for(lock, timeout, [&] { return impl_->lists_.size() > index; })) {
    return std::nullopt;
  }
  return impl_->lists_[index];
}

std::optional<int> PluginClient::WaitForStreamEnd(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex_);
  impl_->changed_.wait_for(lock, timeout, [&] { return impl_->stream_end_.has_value(); });
  return impl_->stream_end_;
}

// ---- FakeKubelet ----

class FakeKubelet::Impl {
 public:
  explicit Impl(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~Impl() { Stop(); }

  grpc::Status Register(const v1beta1::RegisterRequest& request) {
    if (refuse_.load()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the fake kubelet refuses");
    }
    Registration registration{
        .version = request.version(),
        .endpoint = request.endpoint(),
        .resource_name = request.resource_name(),
        .pre_start_required = request.options().pre_start_required(),
        .get_preferred_allocation_available =
            request.options().get_preferred_allocation_available(),
    };
    std::function<void(const Registration&)> callback;
    {
      std::lock_guard lock(mutex_);
      registrations_.push_back(registration);
      callback = callback_;
    }
    changed_.notify_all();
    if (callback) callback(registration);
    return grpc::Status::OK;
  }

  // One per server: a gRPC service is registered with one server only.
  class RegistrationService final : public v1beta1::Registration::Service {
   public:
    explicit RegistrationService(Impl& kubelet) : kubelet_(kubelet) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                          v1beta1::Empty*) override {
      return kubelet_.Register(*request);
    }

   private:
    Impl& kubelet_;
  };

  Status Serve() {
    std::lock_guard lock(server_mutex_);
    const auto socket = dir_ / "kubelet.sock";
    std::error_code error;
    std::filesystem::remove(socket, error);
    auto service = std::make_unique<RegistrationService>(*this);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(service.get());
    auto server = builder.BuildAndStart();
    if (!server) {
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("fake kubelet cannot serve {}", socket.string()));
    }
    service_ = std::move(service);
    server_ = std::move(server);
    return {};
  }

  void Stop() {
    std::lock_guard lock(server_mutex_);
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
    service_.reset();
    std::error_code error;
    std::filesystem::remove(dir_ / "kubelet.sock", error);
  }

  void DeleteSockets() {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, error)) {
      if (entry.is_socket(error)) std::filesystem::remove(entry.path(), error);
    }
  }

  const std::filesystem::path dir_;
  std::atomic<bool> refuse_{false};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<Registration> registrations_;
  std::function<void(const Registration&)> callback_;
  std::mutex server_mutex_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
};

Result<std::unique_ptr<FakeKubelet>> FakeKubelet::Start(std::filesystem::path dir) {
  auto impl = std::make_unique<Impl>(std::move(dir));
  if (auto served = impl->Serve(); !served) return Fail(served.error());
  return std::make_unique<FakeKubelet>(std::move(impl));
}

FakeKubelet::FakeKubelet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeKubelet::~FakeKubelet() = default;

Status FakeKubelet::Restart() {
  impl_->Stop();
  impl_->DeleteSockets();
  return impl_->Serve();
}

void FakeKubelet::Stop() { impl_->Stop(); }
Status FakeKubelet::Resume() { return impl_->Serve(); }

void FakeKubelet::RefuseRegistrations(bool refuse) { impl_->refuse_.store(refuse); }

std::vector<Registration> FakeKubelet::Registrations() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->registrations_;
}

bool FakeKubelet::WaitForRegistrations(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex_);
  return impl_->changed_.wait_for(lock, timeout,
                                  [&] { return impl_->registrations_.size() >= count; });
}

void FakeKubelet::OnRegistration(std::function<void(const Registration&)> callback) {
  std::lock_guard lock(impl_->mutex_);
  impl_->callback_ = std::move(callback);
}

std::unique_ptr<PluginClient> FakeKubelet::Dial(const std::string& endpoint,
                                                std::chrono::milliseconds timeout) const {
  return std::make_unique<PluginClient>(
      std::make_unique<PluginClient::Impl>(impl_->dir_ / endpoint, timeout));
}

const std::filesystem::path& FakeKubelet::Dir() const { return impl_->dir_; }

}  // namespace rasd::k8s::fake
