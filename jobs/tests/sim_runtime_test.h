#pragma once

// A runtime over 4 simulated devices of 64 MiB for the jobs' tests, with
// the simulator at hand for fault injection.

#include <gtest/gtest.h>

#include <memory>

#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/runtime.h"

namespace rasd::jobs::testing {

class SimRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver =
        drivers::SimDriver::Create({.device_count = 4, .memory_bytes_per_device = 64 << 20});
    ASSERT_TRUE(driver.has_value());
    sim_ = driver->get();
    auto runtime = runtime::Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = 8 << 20}});
    ASSERT_TRUE(runtime.has_value());
    runtime_ = std::move(*runtime);
  }

  runtime::Device& Device(int index) { return **runtime_->GetDevice(index); }

  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<runtime::Runtime> runtime_;
};

}  // namespace rasd::jobs::testing
