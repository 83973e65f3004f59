#include "node_fault.h"

#include <fmt/chrono.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "arg_reader.h"
#include "rasd/common/logging.h"
#include "rasd/common/unix_nanos.h"

namespace rasd::daemon {
namespace {

// The store's node_state key.
constexpr const char* kFaultKey = "node_fault";

}  // namespace

void NodeFault::Restore() {
  auto saved = store_.LoadNodeValue(kFaultKey);
  if (!saved) {
    // Whether a fault was saved is unknown: the safe reading is that one
    // stands, as for a damaged one; an operator's undrain clears it.
    fault_ = Record{"the saved node fault cannot be read (" + saved.error().message + ")",
                    clock_.Wall()};
    RASD_LOG_ERROR("{}", fault_->reason);
    return;
  }
  if (!*saved) return;
  const auto value = nlohmann::json::parse(**saved, nullptr, false);
  std::optional<std::string> reason;
  std::optional<std::int64_t> since_ns;
  Status readable = Fail(ErrorCode::kCorruptData, "not a JSON object");
  if (value.is_object()) {
    ArgReader fields("the saved node fault", value);
    reason = fields.Required(fields.String("reason", 1 << 20), "reason");
    since_ns = fields.Required(fields.Int("since_ns", std::numeric_limits<std::int64_t>::min(),
                                          std::numeric_limits<std::int64_t>::max()),
                               "since_ns");
    readable = fields.Finish();
  }
  if (!readable) {
    // Damaged: the safe reading is that the fault stands.
    fault_ =
        Record{"a node fault was saved but cannot be read back (" + readable.error().message + ")",
               clock_.Wall()};
    RASD_LOG_ERROR("{}", fault_->reason);
    return;
  }
  fault_ = Record{*reason, common::FromUnixNanos(*since_ns)};
  RASD_LOG_WARN("the node has a fault since {:%F %T}: {} (an operator's undrain clears it)",
                std::chrono::floor<std::chrono::seconds>(fault_->since), fault_->reason);
}

bool NodeFault::Declare(const std::string& reason) {
  if (fault_) return false;
  fault_ = Record{reason, clock_.Wall()};
  Save();
  return true;
}

void NodeFault::Save() {
  const nlohmann::json value = {{"reason", fault_->reason},
                                {"since_ns", common::UnixNanos(fault_->since)}};
  if (auto saved = store_.SaveNodeValue(kFaultKey, value.dump()); !saved) {
    // It stands in memory; a restart before the next save would lose it.
    RASD_LOG_ERROR("cannot save the node fault ({}): {}; it holds until rasd stops", fault_->reason,
                   saved.error().message);
  }
}

void NodeFault::Clear() {
  fault_.reset();
  if (auto deleted = store_.DeleteNodeValue(kFaultKey); !deleted) {
    RASD_LOG_ERROR("cannot clear the saved node fault: {}; a restart would bring it back",
                   deleted.error().message);
  }
}

}  // namespace rasd::daemon
