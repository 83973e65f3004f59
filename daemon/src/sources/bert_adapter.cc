#include "bert_adapter.h"

#include <fmt/format.h>

#include <span>

#include "rasd/common/logging.h"
#include "rasd/ras/bert_source.h"
#include "rasd/ras/pstore_source.h"

namespace rasd::daemon {

void BertAdapter::Start() {
  retry_ = context_.loop.CreateTimer([this] { Check(); });
  Check();
}

void BertAdapter::Check() {
  auto table = context_.host.ReadFile(kTable, 16 << 20);
  if (!table) {
    state_ = LookAgainLater(table.error(), backoff_, *retry_);
    return;
  }
  backoff_.Reset();
  const std::string where = context_.host.Resolve(kTable).string();
  const std::string key = ras::ContentKey("BERT", *table);
  if (context_.SeenFile(key)) {
    state_ = {"active", fmt::format("{}: read before ({} bytes)", where, table->size())};
    return;
  }
  auto events = ras::DecodeBert(
      std::span(reinterpret_cast<const std::uint8_t*>(table->data()), table->size()),
      context_.host.GetClock().Wall());
  ++read_;
  state_ = {"active",
            fmt::format("{}: {} error record(s) from the previous boot", where, events.size())};
  if (!events.empty())
    RASD_LOG_WARN("BERT: {} error record(s) from the previous boot", events.size());
  context_.deliver({.events = std::move(events),
                    .cursors = {{std::string(kSeenFilePrefix) + key, context_.boot_id, "read"}}});
}

}  // namespace rasd::daemon
