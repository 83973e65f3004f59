// The Ascend backend's kernels through the operator library (aclnn), over
// the stand-in libascendcl and libopapi (drivers_shim/ascend/testing): every
// kernel against the simulator through the real marshalling, the two-phase
// protocol as the stand-in enforces it, and the degraded modes (no library,
// one operator missing, bad addresses, a reset meanwhile).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <thread>
#include <vector>

#include "aclnn_types.h"
#include "driver_test_util.h"
#include "rasd/common/dynamic_library.h"
#include "rasd/drivers_shim/ascend_driver.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "testing/fake_control.h"

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;

// The stand-ins' controls, from the copies the driver loads.
struct Stand_ins {
  common::DynamicLibrary acl;
  common::DynamicLibrary opapi;
  decltype(&::fake_acl_reset) acl_reset = nullptr;
  decltype(&::fake_acl_hold) hold = nullptr;
  decltype(&::fake_acl_live_objects) acl_live = nullptr;
  decltype(&::fake_opapi_reset) opapi_reset = nullptr;
  decltype(&::fake_opapi_set_workspace) set_workspace = nullptr;
  decltype(&::fake_opapi_live_objects) opapi_live = nullptr;
  decltype(&::fake_opapi_runs) runs = nullptr;
  decltype(&::fake_opapi_run_faults) run_faults = nullptr;

  static Stand_ins* Get() {
    static Stand_ins* loaded = Load();
    return loaded;
  }

 private:
  Stand_ins(common::DynamicLibrary a, common::DynamicLibrary o)
      : acl(std::move(a)), opapi(std::move(o)) {}
  static Stand_ins* Load() {
    auto acl = common::DynamicLibrary::Open(RASD_FAKE_ASCENDCL_PATH);
    auto opapi = common::DynamicLibrary::Open(RASD_FAKE_OPAPI_PATH);
    if (!acl || !opapi) return nullptr;
    auto* s = new Stand_ins(std::move(*acl), std::move(*opapi));
    const bool bound = s->acl.Bind(s->acl_reset, "fake_acl_reset").has_value() &&
                       s->acl.Bind(s->hold, "fake_acl_hold") &&
                       s->acl.Bind(s->acl_live, "fake_acl_live_objects") &&
                       s->opapi.Bind(s->opapi_reset, "fake_opapi_reset") &&
                       s->opapi.Bind(s->set_workspace, "fake_opapi_set_workspace") &&
                       s->opapi.Bind(s->opapi_live, "fake_opapi_live_objects") &&
                       s->opapi.Bind(s->runs, "fake_opapi_runs") &&
                       s->opapi.Bind(s->run_faults, "fake_opapi_run_faults");
    return bound ? s : nullptr;
  }
};

AscendDriverOptions StandInOptions() {
  AscendDriverOptions options;
  options.acl_library = RASD_FAKE_ASCENDCL_PATH;  // libopapi.so is found beside it
  options.dcmi_library = "/nonexistent/libdcmi-for-rasd-tests.so";
  options.visible_devices = "";
  return options;
}

std::vector<float> Wave(std::size_t count, float phase) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = std::sin(static_cast<float>(i) * 0.37f + phase) * 3.0f;
  }
  return values;
}

class AscendKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Stand_ins::Get(), nullptr) << "the stand-in libraries did not load";
    fake().acl_reset();
    fake().opapi_reset();
    ASSERT_EQ(fake().acl_live(), 0) << "an earlier test leaked ACL objects";
    auto created = CreateAscendDriver(StandInOptions());
    ASSERT_TRUE(created.has_value()) << created.error().ToString();
    driver_ = std::move(*created);
  }

  void TearDown() override {
    driver_.reset();
    fake().hold(0, 0);
    EXPECT_EQ(fake().acl_live(), 0) << "the driver leaked device memory, streams or contexts";
    EXPECT_EQ(fake().opapi_live(), 0) << "tensors, scalars or executors leaked";
    EXPECT_EQ(fake().run_faults(), 0) << "an operator ran over freed memory";
  }

  static Stand_ins& fake() { return *Stand_ins::Get(); }

  std::unique_ptr<Driver> driver_;
};

// Runs every kernel of the registry on `driver` over the same inputs and
// returns everything each produced, in order.
std::vector<float> RunEveryKernel(Driver& driver, std::uint64_t misalign = 0) {
  auto stream = driver.CreateStream(0);
  EXPECT_TRUE(stream.has_value());
  const std::int64_t m = 33, k = 47, n = 29, count = 1000;
  const auto a = Wave(m * k, 0.1f), b = Wave(k * n, 0.7f), x = Wave(count, 1.3f),
             y = Wave(count, 2.9f);
  std::vector<DeviceAddress> reserved;
  // A copy's host buffer must outlive the copy (the Driver contract; the
  // simulator reads it when the copy runs): every one stays until the end.
  std::deque<std::vector<float>> staged;
  auto upload = [&](const std::vector<float>& values) {
    const DeviceAddress base = *driver.ReserveMemory(0, values.size() * 4 + 4096);
    reserved.push_back(base);
    const DeviceAddress at = base + misalign;
    const auto& zeros = staged.emplace_back(values.size() + 16, 0.0f);
    EXPECT_TRUE(driver.CopyHostToDevice(*stream, base, zeros.data(), zeros.size() * 4));
    if (misalign == 0) {
      const auto& kept = staged.emplace_back(values);  // `values` may be a temporary
      EXPECT_TRUE(driver.CopyHostToDevice(*stream, at, kept.data(), kept.size() * 4));
    } else {  // copies need 64-byte alignment: place the values with a kernel-free copy
      auto& shifted = staged.emplace_back(values.size() + 16, 0.0f);
      std::copy(values.begin(), values.end(), shifted.begin() + static_cast<long>(misalign / 4));
      EXPECT_TRUE(driver.CopyHostToDevice(*stream, base, shifted.data(), shifted.size() * 4));
    }
    return at;
  };
  const DeviceAddress da = upload(a), db = upload(b), dx = upload(x), dy = upload(y),
                      dc = upload(std::vector<float>(m * n)), ds = upload(std::vector<float>(m * n)),
                      dsum = upload(std::vector<float>(1)), dadd = upload(std::vector<float>(count)),
                      dmul = upload(std::vector<float>(count)),
                      dfill = upload(std::vector<float>(count));
  auto launch = [&](std::string_view name, std::vector<KernelArg> args) {
    auto launched = driver.LaunchKernel(*stream, name, {}, args);
    EXPECT_TRUE(launched.has_value()) << name << ": " << launched.error().ToString();
  };
  using A = KernelArg;
  launch("empty", {});
  launch("fill", {A::Address(dfill), A::Int(count), A::Float(-1.75f)});
  launch("add", {A::Int(count), A::Address(dx), A::Address(dy), A::Address(dadd)});
  launch("mul", {A::Int(count), A::Address(dx), A::Address(dy), A::Address(dmul)});
  launch("axpy", {A::Int(count), A::Float(0.5f), A::Address(dx), A::Address(dy)});
  launch("gemm", {A::Int(m), A::Int(n), A::Int(k), A::Address(da), A::Address(db), A::Address(dc)});
  launch("relu", {A::Int(m * n), A::Address(dc), A::Address(dc)});
  launch("softmax", {A::Int(m), A::Int(n), A::Address(dc), A::Address(ds)});
  launch("reduce_sum", {A::Int(m * n), A::Address(ds), A::Address(dsum)});
  std::vector<float> out;
  for (const auto& [address, floats] :
       std::vector<std::pair<DeviceAddress, std::int64_t>>{{dfill, count},
                                                           {dadd, count},
                                                           {dmul, count},
                                                           {dy, count},
                                                           {dc, m * n},
                                                           {ds, m * n},
                                                           {dsum, 1}}) {
    const DeviceAddress base = address - misalign;
    std::vector<float> back(static_cast<std::size_t>(floats) + 16);
    EXPECT_TRUE(driver.CopyDeviceToHost(*stream, back.data(), base, back.size() * 4));
    auto synced = driver.SynchronizeStream(*stream, 10s);
    EXPECT_TRUE(synced.has_value()) << synced.error().ToString();
    out.insert(out.end(), back.begin() + static_cast<long>(misalign / 4),
               back.begin() + static_cast<long>(misalign / 4) + floats);
  }
  for (DeviceAddress base : reserved) EXPECT_TRUE(driver.ReleaseMemory(0, base));
  EXPECT_TRUE(driver.DestroyStream(*stream));
  return out;
}

void ExpectSameAsSimulator(const std::vector<float>& on_npu) {
  auto sim = SimDriver::Create({.device_count = 1, .memory_bytes_per_device = 64 << 20});
  ASSERT_TRUE(sim.has_value());
  const auto on_sim = RunEveryKernel(**sim);
  ASSERT_EQ(on_npu.size(), on_sim.size());
  // The tolerance the CUDA kernels meet against the simulator.
  for (std::size_t i = 0; i < on_npu.size(); ++i) {
    ASSERT_NEAR(on_npu[i], on_sim[i], 1e-5f * std::max(1.0f, std::fabs(on_sim[i]))) << i;
  }
  EXPECT_NEAR(on_npu.back(), 33.0f, 1e-3f) << "each softmax row sums to 1";
  EXPECT_EQ(on_npu.front(), -1.75f);
}

TEST_F(AscendKernelsTest, OffersTheRegistrysKernelsButSleep) {
  std::vector<std::string> names;
  for (const auto& kernel : driver_->Kernels()) names.push_back(kernel.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"add", "axpy", "empty", "fill", "gemm", "mul",
                                             "reduce_sum", "relu", "softmax"}));
  auto stream = driver_->CreateStream(0);
  ASSERT_TRUE(stream.has_value());
  auto slept = driver_->LaunchKernel(*stream, "sleep_us", {}, std::vector{KernelArg::Int(10)});
  ASSERT_FALSE(slept.has_value());
  EXPECT_EQ(slept.error().code, ErrorCode::kNotSupported);
  EXPECT_NE(slept.error().message.find("waits for a time"), std::string::npos)
      << slept.error().message;
  auto unknown = driver_->LaunchKernel(*stream, "no_such_kernel", {}, {});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
}

TEST_F(AscendKernelsTest, EveryKernelMatchesTheSimulator) {
  const auto on_npu = RunEveryKernel(*driver_);
  ExpectSameAsSimulator(on_npu);
  EXPECT_EQ(fake().runs(), 9) << "one operator per kernel";
}

// Tensors that start 4 bytes past a 32-byte boundary are views at an element
// offset into aligned storage (the stand-in refuses unaligned tensorData).
TEST_F(AscendKernelsTest, TensorsOffTheAlignmentAreViewsAndStillMatch) {
  const auto on_npu = RunEveryKernel(*driver_, 4);
  ExpectSameAsSimulator(on_npu);
}

TEST_F(AscendKernelsTest, BadAddressesAndSizesAreRefusedBeforeAnyOperator) {
  auto stream = driver_->CreateStream(0);
  ASSERT_TRUE(stream.has_value());
  const DeviceAddress buffer = testing::ReserveOn(*driver_, 4096);
  using A = KernelArg;
  auto launch = [&](std::string_view name, std::vector<KernelArg> args) {
    return driver_->LaunchKernel(*stream, name, {}, args);
  };
  auto outside = launch("relu", {A::Int(2048), A::Address(buffer), A::Address(buffer)});
  ASSERT_FALSE(outside.has_value()) << "8 KiB of a 4 KiB reservation";
  EXPECT_EQ(outside.error().code, ErrorCode::kInvalidArgument);
  auto misaligned = launch("relu", {A::Int(8), A::Address(buffer + 2), A::Address(buffer)});
  ASSERT_FALSE(misaligned.has_value());
  EXPECT_EQ(misaligned.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(misaligned.error().message.find("4-byte aligned"), std::string::npos);
  auto nowhere = launch("fill", {A::Address(0x1000), A::Int(4), A::Float(1.0f)});
  ASSERT_FALSE(nowhere.has_value());
  EXPECT_EQ(nowhere.error().code, ErrorCode::kInvalidArgument);
  auto kinds = launch("fill", {A::Int(4), A::Address(buffer), A::Float(1.0f)});
  ASSERT_FALSE(kinds.has_value());
  EXPECT_EQ(kinds.error().code, ErrorCode::kInvalidArgument);
  auto huge = launch("gemm", {A::Int(1 << 21), A::Int(1), A::Int(1), A::Address(buffer),
                              A::Address(buffer), A::Address(buffer)});
  ASSERT_FALSE(huge.has_value());
  EXPECT_EQ(huge.error().code, ErrorCode::kInvalidArgument);
  auto negative = launch("add", {A::Int(-1), A::Address(buffer), A::Address(buffer),
                                 A::Address(buffer)});
  ASSERT_FALSE(negative.has_value());
  EXPECT_EQ(negative.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(fake().runs(), 0);
  EXPECT_TRUE(driver_->SynchronizeStream(*stream, 1s).has_value()) << "the stream is not failed";
}

TEST_F(AscendKernelsTest, ZeroLengthKernelsRunNothingOrWriteTheEmptyResult) {
  auto stream = driver_->CreateStream(0);
  ASSERT_TRUE(stream.has_value());
  const DeviceAddress buffer = testing::ReserveOn(*driver_, 4096);
  std::vector<float> ones(16, 1.0f);
  ASSERT_TRUE(driver_->CopyHostToDevice(*stream, buffer, ones.data(), 64));
  using A = KernelArg;
  auto launch = [&](std::string_view name, std::vector<KernelArg> args) {
    auto launched = driver_->LaunchKernel(*stream, name, {}, args);
    EXPECT_TRUE(launched.has_value()) << name << ": " << launched.error().ToString();
  };
  launch("add", {A::Int(0), A::Address(buffer), A::Address(buffer), A::Address(buffer)});
  launch("softmax", {A::Int(0), A::Int(7), A::Address(buffer), A::Address(buffer)});
  launch("gemm", {A::Int(0), A::Int(4), A::Int(4), A::Address(buffer), A::Address(buffer),
                  A::Address(buffer)});
  EXPECT_EQ(fake().runs(), 0);
  // An empty sum is 0, as on the simulator: C (2x2) = 0 and out[0] = 0.
  launch("gemm", {A::Int(2), A::Int(2), A::Int(0), A::Address(buffer), A::Address(buffer),
                  A::Address(buffer)});
  launch("reduce_sum", {A::Int(0), A::Address(buffer), A::Address(buffer + 32)});
  std::vector<float> back(16);
  ASSERT_TRUE(driver_->CopyDeviceToHost(*stream, back.data(), buffer, 64));
  ASSERT_TRUE(driver_->SynchronizeStream(*stream, 5s));
  EXPECT_EQ(back, (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1}));
}

// Workspaces grow with the operators' needs; one outgrown while work that
// uses it is still queued (the NPU held) stays until that work has run.
TEST_F(AscendKernelsTest, AnOutgrownWorkspaceOutlivesTheWorkQueuedOnIt) {
  auto stream = driver_->CreateStream(0);
  ASSERT_TRUE(stream.has_value());
  const DeviceAddress buffer = testing::ReserveOn(*driver_, 4096);
  const std::vector<KernelArg> relu = {KernelArg::Int(16), KernelArg::Address(buffer),
                                       KernelArg::Address(buffer)};
  fake().hold(0, 1);
  for (long long bytes : {100LL << 10, 1LL << 20, 3LL << 20}) {
    fake().set_workspace(bytes);
    ASSERT_TRUE(driver_->LaunchKernel(*stream, "relu", {}, relu).has_value());
  }
  std::this_thread::sleep_for(5ms);
  fake().hold(0, 0);
  ASSERT_TRUE(driver_->SynchronizeStream(*stream, 5s).has_value());
  EXPECT_EQ(fake().runs(), 3);
  EXPECT_EQ(fake().run_faults(), 0) << "a workspace was freed under queued work";
}

TEST_F(AscendKernelsTest, LaunchesRacingResetsFailCleanlyAndWorkAfter) {
  std::atomic<bool> stop{false};
  std::atomic<int> launched{0}, refused{0};
  // A reservation made before a reset began may have been freed by it: its
  // owner forgets it (MemoryAfterReset::kFreed) rather than release an
  // address a later reservation may have taken over.
  // A reservation made while a reset runs may be freed by it too.
  std::atomic<int> resets_begun{0}, resets_done{0};
  std::thread launcher([&] {
    auto stream = driver_->CreateStream(0);
    while (!stream && !stop) stream = driver_->CreateStream(0);  // refused while a reset runs
    ASSERT_TRUE(stream.has_value()) << stream.error().ToString();
    std::vector<std::pair<DeviceAddress, int>> unsynced;  // with resets_begun at reservation
    auto release_survivors = [&] {
      for (const auto& [done, resets_then] : unsynced) {
        if (resets_then == resets_begun.load()) {
          EXPECT_TRUE(driver_->ReleaseMemory(0, done));
        }
      }
      unsynced.clear();
    };
    while (!stop) {
      const int begun = resets_begun.load();
      // -1: a reset was running when it was reserved, never released here.
      const int resets_then = resets_done.load() == begun ? begun : -1;
      auto buffer = driver_->ReserveMemory(0, 4096);
      if (!buffer) continue;
      const std::vector<KernelArg> args = {KernelArg::Int(32), KernelArg::Address(*buffer),
                                           KernelArg::Address(*buffer)};
      for (const char* kernel : {"relu", "empty"}) {
        auto result = driver_->LaunchKernel(*stream, kernel, {}, kernel == std::string("empty")
                                                                     ? std::vector<KernelArg>{}
                                                                     : args);
        if (result) {
          ++launched;
        } else {
          ++refused;
          EXPECT_TRUE(result.error().code == ErrorCode::kAborted ||
                      result.error().code == ErrorCode::kInvalidArgument)
              << result.error().ToString();
        }
      }
      // A synchronize a reset cut short says nothing of the work still on
      // the device: memory goes back only once a synchronize succeeds.
      unsynced.emplace_back(*buffer, resets_then);
      if (driver_->SynchronizeStream(*stream, 1s)) release_survivors();
    }
    EXPECT_TRUE(driver_->DestroyStream(*stream));
    release_survivors();
  });
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(2ms);
    ++resets_begun;
    ASSERT_TRUE(driver_->ResetDevice(0).has_value());
    ++resets_done;
  }
  stop = true;
  launcher.join();
  EXPECT_GT(launched.load(), 0);
  auto stream = driver_->CreateStream(0);
  ASSERT_TRUE(stream.has_value());
  const DeviceAddress buffer = testing::ReserveOn(*driver_, 4096);
  ASSERT_TRUE(driver_->LaunchKernel(*stream, "fill", {},
                                    std::vector{KernelArg::Address(buffer), KernelArg::Int(4),
                                                KernelArg::Float(2.5f)}));
  std::vector<float> back(16);
  ASSERT_TRUE(driver_->CopyDeviceToHost(*stream, back.data(), buffer, 64));
  ASSERT_TRUE(driver_->SynchronizeStream(*stream, 5s));
  EXPECT_EQ(back[0], 2.5f);
  EXPECT_EQ(back[3], 2.5f);
}

TEST(AscendKernelsDegradedTest, WithoutTheOperatorLibraryKernelsAreUnavailableTheRestServes) {
  ASSERT_NE(Stand_ins::Get(), nullptr);
  Stand_ins::Get()->acl_reset();
  AscendDriverOptions options = StandInOptions();
  options.op_library = "/nonexistent/libopapi-for-rasd-tests.so";
  auto created = CreateAscendDriver(options);
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  Driver& driver = **created;
  EXPECT_TRUE(driver.Kernels().empty());
  const StreamHandle stream = testing::NewStreamOn(driver);
  auto launched = driver.LaunchKernel(stream, "empty", {}, {});
  ASSERT_FALSE(launched.has_value());
  EXPECT_EQ(launched.error().code, ErrorCode::kNotSupported);
  EXPECT_NE(launched.error().message.find("libopapi-for-rasd-tests.so"), std::string::npos)
      << launched.error().message;
  const DeviceAddress buffer = testing::ReserveOn(driver, 4096);
  std::vector<float> values(16, 4.0f), back(16);
  ASSERT_TRUE(driver.CopyHostToDevice(stream, buffer, values.data(), 64));
  ASSERT_TRUE(driver.CopyDeviceToHost(stream, back.data(), buffer, 64));
  ASSERT_TRUE(driver.SynchronizeStream(stream, 5s));
  EXPECT_EQ(back, values);
}

TEST(AscendKernelsDegradedTest, ALibraryWithoutMatmulLosesOnlyGemm) {
  ASSERT_NE(Stand_ins::Get(), nullptr);
  Stand_ins::Get()->acl_reset();
  AscendDriverOptions options = StandInOptions();
  options.op_library = RASD_FAKE_OPAPI_NO_MATMUL_PATH;
  auto created = CreateAscendDriver(options);
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  Driver& driver = **created;
  EXPECT_EQ(driver.Kernels().size(), 8u);
  for (const auto& kernel : driver.Kernels()) EXPECT_NE(kernel.name, "gemm");
  const StreamHandle stream = testing::NewStreamOn(driver);
  const DeviceAddress buffer = testing::ReserveOn(driver, 4096);
  auto gemm = driver.LaunchKernel(stream, "gemm", {},
                                  std::vector{KernelArg::Int(1), KernelArg::Int(1),
                                              KernelArg::Int(1), KernelArg::Address(buffer),
                                              KernelArg::Address(buffer),
                                              KernelArg::Address(buffer)});
  ASSERT_FALSE(gemm.has_value());
  EXPECT_EQ(gemm.error().code, ErrorCode::kNotSupported);
  EXPECT_NE(gemm.error().message.find("aclnnMatmul"), std::string::npos) << gemm.error().message;
  EXPECT_TRUE(driver.LaunchKernel(stream, "fill", {},
                                  std::vector{KernelArg::Address(buffer), KernelArg::Int(4),
                                              KernelArg::Float(1.0f)}));
  EXPECT_TRUE(driver.SynchronizeStream(stream, 5s));
}

// The protocol, called directly as a careless caller would: the stand-in
// refuses what CANN documents as errors.
class AclnnProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Stand_ins::Get(), nullptr);
    Stand_ins::Get()->acl_reset();
    Stand_ins::Get()->opapi_reset();
    auto created = CreateAscendDriver(StandInOptions());  // aclInit, contexts
    ASSERT_TRUE(created.has_value());
    driver_ = std::move(*created);
    auto& acl = Stand_ins::Get()->acl;
    ASSERT_TRUE(acl.Bind(set_device_, "aclrtSetDevice"));
    ASSERT_TRUE(acl.Bind(malloc_, "aclrtMalloc"));
    ASSERT_TRUE(acl.Bind(free_, "aclrtFree"));
    ASSERT_TRUE(acl.Bind(create_stream_, "aclrtCreateStream"));
    ASSERT_TRUE(acl.Bind(destroy_stream_, "aclrtDestroyStream"));
    ASSERT_TRUE(acl.Bind(sync_, "aclrtSynchronizeStreamWithTimeout"));
    auto& op = Stand_ins::Get()->opapi;
    ASSERT_TRUE(op.Bind(create_tensor_, "aclCreateTensor"));
    ASSERT_TRUE(op.Bind(destroy_tensor_, "aclDestroyTensor"));
    ASSERT_TRUE(op.Bind(softmax_prepare_, "aclnnSoftmaxGetWorkspaceSize"));
    ASSERT_TRUE(op.Bind(softmax_, "aclnnSoftmax"));
    ASSERT_TRUE(op.Bind(relu_, "aclnnRelu"));
    ASSERT_EQ(set_device_(1), 0);
    ASSERT_EQ(create_stream_(&other_stream_), 0);
    ASSERT_EQ(set_device_(0), 0);
    ASSERT_EQ(create_stream_(&stream_), 0);
    ASSERT_EQ(malloc_(&memory_, 1 << 16, ACL_MEM_MALLOC_HUGE_FIRST), 0);
    aligned_ = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(memory_) + 31) / 32 * 32);
    const std::int64_t dims[] = {4, 8}, strides[] = {8, 1}, storage[] = {32};
    tensor_ = create_tensor_(dims, 2, ascend::kAclFloat, strides, 0, ascend::kAclFormatNd, storage,
                             1, aligned_);
    ASSERT_NE(tensor_, nullptr);
  }
  void TearDown() override {
    if (tensor_ != nullptr) (void)destroy_tensor_(tensor_);
    (void)sync_(stream_, 1000);
    (void)destroy_stream_(stream_);
    (void)set_device_(1);
    (void)destroy_stream_(other_stream_);
    (void)set_device_(0);
    (void)free_(memory_);
    driver_.reset();
    EXPECT_EQ(Stand_ins::Get()->opapi_live(), 0);
    EXPECT_EQ(Stand_ins::Get()->acl_live(), 0);
  }

  // Phase one of a softmax over the 4x8 tensor, in place.
  aclOpExecutor* Prepared(std::uint64_t* workspace) {
    aclOpExecutor* executor = nullptr;
    EXPECT_EQ(softmax_prepare_(tensor_, 1, tensor_, workspace, &executor), 0);
    return executor;
  }

  std::unique_ptr<Driver> driver_;
  decltype(&::aclrtSetDevice) set_device_ = nullptr;
  decltype(&::aclrtMalloc) malloc_ = nullptr;
  decltype(&::aclrtFree) free_ = nullptr;
  decltype(&::aclrtCreateStream) create_stream_ = nullptr;
  decltype(&::aclrtDestroyStream) destroy_stream_ = nullptr;
  decltype(&::aclrtSynchronizeStreamWithTimeout) sync_ = nullptr;
  decltype(&::aclCreateTensor) create_tensor_ = nullptr;
  decltype(&::aclDestroyTensor) destroy_tensor_ = nullptr;
  decltype(&::aclnnSoftmaxGetWorkspaceSize) softmax_prepare_ = nullptr;
  decltype(&::aclnnSoftmax) softmax_ = nullptr;
  decltype(&::aclnnRelu) relu_ = nullptr;
  aclrtStream stream_ = nullptr;
  aclrtStream other_stream_ = nullptr;
  void* memory_ = nullptr;
  void* aligned_ = nullptr;
  aclTensor* tensor_ = nullptr;
};

TEST_F(AclnnProtocolTest, TheRightCallRuns) {
  std::uint64_t workspace = 0;
  aclOpExecutor* executor = Prepared(&workspace);
  EXPECT_EQ(workspace, 16u) << "4 bytes a row";
  EXPECT_EQ(softmax_(static_cast<std::byte*>(aligned_) + 4096, workspace, executor, stream_), 0);
  EXPECT_EQ(sync_(stream_, 1000), 0);
  EXPECT_EQ(Stand_ins::Get()->runs(), 1);
}

TEST_F(AclnnProtocolTest, AnExecutorWithoutItsFirstPhaseIsRefused) {
  alignas(64) std::byte forged[64] = {};
  EXPECT_EQ(softmax_(aligned_, 1024, reinterpret_cast<aclOpExecutor*>(forged), stream_),
            ascend::kAclnnErrParamInvalid);
  EXPECT_EQ(softmax_(aligned_, 1024, nullptr, stream_), ascend::kAclnnErrParamInvalid);
}

TEST_F(AclnnProtocolTest, AnExecutorRunsOnceAndOnlyWithItsOwnOperator) {
  std::uint64_t workspace = 0;
  aclOpExecutor* executor = Prepared(&workspace);
  void* space = static_cast<std::byte*>(aligned_) + 4096;
  EXPECT_EQ(relu_(space, workspace, executor, stream_), ascend::kAclnnErrParamInvalid)
      << "a softmax executor given to aclnnRelu";
  executor = Prepared(&workspace);
  EXPECT_EQ(softmax_(space, workspace, executor, stream_), 0);
  EXPECT_EQ(softmax_(space, workspace, executor, stream_), ascend::kAclnnErrParamInvalid)
      << "run twice";
}

TEST_F(AclnnProtocolTest, ATooSmallOrMissingWorkspaceIsRefused) {
  std::uint64_t workspace = 0;
  void* space = static_cast<std::byte*>(aligned_) + 4096;
  EXPECT_EQ(softmax_(space, 8, Prepared(&workspace), stream_), ascend::kAclnnErrParamInvalid);
  EXPECT_EQ(softmax_(nullptr, workspace, Prepared(&workspace), stream_),
            ascend::kAclnnErrParamNullptr);
  std::vector<std::byte> host(1024);
  EXPECT_EQ(softmax_(host.data(), workspace, Prepared(&workspace), stream_),
            ascend::kAclnnErrParamInvalid)
      << "host memory as workspace";
  EXPECT_EQ(Stand_ins::Get()->runs(), 0);
}

TEST_F(AclnnProtocolTest, AWrongStreamIsRefused) {
  std::uint64_t workspace = 0;
  void* space = static_cast<std::byte*>(aligned_) + 4096;
  EXPECT_EQ(softmax_(space, workspace, Prepared(&workspace), other_stream_),
            ascend::kAclnnErrParamInvalid)
      << "a stream of another device";
  alignas(64) std::byte not_a_stream[64] = {};
  EXPECT_EQ(softmax_(space, workspace, Prepared(&workspace), not_a_stream),
            ascend::kAclnnErrParamInvalid);
  EXPECT_EQ(Stand_ins::Get()->runs(), 0);
}

TEST_F(AclnnProtocolTest, UnalignedTensorDataIsRefused) {
  const std::int64_t dims[] = {4}, strides[] = {1}, storage[] = {4};
  EXPECT_EQ(create_tensor_(dims, 1, ascend::kAclFloat, strides, 0, ascend::kAclFormatNd, storage,
                           1, static_cast<std::byte*>(aligned_) + 4),
            nullptr);
}

}  // namespace
}  // namespace rasd::drivers
