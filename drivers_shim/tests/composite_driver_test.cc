// Two simulators as one driver: devices numbered on, calls routed by
// device and handle, reports renumbered, no copies across backends.

#include "rasd/drivers_shim/composite_driver.h"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

#include "rasd/drivers_shim/sim_driver.h"

namespace rasd::drivers {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Driver> Sim(int devices) {
  auto sim = SimDriver::Create({.device_count = devices, .memory_bytes_per_device = 16 << 20});
  EXPECT_TRUE(sim);
  return std::move(*sim);
}

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
