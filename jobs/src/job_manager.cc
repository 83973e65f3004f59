#include "rasd/jobs/job_manager.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::jobs {

namespace {

// A replicated service's state from how many of its replicas serve.
std::string ServiceState(int serving, std::size_t replicas) {
  return serving == 0                                  ? "waiting"
         : serving < static_cast<int>(replicas) ? "degraded"
                                                : "serving";
}

// A service's findings, told to the manager's listener with the job's name.
template <typename Finding>
std::function<void(const Finding&)> NamedBy(
    const std::function<void(const std::string&, const Finding&)>& listener, std::string name) {
  if (!listener) return nullptr;
  return [listener, name = std::move(name)](const Finding& finding) { listener(name, finding); };
}

}  // namespace

std::string_view JobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kInference:
      return "inference";
    case JobKind::kCollective:
      return "collective";
    case JobKind::kLlm:
      return "llm";
  }
  return "inference";
}

std::optional<JobKind> ParseJobKind(std::string_view name) {
  if (name == "inference") return JobKind::kInference;
  if (name == "collective") return JobKind::kCollective;
  if (name == "llm") return JobKind::kLlm;
  return std::nullopt;
}

JobManager::JobManager(runtime::Runtime& runtime, std::chrono::milliseconds drain_deadline)
    : runtime_(runtime), drain_deadline_(drain_deadline) {}

JobManager::~JobManager() {
  std::map<std::string, std::unique_ptr<Job>, std::less<>> jobs;
  {
    std::lock_guard lock(mutex_);
    jobs.swap(jobs_);
  }
  for (auto& [name, job] : jobs) {
    if (job->load) job->load->Stop(std::chrono::seconds(2));
    if (job->llm_load) job->llm_load->Stop(std::chrono::seconds(2));
  }
  jobs.clear();
}

Status JobManager::Start(JobSpec spec) {
  if (spec.name.empty() || spec.name.size() > 64 ||
      !std::all_of(spec.name.begin(), spec.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
      })) {
    return Fail(ErrorCode::kInvalidArgument, "a job name is 1 to 64 letters, digits, '-' or '_'");
  }
  if (spec.devices.empty()) {
    for (std::size_t device = 0; device < runtime_.DeviceCount(); ++device)
      spec.devices.push_back(static_cast<int>(device));
  }
  {
    std::lock_guard lock(mutex_);
    if (jobs_.contains(spec.name))
      return Fail(ErrorCode::kAlreadyExists, fmt::format("a job '{}' is running", spec.name));
  }
  auto job = std::make_unique<Job>();
  job->spec = spec;
  if (spec.kind == JobKind::kInference) {
    InferenceOptions options;
    options.id = spec.name;
    options.devices = spec.devices;
    options.max_batch = spec.max_batch;
    options.max_queued = spec.max_queue;
    options.max_wait = spec.max_wait;
    options.drain_deadline = drain_deadline_;
    {
      std::lock_guard lock(mutex_);
      options.verify_one_in = cross_check_one_in_;
      options.on_cross_check = NamedBy(cross_check_listener_, spec.name);
      options.on_review = NamedBy(review_listener_, spec.name);
    }
    auto service = InferenceService::Create(runtime_, options);
    if (!service) return Fail(service.error());
    job->inference = std::shared_ptr<InferenceService>(std::move(*service));
    if (spec.load_rps > 0)
      job->load = std::make_unique<LoadGenerator>(*job->inference, options.model, spec.load_rps);
  } else if (spec.kind == JobKind::kLlm) {
    LlmOptions options;
    options.id = spec.name;
    options.devices = spec.devices;
    options.kv_bytes_per_device = spec.kv_bytes;
    options.tokens_per_block = spec.tokens_per_block;
    options.preemption = spec.preemption;
    options.max_batch_sequences =
        static_cast<std::uint32_t>(std::max<std::size_t>(spec.max_batch, 1));
    options.max_queued = spec.max_queue;
    auto service = LlmService::Create(runtime_, options);
    if (!service) return Fail(service.error());
    job->llm = std::move(*service);
    if (spec.load_rps > 0)
      job->llm_load = std::make_unique<LlmLoad>(*job->llm, options.model, spec.load_rps);
  } else {
    CollectiveOptions options;
    options.id = spec.name;
    options.devices = spec.devices;
    options.elements = spec.elements;
    options.steps = spec.steps;
    options.checkpoint_every = spec.checkpoint_every;
    options.min_ranks = spec.min_ranks;
    options.grow_on_return = spec.grow_on_return;
    {
      std::lock_guard lock(mutex_);
      options.cross_check_every = cross_check_one_in_;
      options.cross_check_budget = collective_check_budget_;
      options.on_cross_check = NamedBy(cross_check_listener_, spec.name);
    }
    auto collective = CollectiveJob::Create(runtime_, options);
    if (!collective) return Fail(collective.error());
    job->collective = std::move(*collective);
    job->collective_options = options;
  }
  std::lock_guard lock(mutex_);
  if (jobs_.contains(spec.name))
    return Fail(ErrorCode::kAlreadyExists, fmt::format("a job '{}' is running", spec.name));
  jobs_.emplace(spec.name, std::move(job));
  return {};
}

Status JobManager::Stop(std::string_view name) {
  std::unique_ptr<Job> job;
  {
    std::lock_guard lock(mutex_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return Fail(ErrorCode::kNotFound, fmt::format("no job '{}'", name));
    job = std::move(it->second);
    jobs_.erase(it);
  }
  if (job->load) job->load->Stop(std::chrono::seconds(5));
  if (job->llm_load) job->llm_load->Stop(std::chrono::seconds(5));
  job.reset();  // the service answers what is left; the collective stops
  return {};
}

std::size_t JobManager::Count() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

void JobManager::SetDrainDeadline(int device, std::chrono::milliseconds deadline) {
  std::lock_guard lock(mutex_);
  for (auto& [name, job] : jobs_) {
    if (job->inference) job->inference->SetDrainDeadline(device, deadline);
  }
}

std::vector<std::string> JobManager::DistrustDevice(int device,
                                                    std::chrono::nanoseconds distrust_for) {
  std::vector<std::string> told;
  std::lock_guard lock(mutex_);
  for (const auto& [name, job] : jobs_) {
    if (!job->collective) continue;
    const auto& devices = job->collective->Devices();
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) continue;
    job->collective->Distrust(device, distrust_for);
    told.push_back(name);
  }
  return told;
}

void JobManager::SetCrossChecks(std::uint32_t one_in, double collective_budget,
                                CrossCheckListener listener) {
  std::lock_guard lock(mutex_);
  cross_check_one_in_ = one_in;
  collective_check_budget_ = collective_budget;
  cross_check_listener_ = std::move(listener);
}

void JobManager::SetCrossCheckSampling(std::uint32_t one_in, double collective_budget) {
  std::lock_guard lock(mutex_);
  cross_check_one_in_ = one_in;
  collective_check_budget_ = collective_budget;
}

void JobManager::SetReviewListener(ReviewListener listener) {
  std::lock_guard lock(mutex_);
  review_listener_ = std::move(listener);
}

std::uint64_t JobManager::ReviewAnswers(int device, std::chrono::nanoseconds distrust_for) {
  // The services are called outside the lock: a review's outcome may reach
  // the listener on this thread, and the listener may look at the jobs.
  std::vector<std::shared_ptr<InferenceService>> services;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, job] : jobs_)
      if (job->inference) services.push_back(job->inference);
  }
  std::uint64_t rerun = 0;
  for (const auto& service : services) rerun += service->ReviewAnswers(device, distrust_for);
  return rerun;
}

std::vector<std::string> JobManager::AnsweredSinceLastCheck(int device) const {
  std::vector<std::string> lines;
  std::lock_guard lock(mutex_);
  for (const auto& [name, job] : jobs_) {
    if (!job->inference) continue;
    const auto unchecked = job->inference->AnsweredSinceLastCheck(device);
    const auto count = unchecked.requests.size() + unchecked.more;
    if (count == 0) continue;
    std::string ids;
    constexpr std::size_t kListed = 32;  // the newest; the count says how many in all
    const std::size_t from =
        unchecked.requests.size() > kListed ? unchecked.requests.size() - kListed : 0;
    for (std::size_t i = from; i < unchecked.requests.size(); ++i)
      ids += fmt::format("{}{}", ids.empty() ? "" : ", ", unchecked.requests[i]);
    lines.push_back(fmt::format("{}: {} answer(s) since its last clean cross-check{}: {}", name,
                                count, from > 0 || unchecked.more > 0 ? ", the newest" : "", ids));
  }
  return lines;
}

void JobManager::Reconsider() {
  std::lock_guard lock(mutex_);
  for (auto& [name, job] : jobs_) {
    if (job->inference) job->inference->Reconsider();
    if (job->collective) job->collective->Reconsider();
    if (job->llm) job->llm->Reconsider();
  }
}

std::shared_ptr<InferenceService> JobManager::Inference(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return nullptr;
  return it->second->inference;
}

std::optional<drivers::DeviceAddress> JobManager::MemoryFaultTarget(std::string_view name,
                                                                    int device) const {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(name);
  if (it == jobs_.end() || !it->second->llm) return std::nullopt;
  const auto blocks = it->second->llm->KvBlocks(device);
  if (!blocks) return std::nullopt;
  // The first block of the sequence holding the most blocks: in use now,
  // and read by every step of that sequence. With none running, the block
  // handed out next: written, then read, by the next sequence to start.
  std::optional<drivers::DeviceAddress> target = blocks->NextFreeBlock();
  std::size_t most = 0;
  for (const SequenceId sequence : blocks->Sequences()) {
    const auto table = blocks->BlockTable(sequence);
    if (table.size() > most) {
      most = table.size();
      target = table.front();
    }
  }
  return target;
}

JobReport JobManager::ReportOf(const Job& job) const {
  JobReport report;
  report.name = job.spec.name;
  report.kind = job.spec.kind;
  if (job.inference) {
    const auto stats = job.inference->GetStats();
    report.served = stats.served;
    report.requeued = stats.requeued;
    report.rerun = stats.rerun;
    report.lost = stats.failed;
    report.waiting = stats.waiting;
    report.overloaded = stats.rejected;
    int serving = 0;
    for (const auto& replica : stats.replicas) {
      auto device = runtime_.GetDevice(replica.device);
      const bool admits = device && ((*device)->Health() == runtime::HealthState::kHealthy ||
                                     (*device)->Health() == runtime::HealthState::kDegraded);
      if (admits) {
        report.devices.push_back(replica.device);
        ++serving;
      }
    }
    report.state = ServiceState(serving, stats.replicas.size());
    if (job.load) {
      const auto load = job.load->GetStats();
      report.load_sent = load.sent;
      report.load_wrong = load.wrong;
      report.load_corrected = load.corrected;
      report.load_wrong_corrected = load.wrong_corrected;
      report.load_corrections_wrong = load.corrections_wrong;
      report.load_p50_ms = load.p50_ms;
      report.load_p99_ms = load.p99_ms;
    }
    report.progress =
        fmt::format("{} served, {} requeued, {} re-run, {} lost on {}/{} replicas", report.served,
                    report.requeued, report.rerun, report.lost, serving, stats.replicas.size());
  } else if (job.llm) {
    const auto stats = job.llm->GetStats();
    report.served = stats.served;
    report.lost = stats.failed;
    report.waiting = stats.unplaced;
    report.overloaded = stats.rejected;
    report.tokens = stats.tokens;
    int serving = 0;
    for (const auto& replica : stats.replicas) {
      if (replica.serving) {
        report.devices.push_back(replica.device);
        ++serving;
      }
      report.kv_blocks_total += replica.blocks.total;
      report.kv_blocks_used += replica.blocks.used;
      report.kv_blocks_free += replica.blocks.free;
      report.kv_blocks_retired += replica.blocks.retired;
      report.sequences_running += replica.running;
      report.sequences_waiting += replica.waiting;
      report.sequences_preempted += replica.preempted;
      report.sequences_recomputed += replica.recomputed;
      report.sequences_moved += replica.moved_out;
      report.llm_replicas.push_back(replica);
    }
    report.state = ServiceState(serving, stats.replicas.size());
    report.preemption = std::string(PreemptionName(job.spec.preemption));
    // As for inference: moved off a replica, and run again.
    report.requeued = report.sequences_moved;
    report.rerun = report.sequences_recomputed;
    if (job.llm_load) {
      const auto load = job.llm_load->GetStats();
      report.load_sent = load.sent;
      report.load_wrong = load.wrong + load.duplicates;
      report.load_errors = load.errors;
      report.load_checked = load.checked;
      report.load_p50_ms = load.p50_ms;
      report.load_p99_ms = load.p99_ms;
    }
    report.progress = fmt::format(
        "{} served, {} sequence(s) running, {} recomputed after memory faults, {} preempted; KV "
        "blocks {} used, {} free, {} retired, on {}/{} replicas",
        report.served, report.sequences_running, report.sequences_recomputed,
        report.sequences_preempted, report.kv_blocks_used, report.kv_blocks_free,
        report.kv_blocks_retired, serving, stats.replicas.size());
  } else {
    const auto progress = job.collective->GetProgress();
    report.devices = progress.devices;
    report.state = std::string(CollectiveJob::StateName(progress.state));
    report.step = progress.step;
    report.steps = job.spec.steps;
    report.reforms = progress.reforms;
    report.grown = progress.grown;
    report.last_release_seconds = std::chrono::duration<double>(progress.last_release).count();
    // Each step was checked as it completed (CollectiveJob keeps only a
    // window of checksums: memory does not grow with the steps).
    report.checksums_match = progress.checksum_mismatches == 0;
    report.distrust_rollbacks = progress.distrust_rollbacks;
    report.steps_redone = progress.steps_redone;
    report.parts_checked = progress.cross_checks;
    report.parts_differing = progress.disagreements;
    report.parts_corrected = progress.parts_corrected;
    report.progress = fmt::format(
        "step {}/{} on {} rank(s), {} re-form(s) ({} down, {} up), checksums {}", progress.step,
        job.spec.steps, progress.devices.size(), progress.reforms, progress.reforms - progress.grown,
        progress.grown, report.checksums_match ? "ok" : "WRONG");
    if (progress.distrust_rollbacks > 0)
      report.progress += fmt::format(", {} roll-back(s) for silent corruption ({} step(s) redone)",
                                     progress.distrust_rollbacks, progress.steps_redone);
    if (progress.disagreements > 0)
      report.progress +=
          fmt::format(", {} of {} cross-checked part(s) differed ({} corrected)",
                      progress.disagreements, progress.cross_checks, progress.parts_corrected);
  }
  return report;
}

std::vector<JobReport> JobManager::Report() const {
  std::lock_guard lock(mutex_);
  std::vector<JobReport> reports;
  for (const auto& [name, job] : jobs_) reports.push_back(ReportOf(*job));
  return reports;
}

}  // namespace rasd::jobs
