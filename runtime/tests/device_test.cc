#include "rasd/runtime/device.h"

#include <gtest/gtest.h>

#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/runtime.h"

namespace rasd::runtime {
namespace {

TEST(DeviceGateTest, EachStateAdmitsWhatTheDesignSays) {
  Device device(drivers::DeviceProperties{.index = 2});
  struct Case {
    HealthState state;
    bool new_work;
    bool admitted_job;
  };
  const Case cases[] = {
      {HealthState::kHealthy, true, true},
      {HealthState::kDegraded, true, true},
      {HealthState::kDraining, false, true},
      {HealthState::kIsolated, false, false},
  };
  for (const auto& c : cases) {
    device.SetHealth(c.state);
    EXPECT_EQ(device.CheckGate(Admission::kNewWork).has_value(), c.new_work)
        << HealthStateName(c.state);
    EXPECT_EQ(device.CheckGate(Admission::kAdmittedJob).has_value(), c.admitted_job)
        << HealthStateName(c.state);
  }
  device.SetHealth(HealthState::kIsolated);
  const auto refused = device.CheckGate(Admission::kAdmittedJob);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kDeviceIsolated);
  EXPECT_EQ(refused.error().message, "device 2 is isolated: no new work");
}

TEST(DeviceGateTest, StateNamesRoundTrip) {
  for (auto state : {HealthState::kHealthy, HealthState::kDegraded, HealthState::kDraining,
                     HealthState::kIsolated}) {
    EXPECT_EQ(ParseHealthState(HealthStateName(state)), state);
  }
  EXPECT_FALSE(ParseHealthState("broken").has_value());
}

TEST(RuntimeCreateTest, OwnsOneDevicePerDriverDevice) {
  auto driver = drivers::SimDriver::Create({.device_count = 4});
  ASSERT_TRUE(driver.has_value());
  auto runtime = Runtime::Create(std::move(*driver));
  ASSERT_TRUE(runtime.has_value()) << runtime.error().ToString();
  EXPECT_EQ((*runtime)->DriverName(), "sim");
  EXPECT_EQ((*runtime)->DeviceCount(), 4u);
  auto device = (*runtime)->GetDevice(3);
  ASSERT_TRUE(device.has_value());
  EXPECT_EQ((*device)->Health(), HealthState::kHealthy);
  EXPECT_EQ((*runtime)->GetDevice(4).error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace rasd::runtime
