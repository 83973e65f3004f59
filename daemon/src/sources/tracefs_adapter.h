#pragma once

#include <memory>
#include <vector>

#include "ras_source.h"
#include "rasd/ras/tracefs_source.h"

namespace rasd::daemon {

// The kernel's RAS tracepoints, from a private tracefs instance
// (ras.tracefs_instance) read per CPU as the buffers fill. Not there (no
// tracefs, no RAS events in this kernel, no privilege, another rasd holding
// the instance): looked for again with a SourceBackoff. Destroying it
// removes the instance.
class TracefsAdapter final : public RasSource {
 public:
  explicit TracefsAdapter(SourceContext& context) : context_(context) {}
  ~TracefsAdapter() override;

  std::string_view Name() const override { return "tracefs"; }
  void Start() override;
  SourceState State() const override { return state_; }
  void AddTo(IngestStats& stats) const override;

 private:
  void Open();
  void Read(std::size_t cpu);

  SourceContext& context_;
  SourceState state_;
  bool logged_missing_ = false;  // once; the retries only update the state
  std::unique_ptr<ras::TracefsSource> tracefs_;
  std::vector<std::unique_ptr<common::FdWatch>> watches_;
  std::unique_ptr<common::Timer> retry_;
  SourceBackoff backoff_;
};

}  // namespace rasd::daemon
