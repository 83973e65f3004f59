#include "rasd/drivers_shim/sim_driver.h"

#include <gtest/gtest.h>

#include <set>

namespace rasd::drivers {
namespace {

TEST(SimDriverTest, EnumeratesTheConfiguredDevices) {
  auto driver = MakeSimDriver({.device_count = 3, .memory_bytes_per_device = 1 << 20});
  ASSERT_TRUE(driver.has_value()) << driver.error().ToString();
  EXPECT_EQ((*driver)->Name(), "sim");
  auto devices = (*driver)->EnumerateDevices();
  ASSERT_TRUE(devices.has_value());
  ASSERT_EQ(devices->size(), 3u);
  std::set<std::string> uuids;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*devices)[static_cast<std::size_t>(i)].index, i);
    EXPECT_EQ((*devices)[static_cast<std::size_t>(i)].memory_bytes, 1u << 20);
    uuids.insert((*devices)[static_cast<std::size_t>(i)].uuid);
  }
  EXPECT_EQ(uuids.size(), 3u) << "device UUIDs must be distinct";
}

TEST(SimDriverTest, RejectsImpossibleOptions) {
  EXPECT_EQ(MakeSimDriver({.device_count = 0}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(MakeSimDriver({.device_count = 65}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(MakeSimDriver({.device_count = 1, .memory_bytes_per_device = 0}).error().code,
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace rasd::drivers
