// A device reset that frees the device's memory, end to end over the CUDA
// backend and its stand-in libcuda (drivers_shim/tests/fake_cuda.cc): a
// sticky error, the context reset, the pool forgetting its arenas, and the
// device serving again (the self-test passes on fresh memory).

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <numeric>
#include <vector>

#include "rasd/drivers_shim/cuda_driver.h"
#include "rasd/runtime/runtime.h"
#include "rasd/runtime/self_test.h"

namespace rasd::runtime {
namespace {

using namespace std::chrono_literals;

// A runtime over the CUDA backend and its stand-in libcuda, with the
// stand-in's controls. Device 1 starts healthy (the library stays loaded
// between tests).
class DeviceResetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("RASD_FAKE_CUDA_INIT");
    ::setenv("RASD_FAKE_CUDA_DEVICES", "2", 1);
    auto driver = drivers::CudaDriver::Create({.library = RASD_FAKE_CUDA_PATH});
    ASSERT_TRUE(driver) << driver.error().ToString();
    auto created = Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 1 << 20}});
    ASSERT_TRUE(created) << created.error().ToString();
    runtime_ = std::move(*created);
    fake_ = ::dlopen(RASD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(fake_, nullptr);
    inject_ecc_ = reinterpret_cast<void (*)(int)>(::dlsym(fake_, "fake_cuda_inject_ecc"));
    clear_ = reinterpret_cast<void (*)(int)>(::dlsym(fake_, "fake_cuda_clear"));
    survives_ =
        reinterpret_cast<void (*)(int, int)>(::dlsym(fake_, "fake_cuda_sticky_survives_reset"));
    ASSERT_TRUE(inject_ecc_ && clear_ && survives_);
    clear_(1);
  }
  void TearDown() override {
    runtime_.reset();  // streams are the tests' own, gone by now
    if (fake_ != nullptr) ::dlclose(fake_);
  }

  std::unique_ptr<Runtime> runtime_;
  void* fake_ = nullptr;
  void (*inject_ecc_)(int) = nullptr;
  void (*clear_)(int) = nullptr;
  void (*survives_)(int, int) = nullptr;
};

TEST_F(DeviceResetTest, AStickyGpuIsResetAndItsPoolReservesAfresh) {
  Runtime& runtime = *runtime_;

  auto stream = runtime.CreateStream(1, {.owner = "job-a"});
  ASSERT_TRUE(stream) << stream.error().ToString();
  MemoryPool& pool = **runtime.Pool(1);
  auto held = pool.Allocate(8192, **stream);
  ASSERT_TRUE(held) << held.error().ToString();
  std::vector<char> pattern(8192);
  std::iota(pattern.begin(), pattern.end(), 0);
  ASSERT_TRUE((*stream)->CopyToDevice(held->address, pattern.data(), pattern.size()));
  ASSERT_TRUE((*stream)->Synchronize(5s));

  inject_ecc_(1);
  (void)(*stream)->CopyToDevice(held->address, pattern.data(), pattern.size());
  ASSERT_FALSE((*stream)->Synchronize(5s)) << "the context is sticky now";

  auto reset = runtime.ResetDevice(1);
  ASSERT_TRUE(reset) << reset.error().ToString();
  EXPECT_TRUE(reset->memory_freed);
  EXPECT_EQ(reset->allocations_lost, 1u);
  EXPECT_EQ(reset->streams_aborted, 1u);
  EXPECT_TRUE((*stream)->Aborted()) << "its holder must rebuild what it kept there";
  EXPECT_EQ(pool.Stats().arenas, 0u);

  // A new stream serves on new memory; the old allocation's free only
  // settles the accounts.
  stream = runtime.CreateStream(1, {.owner = "job-a"});
  ASSERT_TRUE(stream) << stream.error().ToString();
  auto fresh = pool.Allocate(8192, **stream);
  ASSERT_TRUE(fresh) << fresh.error().ToString();
  std::vector<char> back(8192);
  ASSERT_TRUE((*stream)->CopyToDevice(fresh->address, pattern.data(), pattern.size()));
  ASSERT_TRUE((*stream)->CopyToHost(back.data(), fresh->address, back.size()));
  ASSERT_TRUE((*stream)->Synchronize(5s));
  EXPECT_EQ(back, pattern);
  ASSERT_TRUE(pool.Free(*held));
  ASSERT_TRUE(pool.Free(*fresh));
  EXPECT_EQ(pool.Stats().live_allocations, 0u);

  const SelfTestReport report = RunSelfTest(runtime, 1);
  EXPECT_TRUE(report.passed) << report.Summary();
  stream->reset();
}

// A context reset that freed the memory but failed after it (the sticky
// error outlived it): the pool still holds arenas over memory that is gone.
// The next reset that succeeds must say the memory was freed, so the pool
// forgets them, or the repaired GPU hands out addresses nothing maps.
TEST_F(DeviceResetTest, AResetThatFreedTheMemoryButFailedIsReportedByTheNextOne) {
  Runtime& runtime = *runtime_;

  auto stream = runtime.CreateStream(1, {.owner = "job-a"});
  ASSERT_TRUE(stream) << stream.error().ToString();
  MemoryPool& pool = **runtime.Pool(1);
  auto held = pool.Allocate(8192, **stream);
  ASSERT_TRUE(held) << held.error().ToString();
  ASSERT_TRUE(pool.Free(*held));
  ASSERT_EQ(pool.Stats().arenas, 1u);

  survives_(1, 1);
  inject_ecc_(1);
  std::vector<char> host(8192);
  auto again = pool.Allocate(8192, **stream);
  ASSERT_TRUE(again);
  (void)(*stream)->CopyToHost(host.data(), again->address, host.size());
  ASSERT_FALSE((*stream)->Synchronize(5s));
  auto failed = runtime.ResetDevice(1);
  ASSERT_FALSE(failed) << "the sticky error outlived the context reset";
  EXPECT_EQ(failed.error().code, ErrorCode::kDeviceFault);

  clear_(1);  // whatever held the error on (a bus reset, say) is gone now
  auto reset = runtime.ResetDevice(1);
  ASSERT_TRUE(reset) << reset.error().ToString();
  EXPECT_TRUE(reset->memory_freed) << "the failed reset freed it";
  EXPECT_EQ(pool.Stats().arenas, 0u);
  ASSERT_TRUE(pool.Free(*again));
  const SelfTestReport report = RunSelfTest(runtime, 1);
  EXPECT_TRUE(report.passed) << report.Summary();
  stream->reset();
}

}  // namespace
}  // namespace rasd::runtime
