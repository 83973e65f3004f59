#include "rasd/runtime/stream.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "rasd/testing/eventually.h"
#include "runtime_test_util.h"

namespace rasd::runtime::testing {
namespace {

TEST_F(RuntimeTest, KernelRegistryListsTheDriversKernelsAndChecksLaunches) {
  const auto names = runtime_->Kernels().Names();
  EXPECT_NE(std::find(names.begin(), names.end(), "gemm"), names.end());
  auto stream = NewStream();
  const auto unknown = stream->Launch("conv3d", {});
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotSupported);
  const KernelArg wrong[] = {KernelArg::Float(1.0f)};
  const auto bad = stream->Launch("sleep_us", wrong);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("argument 0"), std::string::npos) << bad.error().message;
}

TEST_F(RuntimeTest, GateRefusesWorkOnAnIsolatedDeviceAtOnce) {
  auto stream = NewStream(1);
  auto allocation = Alloc(1024, *stream);
  Device& device = **runtime_->GetDevice(1);
  device.SetHealth(HealthState::kIsolated);
  float host[4] = {};
  const KernelArg fill[] = {KernelArg::Address(allocation.address), KernelArg::Int(4),
                            KernelArg::Float(1)};
  for (const Status& refused :
       {stream->Launch("fill", fill), stream->CopyToDevice(allocation.address, host, 16),
        stream->CopyToHost(host, allocation.address, 16)}) {
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kDeviceIsolated);
  }
  EXPECT_EQ(Pool(1).Allocate(64, *stream).error().code, ErrorCode::kDeviceIsolated);
  EXPECT_EQ(runtime_->CreateStream(1).error().code, ErrorCode::kDeviceIsolated);
  // Other devices are unaffected.
  auto other = NewStream(2);
  EXPECT_TRUE(other->Launch("empty", {}).has_value());
  device.SetHealth(HealthState::kHealthy);
  EXPECT_TRUE(Pool(1).Free(allocation).has_value());
}

TEST_F(RuntimeTest, DrainingDeviceTakesWorkOnlyFromAdmittedJobs) {
  auto admitted = NewStream(0, "job-running", Admission::kAdmittedJob);
  auto fresh = NewStream(0, "job-new", Admission::kNewWork);
  (**runtime_->GetDevice(0)).SetHealth(HealthState::kDraining);
  EXPECT_TRUE(admitted->Launch("empty", {}).has_value());
  EXPECT_EQ(fresh->Launch("empty", {}).error().code, ErrorCode::kDeviceIsolated);
  EXPECT_TRUE(admitted->Synchronize(5s).has_value());
}

TEST_F(RuntimeTest, PeerCopyChecksTheDestinationGateToo) {
  auto stream = NewStream(0);
  auto src = Alloc(4096, *stream);
  auto peer_stream = NewStream(3);
  auto dst = Alloc(4096, *peer_stream);
  (**runtime_->GetDevice(3)).SetHealth(HealthState::kIsolated);
  EXPECT_EQ(stream->CopyDeviceToDevice(dst.address, 3, src.address, 4096).error().code,
            ErrorCode::kDeviceIsolated);
}

TEST_F(RuntimeTest, AbortFailsPendingWorkWakesWaitersAndSticks) {
  auto stream = NewStream();
  const KernelArg sleep[] = {KernelArg::Int(100000)};
  ASSERT_TRUE(stream->Launch("sleep_us", sleep).has_value());
  std::atomic<int> aborted_callbacks{0};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(stream
                    ->AddCallback([&](const Status& status) {
                      if (!status && status.error().message == "device 0 failed")
                        ++aborted_callbacks;
                    })
                    .has_value());
  }
  std::atomic<bool> waiter_result_aborted{false};
  std::thread waiter([&] {
    const auto status = stream->Synchronize(30s);
    waiter_result_aborted = !status && status.error().code == ErrorCode::kAborted;
  });
  std::this_thread::sleep_for(10ms);
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(stream->Abort("device 0 failed").has_value());
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 50ms);
  EXPECT_TRUE(waiter_result_aborted.load());
  // Once the kernel running at the abort has finished (it still writes
  // memory until then).
  EXPECT_TRUE(rasd::testing::Eventually([&] { return aborted_callbacks.load() == 10; }, 2s));
  EXPECT_TRUE(stream->Aborted());
  ASSERT_TRUE(stream->Abort("second reason").has_value());
  const auto later = stream->Launch("empty", {});
  ASSERT_FALSE(later.has_value());
  EXPECT_EQ(later.error().code, ErrorCode::kAborted);
  EXPECT_EQ(later.error().message, "device 0 failed") << "the first reason sticks";
}

TEST_F(RuntimeTest, AbortOwnerStopsEveryStreamOfThatJobAndNoOther) {
  auto a0 = NewStream(0, "job-a");
  auto a1 = NewStream(1, "job-a");
  auto b0 = NewStream(0, "job-b");
  auto anonymous = NewStream(0, "");
  EXPECT_EQ(runtime_->OwnersOn(0), (std::vector<std::string>{"job-a", "job-b"}));
  EXPECT_EQ(runtime_->DevicesOf("job-a"), (std::vector<int>{0, 1}));
  EXPECT_TRUE(runtime_->DevicesOf("").empty());
  EXPECT_EQ(runtime_->AbortOwner("job-a", "consumed poisoned memory"), 2u);
  EXPECT_TRUE(a0->Aborted());
  EXPECT_TRUE(a1->Aborted());
  EXPECT_FALSE(b0->Aborted());
  EXPECT_FALSE(anonymous->Aborted());
  const KernelArg sleep[] = {KernelArg::Int(1)};
  const auto refused = a1->Launch("sleep_us", sleep);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kAborted);
  EXPECT_NE(refused.error().message.find("poisoned"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(b0->Launch("sleep_us", sleep).has_value());
  EXPECT_TRUE(b0->Synchronize(5s).has_value());
  EXPECT_EQ(runtime_->AbortOwner("", "nobody"), 0u) << "an empty owner matches nothing";
  a0.reset();
  b0.reset();
  EXPECT_EQ(runtime_->OwnersOn(0), std::vector<std::string>{}) << "destroyed streams are gone";
  EXPECT_EQ(runtime_->AbortOwner("job-a", "again"), 1u) << "only a1 is left";
}

TEST_F(RuntimeTest, EventsOrderStreamsOnDifferentDevices) {
  auto producer = NewStream(0);
  auto consumer = NewStream(0);
  auto reader = NewStream(1);
  auto data = Alloc(4096, *producer);
  auto copy = Alloc(4096, *reader);
  auto done = runtime_->CreateEvent(0);
  ASSERT_TRUE(done.has_value());
  const KernelArg sleep[] = {KernelArg::Int(10000)};
  const KernelArg fill[] = {KernelArg::Address(data.address), KernelArg::Int(1024),
                            KernelArg::Float(3.0f)};
  ASSERT_TRUE(producer->Launch("sleep_us", sleep).has_value());
  ASSERT_TRUE(producer->Launch("fill", fill).has_value());
  ASSERT_TRUE(producer->Record(**done).has_value());
  ASSERT_TRUE(consumer->Wait(**done).has_value());
  ASSERT_TRUE(consumer->CopyDeviceToDevice(copy.address, 1, data.address, 4096).has_value());
  ASSERT_TRUE(consumer->Synchronize(5s).has_value());
  EXPECT_EQ(Download(*reader, copy.address, 1024), std::vector<float>(1024, 3.0f));
}

TEST_F(RuntimeTest, StickyFaultIsContainedToItsDevice) {
  auto broken = NewStream(2);
  auto healthy = NewStream(3);
  std::vector<drivers::DriverErrorEvent> events;
  std::mutex events_mutex;
  runtime_->SubscribeErrors([&](const drivers::DriverErrorEvent& event) {
    std::lock_guard lock(events_mutex);
    events.push_back(event);
  });
  ASSERT_TRUE(sim_->InjectStickyFault(2).has_value());
  EXPECT_EQ(broken->Launch("empty", {}).error().code, ErrorCode::kDeviceFault);
  EXPECT_TRUE(healthy->Launch("empty", {}).has_value());
  EXPECT_TRUE(healthy->Synchronize(5s).has_value());
  std::lock_guard lock(events_mutex);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, drivers::DriverErrorKind::kStickyFault);
  EXPECT_EQ(events[0].device, 2);
}

TEST_F(RuntimeTest, EventTimesWork) {
  auto stream = NewStream();
  auto start = runtime_->CreateEvent(0);
  auto end = runtime_->CreateEvent(0);
  ASSERT_TRUE(start.has_value() && end.has_value());
  const KernelArg sleep[] = {KernelArg::Int(5000)};
  ASSERT_TRUE(stream->Record(**start).has_value());
  ASSERT_TRUE(stream->Launch("sleep_us", sleep).has_value());
  ASSERT_TRUE(stream->Record(**end).has_value());
  ASSERT_TRUE((*end)->Synchronize(5s).has_value());
  auto elapsed = (*end)->ElapsedSince(**start);
  ASSERT_TRUE(elapsed.has_value());
  EXPECT_GE(*elapsed, 5ms);
}

}  // namespace
}  // namespace rasd::runtime::testing
