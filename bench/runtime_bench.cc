// Runtime benchmarks on the simulator. Latencies are reported as p50/p99
// counters from per-operation timings; throughput-style numbers are
// reported next to a baseline measured in the same process (glibc malloc,
// memcpy, the raw driver call).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/communicator.h"
#include "rasd/runtime/runtime.h"

namespace {

using namespace std::chrono_literals;
using rasd::drivers::DeviceAddress;
using rasd::drivers::KernelArg;
using rasd::runtime::Allocation;
using rasd::runtime::Runtime;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Runtime> MakeRuntime(int devices, std::uint64_t memory = std::uint64_t{512} << 20) {
  auto driver = rasd::drivers::SimDriver::Create(
      {.device_count = devices, .memory_bytes_per_device = memory});
  auto runtime = Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 64 << 20}});
  return std::move(*runtime);
}

void ReportPercentiles(benchmark::State& state, std::vector<double>& nanos) {
  if (nanos.empty()) return;
  std::sort(nanos.begin(), nanos.end());
  state.counters["p50_ns"] = nanos[nanos.size() / 2];
  state.counters["p99_ns"] = nanos[nanos.size() * 99 / 100];
}

// Times each call of `enqueue` on a fresh single-device runtime. The
// stream is synchronized every 1024 enqueues, untimed, so the queue stays
// short.
template <typename Enqueue>
void TimeEnqueues(benchmark::State& state, Enqueue enqueue) {
  auto runtime = MakeRuntime(1);
  auto stream = std::move(*runtime->CreateStream(0));
  std::vector<double> samples;
  samples.reserve(1 << 20);
  int batch = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    auto status = enqueue(*runtime, *stream);
    const auto end = Clock::now();
    benchmark::DoNotOptimize(status);
    samples.push_back(std::chrono::duration<double, std::nano>(end - start).count());
    if (++batch == 1024) {
      state.PauseTiming();
      (void)stream->Synchronize(10s);
      batch = 0;
      state.ResumeTiming();
    }
  }
  ReportPercentiles(state, samples);
}

// Enqueue of a no-op kernel through the runtime: gate check, registry
// check, driver enqueue.
void BM_StreamEnqueueNoop(benchmark::State& state) {
  TimeEnqueues(state,
               [](Runtime&, rasd::runtime::Stream& stream) { return stream.Launch("empty", {}); });
}
BENCHMARK(BM_StreamEnqueueNoop)->Iterations(200000);

// Baseline for the above: the raw driver call, no gate or registry check.
void BM_DriverEnqueueNoop(benchmark::State& state) {
  TimeEnqueues(state, [](Runtime& runtime, rasd::runtime::Stream& stream) {
    return runtime.Driver().LaunchKernel(stream.Handle(), "empty", {}, {});
  });
}
BENCHMARK(BM_DriverEnqueueNoop)->Iterations(200000);

// From the enqueue call to the moment the stream starts the operation (a
// callback stands in for an empty kernel: it runs exactly where the kernel
// would start). range(0) = 0: the worker is still spinning from the last
// operation; 1: the worker has gone to sleep (a futex wake-up is needed).
void BM_EnqueueToStart(benchmark::State& state) {
  const bool cold = state.range(0) == 1;
  auto runtime = MakeRuntime(1);
  auto stream = std::move(*runtime->CreateStream(0));
  std::vector<double> samples;
  std::atomic<std::int64_t> started_at{0};
  for (auto _ : state) {
    state.PauseTiming();
    (void)stream->Synchronize(10s);
    if (cold) std::this_thread::sleep_for(300us);  // longer than the 50 us spin
    started_at.store(0);
    state.ResumeTiming();
    const auto enqueued = Clock::now();
    (void)stream->AddCallback([&](const rasd::Status&) {
      started_at.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    });
    while (started_at.load(std::memory_order_acquire) == 0) {
    }
    samples.push_back(static_cast<double>(started_at.load() - enqueued.time_since_epoch().count()));
  }
  ReportPercentiles(state, samples);
}
BENCHMARK(BM_EnqueueToStart)->Arg(0)->Arg(1)->Iterations(3000);

// Pool allocate + free of one size, hitting the cache, on one stream.
void BM_PoolAllocFree(benchmark::State& state) {
  auto runtime = MakeRuntime(1);
  auto stream = std::move(*runtime->CreateStream(0));
  auto& pool = **runtime->Pool(0);
  const auto bytes = static_cast<std::uint64_t>(state.range(0));
  auto warm = pool.Allocate(bytes, *stream);
  (void)pool.Free(*warm);
  for (auto _ : state) {
    auto allocation = pool.Allocate(bytes, *stream);
    benchmark::DoNotOptimize(allocation->address);
    (void)pool.Free(*allocation);
  }
  (void)stream->Synchronize(10s);
}
BENCHMARK(BM_PoolAllocFree)->RangeMultiplier(16)->Range(256, 1 << 20);

// Baseline: glibc malloc + free of the same sizes.
void BM_MallocFree(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(bytes);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_MallocFree)->RangeMultiplier(16)->Range(256, 1 << 20);

// 8-rank AllReduce of 4 MiB per rank, against a memcpy of the same bytes.
void BM_AllReduce8x4MiB(benchmark::State& state) {
  auto runtime = MakeRuntime(8);
  std::vector<int> devices(8);
  std::iota(devices.begin(), devices.end(), 0);
  auto communicator = std::move(*rasd::runtime::Communicator::Create(*runtime, devices));
  const std::uint64_t bytes = 4 << 20;
  std::vector<Allocation> buffers;
  std::vector<DeviceAddress> addresses;
  for (int r = 0; r < 8; ++r) {
    buffers.push_back(*(*runtime->Pool(r))->Allocate(bytes, communicator->RankStream(r)));
    addresses.push_back(buffers.back().address);
    const KernelArg fill[] = {KernelArg::Address(addresses.back()), KernelArg::Int(bytes / 4),
                              KernelArg::Float(1.0f)};
    (void)communicator->RankStream(r).Launch("fill", fill);
  }
  (void)communicator->Synchronize(10s);
  double allreduce_ns = 0;
  for (auto _ : state) {
    const auto started = Clock::now();
    (void)communicator->AllReduce(addresses, bytes / 4);
    auto status = communicator->Synchronize(60s);
    allreduce_ns += std::chrono::duration<double, std::nano>(Clock::now() - started).count();
    if (!status) state.SkipWithError(status.error().message.c_str());
  }
  // The baseline, timed here in the same process.
  std::vector<char> from(bytes, 1), to(bytes);
  const auto start = Clock::now();
  const int copies = 50;
  for (int i = 0; i < copies; ++i) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
  }
  const double memcpy_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() / copies;
  state.counters["memcpy_4MiB_ns"] = memcpy_ns;
  state.counters["allreduce_over_memcpy"] =
      allreduce_ns / static_cast<double>(state.iterations()) / memcpy_ns;
  for (int r = 0; r < 8; ++r) (void)(*runtime->Pool(r))->Free(buffers[static_cast<std::size_t>(r)]);
}
BENCHMARK(BM_AllReduce8x4MiB)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
