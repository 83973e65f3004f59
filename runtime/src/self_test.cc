#include "rasd/runtime/self_test.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <span>

#include "mapped_words.h"
#include "rasd/runtime/screening.h"

namespace rasd::runtime {
namespace {

using drivers::KernelArg;

constexpr const char* kOwner = "rasd-self-test";
constexpr std::uint64_t kMinChunk = 64 << 10;

// Small inputs with values that catch a wrong index or a stuck lane.
std::vector<float> Ramp(std::size_t n, float scale, float offset) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = offset + scale * static_cast<float>(static_cast<int>(i % 17) - 8);
  return values;
}

bool Near(const std::vector<float>& got, const std::vector<float>& want, std::string* detail) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const float tolerance = 1e-4f * std::max(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tolerance)) {
      *detail = fmt::format("element {}: {} instead of {}", i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

class Bench {
 public:
  Bench(Runtime& runtime, int device, const SelfTestOptions& options)
      : runtime_(runtime), device_(device), options_(options) {}
  ~Bench() {
    if (stream_) (void)Wait();
    for (auto& allocation : allocations_) (void)pool_->Free(allocation);
  }

  Status Start() {
    auto pool = runtime_.Pool(device_);
    if (!pool) return Fail(pool.error());
    pool_ = *pool;
    auto stream =
        runtime_.CreateStream(device_, {.owner = kOwner, .admission = Admission::kAdmittedJob});
    if (!stream) return Fail(stream.error());
    stream_ = std::move(*stream);
    return {};
  }

  Result<drivers::DeviceAddress> Upload(const std::vector<float>& values) {
    auto allocation =
        pool_->Allocate(std::max<std::size_t>(values.size(), 1) * sizeof(float), *stream_);
    if (!allocation) return Fail(allocation.error());
    allocations_.push_back(*allocation);
    const auto address = allocation->address;
    if (!values.empty()) {
      if (auto copied =
              stream_->CopyToDevice(address, values.data(), values.size() * sizeof(float));
          !copied)
        return Fail(copied.error());
      // The copy reads `values` when the stream gets to it, and the
      // caller's buffer may be a temporary: wait for it.
      if (auto done = Wait(); !done) return Fail(done.error());
    }
    return address;
  }

  Result<std::vector<float>> Download(drivers::DeviceAddress address, std::size_t n) {
    std::vector<float> values(n);
    if (auto copied = stream_->CopyToHost(values.data(), address, n * sizeof(float)); !copied)
      return Fail(copied.error());
    if (auto done = Wait(); !done) return Fail(done.error());
    return values;
  }

  Status Launch(std::string_view kernel, std::vector<KernelArg> args) {
    return stream_->Launch(kernel, args);
  }

  Status Sync() { return Wait(); }
  MemoryPool& Pool() { return *pool_; }
  Stream& GetStream() { return *stream_; }
  void ReleaseAll() {
    (void)Wait();
    for (auto& allocation : allocations_) (void)pool_->Free(allocation);
    allocations_.clear();
  }

 private:
  // A step that did not finish in time means a device that stopped
  // completing work: its stream is aborted, so that what is queued there
  // never runs into buffers the test frees, and every later wait returns
  // at once (a hung device fails its test in one step timeout, not one per
  // step).
  Status Wait() {
    auto done = stream_->Synchronize(options_.step_timeout);
    if (!done && done.error().code == ErrorCode::kTimeout)
      (void)stream_->Abort("self-test: a step did not finish in time");
    return done;
  }

  Runtime& runtime_;
  int device_;
  SelfTestOptions options_;
  MemoryPool* pool_ = nullptr;
  std::unique_ptr<Stream> stream_;
  std::vector<Allocation> allocations_;
};

// Runs one kernel on inputs and compares `outputs` with the reference.
using KernelCheck = std::function<Status(Bench&, std::string* detail)>;

Status CheckElementwise(Bench& bench, std::string_view kernel, std::string* detail,
                        const std::function<float(float, float)>& reference, bool two_inputs) {
  const std::size_t n = 1000;
  const auto a = Ramp(n, 0.5f, 0.25f), b = Ramp(n, -1.5f, 2.0f);
  auto a_address_result = bench.Upload(a);
  if (!a_address_result) return Fail(a_address_result.error());
  const auto a_address = std::move(*a_address_result);
  auto b_address_result = bench.Upload(b);
  if (!b_address_result) return Fail(b_address_result.error());
  const auto b_address = std::move(*b_address_result);
  auto out_address_result = bench.Upload(std::vector<float>(n, 0));
  if (!out_address_result) return Fail(out_address_result.error());
  const auto out_address = std::move(*out_address_result);
  Status launched =
      two_inputs
          ? bench.Launch(kernel, {KernelArg::Int(n), KernelArg::Address(a_address),
                                  KernelArg::Address(b_address), KernelArg::Address(out_address)})
          : bench.Launch(kernel, {KernelArg::Int(n), KernelArg::Address(a_address),
                                  KernelArg::Address(out_address)});
  if (!launched) return launched;
  auto got_result = bench.Download(out_address, n);
  if (!got_result) return Fail(got_result.error());
  const auto got = std::move(*got_result);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = reference(a[i], b[i]);
  if (!Near(got, want, detail)) return Fail(ErrorCode::kDeviceFault, *detail);
  return {};
}

const std::vector<std::pair<std::string, KernelCheck>>& KernelChecks() {
  static const std::vector<std::pair<std::string, KernelCheck>> kChecks = {
      {"empty",
       [](Bench& bench, std::string*) -> Status {
         if (auto launched = bench.Launch("empty", {}); !launched) return launched;
         return bench.Sync();
       }},
      {"sleep_us",
       [](Bench& bench, std::string*) -> Status {
         if (auto launched = bench.Launch("sleep_us", {KernelArg::Int(10)}); !launched)
           return launched;
         return bench.Sync();
       }},
      {"fill",
       [](Bench& bench, std::string* detail) -> Status {
         const std::size_t n = 4096;
         auto out_result = bench.Upload(std::vector<float>(n, 0));
         if (!out_result) return Fail(out_result.error());
         const auto out = std::move(*out_result);
         if (auto launched = bench.Launch(
                 "fill", {KernelArg::Address(out), KernelArg::Int(n), KernelArg::Float(3.25f)});
             !launched)
           return launched;
         auto got_result = bench.Download(out, n);
         if (!got_result) return Fail(got_result.error());
         const auto got = std::move(*got_result);
         if (!Near(got, std::vector<float>(n, 3.25f), detail))
           return Fail(ErrorCode::kDeviceFault, *detail);
         return {};
       }},
      {"axpy",
       [](Bench& bench, std::string* detail) -> Status {
         const std::size_t n = 1000;
         const auto x = Ramp(n, 1.0f, 0.5f), y = Ramp(n, -0.25f, 1.0f);
         auto x_address_result = bench.Upload(x);
         if (!x_address_result) return Fail(x_address_result.error());
         const auto x_address = std::move(*x_address_result);
         auto y_address_result = bench.Upload(y);
         if (!y_address_result) return Fail(y_address_result.error());
         const auto y_address = std::move(*y_address_result);
         if (auto launched = bench.Launch(
                 "axpy", {KernelArg::Int(n), KernelArg::Float(2.0f), KernelArg::Address(x_address),
                          KernelArg::Address(y_address)});
             !launched)
           return launched;
         auto got_result = bench.Download(y_address, n);
         if (!got_result) return Fail(got_result.error());
         const auto got = std::move(*got_result);
         std::vector<float> want(n);
         for (std::size_t i = 0; i < n; ++i) want[i] = 2.0f * x[i] + y[i];
         if (!Near(got, want, detail)) return Fail(ErrorCode::kDeviceFault, *detail);
         return {};
       }},
      {"add",
       [](Bench& bench, std::string* detail) {
         return CheckElementwise(
             bench, "add", detail, [](float a, float b) { return a + b; }, true);
       }},
      {"mul",
       [](Bench& bench, std::string* detail) {
         return CheckElementwise(
             bench, "mul", detail, [](float a, float b) { return a * b; }, true);
       }},
      {"relu",
       [](Bench& bench, std::string* detail) {
         return CheckElementwise(
             bench, "relu", detail, [](float a, float) { return std::max(a, 0.0f); }, false);
       }},
      {"gemm",
       [](Bench& bench, std::string* detail) -> Status {
         const std::int64_t m = 17, n = 13, k = 19;
         const auto a = Ramp(static_cast<std::size_t>(m * k), 0.125f, 0.5f);
         const auto b = Ramp(static_cast<std::size_t>(k * n), -0.25f, 0.75f);
         auto a_address_result = bench.Upload(a);
         if (!a_address_result) return Fail(a_address_result.error());
         const auto a_address = std::move(*a_address_result);
         auto b_address_result = bench.Upload(b);
         if (!b_address_result) return Fail(b_address_result.error());
         const auto b_address = std::move(*b_address_result);
         auto c_address_result =
             bench.Upload(std::vector<float>(static_cast<std::size_t>(m * n), 0));
         if (!c_address_result) return Fail(c_address_result.error());
         const auto c_address = std::move(*c_address_result);
         if (auto launched =
                 bench.Launch("gemm", {KernelArg::Int(m), KernelArg::Int(n), KernelArg::Int(k),
                                       KernelArg::Address(a_address), KernelArg::Address(b_address),
                                       KernelArg::Address(c_address)});
             !launched)
           return launched;
         auto got_result = bench.Download(c_address, static_cast<std::size_t>(m * n));
         if (!got_result) return Fail(got_result.error());
         const auto got = std::move(*got_result);
         std::vector<float> want(static_cast<std::size_t>(m * n), 0);
         for (std::int64_t i = 0; i < m; ++i)
           for (std::int64_t j = 0; j < n; ++j) {
             double sum = 0;
             for (std::int64_t p = 0; p < k; ++p)
               sum += static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) *
                      b[static_cast<std::size_t>(p * n + j)];
             want[static_cast<std::size_t>(i * n + j)] = static_cast<float>(sum);
           }
         if (!Near(got, want, detail)) return Fail(ErrorCode::kDeviceFault, *detail);
         return {};
       }},
      {"softmax",
       [](Bench& bench, std::string* detail) -> Status {
         const std::int64_t rows = 7, cols = 33;
         const auto in = Ramp(static_cast<std::size_t>(rows * cols), 0.3f, -0.1f);
         auto in_address_result = bench.Upload(in);
         if (!in_address_result) return Fail(in_address_result.error());
         const auto in_address = std::move(*in_address_result);
         auto out_address_result =
             bench.Upload(std::vector<float>(static_cast<std::size_t>(rows * cols), 0));
         if (!out_address_result) return Fail(out_address_result.error());
         const auto out_address = std::move(*out_address_result);
         if (auto launched = bench.Launch(
                 "softmax", {KernelArg::Int(rows), KernelArg::Int(cols),
                             KernelArg::Address(in_address), KernelArg::Address(out_address)});
             !launched)
           return launched;
         auto got_result = bench.Download(out_address, static_cast<std::size_t>(rows * cols));
         if (!got_result) return Fail(got_result.error());
         const auto got = std::move(*got_result);
         std::vector<float> want(static_cast<std::size_t>(rows * cols));
         for (std::int64_t r = 0; r < rows; ++r) {
           const auto row = in.begin() + r * cols;
           const float top = *std::max_element(row, row + cols);
           double total = 0;
           for (std::int64_t c = 0; c < cols; ++c) total += std::exp(row[c] - top);
           for (std::int64_t c = 0; c < cols; ++c)
             want[static_cast<std::size_t>(r * cols + c)] =
                 static_cast<float>(std::exp(row[c] - top) / total);
         }
         if (!Near(got, want, detail)) return Fail(ErrorCode::kDeviceFault, *detail);
         return {};
       }},
      {"reduce_sum",
       [](Bench& bench, std::string* detail) -> Status {
         const std::size_t n = 5000;
         const auto in = Ramp(n, 0.5f, 0.0f);
         auto in_address_result = bench.Upload(in);
         if (!in_address_result) return Fail(in_address_result.error());
         const auto in_address = std::move(*in_address_result);
         auto out_address_result = bench.Upload(std::vector<float>(1, 0));
         if (!out_address_result) return Fail(out_address_result.error());
         const auto out_address = std::move(*out_address_result);
         if (auto launched =
                 bench.Launch("reduce_sum", {KernelArg::Int(n), KernelArg::Address(in_address),
                                             KernelArg::Address(out_address)});
             !launched)
           return launched;
         auto got_result = bench.Download(out_address, 1);
         if (!got_result) return Fail(got_result.error());
         const auto got = std::move(*got_result);
         const double want = std::accumulate(in.begin(), in.end(), 0.0);
         if (!Near(got, {static_cast<float>(want)}, detail))
           return Fail(ErrorCode::kDeviceFault, *detail);
         return {};
       }},
  };
  return kChecks;
}

// Known answers, several rounds: a device that computes wrong now and then
// (silent data corruption) stays out until it computes right every time.
SelfTestCheck ScreenCheck(Runtime& runtime, int device, const SelfTestOptions& options,
                          const common::Clock& clock) {
  const auto screen = KnownAnswerScreen::Build(
      runtime.Kernels().Names(),
      {.elements = options.screen_elements, .step_timeout = options.step_timeout});
  SelfTestCheck check{
      fmt::format("screen {} x {} elements", options.screen_rounds, screen->Options().elements),
      true, ""};
  for (int round = 0; round < options.screen_rounds; ++round) {
    const auto report = screen->Run(runtime, device, clock);
    if (!report.Passed()) {
      check.passed = false;
      check.detail = fmt::format("round {}: {}", round + 1, report.Summary());
      break;
    }
  }
  return check;
}

// Writes a pattern that depends on each word's position (a stuck or
// aliased address line shows) and its complement, reading each back.
// `pattern_words` and `back_words` hold at least `bytes`.
Status PatternChunk(Bench& bench, drivers::DeviceAddress address, std::uint64_t bytes,
                    std::uint32_t* pattern_words, std::uint32_t* back_words, std::string* detail) {
  const std::size_t words = bytes / sizeof(std::uint32_t);
  const std::span<std::uint32_t> pattern(pattern_words, words), back(back_words, words);
  for (std::uint32_t inverted : {0u, 0xffffffffu}) {
    for (std::size_t i = 0; i < words; ++i)
      pattern[i] = (static_cast<std::uint32_t>(i) * 2654435761u ^ 0xa5a5a5a5u) ^ inverted;
    if (auto copied = bench.GetStream().CopyToDevice(address, pattern.data(), bytes); !copied)
      return copied;
    if (auto copied = bench.GetStream().CopyToHost(back.data(), address, bytes); !copied)
      return copied;
    if (auto done = bench.Sync(); !done) return done;
    const auto mismatch = std::mismatch(pattern.begin(), pattern.end(), back.begin());
    if (mismatch.first != pattern.end()) {
      const auto offset = static_cast<std::uint64_t>(mismatch.first - pattern.begin()) * 4;
      *detail = fmt::format("0x{:x}: read 0x{:08x}, wrote 0x{:08x}", address + offset,
                            *mismatch.second, *mismatch.first);
      return Fail(ErrorCode::kDeviceFault, *detail);
    }
  }
  return {};
}

// The load phase (SelfTestOptions::load_*). Every lane first waits for an
// event on a gate stream that a host callback holds until all the lanes'
// work is queued: released together, the lanes run at the same time, with
// the device busy throughout (not one lane finishing before the next starts).
// Values are small multiples of 1/2, so 2x + y is exact on any IEEE device
// and results are compared bit for bit.
SelfTestCheck LoadCheck(Runtime& runtime, int device, const SelfTestOptions& options) {
  const auto lanes = static_cast<std::size_t>(options.load_streams);
  const auto rounds = static_cast<std::size_t>(std::max(options.load_rounds, 1));
  const std::size_t n = std::max<std::uint64_t>(options.load_bytes / sizeof(float), 1);
  const std::uint64_t bytes = n * sizeof(float);
  SelfTestCheck check{fmt::format("load {} streams", lanes), false, ""};
  const auto names = runtime.Kernels().Names();
  const bool axpy = std::find(names.begin(), names.end(), "axpy") != names.end();
  auto pool = runtime.Pool(device);
  if (!pool) {
    check.detail = pool.error().message;
    return check;
  }
  // Per lane: x and y inputs, then one result per round.
  MappedWords inputs(lanes * 2 * n), results(lanes * rounds * n);
  if (!inputs.Valid() || !results.Valid()) {
    check.detail = "no host memory for the load phase's buffers";
    return check;
  }
  struct Lane {
    std::unique_ptr<Stream> stream;
    Allocation x, y;
  };
  std::vector<Lane> running(lanes);
  auto x_of = [&](std::size_t lane) { return inputs.Floats() + lane * 2 * n; };
  auto y_of = [&](std::size_t lane) { return inputs.Floats() + (lane * 2 + 1) * n; };
  auto result_of = [&](std::size_t lane, std::size_t round) {
    return results.Floats() + (lane * rounds + round) * n;
  };
  // The gate: a callback that returns once `open` is set, then the event.
  auto gate = runtime.CreateStream(device, {.owner = kOwner, .admission = Admission::kAdmittedJob});
  if (!gate) {
    check.detail = gate.error().message;
    return check;
  }
  auto ready = runtime.CreateEvent(device);
  if (!ready) {
    check.detail = ready.error().message;
    return check;
  }
  struct Latch {
    std::mutex mutex;
    std::condition_variable changed;
    bool open = false;
  };
  auto latch = std::make_shared<Latch>();
  auto open_gate = [&latch] {
    {
      std::lock_guard lock(latch->mutex);
      latch->open = true;
    }
    latch->changed.notify_all();
  };
  Status queued = (*gate)->AddCallback([latch, limit = options.step_timeout](const Status&) {
    std::unique_lock lock(latch->mutex);
    latch->changed.wait_for(lock, limit, [&] { return latch->open; });
  });
  if (queued) queued = (*gate)->Record(**ready);
  for (std::size_t lane = 0; lane < lanes && queued; ++lane) {
    for (std::size_t i = 0; i < n; ++i) {
      x_of(lane)[i] = 0.5f * static_cast<float>(static_cast<int>((i + lane) % 17) - 8);
      y_of(lane)[i] = static_cast<float>(static_cast<int>((i * 7 + lane) % 13) - 6);
    }
    auto stream =
        runtime.CreateStream(device, {.owner = kOwner, .admission = Admission::kAdmittedJob});
    if (!stream) {
      queued = Fail(stream.error());
      break;
    }
    Lane& it = running[lane];
    it.stream = std::move(*stream);
    auto x = (*pool)->Allocate(bytes, *it.stream);
    if (!x) {
      queued = Fail(x.error());
      break;
    }
    it.x = *x;
    auto y = (*pool)->Allocate(bytes, *it.stream);
    if (!y) {
      queued = Fail(y.error());
      break;
    }
    it.y = *y;
    queued = it.stream->Wait(**ready);
  }
  for (std::size_t round = 0; round < rounds && queued; ++round) {
    for (std::size_t lane = 0; lane < lanes && queued; ++lane) {
      Lane& it = running[lane];
      queued = it.stream->CopyToDevice(it.x.address, x_of(lane), bytes);
      if (queued) queued = it.stream->CopyToDevice(it.y.address, y_of(lane), bytes);
      if (queued && axpy) {
        const KernelArg args[] = {KernelArg::Int(static_cast<std::int64_t>(n)),
                                  KernelArg::Float(2.0f), KernelArg::Address(it.x.address),
                                  KernelArg::Address(it.y.address)};
        queued = it.stream->Launch("axpy", args);
      } else if (queued) {
        queued = it.stream->CopyDeviceToDevice(it.y.address, device, it.x.address, bytes);
      }
      if (queued) queued = it.stream->CopyToHost(result_of(lane, round), it.y.address, bytes);
    }
  }
  // Waits for every lane, whatever happened: no copy may still write into
  // the host buffers when they are unmapped. A lane past its time is aborted.
  open_gate();
  Status finished = queued;
  if (auto done = (*gate)->Synchronize(options.step_timeout); !done && finished) finished = done;
  for (auto& lane : running) {
    if (!lane.stream) continue;
    auto done = lane.stream->Synchronize(options.step_timeout);
    if (!done && done.error().code == ErrorCode::kTimeout)
      (void)lane.stream->Abort("self-test: the load phase did not finish in time");
    if (!done && finished) finished = done;
  }
  for (auto& lane : running) {
    if (lane.x) (void)(*pool)->Free(lane.x);
    if (lane.y) (void)(*pool)->Free(lane.y);
  }
  if (!finished) {
    check.detail = finished.error().message;
    return check;
  }
  for (std::size_t lane = 0; lane < lanes; ++lane) {
    for (std::size_t round = 0; round < rounds; ++round) {
      const float* got = result_of(lane, round);
      for (std::size_t i = 0; i < n; ++i) {
        const float want = axpy ? 2.0f * x_of(lane)[i] + y_of(lane)[i] : x_of(lane)[i];
        if (std::memcmp(&got[i], &want, sizeof want) != 0) {
          check.detail = fmt::format(
              "stream {} of {}, round {}: element {} is {} instead of {} (only under load: the "
              "kernel checks passed one at a time)",
              lane + 1, lanes, round + 1, i, got[i], want);
          return check;
        }
      }
    }
  }
  check.passed = true;
  check.detail = fmt::format("{} rounds of {} KiB on each, {}", rounds, bytes >> 10,
                             axpy ? "axpy" : "device-to-device copies");
  return check;
}

}  // namespace

std::string SelfTestReport::Summary() const {
  for (const auto& check : checks) {
    if (!check.passed) return fmt::format("failed: {}: {}", check.name, check.detail);
  }
  std::size_t kernels = 0;
  for (const auto& check : checks) kernels += check.name.starts_with("kernel ") ? 1 : 0;
  std::string load;
  for (const auto& check : checks) {
    if (check.name.starts_with("load ") || check.name.starts_with("screen "))
      load += ", " + check.name;
  }
  return fmt::format("passed: {} kernel(s), {} MiB pattern{}, {} ms", kernels,
                     pattern_bytes_tested >> 20, load, duration.count());
}

SelfTestReport RunSelfTest(Runtime& runtime, int device, const SelfTestOptions& options) {
  static const common::SystemClock kSystemClock;
  return RunSelfTest(runtime, device, options, kSystemClock);
}

SelfTestReport RunSelfTest(Runtime& runtime, int device, const SelfTestOptions& options,
                           const common::Clock& clock) {
  const auto started = clock.Monotonic();
  SelfTestReport report;
  auto finish = [&] {
    report.passed = !report.checks.empty() &&
                    std::all_of(report.checks.begin(), report.checks.end(),
                                [](const SelfTestCheck& check) { return check.passed; });
    report.duration =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.Monotonic() - started);
    return report;
  };
  Bench bench(runtime, device, options);
  if (auto started_ok = bench.Start(); !started_ok) {
    report.checks.push_back({"start", false, started_ok.error().message});
    return finish();
  }
  const auto names = runtime.Kernels().Names();
  for (const auto& [name, check] : KernelChecks()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    std::string detail;
    const Status result = check(bench, &detail);
    report.checks.push_back(
        {"kernel " + name, result.has_value(), result ? "" : result.error().message});
    bench.ReleaseAll();
    if (!result) return finish();  // a broken device fails the rest the same way
  }
  if (options.load_streams > 0) {
    bench.ReleaseAll();
    report.checks.push_back(LoadCheck(runtime, device, options));
    if (!report.checks.back().passed) return finish();
  }
  if (options.screen_rounds > 0) {
    bench.ReleaseAll();
    report.checks.push_back(ScreenCheck(runtime, device, options, clock));
    if (!report.checks.back().passed) return finish();
  }
  // Chunks of free memory until the budget or the pool runs out.
  std::vector<Allocation> held;
  std::uint64_t tested = 0;
  bool pattern_failed = false;
  // Large chunks first, then smaller ones for what fragmentation leaves,
  // down to 64 KiB: the pattern reaches (nearly) every free byte.
  std::uint64_t chunk = std::max<std::uint64_t>(options.chunk_bytes, kMinChunk);
  const std::size_t chunk_words = static_cast<std::size_t>(chunk / sizeof(std::uint32_t));
  MappedWords pattern(chunk_words), back(chunk_words);
  if (!pattern.Valid() || !back.Valid()) {
    report.checks.push_back({"pattern", false, "no host memory for the pattern's buffers"});
    return finish();
  }
  while (tested < options.pattern_bytes && chunk >= kMinChunk) {
    const std::uint64_t size = std::min(chunk, options.pattern_bytes - tested);
    auto allocation = bench.Pool().Allocate(size, bench.GetStream());
    if (!allocation) {
      if (allocation.error().code == ErrorCode::kOutOfMemory) {
        chunk /= 2;
        continue;
      }
      report.checks.push_back({"pattern", false, allocation.error().message});
      pattern_failed = true;
      break;
    }
    held.push_back(*allocation);
    std::string detail;
    if (auto checked =
            PatternChunk(bench, allocation->address, size, pattern.Data(), back.Data(), &detail);
        !checked) {
      report.checks.push_back({fmt::format("pattern 0x{:x}-0x{:x}", allocation->address,
                                           allocation->address + size - 1),
                               false, checked.error().message});
      pattern_failed = true;
      break;
    }
    tested += size;
  }
  (void)bench.Sync();
  for (auto& allocation : held) (void)bench.Pool().Free(allocation);
  report.pattern_bytes_tested = tested;
  if (!pattern_failed) {
    // A test that could write nothing has shown nothing.
    report.checks.push_back(
        {"pattern", tested > 0,
         tested > 0 ? fmt::format("{} bytes", tested) : "no free memory to test"});
  }
  return finish();
}

}  // namespace rasd::runtime
