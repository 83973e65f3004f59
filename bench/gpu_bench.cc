// The runtime on the CUDA backend: launch round trip, enqueue cost next to
// the raw driver call, pool allocation next to cuMemAlloc/cuMemFree, and an
// AllReduce over every GPU. Needs an NVIDIA GPU and driver: without one
// each benchmark is skipped with the reason. RASD_CUDA_LIBRARY names
// another libcuda (the test tree's stand-in checks this file's code paths
// on machines without a GPU; its figures mean nothing).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "rasd/drivers_shim/cuda_driver.h"
#include "rasd/runtime/communicator.h"
#include "rasd/runtime/runtime.h"

namespace {

using namespace std::chrono_literals;
using rasd::runtime::Runtime;
using Clock = std::chrono::steady_clock;

// One runtime for the whole process: creating CUDA contexts is slow.
Runtime* SharedRuntime(std::string* why) {
  static std::string failure;
  static std::unique_ptr<Runtime> runtime = [] {
    const char* library = std::getenv("RASD_CUDA_LIBRARY");
    auto driver = rasd::drivers::CudaDriver::Create(
        {.library = library != nullptr ? library : "libcuda.so.1"});
    if (!driver) {
      failure = "no CUDA GPU: " + driver.error().message;
      return std::unique_ptr<Runtime>();
    }
    auto created = Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 256 << 20}});
    if (!created) {
      failure = created.error().ToString();
      return std::unique_ptr<Runtime>();
    }
    return std::move(*created);
  }();
  *why = failure;
  return runtime.get();
}

void ReportPercentiles(benchmark::State& state, std::vector<double>& nanos) {
  if (nanos.empty()) return;
  std::sort(nanos.begin(), nanos.end());
  state.counters["p50_ns"] = nanos[nanos.size() / 2];
  state.counters["p99_ns"] = nanos[nanos.size() * 99 / 100];
}

#define RASD_NEED_GPU(runtime)                                 \
  std::string why;                                             \
  Runtime* runtime = SharedRuntime(&why);                      \
  if (runtime == nullptr || runtime->DeviceCount() == 0) {     \
    state.SkipWithError(why.empty() ? "no GPU" : why.c_str()); \
    return;                                                    \
  }

// An empty kernel launched and waited for: the round trip a job's step pays.
void BM_GpuLaunchRoundTrip(benchmark::State& state) {
  RASD_NEED_GPU(runtime);
  auto stream = std::move(*runtime->CreateStream(0));
  std::vector<double> samples;
  for (auto _ : state) {
    const auto start = Clock::now();
    (void)stream->Launch("empty", {});
    (void)stream->Synchronize(10s);
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
  }
  ReportPercentiles(state, samples);
}
BENCHMARK(BM_GpuLaunchRoundTrip)->Iterations(5000);

// Enqueue only (synchronized every 1024, untimed): through the runtime
// (gate and registry checks) and, as the baseline, the raw driver call.
template <typename Enqueue>
void TimeEnqueues(benchmark::State& state, Enqueue enqueue) {
  RASD_NEED_GPU(runtime);
  auto stream = std::move(*runtime->CreateStream(0));
  std::vector<double> samples;
  int batch = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    auto status = enqueue(*runtime, *stream);
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
    benchmark::DoNotOptimize(status);
    if (++batch == 1024) {
      state.PauseTiming();
      (void)stream->Synchronize(10s);
      batch = 0;
      state.ResumeTiming();
    }
  }
  (void)stream->Synchronize(10s);
  ReportPercentiles(state, samples);
}
void BM_GpuStreamEnqueue(benchmark::State& state) {
  TimeEnqueues(state,
               [](Runtime&, rasd::runtime::Stream& stream) { return stream.Launch("empty", {}); });
}
BENCHMARK(BM_GpuStreamEnqueue)->Iterations(50000);
void BM_GpuDriverEnqueue(benchmark::State& state) {
  TimeEnqueues(state, [](Runtime& runtime, rasd::runtime::Stream& stream) {
    return runtime.Driver().LaunchKernel(stream.Handle(), "empty", {}, {});
  });
}
BENCHMARK(BM_GpuDriverEnqueue)->Iterations(50000);

// A pool hit (allocate + free of a cached size) and, as the baseline, a
// reservation straight from the driver (cuMemAlloc + cuMemFree).
void BM_GpuPoolHit(benchmark::State& state) {
  RASD_NEED_GPU(runtime);
  auto stream = std::move(*runtime->CreateStream(0));
  auto& pool = **runtime->Pool(0);
  const auto bytes = static_cast<std::uint64_t>(state.range(0));
  auto warm = pool.Allocate(bytes, *stream);
  if (warm) (void)pool.Free(*warm);
  for (auto _ : state) {
    auto allocation = pool.Allocate(bytes, *stream);
    benchmark::DoNotOptimize(allocation->address);
    (void)pool.Free(*allocation);
  }
  (void)stream->Synchronize(10s);
}
BENCHMARK(BM_GpuPoolHit)->Arg(4096)->Arg(1 << 20);
void BM_GpuDriverAllocFree(benchmark::State& state) {
  RASD_NEED_GPU(runtime);
  const auto bytes = static_cast<std::uint64_t>(state.range(0));
  for (auto _ : state) {
    auto base = runtime->Driver().ReserveMemory(0, bytes);
    benchmark::DoNotOptimize(base);
    if (base) (void)runtime->Driver().ReleaseMemory(0, *base);
  }
}
BENCHMARK(BM_GpuDriverAllocFree)->Arg(4096)->Arg(1 << 20);

// AllReduce of range(0) floats over every GPU (one rank each).
void BM_GpuAllReduce(benchmark::State& state) {
  RASD_NEED_GPU(runtime);
  if (runtime->DeviceCount() < 2) {
    state.SkipWithError("one GPU: no AllReduce to measure");
    return;
  }
  std::vector<int> devices;
  for (int d = 0; d < static_cast<int>(runtime->DeviceCount()); ++d) devices.push_back(d);
  auto communicator = std::move(*rasd::runtime::Communicator::Create(*runtime, devices));
  const auto count = static_cast<std::uint64_t>(state.range(0));
  std::vector<rasd::runtime::Allocation> buffers;
  std::vector<rasd::drivers::DeviceAddress> addresses;
  for (int r = 0; r < communicator->Size(); ++r) {
    buffers.push_back(*(*runtime->Pool(r))->Allocate(count * 4, communicator->RankStream(r)));
    addresses.push_back(buffers.back().address);
  }
  for (auto _ : state) {
    (void)communicator->AllReduce(addresses, count);
    (void)communicator->Synchronize(30s);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * count * 4));
  for (int r = 0; r < communicator->Size(); ++r)
    (void)(*runtime->Pool(r))->Free(buffers[static_cast<std::size_t>(r)]);
}
BENCHMARK(BM_GpuAllReduce)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
