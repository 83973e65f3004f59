// Silent data corruption on the real rasd, under the demo's load.
//
// Each run starts one rasd on four simulated devices with the demo's two
// jobs: an inference service with an in-process load of 200 requests/s on
// every device, and an allreduce collective on every device, checkpointing
// every 10 steps. Screening runs at its defaults (budget 1% of the node's
// time, shared by the devices, screenings of 2^20 elements per elementwise
// kernel, 2 wrong screenings within an hour confirm).
//
// BM_SdcTimeToIsolation/<rate exponent>: after the first screening of
// every device, `rasctl inject sdc --device 2 --rate 1e-<n>` (a seed per
// repetition); the time until `rasctl devices` shows device 2 isolated is
// the figure (seconds), with the other devices' state and mismatches and
// whether the collective's checksums still equal a fault-free run's. Runs
// past kIsolationLimit are reported as such (isolated 0), not waited for.
// 1e-4 and 1e-6 run three times each (medians); 1e-8 once: each device's
// screening fails there about one time in twenty, and with the node's 1%
// shared by four devices a device is screened every 10 s or so.
//
// BM_SdcOverhead: the jobs with everything that looks for silent
// corruption at its defaults (screening's 1% budget, the jobs' cross-checks
// 1 in 100) against all of it off (budget 0, sample_one_in 0), each a fresh
// rasd, alternated five times in this process: the collective's steps per
// second (closed loop: its capacity) and the inference load's answers per
// second and p99 latency (open loop at 200/s) over a 30 s window after a
// 30 s warm-up (the first screenings come about 20 s after the start), and
// the budget the devices measured together (budget_used, the node's share,
// over the time since rasd started: the 20 s before the first screening
// included, so it reads low).
// Medians; steps_ratio_on_off is the median of the five pairs' ratios, so
// a drift of the machine over the run cancels within each pair.
// Needs no root: everything lives in a temp dir.

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using rasd::testing::RasdInstance;

constexpr auto kIsolationLimit = 900s;
constexpr auto kWarmUp = 30s;
constexpr auto kWindow = 30s;

std::string DemoConfig(double budget, int sample_one_in = 100) {
  return fmt::format(R"(simulator:
  memory_mib: 256
screening:
  budget: {}
  sample_one_in: {}
jobs:
  - name: chat
    kind: inference
    load_rps: 200
  - name: allreduce
    kind: collective
    elements: 65536
    steps: 100000000
    checkpoint_every: 10
)",
                     budget, sample_one_in);
}

nlohmann::json JobNamed(RasdInstance& rasd, const std::string& name) {
  const auto jobs = rasd.RasctlJson({"jobs"});
  if (!jobs.is_object() || !jobs.contains("jobs")) return nlohmann::json::object();
  for (const auto& job : jobs["jobs"])
    if (job.value("name", "") == name) return job;
  return nlohmann::json::object();
}

// `rasctl devices`, an empty list when it cannot be read.
nlohmann::json Devices(RasdInstance& rasd) {
  const auto devices = rasd.RasctlJson({"devices"});
  if (!devices.is_object() || !devices.contains("devices")) return nlohmann::json::array();
  return devices["devices"];
}

// A number at `path` in `object`, 0 where it is missing or null.
double NumberAt(const nlohmann::json& object, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &object;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return 0;
    at = &(*at)[key];
  }
  return at->is_number() ? at->get<double>() : 0;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

void BM_SdcTimeToIsolation(benchmark::State& state) {
  const int exponent = static_cast<int>(state.range(0));
  std::uint64_t seed = 1;
  for (auto _ : state) {
    RasdInstance rasd;
    rasd.WriteConfig(DemoConfig(0.01));
    std::string why;
    if (!rasd.Start({}, {}, &why)) {
      state.SkipWithError(("rasd did not start: " + why).c_str());
      return;
    }
    const bool screened = rasd::testing::WaitUntil(
        [&] {
          const auto devices = Devices(rasd);
          if (devices.size() < 4) return false;
          for (const auto& device : devices)
            if (NumberAt(device, {"screening", "screenings"}) < 1) return false;
          return true;
        },
        120s);
    if (!screened) {
      state.SkipWithError("not every device was screened within 120 s");
      return;
    }
    const auto injected =
        rasd.Rasctl({"inject", "sdc", "--device", "2", "--rate", fmt::format("1e-{}", exponent),
                     "--seed", std::to_string(seed++)});
    if (injected.exit_code != 0) {
      state.SkipWithError(("inject: " + injected.err).c_str());
      return;
    }
    const auto start = Clock::now();
    nlohmann::json devices;
    const bool isolated = rasd::testing::WaitUntil(
        [&] {
          devices = Devices(rasd);
          return devices.size() == 4 && devices[2].value("state", "") == "isolated";
        },
        kIsolationLimit);
    const double seconds = Seconds(Clock::now() - start);
    state.SetIterationTime(seconds);
    state.counters["isolated"] = isolated ? 1 : 0;
    state.counters["seconds"] = seconds;
    int others_healthy = 0;
    std::uint64_t others_mismatches = 0;
    for (int device : {0, 1, 3}) {
      if (devices.size() < 4) break;
      others_healthy += devices[device].value("state", "") == "healthy" ? 1 : 0;
      others_mismatches +=
          static_cast<std::uint64_t>(NumberAt(devices[device], {"screening", "mismatches"}));
    }
    state.counters["others_healthy"] = others_healthy;
    state.counters["others_mismatches"] = static_cast<double>(others_mismatches);
    if (devices.size() == 4)
      state.counters["screenings_dev2"] = NumberAt(devices[2], {"screening", "screenings"});
    if (isolated) {
      // Past the roll-back: every step since equal to a fault-free run's.
      (void)rasd::testing::WaitUntil(
          [&] { return NumberAt(JobNamed(rasd, "allreduce"), {"distrust_rollbacks"}) >= 1; }, 30s);
      std::this_thread::sleep_for(2s);
      const auto allreduce = JobNamed(rasd, "allreduce");
      state.counters["checksums_match"] = allreduce.value("checksums_match", false) ? 1 : 0;
      state.counters["steps_redone"] = NumberAt(allreduce, {"steps_redone"});
    }
    rasd.Stop();
  }
}
BENCHMARK(BM_SdcTimeToIsolation)
    ->Arg(4)
    ->Arg(6)
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(false)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);
// At 1e-8 a screening fails about one time in twenty: minutes per run, so
// one run (a figure, not a median).
BENCHMARK(BM_SdcTimeToIsolation)->Arg(8)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

struct Throughput {
  double served_per_s = 0, steps_per_s = 0, budget_used = 0, p99_ms = 0;
};

// Which checks for silent corruption run: each at its default, or off.
struct Checks {
  double budget = 0;
  int sample_one_in = 0;
};
constexpr Checks kNoChecks{0, 0};
// By BM_SdcOverhead's first argument: all, the screening alone, the jobs'
// cross-checks alone.
constexpr Checks kChecksMeasured[] = {{0.01, 100}, {0.01, 0}, {0, 100}};

Throughput Measure(Checks checks) {
  RasdInstance rasd;
  rasd.WriteConfig(DemoConfig(checks.budget, checks.sample_one_in));
  std::string why;
  if (!rasd.Start({}, {}, &why)) return {};
  std::this_thread::sleep_for(kWarmUp);
  auto sample = [&] {
    return std::pair(NumberAt(JobNamed(rasd, "chat"), {"requests", "served"}),
                     NumberAt(JobNamed(rasd, "allreduce"), {"step"}));
  };
  const auto [served_0, steps_0] = sample();
  const auto start = Clock::now();
  std::this_thread::sleep_for(kWindow);
  const auto [served_1, steps_1] = sample();
  const double elapsed = Seconds(Clock::now() - start);
  Throughput result{(served_1 - served_0) / elapsed, (steps_1 - steps_0) / elapsed, 0,
                    NumberAt(JobNamed(rasd, "chat"), {"load", "p99_ms"})};
  for (const auto& device : Devices(rasd))
    result.budget_used += NumberAt(device, {"screening", "budget_used"});
  rasd.Stop();
  return result;
}

// Arg 0: every check against none, five alternated pairs (the figure the
// 1% target is about); 1: the screening alone, 2: the jobs' cross-checks
// alone, three pairs each (where the cost comes from).
void BM_SdcOverhead(benchmark::State& state) {
  const int part = static_cast<int>(state.range(0));
  const Checks checks = kChecksMeasured[part];
  const int rounds = part == 0 ? 5 : 3;
  for (auto _ : state) {
    std::vector<double> served_on, served_off, steps_on, steps_off, budget, ratios, p99_on, p99_off;
    for (int round = 0; round < rounds; ++round) {
      const auto off = Measure(kNoChecks);
      const auto on = Measure(checks);
      served_off.push_back(off.served_per_s);
      steps_off.push_back(off.steps_per_s);
      served_on.push_back(on.served_per_s);
      steps_on.push_back(on.steps_per_s);
      budget.push_back(on.budget_used);
      ratios.push_back(on.steps_per_s / std::max(off.steps_per_s, 1e-9));
      p99_on.push_back(on.p99_ms);
      p99_off.push_back(off.p99_ms);
    }
    state.counters["served_per_s_off"] = Median(served_off);
    state.counters["served_per_s_on"] = Median(served_on);
    state.counters["steps_per_s_off"] = Median(steps_off);
    state.counters["steps_per_s_on"] = Median(steps_on);
    state.counters["steps_ratio_on_off"] = Median(ratios);
    state.counters["steps_ratio_min"] = *std::min_element(ratios.begin(), ratios.end());
    state.counters["steps_ratio_max"] = *std::max_element(ratios.begin(), ratios.end());
    state.counters["p99_ms_off"] = Median(p99_off);
    state.counters["p99_ms_on"] = Median(p99_on);
    state.counters["served_ratio_on_off"] = Median(served_on) / std::max(Median(served_off), 1e-9);
    state.counters["budget_used"] = Median(budget);
  }
}
BENCHMARK(BM_SdcOverhead)->Arg(0)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
