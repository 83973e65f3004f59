#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rasd::ras {

// What one source of link state read in one look, typed as a driver's
// report is; it travels with the events of the same look, and the link
// policy decides on it in their batch.
struct LinkReport {
  std::string source;  // "RDMA", "NVLink", "HCCS", "RoCE"
  // Every device that has links of this source, with those of them down
  // now ("mlx5_0 port 1", "NVLink 3"); a device not listed is left as it was.
  std::map<int, std::vector<std::string>> down;
  // Links the source cannot tell down from absent (LinkPolicy's restart rule).
  std::map<int, std::vector<std::string>> unconfirmed;
};

// The rules for the links an accelerator's collectives depend on (its RDMA
// ports, NVLinks, HCCS and RoCE ports), with time passed in, as
// PolicyEngine's: no clock, no timer, no I/O. Its caller feeds it what each
// source last read, calls Advance() at NextDeadline(), and carries out the
// decisions (the links-usable flag, the link's Degraded hold).
//
// The rules:
// - down: a device is down while any source lists a link of it down. Going
//   down takes it out of collectives and asks for the link's Degraded.
// - debounce: once every link is up, the device rejoins (back in
//   collectives, the link's hold lifted) after `up_debounce`, the value in
//   force when the last link came up. A link down meanwhile cancels it.
// - flap: `flap_limit` downs within `flap_window` make the device flapping:
//   it stays out, with its hold, until an operator returns it.
// - restart: a device that was out when rasd stopped (Restore) stays out
//   until its links prove themselves again; links the source cannot tell
//   down from absent (NVML's inactive-at-start NVLinks) count as down only
//   for a device that was out for that very link.
//
// Not thread-safe; one owner.
class LinkPolicy {
 public:
  struct Options {
    std::chrono::milliseconds up_debounce{30000};
    std::size_t flap_limit = 5;
    std::chrono::seconds flap_window{3600};
  };
  using Clock = std::chrono::nanoseconds;  // the caller's monotonic time
  // Links per device: "mlx5_0 port 1", "NVLink 3".
  using LinksByDevice = std::map<int, std::vector<std::string>>;

  // What to do about one device.
  struct Decision {
    enum class What {
      kWentDown,      // out of collectives, hold Degraded
      kFlapping,      // went down, and that made it flapping
      kLinksChanged,  // still down, other links: the hold's reason changes
      kRejoined,      // links up for the debounce: back in, hold lifted
    };
    int device = -1;
    What what = What::kWentDown;
    bool links_usable = false;
    std::string reason;  // for the hold (down) or the lift (rejoined)
  };

  // A device's state as saved across a restart.
  struct Saved {
    bool held = false;               // flapping
    bool degraded = false;           // the link held it Degraded
    std::vector<std::string> links;  // down when it was saved
  };

  explicit LinkPolicy(Options options) : options_(options) {}
  // From the next observation on; a debounce running keeps its value.
  void SetOptions(Options options) { options_ = options; }

  // At start, before the first observation: `out` (held, degraded, or a
  // saved state that could not be read) keeps the device out of
  // collectives until its links prove themselves. Returns whether it is out.
  bool Restore(int device, const Saved& saved, bool out);

  // One source's reading: `down_links` holds every device that has links of
  // that source, with those of them that are down now. A device not listed
  // is left as it was for that source.
  std::vector<Decision> Observe(std::string_view source, const LinksByDevice& down_links,
                                const LinksByDevice& unconfirmed, Clock now);
  std::vector<Decision> Observe(const LinkReport& report, Clock now) {
    return Observe(report.source, report.down, report.unconfirmed, now);
  }
  // The debounces that ended by `now`.
  std::vector<Decision> Advance(Clock now);
  // When Advance has something to do next; nullopt: nothing pending.
  std::optional<Clock> NextDeadline() const;

  // An operator returned the device to service: a flapping hold ends, and
  // the link's hold with it. Returns whether its links are usable now.
  bool OperatorReturned(int device);

  // What ends the link's part of a device's state, in words; nullopt when
  // the link holds nothing.
  std::optional<std::string> Clears(int device) const;
  bool Holds(int device) const;         // the link asked for Degraded and has not lifted it
  std::map<int, Saved> ToSave() const;  // the devices held or degraded
  // (device, source) -> links down now, for every source that listed the device.
  std::map<std::pair<int, std::string>, std::uint64_t> DownLinks() const;

 private:
  struct State {
    std::map<std::string, std::vector<std::string>, std::less<>> down_links;  // by source
    bool down = false;                            // any link down, as last observed
    bool degraded = false;                        // asked for Degraded, not lifted since
    bool held = false;                            // flapping
    std::vector<Clock> downs;                     // within flap_window
    std::optional<Clock> rejoin_at;               // a debounce running
    std::chrono::milliseconds armed_debounce{0};  // the value it runs with
    std::vector<std::string> restored_links;      // down when rasd stopped
  };
  std::vector<std::string> AllDown(const State& state) const;
  std::string Reason(const State& state) const;

  Options options_;
  std::map<int, State> states_;
};

}  // namespace rasd::ras
