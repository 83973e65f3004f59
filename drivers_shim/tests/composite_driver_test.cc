// Two simulators as one driver: devices numbered on, calls routed by
// device and handle (fault injection included), reports renumbered, no
// copies or links across backends.

#include "rasd/drivers_shim/composite_driver.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#include "rasd/drivers_shim/sim_driver.h"

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Driver> Sim(int devices) {
  auto sim = SimDriver::Create({.device_count = devices, .memory_bytes_per_device = 16 << 20});
  EXPECT_TRUE(sim);
  return std::move(*sim);
}

// A backend with devices and nothing else, like a real one: no fault
// injector.
class DevicesOnlyDriver final : public Driver {
 public:
  explicit DevicesOnlyDriver(int devices) : devices_(devices) {}

  std::string_view Name() const override { return "plain"; }
  Result<std::vector<DeviceProperties>> EnumerateDevices() override {
    std::vector<DeviceProperties> devices(static_cast<std::size_t>(devices_));
    for (int i = 0; i < devices_; ++i) devices[static_cast<std::size_t>(i)].index = i;
    return devices;
  }
  std::vector<KernelSignature> Kernels() const override { return {}; }
  Result<DeviceAddress> ReserveMemory(int, std::uint64_t) override { return Refuse(); }
  Status ReleaseMemory(int, DeviceAddress) override { return Refuse(); }
  Result<StreamHandle> CreateStream(int) override { return Refuse(); }
  Status DestroyStream(StreamHandle) override { return Refuse(); }
  Status CopyHostToDevice(StreamHandle, DeviceAddress, const void*, std::uint64_t) override {
    return Refuse();
  }
  Status CopyDeviceToHost(StreamHandle, void*, DeviceAddress, std::uint64_t) override {
    return Refuse();
  }
  Status CopyDeviceToDevice(StreamHandle, DeviceAddress, int, DeviceAddress,
                            std::uint64_t) override {
    return Refuse();
  }
  Status LaunchKernel(StreamHandle, std::string_view, const LaunchConfig&,
                      std::span<const KernelArg>) override {
    return Refuse();
  }
  Status EnqueueCallback(StreamHandle, StreamCallback) override { return Refuse(); }
  Result<EventHandle> CreateEvent(int) override { return Refuse(); }
  Status DestroyEvent(EventHandle) override { return Refuse(); }
  Status RecordEvent(EventHandle, StreamHandle) override { return Refuse(); }
  Status StreamWaitEvent(StreamHandle, EventHandle) override { return Refuse(); }
  Status SynchronizeEvent(EventHandle, std::chrono::nanoseconds) override { return Refuse(); }
  Result<std::chrono::nanoseconds> ElapsedTime(EventHandle, EventHandle) override {
    return Refuse();
  }
  Status SynchronizeStream(StreamHandle, std::chrono::nanoseconds) override { return Refuse(); }
  Status AbortStream(StreamHandle, const Error&) override { return Refuse(); }
  Result<MemoryAfterReset> ResetDevice(int) override { return Refuse(); }
  void SetErrorListener(ErrorListener) override {}

 private:
  static tl::unexpected<Error> Refuse() {
    return Fail(ErrorCode::kNotSupported, "not part of this fake");
  }
  int devices_;
};

// Collects the composite's error reports.
class Reports {
 public:
  ErrorListener Listener() {
    return [this](const DriverErrorEvent& event) {
      std::lock_guard lock(mutex_);
      events_.push_back(event);
    };
  }
  std::vector<DriverErrorEvent> Events() {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  std::mutex mutex_;
  std::vector<DriverErrorEvent> events_;
};

TEST(CompositeDriverTest, NumbersDevicesOnAndRoutesByDeviceAndHandle) {
  std::vector<std::unique_ptr<Driver>> backends;
  backends.push_back(Sim(2));
  backends.push_back(Sim(3));
  auto* second = static_cast<SimDriver*>(backends[1].get());
  auto composite = CompositeDriver::Create(std::move(backends));
  ASSERT_TRUE(composite);
  Driver& driver = **composite;
  EXPECT_EQ(driver.Name(), "sim+sim");
  auto devices = driver.EnumerateDevices();
  ASSERT_TRUE(devices);
  ASSERT_EQ(devices->size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*devices)[static_cast<std::size_t>(i)].index, i);

  std::mutex mutex;
  std::vector<DriverErrorEvent> reports;
  driver.SetErrorListener([&](const DriverErrorEvent& event) {
    std::lock_guard lock(mutex);
    reports.push_back(event);
  });

  auto stream = driver.CreateStream(4);
  ASSERT_TRUE(stream);
  auto base = driver.ReserveMemory(4, 4096);
  ASSERT_TRUE(base);
  std::vector<int> input(256), output(256);
  std::iota(input.begin(), input.end(), 7);
  ASSERT_TRUE(driver.CopyHostToDevice(*stream, *base, input.data(), 1024));
  ASSERT_TRUE(driver.CopyDeviceToHost(*stream, output.data(), *base, 1024));
  ASSERT_TRUE(driver.SynchronizeStream(*stream, 5s));
  EXPECT_EQ(output, input);

  auto on_first = driver.ReserveMemory(1, 4096);
  ASSERT_TRUE(on_first);
  auto across = driver.CopyDeviceToDevice(*stream, *on_first, 1, *base, 1024);
  ASSERT_FALSE(across);
  EXPECT_EQ(across.error().code, ErrorCode::kNotSupported);

  // The second simulator's device 2 is the composite's device 4.
  ASSERT_TRUE(second->InjectCorrectedEcc(2, *base));
  {
    std::unique_lock lock(mutex);
    ASSERT_FALSE(reports.empty());
    EXPECT_EQ(reports[0].device, 4);
    EXPECT_EQ(reports[0].kind, DriverErrorKind::kCorrectedEcc);
  }
  EXPECT_FALSE(driver.SynchronizeStream(StreamHandle{std::uint64_t{9} << 56}, 1s));
  EXPECT_FALSE(driver.CreateStream(5));
  EXPECT_EQ(driver.Kernels().size(), second->Kernels().size());
  EXPECT_TRUE(driver.DestroyStream(*stream));
  driver.SetErrorListener(nullptr);
}

TEST(CompositeDriverTest, FaultsGoToTheBackendOwningTheDevice) {
  std::vector<std::unique_ptr<Driver>> backends;
  backends.push_back(Sim(2));
  backends.push_back(Sim(3));
  auto composite = CompositeDriver::Create(std::move(backends));
  ASSERT_TRUE(composite);
  Driver& driver = **composite;
  Reports reports;
  driver.SetErrorListener(reports.Listener());
  FaultInjector* faults = driver.Faults();
  ASSERT_NE(faults, nullptr);

  // The composite's device 3 is the second simulator's device 1.
  auto base = driver.ReserveMemory(3, 4096);
  ASSERT_TRUE(base);
  ASSERT_TRUE(faults->InjectCorrectedEcc(3, *base + 64));
  auto events = reports.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, DriverErrorKind::kCorrectedEcc);
  EXPECT_EQ(events[0].device, 3);
  EXPECT_EQ(events[0].address, *base + 64);

  // A sticky fault on device 1 (the first simulator's) fails that device
  // only.
  ASSERT_TRUE(faults->InjectStickyFault(1));
  events = reports.Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].kind, DriverErrorKind::kStickyFault);
  EXPECT_EQ(events[1].device, 1);
  auto on_one = driver.CreateStream(1);
  ASSERT_FALSE(on_one);
  EXPECT_EQ(on_one.error().code, ErrorCode::kDeviceFault);
  for (int device : {0, 2, 3, 4}) EXPECT_TRUE(driver.CreateStream(device)) << device;

  // A link within one backend is that backend's; one across backends is
  // not a link at all.
  ASSERT_TRUE(faults->InjectLinkError(3, 4));
  events = reports.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].kind, DriverErrorKind::kLinkError);
  EXPECT_EQ(events[2].device, 3);
  EXPECT_EQ(events[2].peer_device, 4);
  auto across = faults->InjectLinkError(1, 2);
  ASSERT_FALSE(across);
  EXPECT_EQ(across.error().code, ErrorCode::kNotSupported);
  EXPECT_EQ(reports.Events().size(), 3u);
  driver.SetErrorListener(nullptr);
}

TEST(CompositeDriverTest, DevicesOfABackendWithoutFaultsRefuseInjection) {
  std::vector<std::unique_ptr<Driver>> backends;
  backends.push_back(Sim(1));
  backends.push_back(std::make_unique<DevicesOnlyDriver>(2));
  auto composite = CompositeDriver::Create(std::move(backends));
  ASSERT_TRUE(composite);
  FaultInjector* faults = (*composite)->Faults();
  ASSERT_NE(faults, nullptr) << "the simulator's device can take faults";
  EXPECT_TRUE(faults->InjectHang(0));
  for (const Status& refused :
       {faults->InjectCorrectedEcc(2, 0x1000), faults->InjectUncorrectedEcc(2, 0x1000),
        faults->InjectActionOptionalEcc(2, 0x1000), faults->InjectStickyFault(2),
        faults->InjectHang(2), faults->InjectFallOffBus(2), faults->InjectLinkError(1, 2)}) {
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::kNotSupported);
    EXPECT_NE(refused.error().message.find("plain cannot inject faults"), std::string::npos)
        << refused.error().message;
  }
  EXPECT_EQ(faults->InjectFallOffBus(1).error().message,
            "device 1 is a plain device: plain cannot inject faults");
  auto across = faults->InjectLinkError(0, 1);
  ASSERT_FALSE(across);
  EXPECT_EQ(across.error().code, ErrorCode::kNotSupported);
}

TEST(CompositeDriverTest, InjectionIntoAnUnknownDeviceIsAnError) {
  std::vector<std::unique_ptr<Driver>> backends;
  backends.push_back(Sim(2));
  backends.push_back(std::make_unique<DevicesOnlyDriver>(1));
  auto composite = CompositeDriver::Create(std::move(backends));
  ASSERT_TRUE(composite);
  FaultInjector* faults = (*composite)->Faults();
  ASSERT_NE(faults, nullptr);
  EXPECT_EQ(faults->InjectCorrectedEcc(3, 0x1000).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(faults->InjectStickyFault(-1).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(faults->InjectLinkError(0, 3).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(faults->InjectLinkError(1, 1).error().code, ErrorCode::kInvalidArgument)
      << "the simulator's own check: a link joins two devices";
}

TEST(CompositeDriverTest, NoInjectorWhereNoBackendHasOne) {
  std::vector<std::unique_ptr<Driver>> backends;
  backends.push_back(std::make_unique<DevicesOnlyDriver>(2));
  auto composite = CompositeDriver::Create(std::move(backends));
  ASSERT_TRUE(composite);
  EXPECT_EQ((*composite)->Faults(), nullptr);
  auto empty = CompositeDriver::Create({});
  ASSERT_TRUE(empty);
  EXPECT_EQ((*empty)->Faults(), nullptr);
}

TEST(CompositeDriverTest, WithoutBackendsThereAreNoDevices) {
  auto composite = CompositeDriver::Create({});
  ASSERT_TRUE(composite);
  EXPECT_EQ((*composite)->Name(), "none");
  EXPECT_TRUE((*composite)->EnumerateDevices()->empty());
  EXPECT_TRUE((*composite)->Kernels().empty());
  auto stream = (*composite)->CreateStream(0);
  ASSERT_FALSE(stream);
  EXPECT_EQ(stream.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace rasd::drivers
