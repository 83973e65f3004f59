#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/event_loop.h"
#include "rasd/ras/recovery.h"
#include "rasd/ras/state_store.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon {

// What returned a device to service after its self-test passed: an
// operator's undrain, or automatic recovery (policy.auto_recover).
enum class ReturnedBy : std::uint8_t { kUndrain, kAutoRecover };
// "undrain", "auto-recover": the recovery history's words.
const char* ReturnedByName(ReturnedBy how);

// What to do next about each device, and how its state clears: the
// recovery table's suggestion for the faults that took it out of service,
// escalated by the device's own recovery history.
//
// A suggestion that is about the device (reset-device and up,
// ras::SticksToDevice) stays with it until it is recovered: an undrain whose
// self-test passed, an automatic recovery, or a reboot where one was
// suggested (counted at start when the boot id changed). Each recovery is
// remembered (its time and how; the newest 64) and counts towards the next
// escalation. History and suggestion are saved by device UUID (one row per
// device, ras::DeviceRecoveryRecord): they outlive restarts and reboots. A
// save that fails (a full disk) is retried once a second.
//
// Loop thread only. The runtime, the loop and the store outlive it.
class DeviceRecovery {
 public:
  DeviceRecovery(common::EventLoop& loop, runtime::Runtime& runtime, ras::StateStore* store,
                 std::string boot_id);
  ~DeviceRecovery();

  // Reads the saved history; a device whose suggestion was reboot-node,
  // saved in another boot, has been rebooted: that counts as a recovery and
  // clears the suggestion. A damaged row is logged and started afresh.
  void Load();
  void SetTable(ras::RecoveryTable table) { table_ = std::move(table); }

  // The suggestion for an event, escalated by its device's history. When
  // `sticks` (the policy degrades, drains or isolates the device for it) a
  // suggestion about the device is kept, the stronger one winning.
  ras::RecoverySuggestion OnEvent(const ras::RasEvent& event, bool sticks);
  // A decision rasd made itself, with no event behind it (a device found
  // computing wrong by screening): its suggestion is kept as an event's
  // that sticks.
  void OnVerdict(int device, ras::RecoverySuggestion suggestion);
  // The same without keeping anything: for a hook's environment.
  ras::RecoverySuggestion SuggestFor(const ras::RasEvent& event) const;

  // A device back in service. Counted when a fault was stuck to it since
  // its last recovery; the history keeps ReturnedByName(how).
  void OnRecovered(int device, ReturnedBy how);

  struct View {
    ras::RecoveryAction action = ras::RecoveryAction::kNone;
    std::string why;      // empty when none
    std::string clears;   // how the device's present state clears; empty when healthy
    std::size_t recoveries_24h = 0;
    std::size_t recoveries = 0;  // all remembered
  };
  View For(int device) const;
  // Every device's suggested action (for the metric).
  std::map<int, ras::RecoveryAction> Actions() const;

 private:
  struct Recovery {
    std::chrono::system_clock::time_point time;
    std::string how;
  };
  struct State {
    ras::RecoveryAction action = ras::RecoveryAction::kNone;
    std::string why;
    std::string boot_id;  // the boot in which the suggestion was made
    // A fault stuck to the device since its last recovery: only such a
    // device's return counts (a reboot and the undrain after it are one
    // recovery; an operator's own isolation is none).
    bool open = false;
    std::vector<Recovery> recoveries;
  };
  // A saved row read back without throwing: kCorruptData and why when it
  // is not what Save writes.
  static Result<State> ReadSavedState(const std::string& saved);
  std::vector<std::chrono::system_clock::time_point> Times(int device) const;
  void Save(int device);
  void RetryUnsaved();

  common::EventLoop& loop_;
  runtime::Runtime& runtime_;
  ras::StateStore* store_;
  const std::string boot_id_;
  ras::RecoveryTable table_ = ras::RecoveryTable::Default();
  std::map<int, State> states_;
  std::set<int> unsaved_;
  std::unique_ptr<common::Timer> retry_;
};

// How a device in `state` with `action` suggested returns to service, in
// words for people: "" when healthy. Pure.
std::string ClearsBy(runtime::HealthState state, ras::RecoveryAction action);

}  // namespace rasd::daemon
