#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "control_server.h"
#include "corruption_screening.h"
#include "device_lifecycle.h"
#include "device_recovery.h"
#include "fault_injection.h"
#include "node_fault.h"
#include "rasd/common/event_loop.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"
#include "store_reader.h"
#include "watchers.h"
#include "workloads.h"

namespace rasd::daemon {

// "2026-12-01T01:41:45Z": times as the control API shows them.
std::string Iso8601(std::chrono::system_clock::time_point time);

// The control API: the command table the ControlServer serves, each
// command's arguments read by one ArgReader (one error style for types,
// ranges and unknown keys), and the JSON views. State changes go to the
// DeviceLifecycle, injection to FaultInjection; `status` and `reload` are
// the daemon's own and come in as functions.
//
// Loop thread only (the ControlServer calls the handlers there). Everything
// in Parts must outlive the ControlApi and the commands it returned.
class ControlApi {
 public:
  struct Parts {
    common::EventLoop& loop;
    runtime::Runtime& runtime;
    ras::StateStore& store;
    jobs::JobManager& jobs;
    const NodeFault& node;  // the node fault
    const DeviceHealth& health;
    DeviceLifecycle& lifecycle;
    FaultInjection& injection;
    Workloads& workloads;
    Watchers& watchers;
    const DeviceRecovery& recovery;
    // Whether the peer may change state (the attach of another user's process).
    std::function<bool(const PeerCredentials&)> is_admin;
    // The daemon's part of `status` (version, paths, sources, config).
    std::function<Result<nlohmann::json>()> status;
    std::function<Result<nlohmann::json>()> reload;
    // The RDMA ports a device uses, as the devices view shows them.
    std::function<nlohmann::json(int device)> rdma_ports;
    // What ends a device's Degraded when its links caused it (LinkHealth:
    // by itself after the debounce, or an operator for a flapping link);
    // nullopt: the recovery view's answer stands.
    std::function<std::optional<std::string>(int device)> link_clears;
    // Backends the config named that are not available ("cuda: why").
    std::vector<std::string> missing_backends;
    // The scheduler link as `status` and `check` show it ({"kind": "none"}
    // without one), with the blast-radius guard's settings.
    std::function<nlohmann::json()> scheduler;
    // Where events, actions and retired pages are read: off the loop. Null:
    // on `store`, on the loop (a test's daemon without a reader thread).
    StoreReader* reader = nullptr;
    // Screening for silent data corruption; null: none runs.
    const CorruptionScreening* screening = nullptr;
  };

  explicit ControlApi(Parts parts) : parts_(std::move(parts)) {}
  // Waits for a backup's check to end (its copy is kept if it passes).
  ~ControlApi();

  std::map<std::string, Command> Commands();

  // The daemon's own status with the devices, jobs and event counts.
  Result<nlohmann::json> Status(const nlohmann::json& args);
  // The reads of stored history: `reply` gets the answer, from the reader
  // thread's connection where there is one.
  void Events(const nlohmann::json& args, AsyncReply reply);
  void Actions(const nlohmann::json& args, AsyncReply reply);
  void Retired(const nlohmann::json& args, AsyncReply reply);
  // Runs `query` on the reader's connection, or on the store where there is
  // no reader, and replies with its answer.
  void ReadStore(StoreReader::Query query, AsyncReply reply);
  Result<nlohmann::json> Summary(const nlohmann::json& args);
  Result<nlohmann::json> Devices(const nlohmann::json& args);
  // One verdict for node agents (rasctl check): JudgeNode over the devices
  // and the node fault, with the findings' reasons.
  Result<nlohmann::json> Check(const nlohmann::json& args);
  Result<nlohmann::json> Jobs(const nlohmann::json& args);
  Result<Subscribed> Attach(const nlohmann::json& args, const PeerCredentials& peer, Push push);
  Result<Subscribed> Watch(const nlohmann::json& args, Push push);
  Result<nlohmann::json> StartJob(const nlohmann::json& args);
  Result<nlohmann::json> StopJob(const nlohmann::json& args);
  void Infer(const nlohmann::json& args, AsyncReply reply);
  // isolate, drain, undrain.
  void ChangeDeviceState(const std::string& command, const nlohmann::json& args, AsyncReply reply);
  // An online copy of the state database to an absolute path, stepped on the
  // loop kBackupPagesPerSlice pages at a time (tasks posted one after the
  // other, so whatever else is ready runs between them); the copy is then
  // checked, synced and renamed on a thread of its own (a second for 1M
  // events). One at a time.
  void Backup(const nlohmann::json& args, AsyncReply reply);

  // About a millisecond of copying per turn of the loop (bench/ras_bench.cc
  // BM_StoreBackupSlice).
  static constexpr int kBackupPagesPerSlice = 256;

 private:
  struct RunningBackup {
    std::unique_ptr<ras::StateBackup> backup;
    AsyncReply reply;
    std::thread finisher;  // StateBackup::Finish(), once every page is copied
  };
  nlohmann::json DeviceJson(const runtime::Device& device);
  // Posts the next slice. The task holds the backup weakly: while the backup
  // lives, so does this ControlApi, its only owner; a task still queued when
  // the ControlApi goes does nothing.
  void PostBackupSlice();
  // Copies one slice and posts the next; once every page is copied, starts
  // the finisher, which answers and then posts EndBackup.
  void StepBackup();
  void EndBackup();

  Parts parts_;
  std::shared_ptr<RunningBackup> backup_;  // the backup in progress, if any
};

}  // namespace rasd::daemon
