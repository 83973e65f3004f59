#pragma once

#include <memory>

#include "ras_source.h"

namespace rasd::daemon {

// Crash dumps in pstore (and where systemd-pstore archives them): records
// of a previous boot, each file decoded once. A file's ContentKey is stored
// with the events it gave, in the same batch, so a file seen again (after a
// restart, or in a later boot) is not reported again. No pstore: looked for
// again with a SourceBackoff.
class PstoreAdapter final : public RasSource {
 public:
  explicit PstoreAdapter(SourceContext& context) : context_(context) {}

  std::string_view Name() const override { return "pstore"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override { stats.crash_records_read += read_; }

 private:
  void Check();

  SourceContext& context_;
  SourceState state_;
  std::uint64_t read_ = 0;  // new dumps decoded
  std::unique_ptr<common::Timer> retry_;
  SourceBackoff backoff_;
};

}  // namespace rasd::daemon
