#include "ras_source.h"

#include <fmt/format.h>

namespace rasd::daemon {

SourceState SourceFailure(const Error& error) {
  switch (error.code) {
    case ErrorCode::kNotFound:
      return {"absent", error.message};
    case ErrorCode::kPermissionDenied:
      return {"no_permission", error.message};
    case ErrorCode::kUnavailable:
      return {"in_use", error.message};
    default:
      return {"failed", error.message};
  }
}

SourceState LookAgainLater(const Error& error, SourceBackoff& backoff, common::Timer& retry) {
  const auto delay = backoff.Next();
  auto state = SourceFailure(error);
  state.reason += fmt::format("; looked for again in {} s", delay.count());
  retry.ArmAfter(delay);
  return state;
}

bool SourceContext::SeenFile(const std::string& key) const {
  auto cursor = store.LoadCursor(std::string(kSeenFilePrefix) + key);
  return cursor && cursor->has_value();
}

nlohmann::json IngestStats::ToJson() const {
  nlohmann::json source_states = nlohmann::json::object();
  for (const auto& [name, source] : sources)
    source_states[name] = {{"state", source.state}, {"reason", source.reason}};
  nlohmann::json json = {{"kmsg_active", kmsg_active},
                         {"kmsg_records", kmsg_records},
                         {"kmsg_lost", kmsg_lost},
                         {"kmsg_untrusted", kmsg_untrusted},
                         {"kmsg_before_start", kmsg_before_start},
                         {"tracefs_active", tracefs_active},
                         {"tracefs_pages", tracefs_pages},
                         {"tracefs_events", tracefs_events},
                         {"nvml_gpus", nvml_gpus},
                         {"nvml_reports", nvml_reports},
                         {"edac_controllers", edac_controllers},
                         {"crash_records_read", crash_records_read}};
  json["sources"] = std::move(source_states);
  return json;
}

}  // namespace rasd::daemon
