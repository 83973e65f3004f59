// Device liveness on the simulator, with the daemon's DeviceHeartbeat on a
// real event loop.
//
// BM_HangToReport: a device with work in flight (a job's stream that
// keeps launching kernels) stops completing work (InjectHang); from the
// injection to the hang report, p50/p99 in ms and as a multiple of the
// heartbeat period. The ratios are the defaults' (period 250 ms, deadline
// 0.8 of it, 2 misses, idle period 60 s): within a period and two
// deadlines, 2.6 periods; beside it the earlier default deadline (2
// periods). The hang lands at a random phase of the period.
//
// BM_HeartbeatCost: the process's CPU time over 5 s with the heartbeat on
// 4 devices (period 50 ms, paced by the loop's timer accuracy) against the same 5 s with it off, in
// the same process: CPU per beat, and what that costs per device per hour at the default period (1
// s); beats per second.

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <functional>

#include "device_heartbeat.h"
#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/drivers_shim/sim_driver.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using rasd::daemon::DeviceHeartbeat;

struct Setup {
  rasd::drivers::SimDriver* sim = nullptr;
  std::unique_ptr<rasd::runtime::Runtime> runtime;
  std::unique_ptr<rasd::common::EventLoop> loop;
};

Setup Make(int devices) {
  Setup made;
  auto driver = rasd::drivers::SimDriver::Create(
      {.device_count = devices, .memory_bytes_per_device = 16 << 20});
  made.sim = driver->get();
  made.runtime = std::move(*rasd::runtime::Runtime::Create(std::move(*driver),
                                                           {.pool = {.arena_bytes = 4 << 20}}));
  made.loop = std::move(*rasd::common::CreateSdEventLoop(std::make_shared<rasd::common::SystemClock>()));
  return made;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(values.size() * p))];
}

double CpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

void BM_HangToReport(benchmark::State& state) {
  constexpr auto kPeriod = 250ms;
  std::vector<double> latency_ms;
  for (auto _ : state) {
    Setup setup = Make(2);
    DeviceHeartbeat heartbeat(*setup.loop, *setup.runtime,
                              {.period = kPeriod,
                               .deadline = kPeriod * state.range(0) / 100,
                               .misses = 2,
                               .idle_period = 60s});
    // The job: its own stream on device 1, a kernel every 5 ms until the
    // device stops taking them.
    auto job = setup.runtime->CreateStream(1, {.owner = "job-1"});
    if (!job) {
      state.SkipWithError("no job stream");
      return;
    }
    std::unique_ptr<rasd::common::Timer> work;
    work = setup.loop->CreateTimer([&] {
      (void)(*job)->Launch("empty", {});
      work->ArmAfter(5ms);
    });
    work->ArmAfter(0ms);
    Clock::time_point injected{}, reported{};
    const int subscription = setup.runtime->SubscribeErrors(
        [&](const rasd::drivers::DriverErrorEvent& event) {
          if (event.kind != rasd::drivers::DriverErrorKind::kHang) return;
          reported = Clock::now();
          setup.loop->Post([&] { setup.loop->Exit(0); });
        });
    heartbeat.Start();
    // (One Run per loop: sd-event does not run again.)
    auto inject = setup.loop->CreateTimer([&] {
      injected = Clock::now();
      (void)setup.sim->InjectHang(1);
    });
    inject->SetSlack(0ns);
    inject->ArmAfter(600ms + std::chrono::microseconds(std::rand() % 250'000));
    auto give_up = setup.loop->CreateTimer([&] { setup.loop->Exit(1); });
    give_up->ArmAfter(5s);
    setup.loop->Run();
    setup.runtime->Unsubscribe(subscription);
    if (reported > injected)
      latency_ms.push_back(std::chrono::duration<double, std::milli>(reported - injected).count());
    work.reset();
    (void)(*job)->Abort("bench over");
    job->reset();
    (void)setup.runtime->Driver().ResetDevice(1);
  }
  const double period_ms = std::chrono::duration<double, std::milli>(kPeriod).count();
  state.counters["hang_to_report_p50_ms"] = Percentile(latency_ms, 0.5);
  state.counters["hang_to_report_p99_ms"] = Percentile(latency_ms, 0.99);
  state.counters["hang_to_report_max_ms"] = Percentile(latency_ms, 1.0);
  state.counters["p50_in_periods"] = Percentile(latency_ms, 0.5) / period_ms;
  state.counters["p99_in_periods"] = Percentile(latency_ms, 0.99) / period_ms;
  state.counters["max_in_periods"] = Percentile(latency_ms, 1.0) / period_ms;
  state.counters["reported"] = static_cast<double>(latency_ms.size());
}
// The argument: the deadline in hundredths of the period. 80 is today's
// default; 200 the earlier one (2 s against 1 s), the baseline beside it.
BENCHMARK(BM_HangToReport)
    ->Arg(80)
    ->Arg(200)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_HeartbeatCost(benchmark::State& state) {
  constexpr int kDevices = 4;
  constexpr auto kSpan = 5000ms;
  for (auto _ : state) {
    Setup setup = Make(kDevices);
    // The baseline first: the same loop and devices, no heartbeat; then the
    // heartbeat for as long. One Run of the loop for both.
    DeviceHeartbeat heartbeat(*setup.loop, *setup.runtime,
                              {.period = 50ms, .deadline = 2000ms, .misses = 2});
    double idle = 0, beating = 0;
    const double idle_start = CpuSeconds();
    double beating_start = 0;
    auto switch_on = setup.loop->CreateTimer([&] {
      idle = CpuSeconds() - idle_start;
      beating_start = CpuSeconds();
      heartbeat.Start();
    });
    switch_on->ArmAfter(kSpan);
    auto stop = setup.loop->CreateTimer([&] {
      beating = CpuSeconds() - beating_start;
      setup.loop->Exit(0);
    });
    stop->ArmAfter(2 * kSpan);
    setup.loop->Run();
    std::uint64_t beats = 0;
    for (const auto& stats : heartbeat.Stats()) beats += stats.beats;
    const double per_beat = beats > 0 ? (beating - idle) / static_cast<double>(beats) : 0;
    state.counters["beats_per_second"] =
        static_cast<double>(beats) / std::chrono::duration<double>(kSpan).count();
    state.counters["cpu_us_per_beat"] = per_beat * 1e6;
    // At the default period (1 s): 3600 beats per device per hour.
    state.counters["cpu_s_per_device_hour_at_1s"] = per_beat * 3600;
    state.counters["idle_cpu_s"] = idle;
    state.counters["beating_cpu_s"] = beating;
  }
}
BENCHMARK(BM_HeartbeatCost)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
