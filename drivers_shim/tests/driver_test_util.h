#pragma once

// Helpers every backend's driver tests share: a stream and a reservation,
// failing the test (not crashing it) when the driver refuses.

#include <gtest/gtest.h>

#include <cstdint>

#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers::testing {

inline StreamHandle NewStreamOn(Driver& driver, int device = 0) {
  auto stream = driver.CreateStream(device);
  EXPECT_TRUE(stream.has_value()) << stream.error().ToString();
  return stream.value_or(StreamHandle{});
}

inline DeviceAddress ReserveOn(Driver& driver, std::uint64_t bytes, int device = 0) {
  auto address = driver.ReserveMemory(device, bytes);
  EXPECT_TRUE(address.has_value()) << address.error().ToString();
  return address.value_or(0);
}

}  // namespace rasd::drivers::testing
