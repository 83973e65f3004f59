#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "driver_test_util.h"
#include "rasd/drivers_shim/sim_driver.h"

namespace rasd::drivers::testing {

using namespace std::chrono_literals;

// A simulator with helpers to move float vectors in and out of devices.
class SimDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = SimDriver::Create({.device_count = 4, .memory_bytes_per_device = 64 << 20});
    ASSERT_TRUE(created.has_value()) << created.error().ToString();
    driver_ = std::move(*created);
  }

  StreamHandle NewStream(int device = 0) { return testing::NewStreamOn(*driver_, device); }

  DeviceAddress Reserve(std::uint64_t bytes, int device = 0) {
    return testing::ReserveOn(*driver_, bytes, device);
  }

  DeviceAddress Upload(StreamHandle stream, const std::vector<float>& values, int device = 0) {
    const DeviceAddress address =
        Reserve(std::max<std::uint64_t>(values.size() * sizeof(float), 4), device);
    EXPECT_TRUE(
        driver_->CopyHostToDevice(stream, address, values.data(), values.size() * sizeof(float))
            .has_value());
    EXPECT_TRUE(driver_->SynchronizeStream(stream, 5s).has_value());
    return address;
  }

  std::vector<float> Download(StreamHandle stream, DeviceAddress address, std::size_t count) {
    std::vector<float> values(count);
    EXPECT_TRUE(driver_->CopyDeviceToHost(stream, values.data(), address, count * sizeof(float))
                    .has_value());
    const auto synced = driver_->SynchronizeStream(stream, 5s);
    EXPECT_TRUE(synced.has_value()) << synced.error().ToString();
    return values;
  }

  std::unique_ptr<SimDriver> driver_;
};

inline std::vector<float> Pattern(std::size_t count, float scale = 1.0f, float offset = 0.0f) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    // Deterministic, non-trivial, with negative values for relu.
    values[i] =
        scale * static_cast<float>(static_cast<int>((i * 7919) % 201) - 100) / 50.0f + offset;
  }
  return values;
}

}  // namespace rasd::drivers::testing
