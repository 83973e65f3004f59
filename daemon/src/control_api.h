#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "actuator.h"
#include "control_server.h"
#include "device_lifecycle.h"
#include "fault_injection.h"
#include "rasd/common/event_loop.h"
#include "rasd/jobs/job_manager.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

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
    Actuator& actuator;
    DeviceLifecycle& lifecycle;
    FaultInjection& injection;
    // The daemon's part of `status` (version, paths, sources, config).
    std::function<Result<nlohmann::json>()> status;
    std::function<Result<nlohmann::json>()> reload;
    // After an operator's isolate, drain or undrain (metrics time drains).
    std::function<void()> state_changed;
  };

  explicit ControlApi(Parts parts) : parts_(std::move(parts)) {}

  std::map<std::string, Command> Commands();

  // The daemon's own status with the devices, jobs and event counts.
  Result<nlohmann::json> Status(const nlohmann::json& args);
  Result<nlohmann::json> Events(const nlohmann::json& args);
  Result<nlohmann::json> Summary(const nlohmann::json& args);
  Result<nlohmann::json> Devices(const nlohmann::json& args);
  Result<nlohmann::json> Actions(const nlohmann::json& args);
  Result<nlohmann::json> Retired(const nlohmann::json& args);
  Result<nlohmann::json> Jobs(const nlohmann::json& args);
  Result<nlohmann::json> StartJob(const nlohmann::json& args);
  Result<nlohmann::json> StopJob(const nlohmann::json& args);
  void Infer(const nlohmann::json& args, AsyncReply reply);
  // isolate, drain, undrain.
  void ChangeDeviceState(const std::string& command, const nlohmann::json& args, AsyncReply reply);

 private:
  nlohmann::json DeviceJson(const runtime::Device& device);

  Parts parts_;
};

}  // namespace rasd::daemon
