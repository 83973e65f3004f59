// On a machine with an Ascend NPU and CANN installed (ctest label "hw"):
// every kernel the NPU offers through CANN's operator library gives the
// simulator's results within the tolerance the CUDA kernels meet, and the
// self-test passes on each NPU. Elsewhere each test is skipped with the
// reason. RASD_ASCEND_LIBRARY names another libascendcl (default
// libascendcl.so; libopapi.so is then looked for beside it when it is a
// path). Never run on Ascend hardware by rasd's authors so far.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "rasd/drivers_shim/ascend_driver.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/runtime.h"
#include "rasd/runtime/screening.h"
#include "rasd/runtime/self_test.h"

namespace rasd::testing {
namespace {

using namespace std::chrono_literals;
using drivers::DeviceAddress;
using drivers::KernelArg;

drivers::AscendDriverOptions RealOptions() {
  drivers::AscendDriverOptions options;
  if (const char* library = std::getenv("RASD_ASCEND_LIBRARY")) options.acl_library = library;
  return options;
}

// The driver, or a skip naming why there is none (no NPU or no CANN
// runtime: missing hardware). An NPU whose CANN lacks the operator library
// is a failure, not a skip: kernels through aclnn are what this checks.
#define RASD_NEED_NPU(driver)                                                                 \
  auto driver##_created = drivers::CreateAscendDriver(RealOptions());                         \
  if (!driver##_created) {                                                                    \
    GTEST_SKIP() << "needs an Ascend NPU with CANN: " << driver##_created.error().message;    \
  }                                                                                           \
  if ((*driver##_created)->Kernels().empty()) {                                               \
    FAIL() << "an Ascend NPU without kernels: CANN's operator library (libopapi.so, "         \
              "libnnopbase.so) was not loaded; rasd's log says why";                          \
  }                                                                                           \
  std::unique_ptr<drivers::Driver> driver = std::move(*driver##_created)

std::vector<float> GemmSoftmaxSum(drivers::Driver& driver) {
  const std::int64_t m = 64, k = 96, n = 80;
  std::vector<float> a(m * k), b(k * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(static_cast<float>(i) * 0.5f);
  auto stream = driver.CreateStream(0);
  EXPECT_TRUE(stream);
  auto reserve = [&](std::uint64_t floats) { return *driver.ReserveMemory(0, floats * 4); };
  const DeviceAddress da = reserve(a.size()), db = reserve(b.size()), dc = reserve(m * n),
                      ds = reserve(m * n), dr = reserve(1);
  EXPECT_TRUE(driver.CopyHostToDevice(*stream, da, a.data(), a.size() * 4));
  EXPECT_TRUE(driver.CopyHostToDevice(*stream, db, b.data(), b.size() * 4));
  using A = KernelArg;
  EXPECT_TRUE(driver.LaunchKernel(*stream, "gemm", {},
                                  std::vector{A::Int(m), A::Int(n), A::Int(k), A::Address(da),
                                              A::Address(db), A::Address(dc)}));
  EXPECT_TRUE(driver.LaunchKernel(*stream, "relu", {},
                                  std::vector{A::Int(m * n), A::Address(dc), A::Address(dc)}));
  EXPECT_TRUE(driver.LaunchKernel(*stream, "softmax", {},
                                  std::vector{A::Int(m), A::Int(n), A::Address(dc), A::Address(ds)}));
  EXPECT_TRUE(driver.LaunchKernel(*stream, "reduce_sum", {},
                                  std::vector{A::Int(m * n), A::Address(ds), A::Address(dr)}));
  std::vector<float> out(m * n + 1);
  EXPECT_TRUE(driver.CopyDeviceToHost(*stream, out.data(), ds, m * n * 4));
  EXPECT_TRUE(driver.CopyDeviceToHost(*stream, out.data() + m * n, dr, 4));
  auto synced = driver.SynchronizeStream(*stream, 30s);
  EXPECT_TRUE(synced) << synced.error().ToString();
  return out;
}

TEST(AscendHwTest, KernelsThroughAclnnMatchTheSimulator) {
  RASD_NEED_NPU(npu);
  auto sim = drivers::SimDriver::Create({.device_count = 1, .memory_bytes_per_device = 64 << 20});
  ASSERT_TRUE(sim);
  const auto on_npu = GemmSoftmaxSum(*npu);
  const auto on_sim = GemmSoftmaxSum(**sim);
  ASSERT_EQ(on_npu.size(), on_sim.size());
  for (std::size_t i = 0; i < on_npu.size(); ++i) {
    ASSERT_NEAR(on_npu[i], on_sim[i], 1e-5f * std::max(1.0f, std::fabs(on_sim[i]))) << i;
  }
}

TEST(AscendHwTest, TheSelfTestPassesOnEveryNpu) {
  RASD_NEED_NPU(npu);
  auto runtime = runtime::Runtime::Create(std::move(npu));
  ASSERT_TRUE(runtime) << runtime.error().ToString();
  for (int device = 0; device < static_cast<int>((*runtime)->DeviceCount()); ++device) {
    runtime::SelfTestOptions options;
    options.pattern_bytes = 64ULL << 20;
    const auto report = runtime::RunSelfTest(**runtime, device, options);
    EXPECT_TRUE(report.passed) << "NPU " << device << ": " << report.Summary();
    bool ran_gemm = false;
    for (const auto& check : report.checks) ran_gemm = ran_gemm || check.name == "kernel gemm";
    EXPECT_TRUE(ran_gemm) << "the self-test ran the kernels through aclnn";
  }
}

// Silent data corruption screening through the aclnn kernels: every kernel
// the screen knows gives the host's exact digest on a healthy NPU (softmax
// within 1e-6), so a healthy device is never accused, and the screen
// leaves nothing of the registry silently unchecked.
TEST(AscendHwTest, TheKnownAnswerScreenPassesOnEveryNpu) {
  RASD_NEED_NPU(npu);
  auto runtime = runtime::Runtime::Create(std::move(npu));
  ASSERT_TRUE(runtime) << runtime.error().ToString();
  const auto screen = runtime::KnownAnswerScreen::Build((*runtime)->Kernels().Names());
  EXPECT_GE(screen->Screened().size(), 8u);
  const common::SystemClock clock;
  for (int device = 0; device < static_cast<int>((*runtime)->DeviceCount()); ++device) {
    for (int round = 0; round < 3; ++round) {
      const auto report = screen->Run(**runtime, device, clock);
      EXPECT_TRUE(report.Passed()) << "NPU " << device << ": " << report.Summary();
      EXPECT_EQ(report.kernels, screen->Screened());
      EXPECT_EQ(report.wrong_elements, 0u);
    }
  }
}

}  // namespace
}  // namespace rasd::testing
