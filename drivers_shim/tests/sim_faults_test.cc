// Each injected fault yields the typed error and the error event a real
// driver would give, and stays contained to its device.

#include <mutex>
#include <thread>
#include <tuple>

#include "rasd/testing/eventually.h"
#include "sim_test_util.h"

namespace rasd::drivers::testing {
namespace {

class SimFaultsTest : public SimDriverTest {
 protected:
  void SetUp() override {
    SimDriverTest::SetUp();
    driver_->SetErrorListener([this](const DriverErrorEvent& event) {
      std::lock_guard lock(mutex_);
      events_.push_back(event);
    });
  }
  std::vector<DriverErrorEvent> Events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  Status FillOnce(StreamHandle stream, DeviceAddress buffer, std::int64_t n = 1) {
    if (auto launched = driver_->LaunchKernel(
            stream, "fill", {},
            std::vector{KernelArg::Address(buffer), KernelArg::Int(n), KernelArg::Float(1.0f)});
        !launched) {
      return launched;
    }
    return driver_->SynchronizeStream(stream, 5s);
  }

  std::mutex mutex_;
  std::vector<DriverErrorEvent> events_;
};

TEST_F(SimFaultsTest, CorrectedEccIsReportedAndHarmless) {
  const StreamHandle stream = NewStream();
  const DeviceAddress buffer = Upload(stream, Pattern(1024));
  ASSERT_TRUE(driver_->InjectCorrectedEcc(0, buffer + 64).has_value());
  const auto events = Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, DriverErrorKind::kCorrectedEcc);
  EXPECT_EQ(events[0].device, 0);
  EXPECT_EQ(events[0].address, buffer + 64);
  EXPECT_EQ(Download(stream, buffer, 1024), Pattern(1024));
}

TEST_F(SimFaultsTest, UncorrectedEccFailsExactlyTheConsumer) {
  const StreamHandle consumer = NewStream();
  const StreamHandle bystander = NewStream();
  const DeviceAddress buffer = Upload(consumer, Pattern(4096));  // four pages
  const DeviceAddress poisoned = buffer + 2 * 4096 + 100;
  ASSERT_TRUE(driver_->InjectUncorrectedEcc(0, poisoned).has_value());
  ASSERT_EQ(Events().size(), 1u);
  EXPECT_EQ(Events()[0].kind, DriverErrorKind::kUncorrectedEcc);
  EXPECT_FALSE(Events()[0].consumed);

  // Reading other pages is fine.
  EXPECT_EQ(Download(bystander, buffer, 1024).size(), 1024u);
  // Reading the poisoned page fails the consumer's stream...
  const DeviceAddress sum = Reserve(4);
  ASSERT_TRUE(driver_
                  ->LaunchKernel(consumer, "reduce_sum", {},
                                 std::vector{KernelArg::Int(4096), KernelArg::Address(buffer),
                                             KernelArg::Address(sum)})
                  .has_value());
  const auto status = driver_->SynchronizeStream(consumer, 5s);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kDeviceFault);
  EXPECT_NE(status.error().message.find("uncorrectable ECC error consumed"), std::string::npos);
  // ...and is reported with the stream, so the runtime can stop that job.
  const auto events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[1].consumed);
  EXPECT_EQ(events[1].stream, consumer);
  EXPECT_EQ(events[1].address, buffer + 2 * 4096);
  // The bystander and the device carry on.
  EXPECT_TRUE(FillOnce(bystander, sum).has_value());
  // The poison outlives a reset: it is a hardware defect.
  ASSERT_TRUE(driver_->ResetDevice(0).has_value());
  std::vector<float> host(4);
  ASSERT_TRUE(driver_->CopyDeviceToHost(bystander, host.data(), poisoned, 4).has_value());
  EXPECT_EQ(driver_->SynchronizeStream(bystander, 5s).error().code, ErrorCode::kDeviceFault);
}

TEST_F(SimFaultsTest, StickyFaultFailsEveryCallOnThatDeviceUntilReset) {
  const StreamHandle on_zero = NewStream(0);
  const StreamHandle on_one = NewStream(1);
  const DeviceAddress zero_buffer = Reserve(4096, 0);
  const DeviceAddress one_buffer = Reserve(4096, 1);
  ASSERT_TRUE(driver_->LaunchKernel(on_zero, "sleep_us", {}, std::vector{KernelArg::Int(20000)})
                  .has_value());
  ASSERT_TRUE(driver_->InjectStickyFault(0).has_value());
  ASSERT_EQ(Events().size(), 1u);
  EXPECT_EQ(Events()[0].kind, DriverErrorKind::kStickyFault);

  const auto launch = driver_->LaunchKernel(on_zero, "empty", {}, {});
  ASSERT_FALSE(launch.has_value());
  EXPECT_EQ(launch.error().code, ErrorCode::kDeviceFault);
  EXPECT_NE(launch.error().message.find("sticky"), std::string::npos);
  EXPECT_EQ(driver_->ReserveMemory(0, 4096).error().code, ErrorCode::kDeviceFault);
  EXPECT_EQ(driver_->CreateStream(0).error().code, ErrorCode::kDeviceFault);
  // Contained: device 1 keeps working.
  EXPECT_TRUE(FillOnce(on_one, one_buffer).has_value());

  ASSERT_TRUE(driver_->ResetDevice(0).has_value());
  EXPECT_TRUE(FillOnce(on_zero, zero_buffer).has_value());
}

TEST_F(SimFaultsTest, HangShowsOnlyAsTimeoutsUntilReset) {
  const StreamHandle stream = NewStream(2);
  const DeviceAddress buffer = Reserve(4096, 2);
  ASSERT_TRUE(driver_->InjectHang(2).has_value());
  EXPECT_TRUE(Events().empty()) << "a hang is not reported; watchdogs find it";
  ASSERT_TRUE(driver_
                  ->LaunchKernel(stream, "fill", {},
                                 std::vector{KernelArg::Address(buffer), KernelArg::Int(1),
                                             KernelArg::Float(1.0f)})
                  .has_value());
  const auto status = driver_->SynchronizeStream(stream, 50ms);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kTimeout);
  EXPECT_TRUE(FillOnce(NewStream(3), Reserve(4096, 3)).has_value())
      << "other devices are unaffected";
  ASSERT_TRUE(driver_->ResetDevice(2).has_value());
  EXPECT_TRUE(driver_->SynchronizeStream(stream, 5s).has_value()) << "reset drops the stuck work";
  EXPECT_TRUE(FillOnce(stream, buffer).has_value());
}

TEST_F(SimFaultsTest, FallingOffTheBusIsPermanent) {
  const StreamHandle stream = NewStream(1);
  const DeviceAddress buffer = Reserve(4096, 1);
  ASSERT_TRUE(driver_->LaunchKernel(stream, "sleep_us", {}, std::vector{KernelArg::Int(100000)})
                  .has_value());
  std::atomic<bool> pending_failed{false};
  ASSERT_TRUE(
      driver_->EnqueueCallback(stream, [&](const Status& s) { pending_failed = !s.has_value(); })
          .has_value());
  ASSERT_TRUE(driver_->InjectFallOffBus(1).has_value());
  ASSERT_EQ(Events().size(), 1u);
  EXPECT_EQ(Events()[0].kind, DriverErrorKind::kFellOffBus);
  // Failed once the kernel that was running ends (the driver's contract:
  // an abort's dropped callbacks run after the op in progress).
  EXPECT_TRUE(rasd::testing::Eventually([&] { return pending_failed.load(); }, 5s));
  const auto launch = driver_->LaunchKernel(stream, "empty", {}, {});
  ASSERT_FALSE(launch.has_value());
  EXPECT_NE(launch.error().message.find("fell off the bus"), std::string::npos);
  const auto reset = driver_->ResetDevice(1);
  ASSERT_FALSE(reset.has_value());
  EXPECT_EQ(reset.error().code, ErrorCode::kDeviceFault);
  EXPECT_EQ(driver_->CreateStream(1).error().code, ErrorCode::kDeviceFault);
  EXPECT_TRUE(FillOnce(NewStream(0), Reserve(4096, 0)).has_value());
  (void)buffer;
}

// An NVLink fault reported as NVML reports one: a typed link report of each
// device naming its link by the device at the other end; copies between
// them fail while it is down and work once it is back.
TEST_F(SimFaultsTest, AnNvlinkDownIsReportedAsNvmlReportsOneUntilItIsBack) {
  const StreamHandle stream = NewStream(0);
  const DeviceAddress src = Upload(stream, Pattern(1024), 0);
  const DeviceAddress on_one = Reserve(4096, 1);
  ASSERT_TRUE(driver_->InjectNvlinkState(0, 1, /*up=*/false).has_value());
  ASSERT_EQ(Events().size(), 2u);
  for (const auto& [event, device, peer] :
       {std::tuple{Events()[0], 0, 1}, std::tuple{Events()[1], 1, 0}}) {
    EXPECT_EQ(event.kind, DriverErrorKind::kLinkDown);
    EXPECT_EQ(event.device, device);
    ASSERT_TRUE(event.link.has_value());
    EXPECT_EQ(event.link->kind, LinkKind::kNvlink);
    EXPECT_EQ(event.link->index, static_cast<unsigned>(peer));
  }
  ASSERT_TRUE(driver_->CopyDeviceToDevice(stream, on_one, 1, src, 4096).has_value());
  EXPECT_FALSE(driver_->SynchronizeStream(stream, 5s).has_value());

  ASSERT_TRUE(driver_->InjectNvlinkState(1, 0, /*up=*/true).has_value());
  ASSERT_EQ(Events().size(), 4u);
  EXPECT_EQ(Events()[2].kind, DriverErrorKind::kLinkUp);
  EXPECT_EQ(Events()[3].kind, DriverErrorKind::kLinkUp);
  const StreamHandle retry = NewStream(0);
  ASSERT_TRUE(driver_->CopyDeviceToDevice(retry, on_one, 1, src, 4096).has_value());
  EXPECT_TRUE(driver_->SynchronizeStream(retry, 5s).has_value());
  EXPECT_EQ(driver_->InjectNvlinkState(1, 1, false).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SimFaultsTest, LinkErrorFailsPeerCopiesOnThatLinkOnly) {
  const StreamHandle stream = NewStream(0);
  const DeviceAddress src = Upload(stream, Pattern(1024), 0);
  const DeviceAddress on_one = Reserve(4096, 1);
  const DeviceAddress on_two = Reserve(4096, 2);
  ASSERT_TRUE(driver_->InjectLinkError(0, 1).has_value());
  ASSERT_EQ(Events().size(), 1u);
  EXPECT_EQ(Events()[0].kind, DriverErrorKind::kLinkError);
  EXPECT_EQ(Events()[0].peer_device, 1);

  const StreamHandle to_two = NewStream(0);
  ASSERT_TRUE(driver_->CopyDeviceToDevice(to_two, on_two, 2, src, 4096).has_value());
  EXPECT_TRUE(driver_->SynchronizeStream(to_two, 5s).has_value());

  ASSERT_TRUE(driver_->CopyDeviceToDevice(stream, on_one, 1, src, 4096).has_value());
  const auto failed = driver_->SynchronizeStream(stream, 5s);
  ASSERT_FALSE(failed.has_value());
  EXPECT_NE(failed.error().message.find("link between device 0 and device 1 is down"),
            std::string::npos);

  ASSERT_TRUE(driver_->ResetDevice(1).has_value());
  const StreamHandle retry = NewStream(0);
  ASSERT_TRUE(driver_->CopyDeviceToDevice(retry, on_one, 1, src, 4096).has_value());
  EXPECT_TRUE(driver_->SynchronizeStream(retry, 5s).has_value());
}

// The daemon reaches injection through Driver::Faults(), not the concrete
// class: the same simulator, the same reports.
// Silent corruption: a fraction of what kernels write comes back with one
// bit flipped, the same places for the same seed, nothing reported; only
// the named kernel, only on its device; a rate of 0 ends it.
TEST_F(SimFaultsTest, SilentCorruptionFlipsOneBitInAFractionOfWhatKernelsWriteAndSaysNothing) {
  constexpr std::int64_t kElements = 1 << 16;
  auto fill = [&](int device) {
    const StreamHandle stream = NewStream(device);
    const DeviceAddress buffer = Reserve(kElements * sizeof(float), device);
    EXPECT_TRUE(driver_
                    ->LaunchKernel(stream, "fill", {},
                                   std::vector{KernelArg::Address(buffer),
                                               KernelArg::Int(kElements), KernelArg::Float(1.5f)})
                    .has_value());
    return Download(stream, buffer, kElements);
  };
  // The flipped elements, each checked to differ from 1.5 by one bit.
  auto flipped = [](const std::vector<float>& values) {
    std::vector<std::size_t> at;
    std::uint32_t clean;
    const float expected = 1.5f;
    std::memcpy(&clean, &expected, 4);
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      if (bits == clean) continue;
      EXPECT_EQ(__builtin_popcount(bits ^ clean), 1) << "element " << i;
      at.push_back(i);
    }
    return at;
  };
  ASSERT_TRUE(driver_->InjectSilentCorruption(2, 1e-3, "", 7).has_value());
  const auto first = flipped(fill(2));
  EXPECT_GT(first.size(), 30u);  // 65.5 expected
  EXPECT_LT(first.size(), 120u);
  EXPECT_TRUE(flipped(fill(1)).empty()) << "another device computes right";
  ASSERT_TRUE(driver_->InjectSilentCorruption(2, 1e-3, "", 7).has_value());
  EXPECT_EQ(flipped(fill(2)), first) << "the same seed, the same places";
  ASSERT_TRUE(driver_->InjectSilentCorruption(2, 1e-3, "gemm", 7).has_value());
  EXPECT_TRUE(flipped(fill(2)).empty()) << "only the kernel named";
  ASSERT_TRUE(driver_->InjectSilentCorruption(2, 0, "", 7).has_value());
  EXPECT_TRUE(flipped(fill(2)).empty()) << "rate 0 ends it";
  EXPECT_TRUE(Events().empty()) << "nothing is reported";
  EXPECT_EQ(driver_->InjectSilentCorruption(2, 1.5, "", 7).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->InjectSilentCorruption(2, 1e-3, "nope", 7).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(driver_->InjectSilentCorruption(9, 1e-3, "", 7).has_value());
}

TEST_F(SimFaultsTest, FaultsIsTheSimulatorsInjector) {
  Driver& driver = *driver_;
  FaultInjector* faults = driver.Faults();
  ASSERT_NE(faults, nullptr);
  const StreamHandle stream = NewStream(1);
  const DeviceAddress buffer = Upload(stream, Pattern(1024), 1);
  ASSERT_TRUE(faults->InjectCorrectedEcc(1, buffer + 128).has_value());
  const auto events = Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, DriverErrorKind::kCorrectedEcc);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].address, buffer + 128);
  EXPECT_EQ(faults->InjectHang(4).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SimFaultsTest, InjectionIntoAnUnknownDeviceIsAnError) {
  EXPECT_EQ(driver_->InjectStickyFault(4).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->InjectHang(-1).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->InjectLinkError(1, 1).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(driver_->ResetDevice(7).error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace rasd::drivers::testing
