// The CUDA backend: loading fails cleanly without a driver, and the
// Driver contract holds over tests/fake_cuda.cc, a libcuda stand-in whose
// memory is host memory and whose kernels are the simulator's.

#include "rasd/drivers_shim/cuda_driver.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "driver_test_util.h"
#include "rasd/drivers_shim/composite_driver.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/testing/eventually.h"

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;

TEST(CudaDriverLoadTest, AMissingLibraryIsUnavailable) {
  auto driver = CudaDriver::Create({.library = "libcuda-rasd-missing.so.1"});
  ASSERT_FALSE(driver);
  EXPECT_EQ(driver.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(driver.error().message.find("libcuda-rasd-missing.so.1"), std::string::npos);
}

TEST(CudaDriverLoadTest, ALibraryWithoutTheDriverApiIsUnavailable) {
  auto driver = CudaDriver::Create({.library = "libm.so.6"});
  ASSERT_FALSE(driver);
  EXPECT_EQ(driver.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(driver.error().message.find("no symbol cuInit"), std::string::npos)
      << driver.error().message;
}

// The toolkit's stub libcuda answers cuInit with CUDA_ERROR_STUB_LIBRARY
// (34): the stand-in does the same on demand, and the real stub is checked
// too where the toolkit is installed.
TEST(CudaDriverLoadTest, TheToolkitsStubLibrarySaysThereIsNoDriver) {
  auto expect_stub_refused = [](const std::string& library) {
    auto driver = CudaDriver::Create({.library = library});
    ASSERT_FALSE(driver) << library;
    EXPECT_EQ(driver.error().code, ErrorCode::kUnavailable);
    EXPECT_NE(driver.error().message.find("stub: no NVIDIA driver"), std::string::npos)
        << driver.error().message;
    EXPECT_NE(driver.error().message.find("(34)"), std::string::npos) << driver.error().message;
  };
  ::setenv("RASD_FAKE_CUDA_INIT", "34", 1);
  expect_stub_refused(RASD_FAKE_CUDA_PATH);
  ::unsetenv("RASD_FAKE_CUDA_INIT");
  const std::string toolkit_stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (std::filesystem::exists(toolkit_stub)) expect_stub_refused(toolkit_stub);
}

TEST(CudaDriverLoadTest, NoGpuIsUnavailableWithCudasReason) {
  ::setenv("RASD_FAKE_CUDA_INIT", "100", 1);  // CUDA_ERROR_NO_DEVICE
  auto driver = CudaDriver::Create({.library = RASD_FAKE_CUDA_PATH});
  ::unsetenv("RASD_FAKE_CUDA_INIT");
  ASSERT_FALSE(driver);
  EXPECT_EQ(driver.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(driver.error().message.find("cuInit: CUDA_ERROR_NO_DEVICE (100)"), std::string::npos)
      << driver.error().message;
}

class CudaDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("RASD_FAKE_CUDA_INIT");
    ::setenv("RASD_FAKE_CUDA_DEVICES", "2", 1);
    auto driver = CudaDriver::Create({.library = RASD_FAKE_CUDA_PATH});
    ASSERT_TRUE(driver) << driver.error().ToString();
    driver_ = std::move(*driver);
    // The fake's test controls, from the copy the driver loaded.
    fake_ = ::dlopen(RASD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(fake_, nullptr);
    hold_ = reinterpret_cast<void (*)(int, int)>(::dlsym(fake_, "fake_cuda_hold"));
    inject_ecc_ = reinterpret_cast<void (*)(int)>(::dlsym(fake_, "fake_cuda_inject_ecc"));
    clear_ = reinterpret_cast<void (*)(int)>(::dlsym(fake_, "fake_cuda_clear"));
    stream_queries_ = reinterpret_cast<int (*)()>(::dlsym(fake_, "fake_cuda_stream_queries"));
    ASSERT_TRUE(hold_ && inject_ecc_ && clear_ && stream_queries_);
    clear_(0);
    clear_(1);
  }
  void TearDown() override {
    if (clear_ != nullptr) {
      clear_(0);
      clear_(1);
    }
    driver_.reset();
    if (fake_ != nullptr) ::dlclose(fake_);
  }

  StreamHandle NewStream(int device = 0) { return testing::NewStreamOn(*driver_, device); }
  DeviceAddress Reserve(std::uint64_t bytes, int device = 0) {
    return testing::ReserveOn(*driver_, bytes, device);
  }

  int StreamQueries() const { return stream_queries_(); }
  // A wait on a stream has begun (it took its snapshot of the stream's
  // resets) once CUDA is asked about a stream after `before`.
  void WaitUntilAStreamIsQueried(int before) const {
    ASSERT_TRUE(rasd::testing::Eventually([&] { return StreamQueries() > before; }, 5s))
        << "the wait never asked CUDA about its stream";
  }

  std::vector<char> host_buffer_;  // destroyed after the driver, which waits for the GPU
  std::unique_ptr<Driver> driver_;
  void* fake_ = nullptr;
  void (*hold_)(int, int) = nullptr;
  void (*inject_ecc_)(int) = nullptr;
  void (*clear_)(int) = nullptr;
  int (*stream_queries_)() = nullptr;
};

TEST_F(CudaDriverTest, EnumeratesGpusWithTheirPciAddressUuidAndMemory) {
  EXPECT_EQ(driver_->Name(), "cuda");
  auto devices = driver_->EnumerateDevices();
  ASSERT_TRUE(devices);
  ASSERT_EQ(devices->size(), 2u);
  const auto& first = (*devices)[0];
  EXPECT_EQ(first.vendor, "nvidia");
  EXPECT_EQ(first.name, "Fake CUDA GPU 0");
  EXPECT_EQ(first.pci_bdf, "0000:d1:00.0") << "lower case, as the kernel and NVML name it";
  EXPECT_EQ(first.uuid, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
  EXPECT_EQ(first.memory_bytes, std::uint64_t{1} << 30);
  EXPECT_EQ((*devices)[1].pci_bdf, "0000:d2:00.0");
}

TEST_F(CudaDriverTest, HasNoFaultInjector) {
  EXPECT_EQ(driver_->Faults(), nullptr) << "a real GPU takes no injected faults";
}

// runtime.driver: [sim, cuda]: the simulator's devices take injected faults,
// the GPUs refuse them by name.
TEST_F(CudaDriverTest, NextToTheSimulatorItsGpusRefuseInjectedFaults) {
  auto sim = SimDriver::Create({.device_count = 1, .memory_bytes_per_device = 16 << 20});
  ASSERT_TRUE(sim) << sim.error().ToString();
  std::vector<std::unique_ptr<Driver>> backends;
  backends.push_back(std::move(*sim));
  backends.push_back(std::move(driver_));
  auto composite = CompositeDriver::Create(std::move(backends));
  ASSERT_TRUE(composite) << composite.error().ToString();
  FaultInjector* faults = (*composite)->Faults();
  ASSERT_NE(faults, nullptr);
  EXPECT_TRUE(faults->InjectHang(0).has_value());
  auto refused = faults->InjectHang(2);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kNotSupported);
  EXPECT_EQ(refused.error().message, "device 2 is a cuda device: cuda cannot inject faults");
  auto across = faults->InjectLinkError(0, 1);
  ASSERT_FALSE(across);
  EXPECT_EQ(across.error().code, ErrorCode::kNotSupported);
}

TEST_F(CudaDriverTest, ReservationsAreAlignedToTheRetireGranularityAndReleasedOnce) {
  const DeviceAddress base = Reserve(5000);
  EXPECT_EQ(base % 4096, 0u) << "cuMemAlloc promises 256 bytes; the backend aligns further";
  EXPECT_TRUE(driver_->ReleaseMemory(0, base));
  auto again = driver_->ReleaseMemory(0, base);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(driver_->ReserveMemory(2, 4096)) << "no GPU 2";
  EXPECT_FALSE(driver_->ReserveMemory(0, 0));
}

TEST_F(CudaDriverTest, CopiesRoundTripWithinAndAcrossGpus) {
  const StreamHandle stream = NewStream(0);
  std::vector<float> input(1000);
  std::iota(input.begin(), input.end(), 1.0f);
  const std::uint64_t bytes = input.size() * sizeof(float);
  const DeviceAddress a = Reserve(bytes, 0), b = Reserve(bytes, 0), c = Reserve(bytes, 1);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, a, input.data(), bytes));
  ASSERT_TRUE(driver_->CopyDeviceToDevice(stream, b, 0, a, bytes));
  ASSERT_TRUE(driver_->CopyDeviceToDevice(stream, c, 1, b, bytes));
  std::vector<float> output(input.size());
  ASSERT_TRUE(driver_->CopyDeviceToHost(stream, output.data(), c, bytes));
  ASSERT_TRUE(driver_->SynchronizeStream(stream, 5s));
  EXPECT_EQ(output, input);
  EXPECT_TRUE(driver_->DestroyStream(stream));
  EXPECT_FALSE(driver_->SynchronizeStream(stream, 1s)) << "a destroyed handle is unknown";
}

TEST_F(CudaDriverTest, CallbacksRunInOrderAndMayCallTheDriver) {
  const StreamHandle stream = NewStream(0);
  std::promise<Result<EventHandle>> made;
  // CUDA forbids CUDA calls in its own callbacks; the backend's callbacks
  // run on its thread, where they may.
  ASSERT_TRUE(driver_->EnqueueCallback(stream, [&](const Status& status) {
    EXPECT_TRUE(status) << status.error().ToString();
    made.set_value(driver_->CreateEvent(0));
  }));
  auto future = made.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  auto event = future.get();
  ASSERT_TRUE(event) << event.error().ToString();
  EXPECT_TRUE(driver_->DestroyEvent(*event));
}

TEST_F(CudaDriverTest, EventsOrderStreamsAndMeasureTime) {
  const StreamHandle first = NewStream(0), second = NewStream(0);
  auto start = driver_->CreateEvent(0), end = driver_->CreateEvent(0);
  ASSERT_TRUE(start && end);
  hold_(0, 1);
  ASSERT_TRUE(driver_->RecordEvent(*start, first));
  ASSERT_TRUE(driver_->StreamWaitEvent(second, *start));
  ASSERT_TRUE(driver_->RecordEvent(*end, second));
  auto early = driver_->SynchronizeEvent(*end, 20ms);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().code, ErrorCode::kTimeout);
  hold_(0, 0);
  ASSERT_TRUE(driver_->SynchronizeEvent(*end, 5s));
  auto elapsed = driver_->ElapsedTime(*start, *end);
  ASSERT_TRUE(elapsed) << elapsed.error().ToString();
  EXPECT_GE(elapsed->count(), 0);
}

TEST_F(CudaDriverTest, AbortWakesAWaiterAtOnceAndFailsLaterWork) {
  const StreamHandle stream = NewStream(0);
  const DeviceAddress a = Reserve(4096);
  // A fixture member: an aborted copy still runs (nothing cancels GPU work)
  // and must find its buffer alive until the driver has waited for it.
  std::vector<char>& host = host_buffer_;
  host.assign(4096, 'x');
  hold_(0, 1);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, a, host.data(), host.size()));
  auto timed_out = driver_->SynchronizeStream(stream, 20ms);
  ASSERT_FALSE(timed_out);
  EXPECT_EQ(timed_out.error().code, ErrorCode::kTimeout);
  const int queries_before = StreamQueries();

  auto waiter =
      std::async(std::launch::async, [&] { return driver_->SynchronizeStream(stream, 10s); });
  WaitUntilAStreamIsQueried(queries_before);
  const auto aborted_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(driver_->AbortStream(stream, Error{ErrorCode::kAborted, "job killed"}));
  ASSERT_EQ(waiter.wait_for(2s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - aborted_at, 100ms);
  auto woken = waiter.get();
  ASSERT_FALSE(woken);
  EXPECT_EQ(woken.error().message, "job killed");
  auto later = driver_->CopyHostToDevice(stream, a, host.data(), host.size());
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().message, "job killed");
  hold_(0, 0);
}

TEST_F(CudaDriverTest, ResetEndsWaitsBeganBeforeItAndLaterWorkRuns) {
  const StreamHandle stream = NewStream(0);
  const DeviceAddress a = Reserve(4096);
  std::vector<char>& host = host_buffer_;
  host.assign(4096, 'y');
  std::vector<char> back(4096);
  hold_(0, 1);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, a, host.data(), host.size()));
  const int queries_before = StreamQueries();
  auto waiter =
      std::async(std::launch::async, [&] { return driver_->SynchronizeStream(stream, 10s); });
  WaitUntilAStreamIsQueried(queries_before);
  ASSERT_TRUE(driver_->ResetDevice(0));
  ASSERT_EQ(waiter.wait_for(2s), std::future_status::ready);
  auto woken = waiter.get();
  ASSERT_FALSE(woken);
  EXPECT_EQ(woken.error().code, ErrorCode::kAborted);
  hold_(0, 0);
  ASSERT_TRUE(driver_->CopyDeviceToHost(stream, back.data(), a, back.size()));
  ASSERT_TRUE(driver_->SynchronizeStream(stream, 5s));
  EXPECT_EQ(back, host);
}

TEST_F(CudaDriverTest, AnUncorrectableEccErrorIsReportedAsConsumedByTheStream) {
  std::mutex mutex;
  std::vector<DriverErrorEvent> reports;
  driver_->SetErrorListener([&](const DriverErrorEvent& event) {
    std::lock_guard lock(mutex);
    reports.push_back(event);
  });
  const StreamHandle stream = NewStream(1);
  const DeviceAddress a = Reserve(4096, 1);
  std::vector<char> host(4096);
  inject_ecc_(1);
  // The copy meets the error; whether its enqueue already sees the failed
  // context (a copy is a copy and a callback) depends on timing.
  auto enqueued = driver_->CopyDeviceToHost(stream, host.data(), a, host.size());
  if (!enqueued) {
    EXPECT_EQ(enqueued.error().code, ErrorCode::kDeviceFault);
  }
  auto synced = driver_->SynchronizeStream(stream, 5s);
  ASSERT_FALSE(synced);
  EXPECT_EQ(synced.error().code, ErrorCode::kDeviceFault);
  EXPECT_NE(synced.error().message.find("CUDA_ERROR_ECC_UNCORRECTABLE"), std::string::npos)
      << synced.error().message;
  {
    std::lock_guard lock(mutex);
    ASSERT_FALSE(reports.empty());
    EXPECT_EQ(reports[0].kind, DriverErrorKind::kUncorrectedEcc);
    EXPECT_TRUE(reports[0].consumed);
    EXPECT_EQ(reports[0].device, 1);
    ASSERT_TRUE(reports[0].stream);
    EXPECT_EQ(*reports[0].stream, stream);
    EXPECT_EQ(reports[0].pci_bdf, "0000:d2:00.0");
  }
  // Every later call fails the same way; the one error is reported once.
  EXPECT_FALSE(driver_->SynchronizeStream(stream, 5s));
  EXPECT_FALSE(driver_->CopyDeviceToHost(stream, host.data(), a, host.size()));
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(reports.size(), 1u);
  }
  const StreamHandle other = NewStream(0);
  EXPECT_TRUE(driver_->CopyHostToDevice(other, Reserve(4096, 0), host.data(), 16));
  EXPECT_TRUE(driver_->SynchronizeStream(other, 5s)) << "the other GPU serves on";
  driver_->SetErrorListener(nullptr);
}

// A sticky error is repaired by resetting the primary context, which frees
// the GPU's memory: the reset says so, and the stream handles, events and
// kernels serve again on new CUDA objects.
TEST_F(CudaDriverTest, AStickyContextIsResetAndSaysItsMemoryIsGone) {
  auto resets = reinterpret_cast<int (*)(int)>(::dlsym(fake_, "fake_cuda_context_resets"));
  ASSERT_NE(resets, nullptr);
  const int resets_before = resets(1);
  const StreamHandle stream = NewStream(1);
  auto event = driver_->CreateEvent(1);
  ASSERT_TRUE(event);
  const DeviceAddress old_buffer = Reserve(4096, 1);
  const DeviceAddress kept = Reserve(4096, 0);
  std::vector<char> host(4096, 'k');
  const StreamHandle on_zero = NewStream(0);
  ASSERT_TRUE(driver_->CopyHostToDevice(on_zero, kept, host.data(), host.size()));
  ASSERT_TRUE(driver_->SynchronizeStream(on_zero, 5s));

  // A callback queued behind the failing copy, which CUDA never runs in a
  // failed context, still hears about the reset.
  hold_(1, 1);
  inject_ecc_(1);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, old_buffer, host.data(), host.size()));
  std::promise<Status> dropped;
  ASSERT_TRUE(
      driver_->EnqueueCallback(stream, [&](const Status& status) { dropped.set_value(status); }));
  hold_(1, 0);
  ASSERT_FALSE(driver_->SynchronizeStream(stream, 5s));

  auto reset = driver_->ResetDevice(1);
  ASSERT_TRUE(reset) << reset.error().ToString();
  EXPECT_EQ(*reset, MemoryAfterReset::kFreed);
  EXPECT_EQ(resets(1), resets_before + 1);
  auto heard = dropped.get_future();
  ASSERT_EQ(heard.wait_for(2s), std::future_status::ready);
  const Status dropped_status = heard.get();
  ASSERT_FALSE(dropped_status);
  EXPECT_EQ(dropped_status.error().code, ErrorCode::kAborted);

  // The old reservation is gone; the same stream and event work on new memory.
  EXPECT_FALSE(driver_->ReleaseMemory(1, old_buffer)) << "forgotten, never freed twice";
  const DeviceAddress fresh = Reserve(4096, 1);
  std::vector<char> pattern(4096);
  std::iota(pattern.begin(), pattern.end(), 0);
  std::vector<char> back(4096);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream, fresh, pattern.data(), pattern.size()));
  ASSERT_TRUE(driver_->RecordEvent(*event, stream));
  ASSERT_TRUE(driver_->CopyDeviceToHost(stream, back.data(), fresh, back.size()));
  ASSERT_TRUE(driver_->SynchronizeStream(stream, 5s));
  ASSERT_TRUE(driver_->SynchronizeEvent(*event, 5s));
  EXPECT_EQ(back, pattern);
  // The other GPU's memory was never touched.
  ASSERT_TRUE(driver_->CopyDeviceToHost(on_zero, back.data(), kept, back.size()));
  ASSERT_TRUE(driver_->SynchronizeStream(on_zero, 5s));
  EXPECT_EQ(back, host);
  // A reset that finds nothing to repair keeps the memory.
  auto again = driver_->ResetDevice(1);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, MemoryAfterReset::kKept);
  EXPECT_EQ(resets(1), resets_before + 1);
  ASSERT_TRUE(driver_->DestroyEvent(*event));
}

TEST_F(CudaDriverTest, AStickyErrorThatOutlivesTheContextResetIsAFault) {
  auto survives =
      reinterpret_cast<void (*)(int, int)>(::dlsym(fake_, "fake_cuda_sticky_survives_reset"));
  ASSERT_NE(survives, nullptr);
  const StreamHandle stream = NewStream(1);
  const DeviceAddress buffer = Reserve(4096, 1);
  std::vector<char> host(4096);
  survives(1, 1);
  inject_ecc_(1);
  (void)driver_->CopyDeviceToHost(stream, host.data(), buffer, host.size());
  ASSERT_FALSE(driver_->SynchronizeStream(stream, 5s));
  auto reset = driver_->ResetDevice(1);
  ASSERT_FALSE(reset);
  EXPECT_EQ(reset.error().code, ErrorCode::kDeviceFault);
  EXPECT_NE(reset.error().message.find("outlived a context reset"), std::string::npos)
      << reset.error().message;
}

// Two resets of one sticky GPU at once (auto-recovery and an operator's
// `rasctl reset`): the second finds the context repaired by the first and
// keeps it, rather than resetting it again and freeing the memory and work
// the repaired GPU was given meanwhile.
TEST_F(CudaDriverTest, ASecondResetWaitingForTheFirstKeepsTheRepairedContext) {
  auto pause = reinterpret_cast<void (*)(int, int)>(::dlsym(fake_, "fake_cuda_pause_resets"));
  auto waiting = reinterpret_cast<int (*)(int)>(::dlsym(fake_, "fake_cuda_resets_waiting"));
  auto resets = reinterpret_cast<int (*)(int)>(::dlsym(fake_, "fake_cuda_context_resets"));
  ASSERT_TRUE(pause && waiting && resets);
  const int resets_before = resets(1);
  const StreamHandle stream = NewStream(1);
  const DeviceAddress buffer = Reserve(4096, 1);
  std::vector<char> host(4096);
  inject_ecc_(1);
  (void)driver_->CopyDeviceToHost(stream, host.data(), buffer, host.size());
  ASSERT_FALSE(driver_->SynchronizeStream(stream, 5s));

  pause(1, 1);
  auto first = std::async(std::launch::async, [&] { return driver_->ResetDevice(1); });
  ASSERT_TRUE(rasd::testing::Eventually([&] { return waiting(1) > 0; }, 5s));
  ASSERT_EQ(waiting(1), 1);
  auto second = std::async(std::launch::async, [&] { return driver_->ResetDevice(1); });
  EXPECT_EQ(second.wait_for(100ms), std::future_status::timeout) << "waits for the first";
  pause(1, 0);
  auto freed = first.get();
  ASSERT_TRUE(freed) << freed.error().ToString();
  EXPECT_EQ(*freed, MemoryAfterReset::kFreed);
  auto kept = second.get();
  ASSERT_TRUE(kept) << kept.error().ToString();
  EXPECT_EQ(*kept, MemoryAfterReset::kKept) << "nothing left to repair";
  EXPECT_EQ(resets(1), resets_before + 1);
}

// An old driver without cuDevicePrimaryCtxReset: the sticky context stays,
// and the reset says what repairs it.
TEST(CudaDriverOldLibraryTest, WithoutAContextResetAStickyErrorNeedsARestart) {
  ::unsetenv("RASD_FAKE_CUDA_INIT");
  ::setenv("RASD_FAKE_CUDA_DEVICES", "1", 1);
  auto driver = CudaDriver::Create({.library = RASD_FAKE_CUDA_NORESET_PATH});
  ASSERT_TRUE(driver) << driver.error().ToString();
  void* fake = ::dlopen(RASD_FAKE_CUDA_NORESET_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake, nullptr);
  EXPECT_EQ(::dlsym(fake, "cuDevicePrimaryCtxReset_v2"), nullptr);
  auto inject = reinterpret_cast<void (*)(int)>(::dlsym(fake, "fake_cuda_inject_ecc"));
  auto clear = reinterpret_cast<void (*)(int)>(::dlsym(fake, "fake_cuda_clear"));
  ASSERT_TRUE(inject && clear);
  clear(0);  // the library stays loaded: a repeated run finds the last one's sticky error
  const StreamHandle stream = testing::NewStreamOn(**driver, 0);
  const DeviceAddress buffer = testing::ReserveOn(**driver, 4096, 0);
  std::vector<char> host(4096);
  inject(0);
  (void)(*driver)->CopyDeviceToHost(stream, host.data(), buffer, host.size());
  ASSERT_FALSE((*driver)->SynchronizeStream(stream, 5s));
  auto reset = (*driver)->ResetDevice(0);
  ASSERT_FALSE(reset);
  EXPECT_EQ(reset.error().code, ErrorCode::kNotSupported);
  EXPECT_NE(reset.error().message.find("restart rasd"), std::string::npos)
      << reset.error().message;
  ::setenv("RASD_FAKE_CUDA_DEVICES", "2", 1);
  driver->reset();
  ::dlclose(fake);
}

// Which of the two tests below exists depends on the build: nvcc found at
// configure time (RASD_HAVE_CUDA_KERNELS) embeds the kernels.
#if !RASD_HAVE_CUDA_KERNELS
TEST_F(CudaDriverTest, WithoutKernelsLaunchesAreRefusedClearly) {
  EXPECT_TRUE(driver_->Kernels().empty());
  auto launched = driver_->LaunchKernel(
      NewStream(0), "fill", {},
      std::vector{KernelArg::Address(Reserve(4096)), KernelArg::Int(4), KernelArg::Float(1)});
  ASSERT_FALSE(launched);
  EXPECT_EQ(launched.error().code, ErrorCode::kNotSupported);
  EXPECT_NE(launched.error().message.find("without nvcc"), std::string::npos)
      << launched.error().message;
}
#else
TEST_F(CudaDriverTest, KernelsMatchTheSimulatorsResults) {
  auto sim = SimDriver::Create({.device_count = 1, .memory_bytes_per_device = 64 << 20});
  ASSERT_TRUE(sim);
  ASSERT_EQ(driver_->Kernels().size(), (*sim)->Kernels().size());

  // The same work on both, the same answers: gemm of a 33x47 by 47x29
  // matrix (sizes that do not divide the tiles), softmax, reduce.
  const std::int64_t m = 33, k = 47, n = 29;
  std::vector<float> a(m * k), b(k * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(static_cast<float>(i) * 0.5f);
  auto run = [&](Driver& driver) {
    auto stream = driver.CreateStream(0);
    EXPECT_TRUE(stream);
    auto reserve = [&](std::uint64_t floats) { return *driver.ReserveMemory(0, floats * 4); };
    const DeviceAddress da = reserve(a.size()), db = reserve(b.size()), dc = reserve(m * n),
                        ds = reserve(m * n), dr = reserve(1);
    EXPECT_TRUE(driver.CopyHostToDevice(*stream, da, a.data(), a.size() * 4));
    EXPECT_TRUE(driver.CopyHostToDevice(*stream, db, b.data(), b.size() * 4));
    const std::vector<KernelArg> gemm = {KernelArg::Int(m),      KernelArg::Int(n),
                                         KernelArg::Int(k),      KernelArg::Address(da),
                                         KernelArg::Address(db), KernelArg::Address(dc)};
    EXPECT_TRUE(driver.LaunchKernel(*stream, "gemm", {}, gemm));
    const std::vector<KernelArg> relu = {KernelArg::Int(m * n), KernelArg::Address(dc),
                                         KernelArg::Address(dc)};
    EXPECT_TRUE(driver.LaunchKernel(*stream, "relu", {}, relu));
    const std::vector<KernelArg> softmax = {KernelArg::Int(m), KernelArg::Int(n),
                                            KernelArg::Address(dc), KernelArg::Address(ds)};
    EXPECT_TRUE(driver.LaunchKernel(*stream, "softmax", {}, softmax));
    const std::vector<KernelArg> sum = {KernelArg::Int(m * n), KernelArg::Address(ds),
                                        KernelArg::Address(dr)};
    EXPECT_TRUE(driver.LaunchKernel(*stream, "reduce_sum", {}, sum));
    std::vector<float> out(m * n + 1);
    EXPECT_TRUE(driver.CopyDeviceToHost(*stream, out.data(), ds, m * n * 4));
    EXPECT_TRUE(driver.CopyDeviceToHost(*stream, out.data() + m * n, dr, 4));
    auto synced = driver.SynchronizeStream(*stream, 10s);
    EXPECT_TRUE(synced) << synced.error().ToString();
    return out;
  };
  const auto on_gpu = run(*driver_);
  const auto on_sim = run(**sim);
  ASSERT_EQ(on_gpu.size(), on_sim.size());
  for (std::size_t i = 0; i < on_gpu.size(); ++i) {
    EXPECT_NEAR(on_gpu[i], on_sim[i], 1e-5f * std::max(1.0f, std::fabs(on_sim[i]))) << i;
  }
  EXPECT_NEAR(on_gpu.back(), static_cast<float>(m), 1e-3f) << "each softmax row sums to 1";

  auto unknown = driver_->LaunchKernel(NewStream(0), "no_such_kernel", {}, {});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  const StreamHandle stream = NewStream(0);
  const DeviceAddress small = Reserve(4096);
  auto outside = driver_->LaunchKernel(
      stream, "fill", {},
      std::vector{KernelArg::Address(small), KernelArg::Int(1025), KernelArg::Float(0)});
  ASSERT_FALSE(outside) << "4100 bytes do not fit in a 4096-byte reservation";
  EXPECT_EQ(outside.error().code, ErrorCode::kInvalidArgument);
  auto negative = driver_->LaunchKernel(
      stream, "fill", {},
      std::vector{KernelArg::Address(small), KernelArg::Int(-1), KernelArg::Float(0)});
  ASSERT_FALSE(negative);
  EXPECT_TRUE(driver_->LaunchKernel(
      stream, "fill", {},
      std::vector{KernelArg::Address(small + 4092), KernelArg::Int(1), KernelArg::Float(0)}))
      << "the last float of the reservation";
  auto wrong = driver_->LaunchKernel(NewStream(0), "relu", {}, std::vector{KernelArg::Int(1)});
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
}
// A launch checked before a context reset and queued after it must not
// reach the new context with the old context's addresses: on a GPU that is
// CUDA_ERROR_ILLEGAL_ADDRESS, and the GPU just repaired fails again, with
// every job on it. The stand-in holds the reset inside
// cuDevicePrimaryCtxReset while the launch arrives.
TEST_F(CudaDriverTest, ALaunchRacingAContextResetIsCheckedAgainstTheNewContext) {
  auto pause = reinterpret_cast<void (*)(int, int)>(::dlsym(fake_, "fake_cuda_pause_resets"));
  auto waiting = reinterpret_cast<int (*)(int)>(::dlsym(fake_, "fake_cuda_resets_waiting"));
  ASSERT_TRUE(pause && waiting);
  const StreamHandle stream = NewStream(1);
  const DeviceAddress old_buffer = Reserve(4096, 1);
  const std::vector<KernelArg> fill = {KernelArg::Address(old_buffer), KernelArg::Int(16),
                                       KernelArg::Float(1)};
  ASSERT_TRUE(driver_->LaunchKernel(stream, "fill", {}, fill));
  ASSERT_TRUE(driver_->SynchronizeStream(stream, 5s));
  inject_ecc_(1);
  ASSERT_TRUE(driver_->LaunchKernel(stream, "fill", {}, fill));
  ASSERT_FALSE(driver_->SynchronizeStream(stream, 5s)) << "the context is sticky now";

  pause(1, 1);
  auto reset = std::async(std::launch::async, [&] { return driver_->ResetDevice(1); });
  ASSERT_TRUE(rasd::testing::Eventually([&] { return waiting(1) > 0; }, 5s));
  ASSERT_EQ(waiting(1), 1) << "the reset is inside cuDevicePrimaryCtxReset";
  auto launch =
      std::async(std::launch::async, [&] { return driver_->LaunchKernel(stream, "fill", {}, fill); });
  EXPECT_EQ(launch.wait_for(100ms), std::future_status::timeout) << "waits for the reset";
  pause(1, 0);
  auto memory = reset.get();
  ASSERT_TRUE(memory) << memory.error().ToString();
  ASSERT_EQ(*memory, MemoryAfterReset::kFreed);
  const Status launched = launch.get();
  ASSERT_FALSE(launched) << "its buffer went with the old context";
  EXPECT_EQ(launched.error().code, ErrorCode::kInvalidArgument) << launched.error().ToString();

  // The new context is healthy, and the stream serves on new memory.
  const DeviceAddress fresh = Reserve(4096, 1);
  ASSERT_TRUE(driver_->LaunchKernel(
      stream, "fill", {},
      std::vector{KernelArg::Address(fresh), KernelArg::Int(16), KernelArg::Float(2)}));
  std::vector<float> back(16);
  ASSERT_TRUE(driver_->CopyDeviceToHost(stream, back.data(), fresh, 64));
  auto synced = driver_->SynchronizeStream(stream, 5s);
  ASSERT_TRUE(synced) << synced.error().ToString();
  EXPECT_EQ(back, std::vector<float>(16, 2.0f));
  auto again = driver_->ResetDevice(1);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, MemoryAfterReset::kKept) << "nothing to repair";
}
#endif  // RASD_HAVE_CUDA_KERNELS

}  // namespace
}  // namespace rasd::drivers
