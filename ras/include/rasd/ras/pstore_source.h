#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/common/result.h"
#include "rasd/ras/code_table.h"
#include "rasd/ras/ras_event.h"

namespace rasd::ras {

// Where crash dumps are kept. The kernel exposes them in pstore; on Debian
// 12 (and every distribution with systemd 243 or later) systemd-pstore.service
// runs at boot, before rasd, and with its defaults (pstore.conf(5):
// Storage=external, Unlink=yes) moves every file out of pstore into its
// archive, so rasd reads both.
inline constexpr std::string_view kPstoreDir = "/sys/fs/pstore";
inline constexpr std::string_view kPstoreArchiveDir = "/var/lib/systemd/pstore";

// One crash dump: the kernel log as it was written to persistent storage
// when the previous boot ended, possibly in several parts.
struct PstoreRecord {
  std::string name;  // for people: the file, or the archive's dmesg.txt
  std::string text;  // the parts joined in the kernel log's order
  // The identity of each file the dump is made of: "<file name>:<bytes>:
  // <FNV-1a 64 of the content, hex>". The same dump has the same keys
  // wherever it is found (in pstore, or after systemd-pstore moved it) and
  // whenever (a later boot: the archive keeps it), while a new dump that
  // reuses a name (dmesg-ramoops-0, which systemd-pstore overwrites in its
  // archive) does not.
  std::vector<std::string> part_keys;        // the kernel's dmesg-* files
  std::optional<std::string> assembled_key;  // systemd-pstore's dmesg.txt
  // A dump the kernel kept compressed (*.enc.z: it could not decompress
  // it) that is not zlib/deflate either: `text` is empty.
  bool undecodable = false;

  // Whether the dump is news, given which keys were seen before: a dump
  // is seen once every part of it was (systemd's dmesg.txt is only a copy
  // of the parts), or, without parts, once its dmesg.txt was.
  template <typename SeenFn>
  bool IsNew(SeenFn&& seen) const {
    if (part_keys.empty()) return assembled_key && !seen(*assembled_key);
    for (const auto& key : part_keys)
      if (!seen(key)) return true;
    return false;
  }
  std::vector<std::string> AllKeys() const;
};

// Finds the crash dumps under <root>/sys/fs/pstore and in systemd-pstore's
// archive (<root>/var/lib/systemd/pstore), the latter in systemd's layout
// (src/pstore/pstore.c, systemd 243 to 256):
//  - dmesg-efi-<id>: the EFI back end writes one dump in parts whose record
//    ids differ in their last 5 digits (2 for the part, 3 for a count);
//    systemd moves part files to <archive>/<id without the last 5 digits>/
//    <the last 3 digits>/ and appends them, in reverse name order (the last
//    part holds the oldest lines), to dmesg.txt there.
//  - dmesg-erst-<id>: the ERST back end numbers parts one below the other;
//    a run of consecutive ids is one dump, moved to <archive>/<highest id>/
//    with its dmesg.txt.
//  - any other file (dmesg-ramoops-<n>, *.enc.z, unknown back ends) is
//    moved as it is to <archive>/<name>.
// In /sys/fs/pstore the same grouping is applied to the kernel's files, so
// a dump read there and again in the archive has the same part keys.
// Only dmesg dumps are kernel logs of a crash (console-*, pmsg-* and
// ftrace-* are not read). A *.enc.z file is inflated (zlib or raw deflate,
// what the kernel's pstore compression writes); other algorithms leave it
// `undecodable`.
//
// kNotFound when neither directory exists, kPermissionDenied when one
// exists and none can be read. Unreadable files are skipped.
Result<std::vector<PstoreRecord>> FindPstoreRecords(const common::HostEnv& host);

// Pure: the RAS records of a dump, as historical events (source "pstore")
// stamped `now`, their summaries prefixed with the record's name. An
// undecodable dump gives one INFO event saying so.
std::vector<RasEvent> DecodePstoreRecord(const PstoreRecord& record, const CodeTable& codes,
                                         std::chrono::system_clock::time_point now);

// Every dump's events, read or not before: for tools and tests (the daemon
// remembers what it has read; see RasIngest).
std::vector<RasEvent> ReadPstoreEvents(const common::HostEnv& host,
                                       const CodeTable& codes = CodeTable::Default());

// "<name>:<bytes>:<FNV-1a 64 hex>": how a crash-record file is known again.
std::string ContentKey(std::string_view name, std::string_view content);

}  // namespace rasd::ras
