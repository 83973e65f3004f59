#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"

namespace rasd::jobs {

enum class JobKind : std::uint8_t { kInference, kCollective };
enum class JobState : std::uint8_t { kRunning, kDraining, kRequeued, kAborted, kFinished };

std::string_view JobKindName(JobKind kind);
std::string_view JobStateName(JobState state);

struct JobInfo {
  std::string id;  // unique while the job is known, e.g. "llm-0"
  JobKind kind = JobKind::kInference;
  JobState state = JobState::kRunning;
  std::vector<int> devices;  // device indices the job has work on
};

// The table of jobs the daemon runs on the runtime. It answers "which jobs
// run on device N" (what a drain or an isolation has to move) and keeps
// their state. The services themselves (inference, collectives) arrive with
// the jobs issue and register here. Thread-safe.
class JobManager {
 public:
  // kAlreadyExists for a duplicate id, kInvalidArgument for an empty one.
  Status Add(JobInfo job);
  // kNotFound for an unknown id.
  Status SetState(std::string_view id, JobState state);
  Status Remove(std::string_view id);

  std::optional<JobInfo> Find(std::string_view id) const;
  std::vector<JobInfo> OnDevice(int device) const;
  std::vector<JobInfo> List() const;
  std::size_t Count() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, JobInfo, std::less<>> jobs_;
};

}  // namespace rasd::jobs
