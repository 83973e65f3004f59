#include "workloads.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "arg_reader.h"
#include "rasd/common/logging.h"

namespace rasd::daemon {

const char* Workloads::WorkloadStateName(WorkloadState state) {
  switch (state) {
    case WorkloadState::kRunning:
      return "running";
    case WorkloadState::kDraining:
      return "draining";
    case WorkloadState::kKilled:
      return "killed";
  }
  return "running";
}
namespace {

constexpr std::chrono::seconds kSweepPeriod{1};

std::string SignalName(int signal) {
  const char* abbreviation = ::sigabbrev_np(signal);
  return abbreviation ? fmt::format("SIG{}", abbreviation) : fmt::format("signal {}", signal);
}

// A name is printed in logs and tables: control characters (a newline
// forging a log line, a terminal escape) are refused.
Status CheckName(std::string_view name) {
  for (char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("name has a control character (0x{:02x}): printable text only",
                              byte));
    }
  }
  return {};
}

// A drain signal is a request the workload can act on: SIGSTOP would
// freeze it for its grace, SIGKILL leave it none (grace_ms 0 does that).
Status CheckDrainSignal(int signal) {
  if (signal < 1 || signal > SIGRTMAX) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("drain_signal {} is not a signal", signal));
  }
  if (signal == SIGKILL || signal == SIGSTOP) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("drain_signal {} cannot be handled by the workload; for an "
                            "immediate kill give grace_ms 0",
                            SignalName(signal)));
  }
  return {};
}

}  // namespace

Workloads::Workloads(common::EventLoop& loop, runtime::Runtime& runtime,
                     const ProcessTable& processes, ras::StateStore* store, Options options,
                     ReasonOf reason_of)
    : loop_(loop),
      runtime_(runtime),
      processes_(processes),
      store_(store),
      options_(options),
      reason_of_(std::move(reason_of)),
      sweep_(loop.CreateTimer([this] {
        for (auto& [id, workload] : workloads_) {
          if (!workload->unsaved_reason.empty()) (void)Save(*workload);
        }
        ArmSweep();
      })) {
  totals_.signals = {{"drain", 0}, {"grace_kill", 0}, {"consumer_kill", 0}};
  totals_.attaches = {{"ok", 0}, {"refused", 0}};
  Publish();
}

void Workloads::Publish() {
  Counts counts = totals_;
  for (const auto state :
       {WorkloadState::kRunning, WorkloadState::kDraining, WorkloadState::kKilled})
    counts.by_state[WorkloadStateName(state)] = 0;
  for (const auto& [id, workload] : workloads_)
    ++counts.by_state[WorkloadStateName(workload->state)];
  std::lock_guard lock(published_mutex_);
  published_ = std::move(counts);
}

Workloads::Counts Workloads::PublishedCounts() const {
  std::lock_guard lock(published_mutex_);
  return published_;
}

Workloads::~Workloads() {
  *alive_ = false;
  sweep_->Disarm();
  workloads_.clear();
}

void Workloads::ArmSweep() {
  if (!workloads_.empty() && !sweep_->Armed()) sweep_->ArmAfter(kSweepPeriod);
}

Result<Subscribed> Workloads::Attach(WorkloadSpec spec, const PeerCredentials& peer, bool admin,
                                     Push push) {
  auto attached = AttachOne(std::move(spec), peer, admin, std::move(push));
  ++totals_.attaches[attached ? "ok" : "refused"];
  Publish();
  return attached;
}

Result<Subscribed> Workloads::AttachOne(WorkloadSpec spec, const PeerCredentials& peer,
                                        bool admin, Push push) {
  if (spec.pid < 0) return Fail(ErrorCode::kInvalidArgument, "pid must be positive");
  const pid_t pid = spec.pid == 0 ? peer.pid : spec.pid;
  if (pid <= 0) return Fail(ErrorCode::kInvalidArgument, "the connection names no process");
  // A drain of rasd's own device would signal rasd itself, one of init the
  // whole host.
  if (pid == ::getpid() || pid == 1) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("process {} is {}: it cannot be a workload", pid,
                            pid == 1 ? "init" : "rasd itself"));
  }
  if (auto named = CheckName(spec.name); !named) return Fail(named.error());
  if (spec.devices.empty()) return Fail(ErrorCode::kInvalidArgument, "no devices named");
  if (auto usable = CheckDrainSignal(spec.drain_signal); !usable) return Fail(usable.error());
  for (const auto& [id, workload] : workloads_) {
    if (workload->pid == pid) {
      return Fail(ErrorCode::kAlreadyExists,
                  fmt::format("process {} is attached already (as '{}')", pid, workload->name));
    }
  }
  std::sort(spec.devices.begin(), spec.devices.end());
  spec.devices.erase(std::unique(spec.devices.begin(), spec.devices.end()), spec.devices.end());
  for (int device : spec.devices) {
    auto found = runtime_.GetDevice(device);
    if (!found) return Fail(ErrorCode::kNotFound, fmt::format("no device {}", device));
    if (!runtime::TakesNewWork((*found)->Health())) {
      return Fail(ErrorCode::kDeviceIsolated,
                  fmt::format("device {} is {}: it takes no new work", device,
                              runtime::HealthStateName((*found)->Health())));
    }
  }
  // The pidfd first: from here on it names this process, whatever happens
  // to the pid.
  auto pidfd = processes_.Open(pid);
  if (!pidfd) return Fail(pidfd.error());
  auto owner = processes_.OwnerOf(pid);
  if (!owner) return Fail(owner.error());
  if (*owner != peer.uid && !admin) {
    return Fail(ErrorCode::kPermissionDenied,
                fmt::format("permission denied: process {} belongs to uid {}, not to uid {}; "
                            "attaching another user's process needs an administrator",
                            pid, *owner, peer.uid));
  }

  auto started = processes_.StartTimeOf(pid);
  auto workload = NewWorkload({.pid = pid,
                               .name = spec.name,
                               .devices = spec.devices,
                               .drain_signal = spec.drain_signal,
                               .grace = spec.grace},
                              *owner, started ? *started : 0, std::move(*pidfd));
  workload->push = std::move(push);
  const std::uint64_t id = workload->id;
  Workload& attached = *workload;
  if (auto followed = Follow(std::move(workload)); !followed) return Fail(followed.error());
  const bool saved = Save(attached);
  RASD_LOG_INFO("workload '{}' (pid {}, uid {}) attached on device(s) {}; drain signal {}, grace "
                "{} ms",
                attached.name, pid, attached.uid, fmt::join(attached.devices, ","),
                SignalName(attached.drain_signal), attached.grace.count());
  nlohmann::json reply = {{"id", id},
                          {"name", attached.name},
                          {"pid", pid},
                          {"devices", attached.devices},
                          {"drain_signal", SignalName(attached.drain_signal)},
                          {"grace_ms", attached.grace.count()},
                          {"kill_after_grace", options_.kill_after_grace},
                          {"saved", saved}};
  if (!saved) reply["unsaved_reason"] = attached.unsaved_reason;
  ArmSweep();
  // The token: when the connection closes, the process is still followed
  // (it may run on), but messages have nowhere to go.
  std::shared_ptr<void> token(nullptr, [this, id, alive = alive_](void*) {
    if (!*alive) return;
    if (auto found = workloads_.find(id); found != workloads_.end()) found->second->push = nullptr;
  });
  return Subscribed{std::move(reply), std::move(token)};
}

Status Workloads::Follow(std::unique_ptr<Workload> workload) {
  const std::uint64_t id = workload->id;
  auto watch = loop_.WatchFd(workload->pidfd.Get(), EPOLLIN, [this, id](std::uint32_t) {
    Forget(id, "exited");
  });
  if (!watch) return Fail(watch.error());
  workload->exit_watch = std::move(*watch);
  workload->kill_timer = loop_.CreateTimer([this, id] {
    auto found = workloads_.find(id);
    if (found == workloads_.end()) return;
    Workload& late = *found->second;
    RASD_LOG_WARN("workload '{}' (pid {}) still runs {} ms after its drain began: SIGKILL",
                  late.name, late.pid, late.grace.count());
    // The message first: the watcher learns why before the process is gone.
    Send(late, {{"event", "killed"},
                {"pid", late.pid},
                {"signal", "SIGKILL"},
                {"grace_ms", late.grace.count()}});
    if (auto killed = processes_.Signal(late.pidfd, SIGKILL); !killed) {
      RASD_LOG_WARN("workload '{}' (pid {}): {}", late.name, late.pid, killed.error().message);
    }
    late.state = WorkloadState::kKilled;
    ++totals_.signals["grace_kill"];
    Publish();
  });
  workloads_.emplace(id, std::move(workload));
  return {};
}

// What a restarted rasd needs to follow the process again. Devices by
// UUID too: indexes may change when the hardware does.
bool Workloads::Save(Workload& workload) {
  if (store_ == nullptr || workload.start_time == 0) return true;
  nlohmann::json uuids = nlohmann::json::array();
  for (int device : workload.devices) {
    auto found = runtime_.GetDevice(device);
    uuids.push_back(found ? (*found)->Properties().uuid : std::string());
  }
  const nlohmann::json spec = {{"name", workload.name},
                               {"uid", workload.uid},
                               {"devices", workload.devices},
                               {"device_uuids", uuids},
                               {"drain_signal", workload.drain_signal},
                               {"grace_ms", workload.grace.count()}};
  nlohmann::json saved_spec = spec;
  if (workload.kill_at) {
    saved_spec["kill_at_unix_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                                        workload.kill_at->time_since_epoch())
                                        .count();
  }
  auto saved = store_->SaveWorkload({workload.pid, workload.start_time, saved_spec.dump()});
  if (!saved) {
    // Once a second until it is (the sweep): a full disk empties again.
    if (workload.unsaved_reason.empty()) {
      RASD_LOG_WARN("workload '{}' (pid {}) is not saved ({}): a restarted rasd will not follow it "
                    "until it is; retried every second",
                    workload.name, workload.pid, saved.error().message);
    }
    workload.unsaved_reason = saved.error().message;
    return false;
  }
  if (!workload.unsaved_reason.empty()) {
    RASD_LOG_INFO("workload '{}' (pid {}) is saved now", workload.name, workload.pid);
    workload.unsaved_reason.clear();
  }
  return true;
}

std::unique_ptr<Workloads::Workload> Workloads::NewWorkload(const WorkloadSpec& spec, uid_t uid,
                                                            std::uint64_t start_time,
                                                            common::UniqueFd pidfd) {
  auto workload = std::make_unique<Workload>();
  workload->id = next_id_++;
  workload->pid = spec.pid;
  workload->start_time = start_time;
  workload->uid = uid;
  workload->name = spec.name.empty() ? fmt::format("pid-{}", spec.pid) : spec.name;
  workload->devices = spec.devices;
  workload->drain_signal = spec.drain_signal;
  workload->grace = spec.grace.value_or(options_.default_grace);
  workload->pidfd = std::move(pidfd);
  return workload;
}

std::size_t Workloads::Readopt() {
  if (store_ == nullptr) return 0;
  auto stored = store_->LoadWorkloads();
  if (!stored) {
    RASD_LOG_ERROR("cannot read the attached workloads: {}; none is followed again",
                   stored.error().message);
    return 0;
  }
  std::map<std::string, int> by_uuid;
  for (const auto& device : runtime_.Devices()) by_uuid[device->Properties().uuid] = device->Index();
  std::size_t adopted = 0;
  for (const auto& record : *stored) {
    auto forget = [&](const std::string& why) {
      RASD_LOG_INFO("workload pid {} attached before rasd restarted: {}; forgotten", record.pid,
                    why);
      (void)store_->DeleteWorkload(record.pid, record.start_time);
    };
    const auto spec = nlohmann::json::parse(record.spec, nullptr, false);
    if (!spec.is_object() || record.pid <= 0 || record.pid > 4'194'304) {
      forget("its saved record is unreadable");
      continue;
    }
    const auto pid = static_cast<pid_t>(record.pid);
    // The pidfd first, then the start time: a pid reused after the open
    // would show another start time.
    auto pidfd = processes_.Open(pid);
    auto started = processes_.StartTimeOf(pid);
    if (!pidfd || !started || *started != record.start_time) {
      forget("it no longer runs");
      continue;
    }
    // Save wrote it, but a damaged or edited row must neither stop the start
    // nor give a drain a signal an attach would refuse: read as a request.
    WorkloadSpec saved{.pid = pid};
    ArgReader fields("the saved workload", spec);
    if (auto name = fields.String("name", 64)) saved.name = *name;
    const auto saved_uid = fields.Int("uid", 0, std::numeric_limits<std::uint32_t>::max() - 1);
    if (auto signal = fields.Int("drain_signal", 1, SIGRTMAX))
      saved.drain_signal = static_cast<int>(*signal);
    if (auto grace = fields.Int("grace_ms", 0, 3'600'000))
      saved.grace = std::chrono::milliseconds(*grace);
    (void)fields.Raw("devices");  // the saving rasd's indices: the UUIDs decide
    const auto kill_at_ms =
        fields.Int("kill_at_unix_ms", 0, std::numeric_limits<std::int64_t>::max());
    const nlohmann::json* uuids = fields.Raw("device_uuids");
    Status readable = fields.Finish();
    if (readable) readable = CheckDrainSignal(saved.drain_signal);
    if (readable) readable = CheckName(saved.name);
    if (readable && (uuids == nullptr || !uuids->is_array()))
      readable = Fail(ErrorCode::kInvalidArgument, "it names no device UUIDs");
    if (!readable) {
      forget(fmt::format("its saved record is unreadable ({})", readable.error().message));
      continue;
    }
    for (const auto& uuid : *uuids) {
      if (!uuid.is_string()) continue;
      if (auto found = by_uuid.find(uuid.get<std::string>()); found != by_uuid.end())
        saved.devices.push_back(found->second);
    }
    std::sort(saved.devices.begin(), saved.devices.end());
    saved.devices.erase(std::unique(saved.devices.begin(), saved.devices.end()),
                        saved.devices.end());
    if (saved.devices.empty()) {
      forget("none of its devices is here any more");
      continue;
    }
    auto owner = processes_.OwnerOf(pid);
    const uid_t uid = owner ? *owner : static_cast<uid_t>(saved_uid.value_or(0));
    auto workload = NewWorkload(saved, uid, record.start_time, std::move(*pidfd));
    Workload& adopted_one = *workload;
    if (auto followed = Follow(std::move(workload)); !followed) {
      forget(followed.error().message);
      continue;
    }
    ++adopted;
    RASD_LOG_INFO("workload '{}' (pid {}) on device(s) {} followed again after the restart",
                  adopted_one.name, pid, fmt::join(adopted_one.devices, ","));
    // A device that left service while rasd was away: drained now (it may
    // have been drained before; a second drain signal is the safe side),
    // with what is left of the grace of a drain under way before the
    // restart, else a fresh one: a crash loop cannot stretch a grace.
    std::optional<std::chrono::milliseconds> remaining;
    if (kill_at_ms) {
      const std::chrono::system_clock::time_point kill_at{std::chrono::milliseconds(*kill_at_ms)};
      remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
          kill_at - loop_.GetClock().Wall());
    }
    for (int device : adopted_one.devices) {
      auto found = runtime_.GetDevice(device);
      if (found && !runtime::TakesNewWork((*found)->Health())) {
        Leaving(adopted_one, device, (*found)->Health(), remaining);
        break;
      }
    }
  }
  ArmSweep();
  Publish();
  return adopted;
}

void Workloads::Forget(std::uint64_t id, const char* why) {
  auto found = workloads_.find(id);
  if (found == workloads_.end()) return;
  RASD_LOG_INFO("workload '{}' (pid {}) {}; forgotten", found->second->name, found->second->pid,
                why);
  // Out of the map first: its watch is running this callback.
  std::unique_ptr<Workload> gone = std::move(found->second);
  workloads_.erase(found);
  if (store_ != nullptr && gone->start_time != 0) {
    if (auto deleted = store_->DeleteWorkload(gone->pid, gone->start_time); !deleted) {
      RASD_LOG_WARN("workload '{}' (pid {}): {}", gone->name, gone->pid,
                    deleted.error().message);
    }
  }
  loop_.Post([gone = std::shared_ptr<Workload>(std::move(gone))] {});
  Publish();
}

void Workloads::Send(Workload& workload, const nlohmann::json& message) {
  if (workload.push && !workload.push(message)) workload.push = nullptr;
}

void Workloads::OnDeviceStateChanged(const DeviceStateChanged& change) {
  const int index = change.device;
  const runtime::HealthState now = change.to;
  const bool was_serving = runtime::TakesNewWork(change.from);
  const bool serving = runtime::TakesNewWork(now);
  for (auto& [id, workload] : workloads_) {
    if (!std::binary_search(workload->devices.begin(), workload->devices.end(), index)) continue;
    if (was_serving && !serving) {
      Leaving(*workload, index, now);
    } else if (!was_serving && !serving && now == runtime::HealthState::kIsolated) {
      Send(*workload, {{"event", "isolated"}, {"device", index}, {"reason", reason_of_(index)}});
    } else if (!was_serving && serving) {
      Returned(*workload, index);
    }
  }
}

Result<std::string> Workloads::KillConsumer(std::int64_t pid, int device,
                                            const std::string& reason) {
  Workload* consumer = nullptr;
  for (auto& [id, workload] : workloads_) {
    if (workload->pid == pid) consumer = workload.get();
  }
  if (consumer == nullptr) {
    return Fail(ErrorCode::kNotFound,
                fmt::format("process {} is not a workload attached to rasd: not killed (rasd "
                            "kills only the processes it follows)",
                            pid));
  }
  if (!std::binary_search(consumer->devices.begin(), consumer->devices.end(), device)) {
    return Fail(ErrorCode::kNotFound,
                fmt::format("workload '{}' (pid {}) is not attached on device {}: not killed",
                            consumer->name, pid, device));
  }
  if (!options_.kill_consumer) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("workload '{}' (pid {}) met the error; workloads.kill_consumer is "
                            "off: not killed",
                            consumer->name, pid));
  }
  // The message first: whoever watches the connection learns why before
  // the process is gone.
  Send(*consumer, {{"event", "killed"},
                   {"pid", consumer->pid},
                   {"signal", "SIGKILL"},
                   {"device", device},
                   {"reason", reason}});
  if (auto killed = processes_.Signal(consumer->pidfd, SIGKILL); !killed) {
    return Fail(killed.error().code, fmt::format("workload '{}' (pid {}): {}", consumer->name,
                                                 pid, killed.error().message));
  }
  consumer->state = WorkloadState::kKilled;
  ++totals_.signals["consumer_kill"];
  Publish();
  RASD_LOG_WARN("workload '{}' (pid {}) consumed an uncorrectable error on device {}: SIGKILL",
                consumer->name, pid, device);
  return fmt::format("workload '{}' (pid {}) killed: it met the error on device {}; no other "
                     "process",
                     consumer->name, pid, device);
}

void Workloads::Leaving(Workload& workload, int device, runtime::HealthState state,
                        std::optional<std::chrono::milliseconds> remaining) {
  const std::string reason = reason_of_(device);
  const std::chrono::milliseconds grace = std::clamp(
      remaining.value_or(workload.grace), std::chrono::milliseconds(0), workload.grace);
  nlohmann::json message = {{"event", "drain"},
                            {"device", device},
                            {"state", std::string(runtime::HealthStateName(state))},
                            {"reason", reason},
                            {"grace_ms", grace.count()},
                            {"kill_after_grace", options_.kill_after_grace}};
  Send(workload, message);
  if (workload.state != WorkloadState::kRunning) return;  // signalled already, for another device
  workload.state = WorkloadState::kDraining;
  RASD_LOG_WARN("workload '{}' (pid {}): device {} is {} ({}); {}{}", workload.name, workload.pid,
                device, runtime::HealthStateName(state), reason, SignalName(workload.drain_signal),
                options_.kill_after_grace
                    ? fmt::format(", SIGKILL in {} ms if it still runs{}", grace.count(),
                                  remaining ? " (the rest of its grace from before the restart)"
                                            : "")
                    : std::string());
  if (auto sent = processes_.Signal(workload.pidfd, workload.drain_signal); !sent) {
    RASD_LOG_WARN("workload '{}' (pid {}): {}", workload.name, workload.pid, sent.error().message);
  } else {
    ++totals_.signals["drain"];
  }
  Publish();
  if (options_.kill_after_grace) {
    workload.kill_timer->ArmAfter(grace);
    workload.kill_at = loop_.GetClock().Wall() + grace;
    (void)Save(workload);
  }
}

void Workloads::Returned(Workload& workload, int device) {
  Send(workload, {{"event", "returned"}, {"device", device}});
  if (workload.state != WorkloadState::kDraining) return;
  for (int other : workload.devices) {
    auto found = runtime_.GetDevice(other);
    if (!found || !runtime::TakesNewWork((*found)->Health())) return;
  }
  // Every device is back before the grace ended: no kill. The drain
  // signal was sent; what the workload made of it is its own affair.
  workload.kill_timer->Disarm();
  workload.kill_at.reset();
  (void)Save(workload);
  workload.state = WorkloadState::kRunning;
  Publish();
  RASD_LOG_INFO("workload '{}' (pid {}): its devices are back in service; no kill", workload.name,
                workload.pid);
}

nlohmann::json Workloads::OnDevice(int device) const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [id, workload] : workloads_) {
    if (!std::binary_search(workload->devices.begin(), workload->devices.end(), device)) continue;
    list.push_back({{"name", workload->name},
                    {"pid", workload->pid},
                    {"state", WorkloadStateName(workload->state)}});
  }
  return list;
}

std::optional<std::string> Workloads::DescribePid(std::int64_t pid) const {
  for (const auto& [id, workload] : workloads_) {
    if (workload->pid != pid) continue;
    return fmt::format("workload '{}' (id {}, device(s) {})", workload->name, id,
                       fmt::join(workload->devices, ","));
  }
  return std::nullopt;
}

nlohmann::json Workloads::Report() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [id, workload] : workloads_) {
    list.push_back({{"id", id},
                    {"name", workload->name},
                    {"pid", workload->pid},
                    {"uid", workload->uid},
                    {"devices", workload->devices},
                    {"state", WorkloadStateName(workload->state)},
                    {"drain_signal", SignalName(workload->drain_signal)},
                    {"grace_ms", workload->grace.count()},
                    {"kill_after_grace", options_.kill_after_grace},
                    {"connected", static_cast<bool>(workload->push)}});
  }
  return list;
}

}  // namespace rasd::daemon
