// Metrics benchmarks.
//
// BM_Scrape: an HTTP scrape of /metrics from prometheus-cpp's exposer with
// 64 simulated devices and the label variety of a busy node (every origin
// and class on every device, EDAC counters, jobs), built as the daemon
// builds it; against rendering the same snapshot without HTTP.
//
// BM_FaultToGateClosedWhileScraped: the daemon's reaction path (sticky
// fault -> driver thread -> policy -> actuator -> gate closed) while
// another thread scrapes back to back, against the same path unscraped:
// a scrape must not hold up the loop.

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "actuator.h"
#include "ras_ingest.h"
#include "rasd/common/logging.h"
#include "rasd/common/simulated_event_loop.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/exporters/metrics.h"
#include "rasd/ras/driver_events.h"
#include "rasd/ras/policy.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Node {
  std::unique_ptr<rasd::runtime::Runtime> runtime;
  rasd::drivers::SimDriver* sim = nullptr;
};

Node MakeNode(int devices) {
  Node node;
  auto driver = rasd::drivers::SimDriver::Create(
      {.device_count = devices, .memory_bytes_per_device = 16 << 20});
  node.sim = driver->get();
  node.runtime = std::move(
      *rasd::runtime::Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 4 << 20}}));
  return node;
}

// What the daemon's MetricsNow() assembles, from a runtime and counts.
rasd::exporters::MetricsSnapshot Snapshot(rasd::runtime::Runtime& runtime,
                                          const rasd::exporters::MetricsSnapshot& loop_part) {
  rasd::exporters::MetricsSnapshot snapshot = loop_part;
  for (const auto& device : runtime.Devices()) {
    rasd::exporters::DeviceMetrics metrics;
    metrics.index = device->Index();
    metrics.vendor = device->Properties().vendor;
    metrics.model = device->Properties().name;
    metrics.bdf = device->Properties().pci_bdf;
    metrics.state = std::string(rasd::runtime::HealthStateName(device->Health()));
    const auto stats = (*runtime.Pool(device->Index()))->Stats();
    metrics.reserved_bytes = stats.reserved_bytes;
    metrics.allocated_bytes = stats.allocated_bytes;
    snapshot.devices.push_back(std::move(metrics));
  }
  return snapshot;
}

// The loop's part of a busy node's snapshot. `every_combination`: every
// origin and class on every device (the worst case the labels allow, 5000
// event series); otherwise what 100k stored events of a busy node look
// like: per device CE, UCE and FATAL from the driver and Xid records, and
// host EDAC/MCE/AER/GHES events.
rasd::exporters::MetricsSnapshot BusyLoopPart(int devices, bool every_combination) {
  rasd::exporters::MetricsSnapshot part;
  const char* origins[] = {"edac",   "mce",    "ghes", "aer",  "memory_failure", "nvidia_xid",
                           "amdgpu", "ascend", "sim",  "bert", "pstore"};
  const char* severities[] = {"INFO", "CE", "UCNA", "SRAO", "SRAR", "UCE", "FATAL"};
  std::uint64_t n = 0;
  if (every_combination) {
    for (int device = -1; device < devices; ++device)
      for (const char* origin : origins)
        for (const char* severity : severities)
          part.events[{origin, severity, device < 0 ? "" : std::to_string(device)}] = ++n * 7;
  } else {
    for (int device = 0; device < devices; ++device) {
      const std::string index = std::to_string(device);
      part.events[{"sim", "CE", index}] = 1500;
      part.events[{"sim", "UCE", index}] = 2;
      part.events[{"nvidia_xid", "FATAL", index}] = 1;
    }
    for (const char* origin : {"edac", "mce", "aer", "ghes"})
      for (const char* severity : {"CE", "UCE", "FATAL"}) part.events[{origin, severity, ""}] = 100;
  }
  for (int mc = 0; mc < 8; ++mc) {
    part.edac.controllers[mc] = {mc, 10, 1, 2, 0, true, true, true, true};
    for (int dimm = 0; dimm < 8; ++dimm)
      part.edac.units.push_back(
          {mc, "dimm", dimm, fmt::format("CPU{}_DIMM_{}", mc / 4, dimm), 3, 0, true, true});
  }
  part.actions[{"retire-page", "ok"}] = 1000;
  part.actions[{"isolate-device", "ok"}] = 3;
  part.requests[{"llm", "served"}] = 100000;
  for (int i = 0; i < 1000; ++i) part.fault_to_isolation.Observe(i * 1e-5);
  return part;
}

std::size_t Scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::size_t bytes = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const char request[] = "GET /metrics HTTP/1.0\r\nConnection: close\r\n\r\n";
    (void)::write(fd, request, sizeof request - 1);
    char buffer[65536];
    ssize_t got = 0;
    while ((got = ::read(fd, buffer, sizeof buffer)) > 0) bytes += static_cast<std::size_t>(got);
  }
  ::close(fd);
  return bytes;
}

void BM_RenderOnlyBaseline(benchmark::State& state) {
  Node node = MakeNode(64);
  const auto part = BusyLoopPart(64, state.range(0) != 0);
  std::size_t bytes = 0;
  for (auto _ : state) {
    const auto text = rasd::exporters::RenderText(Snapshot(*node.runtime, part));
    bytes = text.size();
    benchmark::DoNotOptimize(bytes);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderOnlyBaseline)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_Scrape(benchmark::State& state) {
  Node node = MakeNode(64);
  const auto part = BusyLoopPart(64, state.range(0) != 0);
  auto server = std::move(*rasd::exporters::MetricsServer::Start(
      "127.0.0.1:0", [&] { return Snapshot(*node.runtime, part); }));
  std::vector<double> millis;
  std::size_t bytes = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    bytes = Scrape(server->Port());
    millis.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(millis.begin(), millis.end());
  state.counters["p50_ms"] = millis[millis.size() / 2];
  state.counters["p99_ms"] = millis[millis.size() * 99 / 100];
  state.counters["bytes"] = static_cast<double>(bytes);
}
// Arg 0: a busy node's label variety; 1: every combination.
BENCHMARK(BM_Scrape)->Arg(0)->Arg(1)->Iterations(500)->Unit(benchmark::kMillisecond);

// The reaction path of policy_bench, with or without back-to-back scrapes.
void FaultToGate(benchmark::State& state, bool scraped) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("rasd-metrics-bench-{}-{}", ::getpid(), scraped);
  fs::remove_all(dir);
  fs::create_directories(dir / "host");
  {
    rasd::common::HostEnv host(dir / "host", std::make_shared<rasd::common::SystemClock>());
    auto store = std::move(*rasd::ras::StateStore::Open(dir / "state"));
    Node node = MakeNode(64);
    rasd::ras::PolicyEngine policy;
    rasd::common::SimulatedEventLoop loop;
    rasd::daemon::DeviceHealth health(loop, *node.runtime, *store);
    rasd::daemon::NodeFault node_fault(*store, loop.GetClock());
    rasd::daemon::Actuator actuator(host, *store, *node.runtime, health, node_fault, {});
    std::mutex loop_mutex;  // as the daemon's metrics_mutex_
    auto part = BusyLoopPart(64, false);
    auto server = std::move(*rasd::exporters::MetricsServer::Start("127.0.0.1:0", [&] {
      rasd::exporters::MetricsSnapshot copy;
      {
        std::lock_guard lock(loop_mutex);
        copy = part;
      }
      for (const auto& [key, count] : actuator.Counts()) copy.actions[{key, "ok"}] = count;
      return Snapshot(*node.runtime, copy);
    }));
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> scrapes{0};
    std::thread scraper([&] {
      while (scraped && !stop) {
        Scrape(server->Port());
        ++scrapes;
      }
    });
    std::mutex mutex;
    std::condition_variable arrived;
    std::deque<rasd::drivers::DriverErrorEvent> queue;
    const int subscription = node.runtime->SubscribeErrors([&](const auto& event) {
      std::lock_guard lock(mutex);
      queue.push_back(event);
      arrived.notify_one();
    });
    auto& device = **node.runtime->GetDevice(7);
    std::vector<double> micros;
    for (auto _ : state) {
      const auto start = Clock::now();
      (void)node.sim->InjectStickyFault(7);
      rasd::drivers::DriverErrorEvent report;
      {
        std::unique_lock lock(mutex);
        arrived.wait(lock, [&] { return !queue.empty(); });
        report = queue.front();
        queue.pop_front();
      }
      const std::vector<rasd::ras::RasEvent> events = {rasd::ras::EventFromDriver(
          report, node.runtime->DriverName(), rasd::ras::CodeTable::Default())};
      for (const auto& action : policy.Decide(events[0], start.time_since_epoch()))
        actuator.Apply(action, events[0], 0);
      {
        std::lock_guard lock(loop_mutex);  // the loop publishing its part
        part.events[{"sim", "UCE", "7"}] += 1;
      }
      const auto closed = Clock::now();
      if (device.Health() != rasd::runtime::HealthState::kIsolated) {
        state.SkipWithError("the gate did not close");
        break;
      }
      micros.push_back(std::chrono::duration<double, std::micro>(closed - start).count());
      state.PauseTiming();
      rasd::ras::StoreBatch rows;  // not stored: this benchmark measures the gate and scrapes
      actuator.TakePending(rows);
      (void)node.sim->ResetDevice(7);
      (void)health.Decide({.device = 7,
                           .cause = rasd::daemon::HealthCause::kOperator,
                           .target = rasd::runtime::HealthState::kHealthy,
                           .reason = "bench"});
      state.ResumeTiming();
    }
    stop = true;
    scraper.join();
    node.runtime->Unsubscribe(subscription);
    std::sort(micros.begin(), micros.end());
    state.counters["p50_us"] = micros[micros.size() / 2];
    state.counters["p99_us"] = micros[micros.size() * 99 / 100];
    state.counters["scrapes"] = static_cast<double>(scrapes.load());
  }
  fs::remove_all(dir);
}

void BM_FaultToGateClosedUnscrapedBaseline(benchmark::State& state) { FaultToGate(state, false); }
BENCHMARK(BM_FaultToGateClosedUnscrapedBaseline)->Iterations(3000)->Unit(benchmark::kMicrosecond);

void BM_FaultToGateClosedWhileScraped(benchmark::State& state) { FaultToGate(state, true); }
BENCHMARK(BM_FaultToGateClosedWhileScraped)->Iterations(3000)->Unit(benchmark::kMicrosecond);

}  // namespace
