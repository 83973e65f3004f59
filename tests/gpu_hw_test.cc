// On a machine with an NVIDIA GPU and driver (ctest label "hw"): every
// registry kernel on the GPU gives the simulator's results, the pool
// serves real device memory and the self-test passes on each GPU, and in
// the real rasd an injected Xid closes a GPU's gate until an undrain's
// self-test reopens it. Elsewhere each test is skipped with the reason.
// RASD_CUDA_LIBRARY names another libcuda (default libcuda.so.1).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "rasd/drivers_shim/cuda_driver.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/runtime.h"
#include "rasd/runtime/screening.h"
#include "rasd/runtime/self_test.h"
#include "test_support.h"

namespace rasd::testing {
namespace {

using drivers::DeviceAddress;
using drivers::KernelArg;

std::string CudaLibrary() {
  const char* library = std::getenv("RASD_CUDA_LIBRARY");
  return library != nullptr ? library : "libcuda.so.1";
}

// The driver, or a skip naming why there is none.
#define RASD_NEED_GPU(driver)                                                               \
  auto driver##_created = drivers::CudaDriver::Create({.library = CudaLibrary()});          \
  if (!driver##_created) {                                                                  \
    GTEST_SKIP() << "needs an NVIDIA GPU and driver: " << driver##_created.error().message; \
  }                                                                                         \
  std::unique_ptr<drivers::Driver> driver = std::move(*driver##_created)

struct KernelCase {
  std::string kernel;
  std::vector<std::size_t> input_floats;  // buffers filled with data, in argument order
  std::size_t output_floats;
  std::function<std::vector<KernelArg>(const std::vector<DeviceAddress>&, DeviceAddress)> args;
  float tolerance;  // relative; 0: the same bits
};

std::vector<float> RunCase(drivers::Driver& driver, const KernelCase& test) {
  auto stream = driver.CreateStream(0);
  EXPECT_TRUE(stream);
  std::vector<DeviceAddress> inputs;
  std::vector<std::vector<float>> data;
  for (std::size_t i = 0; i < test.input_floats.size(); ++i) {
    std::vector<float> values(test.input_floats[i]);
    for (std::size_t j = 0; j < values.size(); ++j) {
      values[j] = std::sin(static_cast<float>(j * (i + 3))) * 2.0f;
    }
    auto base = driver.ReserveMemory(0, values.size() * 4);
    EXPECT_TRUE(base);
    EXPECT_TRUE(driver.CopyHostToDevice(*stream, *base, values.data(), values.size() * 4));
    inputs.push_back(*base);
    data.push_back(std::move(values));
  }
  auto output = driver.ReserveMemory(0, std::max<std::size_t>(test.output_floats, 1) * 4);
  EXPECT_TRUE(output);
  std::vector<float> zeros(test.output_floats, 0.0f), result(test.output_floats);
  if (!zeros.empty()) {
    EXPECT_TRUE(driver.CopyHostToDevice(*stream, *output, zeros.data(), zeros.size() * 4));
  }
  const auto args = test.args(inputs, *output);
  auto launched = driver.LaunchKernel(*stream, test.kernel, {}, args);
  EXPECT_TRUE(launched) << test.kernel << ": " << launched.error().ToString();
  if (!result.empty()) {
    EXPECT_TRUE(driver.CopyDeviceToHost(*stream, result.data(), *output, result.size() * 4));
  }
  auto synced = driver.SynchronizeStream(*stream, std::chrono::seconds(30));
  EXPECT_TRUE(synced) << test.kernel << ": " << synced.error().ToString();
  for (DeviceAddress base : inputs) (void)driver.ReleaseMemory(0, base);
  (void)driver.ReleaseMemory(0, *output);
  (void)driver.DestroyStream(*stream);
  return result;
}

TEST(GpuHwTest, EveryKernelMatchesTheSimulator) {
  RASD_NEED_GPU(gpu);
  auto sim = drivers::SimDriver::Create({.device_count = 1, .memory_bytes_per_device = 256 << 20});
  ASSERT_TRUE(sim);
  const std::int64_t n = 100'003, m = 129, k = 77, cols = 95, rows = 64;
  auto A = [](DeviceAddress a) { return KernelArg::Address(a); };
  auto I = [](std::int64_t v) { return KernelArg::Int(v); };
  const std::vector<KernelCase> cases = {
      {"empty", {}, 0, [](auto&, auto) { return std::vector<KernelArg>{}; }, 0},
      {"sleep_us", {}, 0, [&](auto&, auto) { return std::vector{I(200)}; }, 0},
      {"fill",
       {},
       n,
       [&](auto&, DeviceAddress out) {
         return std::vector{A(out), I(n), KernelArg::Float(2.5f)};
       },
       0},
      {"axpy",
       {static_cast<std::size_t>(n)},
       n,
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(n), KernelArg::Float(0.75f), A(in[0]), A(out)};
       },
       0},
      {"add",
       {static_cast<std::size_t>(n), static_cast<std::size_t>(n)},
       n,
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(n), A(in[0]), A(in[1]), A(out)};
       },
       0},
      {"mul",
       {static_cast<std::size_t>(n), static_cast<std::size_t>(n)},
       n,
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(n), A(in[0]), A(in[1]), A(out)};
       },
       0},
      {"relu",
       {static_cast<std::size_t>(n)},
       n,
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(n), A(in[0]), A(out)};
       },
       0},
      {"gemm",
       {static_cast<std::size_t>(m * k), static_cast<std::size_t>(k * cols)},
       static_cast<std::size_t>(m * cols),
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(m), I(cols), I(k), A(in[0]), A(in[1]), A(out)};
       },
       0},
      {"softmax",
       {static_cast<std::size_t>(rows * cols)},
       static_cast<std::size_t>(rows * cols),
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(rows), I(cols), A(in[0]), A(out)};
       },
       1e-6f},
      {"reduce_sum",
       {static_cast<std::size_t>(n)},
       1,
       [&](auto& in, DeviceAddress out) {
         return std::vector{I(n), A(in[0]), A(out)};
       },
       1e-6f},
  };
  ASSERT_EQ(cases.size(), gpu->Kernels().size()) << "a case for every kernel the GPU has";
  for (const auto& test : cases) {
    const auto on_gpu = RunCase(*gpu, test);
    const auto on_sim = RunCase(**sim, test);
    ASSERT_EQ(on_gpu.size(), on_sim.size()) << test.kernel;
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < on_gpu.size(); ++i) {
      const float allowed = test.tolerance * std::max(1.0f, std::fabs(on_sim[i]));
      const bool same = test.tolerance == 0 ? std::memcmp(&on_gpu[i], &on_sim[i], 4) == 0
                                            : std::fabs(on_gpu[i] - on_sim[i]) <= allowed;
      if (!same && ++mismatches <= 3) {
        ADD_FAILURE() << test.kernel << "[" << i << "]: GPU " << on_gpu[i] << ", simulator "
                      << on_sim[i];
      }
    }
    EXPECT_EQ(mismatches, 0u) << test.kernel;
  }
}

TEST(GpuHwTest, ThePoolServesDeviceMemoryAndTheSelfTestPassesOnEveryGpu) {
  RASD_NEED_GPU(gpu);
  auto runtime = runtime::Runtime::Create(std::move(gpu));
  ASSERT_TRUE(runtime) << runtime.error().ToString();
  for (int device = 0; device < static_cast<int>((*runtime)->DeviceCount()); ++device) {
    const auto report = runtime::RunSelfTest(**runtime, device);
    EXPECT_TRUE(report.passed) << "GPU " << device << ": " << report.Summary();
    EXPECT_GT(report.pattern_bytes_tested, 0u);
    auto pool = (*runtime)->Pool(device);
    ASSERT_TRUE(pool);
    EXPECT_GT((*pool)->Stats().reserved_bytes, 0u) << "arenas from cuMemAlloc";
    EXPECT_TRUE((*pool)->CheckConsistency());
  }
}

TEST(GpuHwTest, AnInjectedXidClosesTheGateAndAnUndrainsSelfTestReopensIt) {
  { RASD_NEED_GPU(probe); }
  RasdInstance rasd;
  rasd.WriteConfig("runtime:\n  driver: cuda\n  cuda_library: " + CudaLibrary() + "\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto state = [&] {
    const auto listed = nlohmann::json::parse(rasd.Rasctl({"--json", "devices"}).out);
    return listed["devices"][0]["state"].get<std::string>();
  };
  ASSERT_EQ(state(), "healthy");
  const auto injected = rasd.Rasctl({"inject", "xid", "79", "--device", "0"});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  ASSERT_TRUE(WaitUntil([&] { return state() == "isolated"; }, std::chrono::seconds(5)))
      << rasd.Stderr();
  const auto undrain = rasd.Rasctl({"undrain", "0"});
  EXPECT_EQ(undrain.exit_code, 0) << undrain.err;
  EXPECT_NE(undrain.out.find("self-test passed"), std::string::npos) << undrain.out;
  EXPECT_EQ(state(), "healthy");
}

// Silent data corruption screening through the CUDA kernels: every kernel
// the screen knows gives the host's exact digest on a healthy GPU (softmax
// within 1e-6), so a healthy device is never accused, and the screen
// leaves nothing of the registry silently unchecked.
TEST(GpuHwTest, TheKnownAnswerScreenPassesOnEveryGpu) {
  RASD_NEED_GPU(gpu);
  auto runtime = runtime::Runtime::Create(std::move(gpu));
  ASSERT_TRUE(runtime) << runtime.error().ToString();
  const auto screen = runtime::KnownAnswerScreen::Build((*runtime)->Kernels().Names());
  EXPECT_GE(screen->Screened().size(), 8u);
  const common::SystemClock clock;
  for (int device = 0; device < static_cast<int>((*runtime)->DeviceCount()); ++device) {
    for (int round = 0; round < 3; ++round) {
      const auto report = screen->Run(**runtime, device, clock);
      EXPECT_TRUE(report.Passed()) << "GPU " << device << ": " << report.Summary();
      EXPECT_EQ(report.kernels, screen->Screened());
      EXPECT_EQ(report.wrong_elements, 0u);
    }
  }
}

}  // namespace
}  // namespace rasd::testing
