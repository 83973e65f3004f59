#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/common/unique_fd.h"
#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/ras_event.h"
#include "rasd/ras/state_store.h"

namespace rasd::ras {

// One /dev/kmsg record: "prio,seq,usec,flags;text" and, on the lines after
// it, dictionary entries (" SUBSYSTEM=pci") that are not part of the text.
struct KmsgRecord {
  int priority = 0;  // facility * 8 + level
  std::uint64_t sequence = 0;
  std::uint64_t usec = 0;  // since boot
  std::string_view text;
};

// Pure: nullopt for anything that is not a kmsg record header.
std::optional<KmsgRecord> DecodeKmsgRecord(std::string_view record);

// Follows the kernel log at <root>/dev/kmsg and turns its RAS records into
// events. The real character device is read a record per read(); a regular
// file or FIFO there (replays, tests) is read line by line and followed as
// it grows.
//
// Resume: the cursor is (boot id, sequence number): the last record whose
// lines are all in events already returned. A multi-line block still open
// holds it back to the line before the block, so a caller that stores the
// cursor in the same transaction as the events returned with it gets every
// record exactly once across any crash: nothing already returned is
// repeated, nothing held is lost. Records the kernel's ring buffer
// overwrote before rasd read them are reported as one INFO event naming the
// gap. A source only decodes; it never acts.
//
// First start: without a cursor of this boot (rasd's first start since the
// machine booted, or a store that never saw this boot), the ring is full of
// records logged before rasd ran. Every event of a record read before the
// log was first exhausted (the ring as rasd found it, read to its end), and
// of a block that had begun by then, is marked `before_start`; the policy
// decides which of them still act. A restart in the same boot resumes from
// its cursor and marks nothing.
//
// Trust: from the character device, only the kernel's own records
// (facility 0) are decoded. What user space writes into /dev/kmsg (root's
// echo, a unit with StandardOutput=kmsg, journald's ForwardToKMsg, a
// privileged container) the kernel marks with facility user (1) or the one
// the writer names, never 0: such a record could forge an Xid line and
// isolate a device, so it is counted (UntrustedRecords) and never acted on. A plain file (a replay) carries
// no such mark that means anything and is decoded whole.
//
// Not thread-safe: the daemon's loop owns it.
class KmsgSource {
 public:
  static constexpr std::string_view kSourceName = "kmsg";

  // `codes` must outlive the source; changes to it apply to records decoded later.
  KmsgSource(const common::HostEnv& host, std::string boot_id, std::optional<SourceCursor> resume,
             const CodeTable& codes = CodeTable::Default());

  // kNotFound / kPermissionDenied when there is no readable kmsg.
  Status Open();
  int Fd() const { return fd_.Get(); }
  bool IsCharacterDevice() const { return character_device_; }

  // Reads what is available now, at most `max_lines` records (so that a
  // storm is taken in slices and the caller's loop keeps answering);
  // returns the events whose records are complete. Exhausted() says
  // whether it stopped because nothing more was there.
  std::vector<RasEvent> Poll(std::size_t max_lines = SIZE_MAX);
  bool Exhausted() const { return exhausted_; }
  // The log has been quiet: completes records still open.
  std::vector<RasEvent> Flush();

  SourceCursor Cursor() const;
  std::uint64_t LostRecords() const { return lost_records_; }
  // Overwrites reported (each one event), and lines that looked like RAS
  // records but did not decode.
  std::uint64_t Gaps() const { return gaps_; }
  std::uint64_t UndecodedLines() const { return scanner_.UndecodedLines(); }
  std::uint64_t RecordsRead() const { return records_read_; }
  // Records from the character device that user space wrote (facility not 0).
  std::uint64_t UntrustedRecords() const { return untrusted_records_; }
  // Events marked before_start (see First start above).
  std::uint64_t BeforeStartEvents() const { return before_start_events_; }

 private:
  void Accept(std::string_view record);
  // The events of the records the scanner has completed.
  std::vector<RasEvent> Collect();

  const common::HostEnv& host_;
  std::string boot_id_;
  std::optional<std::uint64_t> resume_after_;  // same boot: skip up to here
  common::UniqueFd fd_;
  bool character_device_ = false;
  std::string partial_;            // lines read but not taken, then an unfinished one (file mode)
  std::size_t partial_start_ = 0;  // where the lines not taken yet begin
  bool exhausted_ = false;
  KernelLogScanner scanner_;
  // Collect's buffer, reused so that a storm does not allocate a slice of
  // records per Poll; released by Flush, when the log has been quiet.
  std::vector<ScannedRecord> completed_;
  std::optional<std::uint64_t> last_sequence_;
  std::uint64_t lost_records_ = 0;
  std::uint64_t records_read_ = 0;
  std::uint64_t untrusted_records_ = 0;
  std::uint64_t gaps_ = 0;
  std::vector<RasEvent> gap_events_;
  // First start in this boot: records up to the ring's end when it was
  // first exhausted are from before the start.
  bool first_start_in_boot_ = false;
  bool ring_read_ = false;              // exhausted once
  std::uint64_t ring_end_position_ = 0;  // sequence + 1 of the ring's last record then
  std::uint64_t before_start_events_ = 0;
};

}  // namespace rasd::ras
