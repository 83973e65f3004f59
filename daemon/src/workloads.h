#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "control_server.h"
#include "device_health.h"
#include "process_table.h"
#include "rasd/common/event_loop.h"
#include "rasd/common/unique_fd.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// What a process asks for when it attaches (`rasctl run` for its child, or
// a program for itself).
struct WorkloadSpec {
  pid_t pid = 0;  // 0: the peer on the control connection itself
  std::string name;
  std::vector<int> devices;
  int drain_signal = 15;                     // SIGTERM
  std::optional<std::chrono::milliseconds> grace;  // unset: the registry's default
};

// Processes outside rasd that use its devices: an inference server, the
// ranks of a training job. Each attaches over the control socket and keeps
// that connection open; rasd follows the process with a pidfd and forgets
// it when it exits.
//
// When a device a workload uses leaves service (draining or isolated, by
// the policy, the heartbeat or an operator), the workload gets a pushed
// {"event": "drain", ...} message on its connection and its drain signal;
// if it still runs after its grace, SIGKILL (unless kill_after_grace is
// off: then only the message and the signal). A device that returns to
// service is announced with {"event": "returned"}; if every device of a
// draining workload is back before its grace ends, the kill is called off.
//
// Who may attach what: anyone may attach a process of their own uid (the
// peer's uid, from SO_PEERCRED, not from the request); an administrator
// any process. The devices must exist and take new work.
//
// Loop thread only. Every change of a device's state reaches it as a
// DeviceStateChanged (the daemon subscribes it to DeviceHealth), whichever
// cause made it.
class Workloads {
 public:
  struct Options {
    std::chrono::milliseconds default_grace{30000};
    bool kill_after_grace = true;
    bool kill_consumer = true;
  };
  // The reason a device is out of service, for the message.
  using ReasonOf = std::function<std::string(int device)>;

  // `store` (may be null: nothing survives a restart) keeps each attached
  // workload until it exits, so that a restarted rasd follows it again.
  Workloads(common::EventLoop& loop, runtime::Runtime& runtime, const ProcessTable& processes,
            ras::StateStore* store, Options options, ReasonOf reason_of);
  ~Workloads();
  Workloads(const Workloads&) = delete;
  Workloads& operator=(const Workloads&) = delete;

  void SetOptions(Options options) { options_ = options; }

  // Registers `spec` for `peer`; `push` reaches the attach connection.
  // kInvalidArgument, kNotFound (no such process or device),
  // kPermissionDenied, kDeviceIsolated (a device not in service),
  // kAlreadyExists (the process is attached already).
  Result<Subscribed> Attach(WorkloadSpec spec, const PeerCredentials& peer, bool admin, Push push);

  void OnDeviceStateChanged(const DeviceStateChanged& change);

  // At start: every stored workload whose process still runs (the same pid
  // with the same start time) is followed again, unconnected (its old
  // connection died with the old rasd, so it gets signals, not messages),
  // with its drain signal and grace; one on
  // a device that is out of service now is drained at once. The others are
  // forgotten. Returns how many were re-adopted.
  std::size_t Readopt();

  // An error consumed by process `pid` on `device` (an Xid's pid=): the
  // attached workload with that pid and that device gets SIGKILL (through
  // its pidfd) and a {"event": "killed", "reason": ...} message. Returns
  // what was done; kNotFound when no attached workload is that process on
  // that device (nothing is killed: rasd kills only what it follows),
  // kUnavailable when kill_consumer is off.
  Result<std::string> KillConsumer(std::int64_t pid, int device, const std::string& reason);

  // Every attached workload: id, name, pid, uid, devices, state
  // (running | draining | killed), grace, connected.
  nlohmann::json Report() const;
  // The attached workload that is process `pid`, for people: "workload
  // 'server' (id 3, device(s) 1)"; nullopt when none is.
  std::optional<std::string> DescribePid(std::int64_t pid) const;
  // The workloads attached on `device`: [{"name", "pid", "state"}].
  nlohmann::json OnDevice(int device) const;
  std::size_t Count() const { return workloads_.size(); }

  // For the metrics thread: any thread; a copy taken after the last change.
  // Every label is always present (bounded: states, reasons, results).
  struct Counts {
    std::map<std::string, std::uint64_t> by_state;  // running, draining, killed
    std::map<std::string, std::uint64_t> signals;   // drain, grace_kill, consumer_kill
    std::map<std::string, std::uint64_t> attaches;  // ok, refused
  };
  Counts PublishedCounts() const;

 private:
  // Where a workload is: it runs; it was told to leave (drain message and
  // signal sent, killed at its grace); it was killed.
  enum class WorkloadState : std::uint8_t { kRunning, kDraining, kKilled };
  static const char* WorkloadStateName(WorkloadState state);

  struct Workload {
    std::uint64_t id = 0;
    pid_t pid = 0;
    std::uint64_t start_time = 0;  // /proc starttime: with pid, the store's key
    uid_t uid = 0;
    std::string name;
    std::vector<int> devices;
    int drain_signal = 15;
    std::chrono::milliseconds grace{0};
    WorkloadState state = WorkloadState::kRunning;
    common::UniqueFd pidfd;
    std::unique_ptr<common::FdWatch> exit_watch;
    std::unique_ptr<common::Timer> kill_timer;
    Push push;  // empty once the connection closed
    std::string unsaved_reason;  // why the store does not have it yet; empty: saved
    // When its grace ends (wall clock), while it drains: saved, so that a
    // restarted rasd keeps the deadline rather than granting a fresh grace.
    std::optional<std::chrono::system_clock::time_point> kill_at;
  };
  Result<Subscribed> AttachOne(WorkloadSpec spec, const PeerCredentials& peer, bool admin,
                               Push push);
  // A workload of `spec` (its pid set, devices sorted), not yet followed.
  std::unique_ptr<Workload> NewWorkload(const WorkloadSpec& spec, uid_t uid,
                                        std::uint64_t start_time, common::UniqueFd pidfd);
  // Follows `workload` (its pidfd set): the exit watch, the kill timer, the map.
  Status Follow(std::unique_ptr<Workload> workload);
  // Saves `workload` to the store; false (and why, in unsaved_reason) if it
  // could not be, retried by the sweep.
  bool Save(Workload& workload);
  void Forget(std::uint64_t id, const char* why);
  void Send(Workload& workload, const nlohmann::json& message);
  // `remaining`: the grace left of a drain that began before a restart.
  void Leaving(Workload& workload, int device, runtime::HealthState state,
               std::optional<std::chrono::milliseconds> remaining = std::nullopt);
  void Returned(Workload& workload, int device);
  void ArmSweep();
  void Publish();  // after every change: the counts the metrics thread reads

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  const ProcessTable& processes_;
  ras::StateStore* store_;
  Options options_;
  ReasonOf reason_of_;
  std::map<std::uint64_t, std::unique_ptr<Workload>> workloads_;
  std::uint64_t next_id_ = 1;
  std::unique_ptr<common::Timer> sweep_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  Counts totals_;  // signals and attaches so far (by_state unused): loop thread
  mutable std::mutex published_mutex_;
  Counts published_;  // guarded by published_mutex_
};

}  // namespace rasd::daemon
