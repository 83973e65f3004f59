#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {

// The EDAC error counters of one moment, read from
// <root>/sys/devices/system/edac/mc as node_exporter reads them, in the
// three layouts the kernel has used: csrowN (with chK_ per-channel
// counters), dimmN and rankN. Attributes a driver does not provide are
// simply absent.
struct EdacSnapshot {
  struct Controller {
    int mc = 0;
    std::uint64_t ce = 0, ue = 0;                // mcN/ce_count, ue_count
    std::uint64_t ce_noinfo = 0, ue_noinfo = 0;  // errors no csrow/dimm could be named for
    // Which of those files exist: a partial tree reports what it has.
    bool has_ce = false, has_ue = false, has_ce_noinfo = false, has_ue_noinfo = false;
  };
  struct Unit {
    int mc = 0;
    std::string kind;  // csrow | dimm | rank
    int index = 0;
    std::string label;  // dimm_label / chK_dimm_label, where the driver names it
    std::uint64_t ce = 0, ue = 0;
    bool has_ce = false, has_ue = false;
  };
  std::map<int, Controller> controllers;
  std::vector<Unit> units;  // sorted by (mc, kind, index)
};

// Reads the counters. A host without EDAC gives an empty snapshot, not an
// error: EDAC is optional hardware support.
EdacSnapshot ReadEdacSnapshot(const common::HostEnv& host);

// Turns successive snapshots into events: one per counter that went up,
// with the increase as its count. The first poll only takes a baseline
// (counts since boot are not news); a counter that went down was reset and
// is re-based without an event. Controller totals count only where the
// controller has no csrow/dimm/rank units, so nothing is counted twice.
// Events are stamped with the host's wall clock; `host` must outlive the
// source.
class EdacSysfsSource {
 public:
  static constexpr std::string_view kSourceName = "edac_sysfs";

  explicit EdacSysfsSource(const common::HostEnv& host) : host_(host) {}
  std::vector<RasEvent> Poll();
  const EdacSnapshot& Last() const { return last_; }

 private:
  const common::HostEnv& host_;
  bool have_baseline_ = false;
  EdacSnapshot last_;
};

}  // namespace rasd::ras
