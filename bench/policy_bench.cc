// Policy benchmarks. Decide() per event over a mixed stream (thresholded
// CE on many pages, UCE, INFO), against copying the event as the baseline
// in the same process. And the daemon's reaction path end to end: a sticky
// fault injected into the simulator, reported on its driver thread, handed
// to the acting thread (as the eventfd hands it to the loop), converted,
// stored, decided and carried out until the device's gate is closed; p50
// and p99 over 10k faults.

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>

#include "actuator.h"
#include "ras_ingest.h"
#include "rasd/common/logging.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/ras/driver_events.h"
#include "rasd/ras/policy.h"

namespace {

using namespace std::chrono_literals;

std::vector<rasd::ras::RasEvent> MixedEvents() {
  std::vector<rasd::ras::RasEvent> events;
  for (int i = 0; i < 4096; ++i) {
    rasd::ras::RasEvent event;
    event.origin = "sim";
    event.device = i % 8;
    switch (i % 8) {
      case 0:
        event.severity = rasd::ras::Severity::kUce;
        break;
      case 1:
        event.severity = rasd::ras::Severity::kInfo;
        event.device.reset();
        break;
      default:
        event.severity = rasd::ras::Severity::kCe;
        event.address = rasd::ras::Address::Of(0x10000000 + (i % 512) * 4096);
    }
    events.push_back(std::move(event));
  }
  return events;
}

void BM_CopyEventBaseline(benchmark::State& state) {
  const auto events = MixedEvents();
  std::size_t i = 0;
  for (auto _ : state) {
    rasd::ras::RasEvent copy = events[i++ % events.size()];
    benchmark::DoNotOptimize(copy);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CopyEventBaseline);

void BM_PolicyDecide(benchmark::State& state) {
  const auto events = MixedEvents();
  rasd::ras::PolicyEngine engine;
  std::size_t i = 0;
  std::int64_t now = 0;
  for (auto _ : state) {
    auto actions =
        engine.Decide(events[i++ % events.size()], std::chrono::nanoseconds(now += 1000));
    benchmark::DoNotOptimize(actions);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PolicyDecide);

void BM_FaultToGateClosed(benchmark::State& state) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("rasd-policy-bench-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "host");
  {
    rasd::common::HostEnv host(dir / "host", std::make_shared<rasd::common::SystemClock>());
    auto store = std::move(*rasd::ras::StateStore::Open(dir / "state"));
    auto driver =
        rasd::drivers::SimDriver::Create({.device_count = 2, .memory_bytes_per_device = 64 << 20});
    auto* sim = driver->get();
    auto runtime = std::move(*rasd::runtime::Runtime::Create(std::move(*driver)));
    rasd::ras::PolicyEngine policy;
    rasd::common::SimulatedEventLoop loop;
    rasd::daemon::DeviceHealth health(loop, *runtime, *store);
    rasd::daemon::NodeFault node_fault(*store, loop.GetClock());
    rasd::daemon::Actuator actuator(host, *store, *runtime, health, node_fault, {});
    std::mutex mutex;
    std::condition_variable arrived;
    std::deque<rasd::drivers::DriverErrorEvent> queue;
    const int subscription = runtime->SubscribeErrors([&](const auto& event) {
      std::lock_guard lock(mutex);
      queue.push_back(event);
      arrived.notify_one();
    });
    rasd::runtime::Device& device = **runtime->GetDevice(1);
    std::vector<double> nanos, written_nanos;
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      (void)sim->InjectStickyFault(1);
      rasd::drivers::DriverErrorEvent report;
      {
        std::unique_lock lock(mutex);
        arrived.wait(lock, [&] { return !queue.empty(); });
        report = queue.front();
        queue.pop_front();
      }
      const std::vector<rasd::ras::RasEvent> events = {rasd::ras::EventFromDriver(
          report, runtime->DriverName(), rasd::ras::CodeTable::Default())};
      // As RasPipeline::Handle does: act, then one transaction for the
      // event and everything the actions write.
      for (const auto& action : policy.Decide(events[0], start.time_since_epoch())) {
        actuator.Apply(action, events[0], 0);
      }
      const auto closed = std::chrono::steady_clock::now();
      rasd::ras::StoreBatch batch;
      batch.events = events;
      actuator.TakePending(batch);
      health.TakePending(batch);
      (void)store->Commit(batch);
      health.Committed();
      written_nanos.push_back(
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
              .count());
      if (device.Health() != rasd::runtime::HealthState::kIsolated) {
        state.SkipWithError("the gate did not close");
        break;
      }
      nanos.push_back(std::chrono::duration<double, std::nano>(closed - start).count());
      state.PauseTiming();
      (void)sim->ResetDevice(1);
      (void)health.Decide({.device = 1,
                           .cause = rasd::daemon::HealthCause::kOperator,
                           .target = rasd::runtime::HealthState::kHealthy,
                           .reason = "bench"});
      state.ResumeTiming();
    }
    runtime->Unsubscribe(subscription);
    if (!nanos.empty()) {
      std::sort(nanos.begin(), nanos.end());
      state.counters["p50_us"] = nanos[nanos.size() / 2] / 1000;
      state.counters["p99_us"] = nanos[nanos.size() * 99 / 100] / 1000;
      std::sort(written_nanos.begin(), written_nanos.end());
      state.counters["stored_p50_us"] = written_nanos[written_nanos.size() / 2] / 1000;
      state.counters["stored_p99_us"] = written_nanos[written_nanos.size() * 99 / 100] / 1000;
    }
  }
  fs::remove_all(dir);
}
BENCHMARK(BM_FaultToGateClosed)->Iterations(10000)->Unit(benchmark::kMicrosecond);

}  // namespace
