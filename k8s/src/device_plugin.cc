#include "rasd/k8s/device_plugin.h"

#include <fmt/format.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "k8s/proto/api.grpc.pb.h"
#include "plugin_service.h"
#include "rasd/common/real_time.h"
#include "rasd/common/logging.h"

namespace rasd::k8s {
namespace {

// How long a stopping server gives its handlers before cancelling them.
// Streams end on Stop() within milliseconds; this bounds a slow Allocate.
constexpr std::chrono::seconds kServerShutdownGrace{2};

// A file's identity: a file deleted and created again at the same path
// differs, even when the inode number is reused (its ctime does not).
struct FileId {
  dev_t device = 0;
  ino_t inode = 0;
  struct timespec changed {};

  friend bool operator==(const FileId& a, const FileId& b) {
    return a.device == b.device && a.inode == b.inode && a.changed.tv_sec == b.changed.tv_sec &&
           a.changed.tv_nsec == b.changed.tv_nsec;
  }
};

std::optional<FileId> IdentityOf(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino, st.st_ctim};
}

Status ValidateOptions(const DevicePlugin::Options& options) {
  if (auto valid = ValidateResourceName(options.resource_name); !valid) return valid;
  const auto& endpoint = options.endpoint;
  if (endpoint.empty() || endpoint == "." || endpoint == ".." ||
      endpoint.find('/') != std::string::npos || endpoint == kKubeletSocketName) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("endpoint '{}' must be a socket file name other than {}, without '/'",
                            endpoint, kKubeletSocketName));
  }
  const auto socket_path = (options.plugin_dir / endpoint).string();
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("socket path {} is longer than a unix socket address allows ({} bytes)",
                            socket_path, sizeof(sockaddr_un::sun_path) - 1));
  }
  if (options.kubelet_check_period <= std::chrono::milliseconds::zero() ||
      options.max_registration_backoff < options.kubelet_check_period ||
      options.register_timeout <= std::chrono::milliseconds::zero()) {
    return Fail(ErrorCode::kInvalidArgument,
                "kubelet_check_period and register_timeout must be positive and "
                "max_registration_backoff at least kubelet_check_period");
  }
  std::error_code error;
  const auto status = std::filesystem::status(options.plugin_dir, error);
  if (!std::filesystem::exists(status)) {
    return Fail(ErrorCode::kNotFound,
                fmt::format("device-plugin directory {} does not exist (no kubelet here yet?)",
                            options.plugin_dir.string()));
  }
  if (!std::filesystem::is_directory(status)) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("device-plugin directory {} is not a directory",
                            options.plugin_dir.string()));
  }
  return {};
}

}  // namespace

// The server and its watcher. The server, the socket's identity and the
// registration state belong to the watcher thread once it runs (before, to
// Start; after, to the destructor); the counters, the signal and
// registered_ are shared.
class DevicePlugin::Impl {
 public:
  Impl(Options options, DeviceSource& source)
      : options_(std::move(options)),
        source_(source),
        socket_path_(options_.plugin_dir / options_.endpoint),
        kubelet_path_(options_.plugin_dir / kKubeletSocketName),
        backoff_(options_.kubelet_check_period) {
    plugin_options_.set_pre_start_required(false);
    plugin_options_.set_get_preferred_allocation_available(false);
  }

  ~Impl() {
    {
      std::lock_guard lock(stop_mutex_);
      stopping_ = true;
      if (register_call_ != nullptr) register_call_->TryCancel();
    }
    stop_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    StopServer();
    // Only our own socket: another plugin may have taken the name since.
    if (socket_id_ && IdentityOf(socket_path_) == socket_id_) {
      std::error_code error;
      std::filesystem::remove(socket_path_, error);
    }
    RASD_LOG_INFO("device plugin for {} stopped", options_.resource_name);
  }

  Status StartServer() {
    std::error_code error;
    std::filesystem::remove(socket_path_, error);  // a stale socket: bind would fail
    auto service = std::make_unique<PluginService>(source_, signal_, counters_, plugin_options_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_path_.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(service.get());
    auto server = builder.BuildAndStart();
    if (!server) {
      return Fail(ErrorCode::kUnavailable,
                  fmt::format("cannot serve the device plugin on {}", socket_path_.string()));
    }
    // Only the kubelet (root) has business here: Allocate and the device
    // list are not for every local user.
    if (::chmod(socket_path_.c_str(), 0600) != 0) {
      RASD_LOG_WARN("device plugin socket {}: chmod 0600: {}", socket_path_.string(),
                    std::strerror(errno));
    }
    socket_id_ = IdentityOf(socket_path_);
    service_ = std::move(service);
    server_ = std::move(server);
    counters_.server_starts.fetch_add(1);
    RASD_LOG_INFO("device plugin for {} serving on {}", options_.resource_name,
                  socket_path_.string());
    return {};
  }

  void StopServer() {
    if (!server_) return;
    service_->Stop();
    // gRPC takes a system_clock deadline and waits it out itself.
    server_->Shutdown(std::chrono::system_clock::now() + kServerShutdownGrace);
    server_->Wait();
    server_.reset();
    service_.reset();
  }

  void StartWatcher() {
    watcher_ = std::thread([this] { WatchLoop(); });
  }

  void DevicesChanged() { signal_.Notify(); }

  Stats GetStats() const {
    return Stats{
        .registrations = counters_.registrations.load(),
        .registration_failures = counters_.registration_failures.load(),
        .server_starts = counters_.server_starts.load(),
        .list_and_watch_streams = counters_.list_and_watch_streams.load(),
        .list_and_watch_active = counters_.list_and_watch_active.load(),
        .list_and_watch_updates = counters_.list_and_watch_updates.load(),
        .allocations = counters_.allocations.load(),
        .allocation_failures = counters_.allocation_failures.load(),
    };
  }

  bool Registered() const { return registered_.load(); }
  const std::filesystem::path& SocketPath() const { return socket_path_; }

 private:
  void WatchLoop() {
    std::unique_lock lock(stop_mutex_);
    while (!stopping_) {
      lock.unlock();
      Check();
      lock.lock();
      stop_cv_.wait_for(lock, options_.kubelet_check_period, [this] { return stopping_; });
    }
  }

  // One look at the two sockets, and whatever that calls for.
  void Check() {
    const auto kubelet = IdentityOf(kubelet_path_);
    bool restart = !server_;
    if (server_ && IdentityOf(socket_path_) != socket_id_) {
      RASD_LOG_WARN("device plugin socket {} is gone (the kubelet restarted?): serving a fresh one",
                    socket_path_.string());
      restart = true;
    }
    if (first_check_ || kubelet != kubelet_seen_) {
      if (!kubelet) {
        RASD_LOG_INFO("no {}: waiting for the kubelet to register {}", kubelet_path_.string(),
                      options_.resource_name);
      } else if (!first_check_) {
        RASD_LOG_INFO("{} appeared or was re-created", kubelet_path_.string());
      }
      first_check_ = false;
      kubelet_seen_ = kubelet;
      next_attempt_ = common::Deadline::Now();
      backoff_ = options_.kubelet_check_period;
    }
    if (registered_with_ && kubelet != registered_with_) {
      registered_.store(false);
      // A new kubelet deletes the sockets it finds; serve on a fresh one
      // rather than race it.
      if (kubelet) {
        RASD_LOG_INFO("the kubelet restarted: serving afresh and registering {} again",
                      options_.resource_name);
        registered_with_.reset();
        restart = true;
      }
    }
    if (restart) {
      StopServer();
      registered_.store(false);
      registered_with_.reset();
      if (auto started = StartServer(); !started) {
        // Once per streak: a directory gone for an hour is one error, not
        // 7200 lines.
        if (!serve_failing_) {
          RASD_LOG_ERROR("{}; trying again every {} ms (logged again once it serves)",
                         started.error().message, options_.kubelet_check_period.count());
        }
        serve_failing_ = true;
        return;
      }
      if (serve_failing_) {
        RASD_LOG_INFO("device plugin for {} serves again on {}", options_.resource_name,
                      socket_path_.string());
      }
      serve_failing_ = false;
      next_attempt_ = common::Deadline::Now();
      backoff_ = options_.kubelet_check_period;
    }
    if (!registered_.load() && kubelet && next_attempt_.Expired()) Register(*kubelet);
  }

  void Register(const FileId& kubelet) {
    v1beta1::RegisterRequest request;
    request.set_version(std::string(kApiVersion));
    request.set_endpoint(options_.endpoint);
    request.set_resource_name(options_.resource_name);
    *request.mutable_options() = plugin_options_;

    // A channel of its own, with subchannels of its own: a shared one may
    // still hold a connection to the kubelet that went away, and gRPC's
    // reconnect backoff would delay us.
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel("unix:" + kubelet_path_.string(),
                                             grpc::InsecureChannelCredentials(), arguments);
    auto stub = v1beta1::Registration::NewStub(channel);
    grpc::ClientContext context;
    // gRPC takes a system_clock deadline and enforces it itself.
    context.set_deadline(std::chrono::system_clock::now() + options_.register_timeout);
    {
      std::lock_guard lock(stop_mutex_);
      if (stopping_) return;
      register_call_ = &context;
    }
    v1beta1::Empty empty;
    const auto status = stub->Register(&context, request, &empty);
    {
      std::lock_guard lock(stop_mutex_);
      register_call_ = nullptr;
    }
    if (status.ok()) {
      counters_.registrations.fetch_add(1);
      registered_with_ = kubelet;
      registered_.store(true);
      backoff_ = options_.kubelet_check_period;
      RASD_LOG_INFO("registered {} with the kubelet (endpoint {})", options_.resource_name,
                    options_.endpoint);
      return;
    }
    counters_.registration_failures.fetch_add(1);
    next_attempt_ = common::Deadline::After(backoff_);
    RASD_LOG_WARN("registering {} with the kubelet at {} failed ({}: {}); next try in {} ms",
                  options_.resource_name, kubelet_path_.string(),
                  static_cast<int>(status.error_code()), status.error_message(), backoff_.count());
    backoff_ = std::min(backoff_ * 2, options_.max_registration_backoff);
  }

  const Options options_;
  DeviceSource& source_;
  const std::filesystem::path socket_path_;
  const std::filesystem::path kubelet_path_;
  v1beta1::DevicePluginOptions plugin_options_;
  DeviceListSignal signal_;
  PluginCounters counters_;
  std::atomic<bool> registered_{false};

  // The watcher's own.
  std::unique_ptr<PluginService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::optional<FileId> socket_id_;
  bool first_check_ = true;
  bool serve_failing_ = false;  // watcher thread only
  std::optional<FileId> kubelet_seen_;
  std::optional<FileId> registered_with_;
  // Real time: the watcher thread paces its checks with its own wait_for.
  common::Deadline next_attempt_ = common::Deadline::Now();
  std::chrono::milliseconds backoff_;

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                         // guarded by stop_mutex_
  grpc::ClientContext* register_call_ = nullptr;  // guarded by stop_mutex_
  std::thread watcher_;
};

namespace {

// gRPC's own messages ("E1202 ... chttp2_server.cc ...") went straight to
// stderr, past rasd's logger and the journal's fields: they go through the
// logger, at warning for gRPC's errors and debug for the rest.
void RouteGrpcLogs() {
  static std::once_flag once;
  std::call_once(once, [] {
    gpr_set_log_function([](gpr_log_func_args* args) {
      const auto level =
          args->severity == GPR_LOG_SEVERITY_ERROR ? spdlog::level::warn : spdlog::level::debug;
      RASD_LOG(level, "grpc: {} ({}:{})", args->message ? args->message : "",
               args->file ? args->file : "?", args->line);
    });
  });
}

}  // namespace

Result<std::unique_ptr<DevicePlugin>> DevicePlugin::Start(Options options, DeviceSource& source) {
  if (auto valid = ValidateOptions(options); !valid) return Fail(valid.error());
  RouteGrpcLogs();
  auto impl = std::make_unique<Impl>(std::move(options), source);
  if (auto started = impl->StartServer(); !started) return Fail(started.error());
  impl->StartWatcher();
  return std::unique_ptr<DevicePlugin>(new DevicePlugin(std::move(impl)));
}

DevicePlugin::DevicePlugin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DevicePlugin::~DevicePlugin() = default;

void DevicePlugin::DevicesChanged() { impl_->DevicesChanged(); }
DevicePlugin::Stats DevicePlugin::GetStats() const { return impl_->GetStats(); }
bool DevicePlugin::Registered() const { return impl_->Registered(); }
std::filesystem::path DevicePlugin::SocketPath() const { return impl_->SocketPath(); }

}  // namespace rasd::k8s
