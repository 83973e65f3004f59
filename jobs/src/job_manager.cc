#include "rasd/jobs/job_manager.h"

#include <algorithm>

namespace rasd::jobs {

std::string_view JobKindName(JobKind kind) {
  return kind == JobKind::kInference ? "inference" : "collective";
}

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kDraining:
      return "draining";
    case JobState::kRequeued:
      return "requeued";
    case JobState::kAborted:
      return "aborted";
    case JobState::kFinished:
      return "finished";
  }
  return "unknown";
}

Status JobManager::Add(JobInfo job) {
  if (job.id.empty()) return Fail(ErrorCode::kInvalidArgument, "a job needs an id");
  std::lock_guard lock(mutex_);
  if (jobs_.contains(job.id)) {
    return Fail(ErrorCode::kAlreadyExists, "job '" + job.id + "' already exists");
  }
  const std::string id = job.id;
  jobs_.emplace(id, std::move(job));
  return {};
}

Status JobManager::SetState(std::string_view id, JobState state) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail(ErrorCode::kNotFound, "no job '" + std::string(id) + "'");
  it->second.state = state;
  return {};
}

Status JobManager::Remove(std::string_view id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Fail(ErrorCode::kNotFound, "no job '" + std::string(id) + "'");
  jobs_.erase(it);
  return {};
}

std::optional<JobInfo> JobManager::Find(std::string_view id) const {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

std::vector<JobInfo> JobManager::OnDevice(int device) const {
  std::lock_guard lock(mutex_);
  std::vector<JobInfo> result;
  for (const auto& [id, job] : jobs_) {
    if (std::find(job.devices.begin(), job.devices.end(), device) != job.devices.end()) {
      result.push_back(job);
    }
  }
  return result;
}

std::vector<JobInfo> JobManager::List() const {
  std::lock_guard lock(mutex_);
  std::vector<JobInfo> result;
  result.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) result.push_back(job);
  return result;
}

std::size_t JobManager::Count() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

}  // namespace rasd::jobs
