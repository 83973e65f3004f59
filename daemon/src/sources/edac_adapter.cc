#include "edac_adapter.h"

#include <fmt/format.h>

#include "rasd/common/logging.h"

namespace rasd::daemon {

void EdacAdapter::Start() {
  edac_ = std::make_unique<ras::EdacSysfsSource>(context_.host);
  (void)edac_->Poll();  // the baseline: counts since boot are not news
  timer_ = context_.loop.CreateTimer([this] { PollNow(); });
  RASD_LOG_INFO("EDAC sysfs: {} memory controller(s), polled every {} ms",
                edac_->Last().controllers.size(), context_.options.edac_poll.count());
  Arm();
}

void EdacAdapter::PollNow() {
  if (!edac_) return;
  context_.deliver({.events = edac_->Poll()});
  Arm();
}

void EdacAdapter::Arm() {
  const std::size_t controllers = edac_->Last().controllers.size();
  if (controllers > 0) {
    backoff_.Reset();
    state_ = {"active", fmt::format("{} memory controller(s) polled every {} ms", controllers,
                                    context_.options.edac_poll.count())};
    timer_->ArmAfter(context_.options.edac_poll);
    return;
  }
  const auto delay = backoff_.Next();
  state_ = {"absent", fmt::format("no memory controller under {}; looked for again in {} s",
                                  context_.host.Resolve("/sys/devices/system/edac/mc").string(),
                                  delay.count())};
  timer_->ArmAfter(delay);
}

ras::EdacSnapshot EdacAdapter::Counters() const {
  return edac_ ? edac_->Last() : ras::EdacSnapshot{};
}

void EdacAdapter::AddTo(IngestStats& stats) const {
  stats.edac_controllers = edac_ ? edac_->Last().controllers.size() : 0;
}

}  // namespace rasd::daemon
