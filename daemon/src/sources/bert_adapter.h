#pragma once

#include <memory>

#include "ras_source.h"

namespace rasd::daemon {

// The firmware's Boot Error Record Table (ACPI BERT): errors of the
// previous boot, decoded once per table, remembered by its ContentKey in
// the same batch as its events. No table: looked for again with a
// SourceBackoff.
class BertAdapter final : public RasSource {
 public:
  static constexpr std::string_view kTable = "/sys/firmware/acpi/tables/data/BERT";

  explicit BertAdapter(SourceContext& context) : context_(context) {}

  std::string_view Name() const override { return "bert"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override { stats.crash_records_read += read_; }

 private:
  void Check();

  SourceContext& context_;
  SourceState state_;
  std::uint64_t read_ = 0;  // new tables decoded
  std::unique_ptr<common::Timer> retry_;
  SourceBackoff backoff_;
};

}  // namespace rasd::daemon
