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

#include <benchmark/benchmark.h>

#include <algorithm>
#include <thread>

#include "rasd/common/logging.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/jobs/collective_job.h"
#include "rasd/jobs/inference_service.h"
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

}  // namespace
