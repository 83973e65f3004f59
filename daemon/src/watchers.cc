#include "watchers.h"

#include <algorithm>
#include <vector>

namespace rasd::daemon {
Watchers::Watchers(common::EventLoop& loop, runtime::Runtime& runtime, ReasonOf reason_of)
    : loop_(loop), runtime_(runtime), reason_of_(std::move(reason_of)) {}

Watchers::~Watchers() { *alive_ = false; }

Result<Subscribed> Watchers::Subscribe(Push push, std::int64_t last_event_id) {
  // What the subscriber compares later messages with: the states as of now.
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& device : runtime_.Devices()) {
    devices.push_back({{"device", device->Index()},
                       {"state", std::string(runtime::HealthStateName(device->Health()))}});
  }
  const std::uint64_t id = next_id_++;
  pushes_.emplace(id, std::move(push));
  std::shared_ptr<void> token(nullptr, [this, id, alive = alive_](void*) {
    if (*alive) pushes_.erase(id);
  });
  return Subscribed{{{"watching", true}, {"devices", devices}, {"last_id", last_event_id}},
                    std::move(token)};
}

void Watchers::Broadcast(const nlohmann::json& message) {
  // A push may close a client, whose token erases its entry: iterate a copy.
  std::vector<std::uint64_t> ids;
  for (const auto& [id, push] : pushes_) ids.push_back(id);
  for (std::uint64_t id : ids) {
    auto found = pushes_.find(id);
    if (found == pushes_.end()) continue;
    Push push = found->second;
    if (!push(message)) pushes_.erase(id);
  }
}

void Watchers::OnStored(const std::vector<std::int64_t>& event_ids) {
  if (event_ids.empty()) return;
  std::vector<std::int64_t> grown;
  std::int64_t newest = newest_stored_;
  for (const std::int64_t id : event_ids) {
    if (id <= newest_stored_) grown.push_back(id);
    newest = std::max(newest, id);
  }
  newest_stored_ = newest;
  if (pushes_.empty()) return;
  nlohmann::json message = {{"event", "events"}, {"last_id", newest}};
  if (!grown.empty()) {
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    if (grown.size() > kMaxGrownIds)
      grown.erase(grown.begin(),
                  grown.begin() + static_cast<std::ptrdiff_t>(grown.size() - kMaxGrownIds));
    message["grown"] = grown;
  }
  Broadcast(message);
}

void Watchers::OnDeviceStateChanged(const DeviceStateChanged& change) {
  if (pushes_.empty()) return;
  nlohmann::json message = {{"event", "device"},
                            {"device", change.device},
                            {"from", std::string(runtime::HealthStateName(change.from))},
                            {"state", std::string(runtime::HealthStateName(change.to))},
                            {"reason", reason_of_(change.device)}};
  // Sent once the turn of the loop that made the change is over: a change
  // the pipeline made reaches watchers after the "events" message of the
  // batch that caused it, so a client that fetches events then finds it.
  loop_.Post([this, alive = alive_, message = std::move(message)] {
    if (*alive) Broadcast(message);
  });
}

}  // namespace rasd::daemon
