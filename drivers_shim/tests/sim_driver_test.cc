#include "rasd/drivers_shim/sim_driver.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "rasd/testing/eventually.h"
#include "sim_test_util.h"

namespace rasd::drivers::testing {
namespace {

TEST(SimDriverCreateTest, EnumeratesTheConfiguredDevices) {
  auto driver = SimDriver::Create({.device_count = 3, .memory_bytes_per_device = 1 << 20});
  ASSERT_TRUE(driver.has_value()) << driver.error().ToString();
  EXPECT_EQ((*driver)->Name(), "sim");
  auto devices = (*driver)->EnumerateDevices();
  ASSERT_TRUE(devices.has_value());
  ASSERT_EQ(devices->size(), 3u);
  std::set<std::string> uuids;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*devices)[i].index, static_cast<int>(i));
    EXPECT_EQ((*devices)[i].memory_bytes, 1u << 20);
    EXPECT_EQ((*devices)[i].retire_granularity, 4096u);
    uuids.insert((*devices)[i].uuid);
  }
  EXPECT_EQ(uuids.size(), 3u) << "device UUIDs must be distinct";
}

TEST(SimDriverCreateTest, RejectsImpossibleOptions) {
  EXPECT_EQ(SimDriver::Create({.device_count = 0}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(SimDriver::Create({.device_count = 65}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(SimDriver::Create({.device_count = 1, .memory_bytes_per_device = 0}).error().code,
            ErrorCode::kInvalidArgument);
}

TEST_F(SimDriverTest, ReservationsArePageAlignedDisjointAndBounded) {
  const DeviceAddress a = Reserve(100);
  const DeviceAddress b = Reserve(5000);
  EXPECT_EQ(a % 4096, 0u);
  EXPECT_EQ(b % 4096, 0u);
  EXPECT_GE(b, a + 4096) << "a 100-byte reservation takes a whole page";
  const DeviceAddress other_device = Reserve(4096, 1);
  EXPECT_NE(other_device >> 40, a >> 40) << "each device has its own address range";

  auto too_big = driver_->ReserveMemory(0, 64 << 20);
  ASSERT_FALSE(too_big.has_value());
  EXPECT_EQ(too_big.error().code, ErrorCode::kOutOfMemory);

  ASSERT_TRUE(driver_->ReleaseMemory(0, a).has_value());
  EXPECT_EQ(driver_->ReleaseMemory(0, a).error().code, ErrorCode::kInvalidArgument)
      << "double release";
  EXPECT_EQ(driver_->ReleaseMemory(0, b + 4096).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->ReserveMemory(0, 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->ReserveMemory(9, 64).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SimDriverTest, CopiesRoundTripThroughDeviceMemory) {
  const StreamHandle stream = NewStream();
  const auto values = Pattern(1000);
  const DeviceAddress src = Upload(stream, values);
  const DeviceAddress dst = Reserve(values.size() * sizeof(float), 2);
  ASSERT_TRUE(
      driver_->CopyDeviceToDevice(stream, dst, 2, src, values.size() * sizeof(float)).has_value());
  const StreamHandle on_two = NewStream(2);
  ASSERT_TRUE(driver_->SynchronizeStream(stream, 5s).has_value());
  EXPECT_EQ(Download(on_two, dst, values.size()), values);
}

TEST_F(SimDriverTest, StreamRunsItsWorkInOrder) {
  const StreamHandle stream = NewStream();
  std::vector<int> order;
  std::mutex order_mutex;
  const DeviceAddress buffer = Reserve(4);
  for (int i = 0; i < 200; ++i) {
    if (i % 3 == 0) {
      ASSERT_TRUE(driver_
                      ->LaunchKernel(stream, "fill", {},
                                     std::vector{KernelArg::Address(buffer), KernelArg::Int(1),
                                                 KernelArg::Float(static_cast<float>(i))})
                      .has_value());
    }
    ASSERT_TRUE(driver_
                    ->EnqueueCallback(stream,
                                      [&, i](const Status& status) {
                                        EXPECT_TRUE(status.has_value());
                                        std::lock_guard lock(order_mutex);
                                        order.push_back(i);
                                      })
                    .has_value());
  }
  ASSERT_TRUE(driver_->SynchronizeStream(stream, 5s).has_value());
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(Download(stream, buffer, 1)[0], 198.0f) << "the last fill wins";
}

TEST_F(SimDriverTest, EventsOrderWorkAcrossStreamsAndTimeIt) {
  const StreamHandle producer = NewStream(0);
  const StreamHandle consumer = NewStream(0);
  const DeviceAddress data = Reserve(4096, 0);
  const DeviceAddress copy = Reserve(4096, 1);
  auto start = driver_->CreateEvent(0);
  auto done = driver_->CreateEvent(0);
  ASSERT_TRUE(start.has_value() && done.has_value());
  ASSERT_TRUE(driver_->RecordEvent(*start, producer).has_value());
  ASSERT_TRUE(driver_->LaunchKernel(producer, "sleep_us", {}, std::vector{KernelArg::Int(20000)})
                  .has_value());
  ASSERT_TRUE(driver_
                  ->LaunchKernel(producer, "fill", {},
                                 std::vector{KernelArg::Address(data), KernelArg::Int(1024),
                                             KernelArg::Float(7.5f)})
                  .has_value());
  ASSERT_TRUE(driver_->RecordEvent(*done, producer).has_value());
  // The consumer copies only after the producer's fill: without the wait it
  // would copy zeros or garbage while the producer sleeps.
  ASSERT_TRUE(driver_->StreamWaitEvent(consumer, *done).has_value());
  ASSERT_TRUE(driver_->CopyDeviceToDevice(consumer, copy, 1, data, 4096).has_value());
  ASSERT_TRUE(driver_->SynchronizeStream(consumer, 5s).has_value());
  const auto result = Download(NewStream(1), copy, 1024);
  EXPECT_EQ(result, std::vector<float>(1024, 7.5f));
  ASSERT_TRUE(driver_->SynchronizeEvent(*done, 5s).has_value());
  auto elapsed = driver_->ElapsedTime(*start, *done);
  ASSERT_TRUE(elapsed.has_value()) << elapsed.error().ToString();
  EXPECT_GE(*elapsed, 20ms);
  EXPECT_TRUE(driver_->DestroyEvent(*start).has_value());
  EXPECT_EQ(driver_->DestroyEvent(*start).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SimDriverTest, WaitingOnANeverRecordedEventDoesNotBlock) {
  const StreamHandle stream = NewStream();
  auto event = driver_->CreateEvent(0);
  ASSERT_TRUE(event.has_value());
  ASSERT_TRUE(driver_->StreamWaitEvent(stream, *event).has_value());
  EXPECT_TRUE(driver_->SynchronizeStream(stream, 1s).has_value());
}

TEST_F(SimDriverTest, SynchronizeTimesOutAndAbortWakesEveryWaiter) {
  const StreamHandle stream = NewStream();
  ASSERT_TRUE(driver_->LaunchKernel(stream, "sleep_us", {}, std::vector{KernelArg::Int(200000)})
                  .has_value());
  std::atomic<int> callbacks_aborted{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(driver_
                    ->EnqueueCallback(stream,
                                      [&](const Status& status) {
                                        if (!status && status.error().code == ErrorCode::kAborted)
                                          ++callbacks_aborted;
                                      })
                    .has_value());
  }
  const auto timed_out = driver_->SynchronizeStream(stream, 10ms);
  ASSERT_FALSE(timed_out.has_value());
  EXPECT_EQ(timed_out.error().code, ErrorCode::kTimeout);

  std::vector<std::thread> waiters;
  std::atomic<int> woken_with_abort{0};
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      const auto status = driver_->SynchronizeStream(stream, 10s);
      if (!status && status.error().code == ErrorCode::kAborted) ++woken_with_abort;
    });
  }
  std::this_thread::sleep_for(20ms);
  const auto aborted_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      driver_->AbortStream(stream, Error{ErrorCode::kAborted, "job cancelled"}).has_value());
  for (auto& waiter : waiters) waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - aborted_at, 150ms)
      << "waiters must not wait for the running kernel";
  EXPECT_EQ(woken_with_abort.load(), 3);
  // The dropped callbacks run once the kernel running at the abort has
  // finished, not before: until then it still writes memory that a
  // callback (a pool's promotion of frees) would hand to other work.
  EXPECT_EQ(callbacks_aborted.load(), 0) << "the 200 ms kernel still runs";
  EXPECT_TRUE(rasd::testing::Eventually([&] { return callbacks_aborted.load() == 5; }, 2s));
  const auto later = driver_->LaunchKernel(stream, "empty", {}, {});
  ASSERT_FALSE(later.has_value());
  EXPECT_EQ(later.error().message, "job cancelled");
}

TEST_F(SimDriverTest, LaunchArgumentsAreChecked) {
  const StreamHandle stream = NewStream();
  EXPECT_EQ(driver_->LaunchKernel(stream, "nope", {}, {}).error().code, ErrorCode::kNotSupported);
  EXPECT_EQ(driver_->LaunchKernel(stream, "fill", {}, std::vector{KernelArg::Int(1)}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->LaunchKernel(stream, "sleep_us", {}, std::vector{KernelArg::Float(1.0f)})
                .error()
                .code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->LaunchKernel(StreamHandle{999999}, "empty", {}, {}).error().code,
            ErrorCode::kInvalidArgument);
}

TEST_F(SimDriverTest, IllegalAddressFailsTheStreamNotTheDevice) {
  const StreamHandle bad = NewStream();
  const StreamHandle good = NewStream();
  const DeviceAddress buffer = Reserve(4096);
  ASSERT_TRUE(driver_
                  ->LaunchKernel(bad, "fill", {},
                                 std::vector{KernelArg::Address(buffer), KernelArg::Int(2048),
                                             KernelArg::Float(1.0f)})
                  .has_value());
  const auto status = driver_->SynchronizeStream(bad, 5s);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(status.error().message.find("illegal address"), std::string::npos)
      << status.error().message;
  EXPECT_EQ(Download(good, buffer, 1).size(), 1u);
}

TEST_F(SimDriverTest, DestroyingAStreamFailsItsPendingWork) {
  const StreamHandle stream = NewStream();
  std::atomic<bool> aborted{false};
  ASSERT_TRUE(driver_->LaunchKernel(stream, "sleep_us", {}, std::vector{KernelArg::Int(50000)})
                  .has_value());
  ASSERT_TRUE(driver_
                  ->EnqueueCallback(stream,
                                    [&](const Status& status) {
                                      aborted =
                                          !status && status.error().code == ErrorCode::kAborted;
                                    })
                  .has_value());
  ASSERT_TRUE(driver_->DestroyStream(stream).has_value());
  EXPECT_TRUE(aborted.load());
  EXPECT_EQ(driver_->SynchronizeStream(stream, 1s).error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace rasd::drivers::testing
