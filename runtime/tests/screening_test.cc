// Known-answer screening for silent data corruption: a healthy device
// passes with the host's digests, a device flipping bits in what its
// kernels write fails on the kernel it corrupts, and a device that cannot
// run the screening gives no verdict.

#include "rasd/runtime/screening.h"

#include <algorithm>
#include <cstring>

#include "runtime_test_util.h"

namespace rasd::runtime::testing {
namespace {

class ScreeningTest : public RuntimeTest {
 protected:
  std::shared_ptr<const KnownAnswerScreen> Screen(std::uint64_t elements = 1 << 16) {
    return KnownAnswerScreen::Build(runtime_->Kernels().Names(), {.elements = elements});
  }
  drivers::FaultInjector& Faults() { return *runtime_->Driver().Faults(); }
  common::SystemClock clock_;
};

TEST_F(ScreeningTest, AHealthyDeviceGivesTheHostsAnswerForEveryKernelItComputes) {
  const auto screen = Screen();
  EXPECT_EQ(screen->Screened(), (std::vector<std::string>{"fill", "axpy", "add", "mul", "relu",
                                                          "gemm", "softmax", "reduce_sum"}));
  auto unscreened = screen->Unscreened();
  std::sort(unscreened.begin(), unscreened.end());
  EXPECT_EQ(unscreened, (std::vector<std::string>{"kv_store", "paged_attention"}));
  for (int device = 0; device < 4; ++device) {
    const auto report = screen->Run(*runtime_, device, clock_);
    EXPECT_TRUE(report.Passed()) << report.Summary();
    EXPECT_EQ(report.kernels.size(), 8u);
    // Five elementwise outputs, a 128 x 128 gemm, 256 softmax rows, one sum.
    EXPECT_EQ(report.elements_checked, 5u * 65536 + 128 * 128 + 65536 + 1);
    EXPECT_GT(report.device_time.count(), 0);
  }
  EXPECT_EQ(Pool(1).Stats().allocated_bytes, 0u) << "everything it allocated is freed";
  EXPECT_EQ(runtime_->OwnersOn(1), std::vector<std::string>{}) << "its stream is gone";
}

TEST_F(ScreeningTest, OneFlippedBitInAKernelsOutputFailsThatKernelAndNoOther) {
  const auto screen = Screen();
  // About 3 flips in add's 65536 outputs; other kernels are left alone.
  ASSERT_TRUE(Faults().InjectSilentCorruption(2, 5e-5, "add", 7).has_value());
  const auto report = screen->Run(*runtime_, 2, clock_);
  ASSERT_TRUE(report.completed) << report.error;
  ASSERT_EQ(report.mismatches.size(), 1u) << report.Summary();
  EXPECT_EQ(report.mismatches[0].kernel, "add");
  EXPECT_EQ(report.mismatches[0].shape, "n=65536");
  EXPECT_NE(report.mismatches[0].detail.find("instead of"), std::string::npos)
      << report.mismatches[0].detail;
  EXPECT_FALSE(report.Passed());
  EXPECT_TRUE(report.Summary().starts_with("add n=65536: element ")) << report.Summary();
  // The other devices compute right.
  EXPECT_TRUE(screen->Run(*runtime_, 1, clock_).Passed());
  ASSERT_TRUE(Faults().InjectSilentCorruption(2, 0, "", 0).has_value());
  EXPECT_TRUE(screen->Run(*runtime_, 2, clock_).Passed()) << "a rate of 0 ends it";
}

TEST_F(ScreeningTest, EveryBitOfAWordIsCaughtWhereverItFlips) {
  // The digest: one changed word, any bit of it, anywhere, changes it.
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 17) - 8;
  const auto digest = WordDigest(values.data(), values.size());
  for (std::size_t at : {0u, 1u, 499u, 999u}) {
    for (int bit = 0; bit < 32; ++bit) {
      auto flipped = values;
      std::uint32_t word;
      std::memcpy(&word, &flipped[at], 4);
      word ^= 1u << bit;
      std::memcpy(&flipped[at], &word, 4);
      EXPECT_NE(WordDigest(flipped.data(), flipped.size()), digest) << at << " bit " << bit;
    }
  }
}

TEST_F(ScreeningTest, AtHighRatesEveryKernelThatWritesIsCaught) {
  const auto screen = Screen();
  ASSERT_TRUE(Faults().InjectSilentCorruption(0, 1e-3, "", 11).has_value());
  const auto report = screen->Run(*runtime_, 0, clock_);
  ASSERT_TRUE(report.completed) << report.error;
  std::vector<std::string> wrong;
  for (const auto& mismatch : report.mismatches) wrong.push_back(mismatch.kernel);
  // reduce_sum writes one element: at 1e-3 it is almost never hit.
  for (const char* kernel : {"fill", "axpy", "add", "mul", "relu", "gemm", "softmax"})
    EXPECT_NE(std::find(wrong.begin(), wrong.end(), kernel), wrong.end()) << kernel;
}

TEST_F(ScreeningTest, ADeviceThatCannotRunItGivesNoVerdict) {
  const auto screen = Screen();
  ASSERT_TRUE(Faults().InjectFallOffBus(3).has_value());
  const auto report = screen->Run(*runtime_, 3, clock_);
  EXPECT_FALSE(report.completed);
  EXPECT_FALSE(report.Passed());
  EXPECT_TRUE(report.mismatches.empty()) << "a lost device is not a wrong one";
  EXPECT_TRUE(report.Summary().starts_with("not completed: ")) << report.Summary();
  // Nor one too full to give the screening its buffers.
  MakeRuntime(1, 1 << 20, 1 << 20);
  const auto big = Screen(1 << 20);
  const auto full = big->Run(*runtime_, 0, clock_);
  EXPECT_FALSE(full.completed);
  EXPECT_TRUE(full.mismatches.empty());
}

}  // namespace
}  // namespace rasd::runtime::testing
