#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dcmi_api.h"
#include "rasd/common/dynamic_library.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/drivers_shim/probe_calls.h"

namespace rasd::drivers::ascend {

// What was last seen of one chip. The reports are what changed since.
struct ChipHealth {
  unsigned int health = 0;
  std::set<unsigned int> codes;
};

// Compares a fresh reading of `device` with `last`, updates `last`, and
// returns the events to report, all kVendorCode in the kAscend space: one
// when the health becomes non-zero or changes to another non-zero value
// (no vendor_code: health is a level, not a code), and one per error code
// that `last` did not hold. A code that clears is forgotten, so it is
// reported again if it comes back.
std::vector<DriverErrorEvent> DiffChipHealth(int device, ChipHealth& last, unsigned int health,
                                             std::span<const unsigned int> codes);

// Compares a fresh dcmi_get_device_network_health answer for `device`'s
// RoCE port with `last_up` (absent: nothing known yet), updates it, and
// returns the link report: kLinkDown / kLinkUp with link {kRoce, 0} when the
// state changes, and at the first answer that says anything (up or down,
// so that the daemon knows the device has the link). DETECT_OK is up;
// INIT and IP_SET (the prober is starting, or its address is being set)
// say nothing and change nothing; every other value is down.
std::optional<DriverErrorEvent> DiffNetworkHealth(int device, std::optional<bool>& last_up,
                                                  int result);

// The DCMI side of the Ascend backend: finds where each ACL device sits
// (card and chip, through the logic id), answers its PCI address and die id,
// and polls health, error codes and, where the library has
// dcmi_get_device_network_health, the RoCE port's state (DiffNetworkHealth)
// on its own thread. HCCS links have no per-link state query in the
// documented DCMI API: their faults arrive as the chip's error codes (the
// Ascend code table classifies them).
//
// Each polled call about one chip is seen in RunningCalls while it runs, so
// that a call that does not return (a wedged driver) is told from a quiet
// chip. Stop waits `stop_wait` for the thread; one stuck in a call past it
// is left behind, detached, with the library kept loaded under it, and it
// reports nothing after Stop returns.
//
// Ownership: owns the library and the thread (what the thread uses is
// shared with it, so a thread left behind outlives the monitor safely).
// Thread-safety: PciBdf, Uuid and RunningCalls may be called from any
// thread; Start and Stop from one thread at a time.
class DcmiMonitor {
 public:
  using EmitFunction = std::function<void(DriverErrorEvent)>;

  // Loads `library` and calls dcmi_init. `logic_ids[i]` is the DCMI logic id
  // of ACL device i. kUnavailable when the library is missing or lacks a
  // required entry point, or dcmi_init fails.
  static Result<std::unique_ptr<DcmiMonitor>> Create(const std::string& library,
                                                     std::vector<int> logic_ids);
  ~DcmiMonitor();
  DcmiMonitor(const DcmiMonitor&) = delete;
  DcmiMonitor& operator=(const DcmiMonitor&) = delete;

  // "0000:c1:00.0", or "" when DCMI does not say or the device is unmapped.
  std::string PciBdf(int device) const;
  // The chip's die id as "ascend-xxxxxxxx-...", or "".
  std::string Uuid(int device) const;
  // How many ACL devices DCMI knows.
  int MappedDevices() const;
  // The DCMI calls about one chip in progress now, named by the chip's PCI
  // address ("card C chip N" where DCMI gave none) and the DCMI function.
  std::vector<ProbeCalls::Call> RunningCalls() const;

  // Polls every `period`; `emit` runs on the polling thread. Start once.
  void Start(std::chrono::milliseconds period, EmitFunction emit,
             std::chrono::milliseconds stop_wait = std::chrono::milliseconds(2000));
  // False when the thread was left behind in a call.
  bool Stop();

 private:
  struct Chip {
    bool mapped = false;
    int card = 0;
    int chip = 0;
    std::string pci_bdf;
    std::string uuid;
    ChipHealth last;              // used by the polling thread only
    std::optional<bool> roce_up;  // used by the polling thread only
    std::string Name() const;     // for RunningCalls
  };
  struct Poller;

  DcmiMonitor(common::DynamicLibrary library, std::shared_ptr<Poller> poller)
      : library_(std::move(library)), poller_(std::move(poller)) {}
  void Locate(const std::vector<int>& logic_ids);

  common::DynamicLibrary library_;
  std::shared_ptr<Poller> poller_;
  std::thread thread_;
  std::chrono::milliseconds stop_wait_{2000};
};

}  // namespace rasd::drivers::ascend
