#include "pstore_adapter.h"

#include <fmt/format.h>

#include "rasd/common/logging.h"
#include "rasd/ras/pstore_source.h"

namespace rasd::daemon {

void PstoreAdapter::Start() {
  retry_ = context_.loop.CreateTimer([this] { Check(); });
  Check();
}

void PstoreAdapter::Check() {
  auto records = ras::FindPstoreRecords(context_.host);
  if (!records) {
    state_ = LookAgainLater(records.error(), backoff_, *retry_);
    return;
  }
  // Found: read once. Dumps appear only at boot, and systemd-pstore moving
  // them after this read is harmless: a moved file keeps its key.
  backoff_.Reset();
  std::vector<ras::RasEvent> events;
  std::vector<ras::SourceCursor> seen;
  std::size_t fresh = 0;
  const auto now = context_.host.GetClock().Wall();
  for (const auto& record : *records) {
    if (record.IsNew([this](const std::string& key) { return context_.SeenFile(key); })) {
      ++fresh;
      auto decoded = ras::DecodePstoreRecord(record, context_.codes, now);
      events.insert(events.end(), std::make_move_iterator(decoded.begin()),
                    std::make_move_iterator(decoded.end()));
    }
    for (const auto& key : record.AllKeys()) {
      if (!context_.SeenFile(key))
        seen.push_back({std::string(kSeenFilePrefix) + key, context_.boot_id, "read"});
    }
  }
  read_ += fresh;
  state_ = {"active", fmt::format("{} crash dump(s) in {} and {}, {} new: {} RAS record(s)",
                                  records->size(), context_.host.Resolve(ras::kPstoreDir).string(),
                                  context_.host.Resolve(ras::kPstoreArchiveDir).string(), fresh,
                                  events.size())};
  if (!events.empty()) {
    RASD_LOG_WARN("pstore: {} RAS record(s) from a previous boot in {} new crash dump(s)",
                  events.size(), fresh);
  }
  context_.deliver({.events = std::move(events), .cursors = std::move(seen)});
}

}  // namespace rasd::daemon
