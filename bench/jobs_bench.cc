// Scenario benchmarks of the jobs, on the simulator.
//
// BM_CollectiveRankLost: a collective over 4 devices loses a rank (fall off
// the bus, then isolated as the policy does); from the injection to every
// rank of the old communicator released, and to the re-formed
// communicator's first AllReduce done. Each iteration is a fresh runtime.
//
// BM_CollectiveGrowsBack: see below.
//
// BM_InferenceDrainUnderLoad: an inference service over 4 devices under a
// steady load; one device is drained. Requests lost, and latency p99 during
// the second after the drain against the second before it (the baseline
// in the same run).
//
// BM_LlmPagedAgainstContiguous: the LLM service on one device, the same
// 192 requests (prompts of 8 to 200 tokens and answers of 16 to 128,
// skewed short as chat traffic is) through a paged KV cache (16-token
// blocks) and through contiguous per-request buffers sized to the model's
// 512 positions (one 512-token block per sequence: the baseline), in the
// same KV memory (2 MiB). Sequences served at once (peak), tokens per
// second, and answers that differ from the host reference; medians of 3
// runs each, the ratio paged / contiguous.
//
// BM_LlmSrarUnderLoad and BM_LlmDrainUnderLoad: the LLM service under an
// open-loop chat load (Poisson arrivals, the same seeded trace in every
// run). Halfway through, poison lands in a KV block in use (one device), or
// one of two devices is drained. Each is paired with a fault-free run of
// the same trace, alternated 3 times; medians. Latency is compared over
// the requests that arrive from 200 ms before the fault to 1 s after it,
// the same requests in both runs; for the SRAR, the sequences on the
// poisoned block are left out of both (they pay a recompute by design).
//
// BM_LlmTraceFragmentation: an LLM-inference allocation trace on one device
// of the simulator, its KV cache through the real block allocator
// (KvBlockPool over one pool allocation, 16-token blocks) and, as the
// baseline in the same process, through one pool allocation per sequence
// sized to the model's positions. Weights live throughout; activations
// sized by the batch come and go every step. The same sequences arrive
// (chat-shaped lengths, more than fit at once); each step adds a token to
// every running one. Per scheme: sequences at once, the KV bytes holding
// tokens over the KV bytes set aside for them (median over steps), the
// pool's reserved over allocated bytes at its peak, and the steps taken to
// serve them all.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "rasd/common/logging.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/jobs/collective_job.h"
#include "rasd/jobs/inference_service.h"
#include "rasd/jobs/kv_block_pool.h"
#include "rasd/jobs/llm_service.h"
#include "rasd/jobs/load_generator.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Sim {
  rasd::drivers::SimDriver* sim = nullptr;
  std::unique_ptr<rasd::runtime::Runtime> runtime;
};

Sim MakeSim() {
  Sim made;
  auto driver =
      rasd::drivers::SimDriver::Create({.device_count = 4, .memory_bytes_per_device = 64 << 20});
  made.sim = driver->get();
  made.runtime = std::move(
      *rasd::runtime::Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 8 << 20}}));
  return made;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(values.size() * p))];
}

void BM_CollectiveRankLost(benchmark::State& state) {
  std::vector<double> release_ms, recovery_ms;
  const auto clock = std::make_shared<rasd::common::SystemClock>();
  for (auto _ : state) {
    state.PauseTiming();
    Sim sim = MakeSim();
    auto job =
        std::move(*rasd::jobs::CollectiveJob::Create(*sim.runtime, {.id = "allreduce",
                                                                    .devices = {0, 1, 2, 3},
                                                                    .elements = 1 << 14,
                                                                    .steps = 1'000'000,
                                                                    .checkpoint_every = 10,
                                                                    .clock = clock}));
    while (job->GetProgress().step < 20) std::this_thread::sleep_for(100us);
    state.ResumeTiming();
    const auto injected = clock->Monotonic();
    (void)sim.sim->InjectFallOffBus(2);
    (**sim.runtime->GetDevice(2)).SetHealth(rasd::runtime::HealthState::kIsolated);
    job->Reconsider();
    while (job->GetProgress().recovered_at < injected) std::this_thread::sleep_for(50us);
    const auto progress = job->GetProgress();
    state.PauseTiming();
    release_ms.push_back(
        std::chrono::duration<double, std::milli>(progress.released_at - injected).count());
    recovery_ms.push_back(
        std::chrono::duration<double, std::milli>(progress.recovered_at - injected).count());
    job.reset();
    state.ResumeTiming();
  }
  state.counters["released_p50_ms"] = Percentile(release_ms, 0.5);
  state.counters["released_p99_ms"] = Percentile(release_ms, 0.99);
  state.counters["reformed_and_reduced_p50_ms"] = Percentile(recovery_ms, 0.5);
  state.counters["reformed_and_reduced_p99_ms"] = Percentile(recovery_ms, 0.99);
}
BENCHMARK(BM_CollectiveRankLost)->Iterations(100)->Unit(benchmark::kMillisecond);

// BM_CollectiveGrowsBack: a collective over 4 devices shrinks to 3 when one
// drains; the device is returned to service; from then to the job running
// on 4 ranks again (it grows at its next checkpoint, every 10 steps).
void BM_CollectiveGrowsBack(benchmark::State& state) {
  std::vector<double> grow_ms;
  for (auto _ : state) {
    state.PauseTiming();
    Sim sim = MakeSim();
    auto job =
        std::move(*rasd::jobs::CollectiveJob::Create(*sim.runtime, {.id = "allreduce",
                                                                    .devices = {0, 1, 2, 3},
                                                                    .elements = 1 << 14,
                                                                    .steps = 1'000'000,
                                                                    .checkpoint_every = 10}));
    while (job->GetProgress().step < 20) std::this_thread::sleep_for(100us);
    (**sim.runtime->GetDevice(1)).SetHealth(rasd::runtime::HealthState::kDraining);
    while (job->GetProgress().devices.size() != 3) std::this_thread::sleep_for(100us);
    state.ResumeTiming();
    const auto returned = Clock::now();
    (**sim.runtime->GetDevice(1)).SetHealth(rasd::runtime::HealthState::kHealthy);
    while (job->GetProgress().devices.size() != 4) std::this_thread::sleep_for(50us);
    state.PauseTiming();
    grow_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - returned).count());
    job.reset();
    state.ResumeTiming();
  }
  state.counters["grown_back_p50_ms"] = Percentile(grow_ms, 0.5);
  state.counters["grown_back_p99_ms"] = Percentile(grow_ms, 0.99);
}
BENCHMARK(BM_CollectiveGrowsBack)->Iterations(30)->Unit(benchmark::kMillisecond);

void BM_InferenceDrainUnderLoad(benchmark::State& state) {
  for (auto _ : state) {
    Sim sim = MakeSim();
    auto service = std::move(*rasd::jobs::InferenceService::Create(
        *sim.runtime, {.id = "llm", .devices = {0, 1, 2, 3}, .drain_deadline = 5s}));
    rasd::jobs::LoadGenerator load(*service, rasd::jobs::MlpModel{}, 2000);
    std::this_thread::sleep_for(1s);
    const auto steady_from = service->GetClock().Monotonic() - 900ms;
    const auto drained_at = service->GetClock().Monotonic();
    const auto steady = load.GetStats(steady_from);
    (**sim.runtime->GetDevice(1)).SetHealth(rasd::runtime::HealthState::kDraining);
    service->Reconsider();
    std::this_thread::sleep_for(1s);
    load.Stop(10s);
    const auto during = load.GetStats(drained_at);
    state.counters["requests"] = static_cast<double>(during.sent);
    state.counters["lost"] =
        static_cast<double>(during.unanswered + during.errors + during.duplicates + during.wrong);
    state.counters["steady_p99_ms"] = steady.p99_ms;
    state.counters["drain_p99_ms"] = during.p99_ms;
    state.counters["p99_ratio"] = steady.p99_ms > 0 ? during.p99_ms / steady.p99_ms : 0;
  }
}
BENCHMARK(BM_InferenceDrainUnderLoad)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

struct LlmRun {
  double tokens_per_s = 0;
  double peak_sequences = 0;
  double wrong = 0;
  double preempted = 0, swapped_out = 0;
};

struct LlmRequest {
  std::vector<int> prompt;
  int wanted = 0;
};

std::vector<LlmRequest> ChatRequests(const rasd::jobs::DecoderModel& model) {
  std::mt19937 random(5);
  // Skewed short: most prompts and answers short, a long tail.
  std::lognormal_distribution<double> prompt_length(3.6, 0.8), answer_length(3.7, 0.6);
  std::vector<LlmRequest> requests(192);
  for (auto& request : requests) {
    request.prompt.resize(static_cast<std::size_t>(std::clamp(prompt_length(random), 8.0, 200.0)));
    for (int& token : request.prompt)
      token = std::uniform_int_distribution<int>(0, model.vocab - 1)(random);
    request.wanted = static_cast<int>(std::clamp(answer_length(random), 16.0, 128.0));
  }
  return requests;
}

LlmRun RunLlm(const std::vector<LlmRequest>& requests, std::uint32_t tokens_per_block,
              std::uint64_t kv_bytes = 2 << 20,
              rasd::jobs::Preemption preemption = rasd::jobs::Preemption::kRecompute) {
  Sim sim = MakeSim();
  rasd::jobs::DecoderModel model;
  auto service =
      std::move(*rasd::jobs::LlmService::Create(*sim.runtime, {.devices = {0},
                                                               .model = model,
                                                               .kv_bytes_per_device = kv_bytes,
                                                               .tokens_per_block = tokens_per_block,
                                                               .max_batch_sequences = 128,
                                                               .max_batch_tokens = 4096,
                                                               .preemption = preemption}));
  std::mutex mutex;
  std::condition_variable all_done;
  std::map<std::uint64_t, std::vector<int>> answers;
  std::map<std::uint64_t, const LlmRequest*> ids;
  const auto start = Clock::now();
  {
    std::lock_guard lock(mutex);
    for (const auto& request : requests) {
      auto id = service->Submit(request.prompt, request.wanted,
                                [&](std::uint64_t answered, rasd::jobs::LlmService::Answer answer) {
                                  std::lock_guard inner(mutex);
                                  answers[answered] = answer ? *answer : std::vector<int>{};
                                  all_done.notify_all();
                                });
      ids[*id] = &request;
    }
  }
  std::unique_lock lock(mutex);
  all_done.wait_for(lock, 300s, [&] { return answers.size() == requests.size(); });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  LlmRun run;
  double tokens = 0;
  for (const auto& [id, request] : ids) {
    tokens += request->wanted;
    // Every eighth answer against the host reference (it recomputes the
    // whole history per token: checking all would dominate the run).
    if (id % 8 == 0 && answers[id] != model.ReferenceGenerate(request->prompt, request->wanted))
      ++run.wrong;
    if (answers[id].size() != static_cast<std::size_t>(request->wanted)) ++run.wrong;
  }
  lock.unlock();
  run.tokens_per_s = tokens / seconds;
  const auto replica = service->GetStats().replicas[0];
  run.peak_sequences = static_cast<double>(replica.peak_running);
  run.preempted = static_cast<double>(replica.preempted);
  run.swapped_out = static_cast<double>(replica.swapped_out);
  return run;
}

double Median(std::vector<double> values) { return Percentile(std::move(values), 0.5); }

void BM_LlmPagedAgainstContiguous(benchmark::State& state) {
  const auto requests = ChatRequests(rasd::jobs::DecoderModel{});
  for (auto _ : state) {
    std::vector<double> paged_tps, contiguous_tps, paged_peak, contiguous_peak;
    double wrong = 0;
    for (int run = 0; run < 3; ++run) {
      // Alternated, so that a slow stretch of the machine hits both.
      const LlmRun contiguous = RunLlm(requests, 512);
      const LlmRun paged = RunLlm(requests, 16);
      contiguous_tps.push_back(contiguous.tokens_per_s);
      contiguous_peak.push_back(contiguous.peak_sequences);
      paged_tps.push_back(paged.tokens_per_s);
      paged_peak.push_back(paged.peak_sequences);
      wrong += contiguous.wrong + paged.wrong;
    }
    state.counters["contiguous_tokens_per_s"] = Median(contiguous_tps);
    state.counters["paged_tokens_per_s"] = Median(paged_tps);
    state.counters["tokens_per_s_ratio"] = Median(paged_tps) / Median(contiguous_tps);
    state.counters["contiguous_peak_sequences"] = Median(contiguous_peak);
    state.counters["paged_peak_sequences"] = Median(paged_peak);
    state.counters["peak_sequences_ratio"] = Median(paged_peak) / Median(contiguous_peak);
    state.counters["wrong"] = wrong;
  }
}
BENCHMARK(BM_LlmPagedAgainstContiguous)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

// BM_LlmPreemptionSwapAgainstRecompute: the same 192 requests through a KV
// cache of 512 KiB (a quarter of the run above: the cache fills and
// sequences are preempted), preempting by recompute (the baseline) and by
// swap to host memory; medians of 3 alternated runs each.
void BM_LlmPreemptionSwapAgainstRecompute(benchmark::State& state) {
  const auto requests = ChatRequests(rasd::jobs::DecoderModel{});
  for (auto _ : state) {
    std::vector<double> recompute_tps, swap_tps, recompute_preempted, swap_preempted, swapped;
    double wrong = 0;
    for (int run = 0; run < 3; ++run) {
      const LlmRun recompute = RunLlm(requests, 16, 512 << 10, rasd::jobs::Preemption::kRecompute);
      const LlmRun swap = RunLlm(requests, 16, 512 << 10, rasd::jobs::Preemption::kSwap);
      recompute_tps.push_back(recompute.tokens_per_s);
      swap_tps.push_back(swap.tokens_per_s);
      recompute_preempted.push_back(recompute.preempted);
      swap_preempted.push_back(swap.preempted);
      swapped.push_back(swap.swapped_out);
      wrong += recompute.wrong + swap.wrong;
    }
    state.counters["recompute_tokens_per_s"] = Median(recompute_tps);
    state.counters["swap_tokens_per_s"] = Median(swap_tps);
    state.counters["tokens_per_s_ratio"] = Median(swap_tps) / Median(recompute_tps);
    state.counters["recompute_preempted"] = Median(recompute_preempted);
    state.counters["swap_preempted"] = Median(swap_preempted);
    state.counters["swapped_out"] = Median(swapped);
    state.counters["wrong"] = wrong;
  }
}
BENCHMARK(BM_LlmPreemptionSwapAgainstRecompute)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

struct TracedRequest {
  LlmRequest request;
  Clock::duration arrival{};  // from the start of the run
};

// Poisson arrivals at `per_second` for `seconds`, chat-shaped requests.
std::vector<TracedRequest> ChatTrace(const rasd::jobs::DecoderModel& model, double per_second,
                                     double seconds) {
  std::mt19937 random(11);
  std::exponential_distribution<double> gap(per_second);
  std::vector<TracedRequest> trace;
  const auto requests = ChatRequests(model);
  double at = 0;
  for (std::size_t i = 0; (at += gap(random)) < seconds; ++i) {
    trace.push_back({.request = requests[i % requests.size()],
                     .arrival = std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(at))});
  }
  return trace;
}

struct TraceResult {
  std::vector<double> latency_ms;  // per trace index; -1 when not answered
  std::set<std::size_t> affected;  // trace indexes the fault touched by design
  double lost = 0;                 // unanswered, errors, answered twice
  double wrong = 0;
  double checked = 0;
  double recomputed = 0, moved = 0;
};

// Runs `trace` through an LLM service over `devices`; `fault` runs at the
// trace's midpoint (or not at all) and names the trace indexes it affects
// by design.
TraceResult RunTrace(
    const std::vector<TracedRequest>& trace, const std::vector<int>& devices,
    const std::function<std::set<std::size_t>(
        Sim&, rasd::jobs::LlmService&, const std::map<std::uint64_t, std::size_t>&)>& fault) {
  Sim sim = MakeSim();
  const rasd::jobs::DecoderModel model;
  auto service =
      std::move(*rasd::jobs::LlmService::Create(*sim.runtime, {.devices = devices,
                                                               .model = model,
                                                               .kv_bytes_per_device = 2 << 20,
                                                               .tokens_per_block = 16,
                                                               .max_batch_sequences = 128,
                                                               .max_batch_tokens = 4096}));
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Clock::time_point> sent(trace.size()), answered(trace.size());
  std::vector<int> answer_count(trace.size(), 0);
  std::vector<rasd::jobs::LlmService::Answer> answers(trace.size());
  std::map<std::uint64_t, std::size_t> index_of;  // request id -> trace index
  std::size_t answered_total = 0;
  TraceResult result;
  const auto start = Clock::now();
  const auto midpoint = trace.empty() ? Clock::duration{} : trace.back().arrival / 2;
  bool fault_done = !fault;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (!fault_done && trace[i].arrival >= midpoint) {
      std::map<std::uint64_t, std::size_t> ids;
      {
        std::lock_guard lock(mutex);
        ids = index_of;
      }
      result.affected = fault(sim, *service, ids);
      fault_done = true;
    }
    std::this_thread::sleep_until(start + trace[i].arrival);
    std::lock_guard lock(mutex);
    sent[i] = Clock::now();
    auto id = service->Submit(trace[i].request.prompt, trace[i].request.wanted,
                              [&, i](std::uint64_t, rasd::jobs::LlmService::Answer answer) {
                                std::lock_guard inner(mutex);
                                answered[i] = Clock::now();
                                if (answer_count[i]++ == 0) ++answered_total;
                                answers[i] = std::move(answer);
                                changed.notify_all();
                              });
    if (id) index_of[*id] = i;
  }
  std::unique_lock lock(mutex);
  changed.wait_for(lock, 60s, [&] { return answered_total == trace.size(); });
  result.latency_ms.resize(trace.size(), -1);
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (answer_count[i] != 1 || !answers[i]) {
      ++result.lost;
      continue;
    }
    result.latency_ms[i] = std::chrono::duration<double, std::milli>(answered[i] - sent[i]).count();
    const auto& request = trace[i].request;
    bool wrong = answers[i]->size() != static_cast<std::size_t>(request.wanted);
    // Every affected answer and every eighth other one against the host
    // reference (which recomputes the whole history per token).
    if (!wrong && (result.affected.contains(i) || i % 8 == 0)) {
      ++result.checked;
      wrong = *answers[i] != model.ReferenceGenerate(request.prompt, request.wanted);
    }
    if (wrong) ++result.wrong;
  }
  lock.unlock();
  for (const auto& replica : service->GetStats().replicas) {
    result.recomputed += static_cast<double>(replica.recomputed);
    result.moved += static_cast<double>(replica.moved_out);
  }
  return result;
}

// p99 of the latencies of the requests arriving in [from, to) of the trace,
// less `excluded`.
double WindowP99(const std::vector<TracedRequest>& trace, const std::vector<double>& latency_ms,
                 Clock::duration from, Clock::duration to, const std::set<std::size_t>& excluded) {
  std::vector<double> window;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].arrival >= from && trace[i].arrival < to && !excluded.contains(i) &&
        latency_ms[i] >= 0)
      window.push_back(latency_ms[i]);
  }
  return Percentile(std::move(window), 0.99);
}

struct FaultPair {
  std::vector<double> faulted_p99, fault_free_p99, before_p99, ratio, affected, recomputed, moved;
  double lost = 0, wrong = 0, checked = 0, requests = 0;
};

void RunFaultPairs(
    benchmark::State& state, const std::vector<TracedRequest>& trace,
    const std::vector<int>& devices,
    const std::function<std::set<std::size_t>(
        Sim&, rasd::jobs::LlmService&, const std::map<std::uint64_t, std::size_t>&)>& fault) {
  const auto midpoint = trace.back().arrival / 2;
  const auto from = midpoint - std::chrono::milliseconds(200);
  const auto to = midpoint + std::chrono::seconds(1);
  for (auto _ : state) {
    FaultPair pair;
    for (int run = 0; run < 3; ++run) {
      const TraceResult fault_free = RunTrace(trace, devices, nullptr);
      const TraceResult faulted = RunTrace(trace, devices, fault);
      const double free_p99 = WindowP99(trace, fault_free.latency_ms, from, to, faulted.affected);
      const double faulted_p99 = WindowP99(trace, faulted.latency_ms, from, to, faulted.affected);
      pair.fault_free_p99.push_back(free_p99);
      pair.faulted_p99.push_back(faulted_p99);
      pair.before_p99.push_back(WindowP99(trace, faulted.latency_ms, from - std::chrono::seconds(1),
                                          from, faulted.affected));
      pair.ratio.push_back(free_p99 > 0 ? faulted_p99 / free_p99 : 0);
      pair.affected.push_back(static_cast<double>(faulted.affected.size()));
      pair.recomputed.push_back(faulted.recomputed);
      pair.moved.push_back(faulted.moved);
      pair.lost += faulted.lost + fault_free.lost;
      pair.wrong += faulted.wrong + fault_free.wrong;
      pair.checked += faulted.checked + fault_free.checked;
      pair.requests += static_cast<double>(2 * trace.size());
    }
    state.counters["requests"] = pair.requests;
    state.counters["lost"] = pair.lost;
    state.counters["wrong"] = pair.wrong;
    state.counters["checked"] = pair.checked;
    state.counters["affected"] = Median(pair.affected);
    state.counters["recomputed"] = Median(pair.recomputed);
    state.counters["moved"] = Median(pair.moved);
    state.counters["fault_free_p99_ms"] = Median(pair.fault_free_p99);
    state.counters["faulted_p99_ms"] = Median(pair.faulted_p99);
    state.counters["before_fault_p99_ms"] = Median(pair.before_p99);
    state.counters["p99_ratio"] = Median(pair.ratio);
  }
}

void BM_LlmSrarUnderLoad(benchmark::State& state) {
  const rasd::jobs::DecoderModel model;
  const auto trace = ChatTrace(model, 1500, 3);
  RunFaultPairs(state, trace, {0},
                [](Sim& sim, rasd::jobs::LlmService& service,
                   const std::map<std::uint64_t, std::size_t>& index_of) -> std::set<std::size_t> {
                  // The first block of the longest sequence in the cache: full, so the
                  // next step reads the poisoned row.
                  const auto blocks = service.KvBlocks(0);
                  if (!blocks) return {};
                  std::optional<rasd::drivers::DeviceAddress> target;
                  std::uint64_t longest = 0;
                  for (const auto sequence : blocks->Sequences()) {
                    const auto table = blocks->BlockTable(sequence);
                    if (!table.empty() && blocks->Tokens(sequence) > longest) {
                      longest = blocks->Tokens(sequence);
                      target = table.front();
                    }
                  }
                  if (!target) return {};
                  std::set<std::size_t> affected;
                  for (const auto sequence : blocks->SequencesOn(*target, 4096)) {
                    if (auto found = index_of.find(sequence); found != index_of.end())
                      affected.insert(found->second);
                  }
                  (void)sim.sim->InjectUncorrectedEcc(0, *target + 200);
                  return affected;
                });
}
BENCHMARK(BM_LlmSrarUnderLoad)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

void BM_LlmDrainUnderLoad(benchmark::State& state) {
  const rasd::jobs::DecoderModel model;
  const auto trace = ChatTrace(model, 1500, 3);
  RunFaultPairs(state, trace, {0, 1},
                [](Sim& sim, rasd::jobs::LlmService& service,
                   const std::map<std::uint64_t, std::size_t>&) -> std::set<std::size_t> {
                  (**sim.runtime->GetDevice(1)).SetHealth(rasd::runtime::HealthState::kDraining);
                  service.Reconsider();
                  return {};
                });
}
BENCHMARK(BM_LlmDrainUnderLoad)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

namespace {

struct FragmentationRun {
  double peak_sequences = 0;
  double kv_utilization = 0;  // median over steps
  double reserved_over_allocated = 0;
  double steps = 0;
  double preempted = 0;
  bool failed = false;
};

// Sequences of `bytes_per_token` per token (a 7B-class model in fp16 holds
// 512 KiB per token; this one is scaled down to fit the simulator), in a KV
// budget of `kv_bytes`; `paged` picks the block allocator, otherwise one
// max-length allocation per sequence.
FragmentationRun RunFragmentationTrace(bool paged) {
  constexpr std::uint64_t kBytesPerToken = 16 << 10;
  constexpr std::uint64_t kKvBytes = std::uint64_t{512} << 20;
  constexpr std::uint64_t kMaxPositions = 512;
  constexpr std::uint32_t kTokensPerBlock = 16;
  constexpr std::uint64_t kSequenceBytes = kMaxPositions * kBytesPerToken;
  auto driver = rasd::drivers::SimDriver::Create(
      {.device_count = 1, .memory_bytes_per_device = std::uint64_t{2} << 30});
  auto runtime = std::move(
      *rasd::runtime::Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 64 << 20}}));
  auto stream = std::move(*runtime->CreateStream(0));
  auto& pool = **runtime->Pool(0);
  FragmentationRun run;
  auto allocate = [&](std::uint64_t bytes) -> std::optional<rasd::runtime::Allocation> {
    auto allocation = pool.Allocate(bytes, *stream);
    if (!allocation) {
      run.failed = true;
      return std::nullopt;
    }
    return *allocation;
  };
  std::mt19937_64 random(7);
  std::vector<rasd::runtime::Allocation> weights;
  for (int i = 0; i < 12; ++i) {
    if (auto weight = allocate(((random() % 48) + 16) << 20)) weights.push_back(*weight);
  }
  std::optional<rasd::runtime::Allocation> region;
  std::optional<rasd::jobs::KvBlockPool> blocks;
  if (paged) {
    region = allocate(kKvBytes);
    if (!region) return run;
    blocks = *rasd::jobs::KvBlockPool::Create({.base = region->address,
                                               .bytes = kKvBytes,
                                               .block_bytes = kBytesPerToken * kTokensPerBlock,
                                               .tokens_per_block = kTokensPerBlock});
  }
  struct Live {
    std::uint64_t id = 0;
    std::uint64_t tokens = 0, total = 0;
    std::optional<rasd::runtime::Allocation> buffer;  // contiguous only
  };
  // 1024 chat-shaped sequences, all waiting from the start.
  std::mt19937 lengths(5);
  std::lognormal_distribution<double> prompt_length(3.6, 0.8), answer_length(3.7, 0.6);
  std::deque<Live> waiting;
  for (std::uint64_t id = 1; id <= 1024; ++id) {
    const auto prompt = static_cast<std::uint64_t>(std::clamp(prompt_length(lengths), 8.0, 200.0));
    const auto answer = static_cast<std::uint64_t>(std::clamp(answer_length(lengths), 16.0, 128.0));
    waiting.push_back({.id = id, .tokens = prompt, .total = prompt + answer});
  }
  std::vector<Live> running;
  std::uint64_t kv_reserved_contiguous = 0;
  std::vector<double> utilization;
  std::uint64_t peak_allocated = 0, reserved_at_peak = 0;
  while ((!waiting.empty() || !running.empty()) && !run.failed) {
    // Admit while the whole history fits (the paged scheme keeps a block of
    // room per running sequence for its next token).
    while (!waiting.empty()) {
      Live& next = waiting.front();
      if (paged) {
        if (blocks->BlocksFor(next.tokens) + running.size() > blocks->GetStats().free) break;
        if (!blocks->Grow(next.id, next.tokens).has_value()) break;
      } else {
        if (kv_reserved_contiguous + kSequenceBytes > kKvBytes) break;
        next.buffer = allocate(kSequenceBytes);
        if (!next.buffer) break;
        kv_reserved_contiguous += kSequenceBytes;
      }
      running.push_back(std::move(next));
      waiting.pop_front();
    }
    run.peak_sequences = std::max(run.peak_sequences, static_cast<double>(running.size()));
    // Activations for this step, by the batch's tokens.
    std::vector<rasd::runtime::Allocation> activations;
    for (int layer = 0; layer < 4 && !running.empty(); ++layer) {
      if (auto activation =
              allocate(static_cast<std::uint64_t>(running.size()) * ((random() % 96) + 32) * 1024))
        activations.push_back(*activation);
    }
    // Decode one token for every running sequence; a paged one that finds
    // no block is preempted (recompute: its blocks are freed, it waits).
    std::uint64_t tokens_held = 0;
    for (std::size_t i = 0; i < running.size();) {
      Live& sequence = running[i];
      if (paged && !blocks->Grow(sequence.id, 1).has_value()) {
        blocks->Release(sequence.id);
        ++run.preempted;
        waiting.push_front(std::move(sequence));
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++sequence.tokens;
      tokens_held += sequence.tokens;
      ++i;
    }
    const double kv_set_aside =
        paged ? static_cast<double>(blocks->GetStats().used * kTokensPerBlock * kBytesPerToken)
              : static_cast<double>(kv_reserved_contiguous);
    if (kv_set_aside > 0)
      utilization.push_back(static_cast<double>(tokens_held * kBytesPerToken) / kv_set_aside);
    const auto stats = pool.Stats();
    if (stats.allocated_bytes > peak_allocated) {
      peak_allocated = stats.allocated_bytes;
      reserved_at_peak = stats.reserved_bytes;
    }
    for (auto& activation : activations) (void)pool.Free(activation);
    // Finished sequences leave.
    for (std::size_t i = 0; i < running.size();) {
      if (running[i].tokens < running[i].total) {
        ++i;
        continue;
      }
      if (paged) {
        blocks->Release(running[i].id);
      } else {
        (void)pool.Free(*running[i].buffer);
        kv_reserved_contiguous -= kSequenceBytes;
      }
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ++run.steps;
    // Every sequence finishes in a few thousand steps even one at a time:
    // more means a scheme stopped admitting.
    if (run.steps > 100'000) run.failed = true;
  }
  run.kv_utilization = Median(utilization);
  run.reserved_over_allocated = peak_allocated > 0 ? static_cast<double>(reserved_at_peak) /
                                                         static_cast<double>(peak_allocated)
                                                   : 0;
  if (region) (void)pool.Free(*region);
  for (auto& weight : weights) (void)pool.Free(weight);
  (void)stream->Synchronize(10s);
  return run;
}

void BM_LlmTraceFragmentation(benchmark::State& state) {
  for (auto _ : state) {
    const FragmentationRun contiguous = RunFragmentationTrace(false);
    const FragmentationRun paged = RunFragmentationTrace(true);
    if (contiguous.failed || paged.failed) {
      state.SkipWithError("a scheme ran out of simulated device memory or stopped admitting");
      return;
    }
    state.counters["contiguous_peak_sequences"] = contiguous.peak_sequences;
    state.counters["paged_peak_sequences"] = paged.peak_sequences;
    state.counters["contiguous_kv_utilization"] = contiguous.kv_utilization;
    state.counters["paged_kv_utilization"] = paged.kv_utilization;
    state.counters["contiguous_steps"] = contiguous.steps;
    state.counters["paged_steps"] = paged.steps;
    state.counters["steps_ratio"] = paged.steps / contiguous.steps;
    state.counters["paged_preempted"] = paged.preempted;
    state.counters["contiguous_reserved_over_allocated_at_peak"] =
        contiguous.reserved_over_allocated;
    state.counters["paged_reserved_over_allocated_at_peak"] = paged.reserved_over_allocated;
  }
}
BENCHMARK(BM_LlmTraceFragmentation)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
