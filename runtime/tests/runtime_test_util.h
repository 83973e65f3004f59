#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/runtime.h"

namespace rasd::runtime::testing {

using namespace std::chrono_literals;
using drivers::DeviceAddress;
using drivers::KernelArg;

// A runtime over the simulator, keeping a pointer to the simulator for
// fault injection.
class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeRuntime(4, 64 << 20, 8 << 20); }

  void MakeRuntime(int devices, std::uint64_t memory, std::uint64_t arena) {
    runtime_.reset();
    auto driver =
        drivers::SimDriver::Create({.device_count = devices, .memory_bytes_per_device = memory});
    ASSERT_TRUE(driver.has_value()) << driver.error().ToString();
    sim_ = driver->get();
    auto runtime = Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = arena}});
    ASSERT_TRUE(runtime.has_value()) << runtime.error().ToString();
    runtime_ = std::move(*runtime);
  }

  std::unique_ptr<Stream> NewStream(int device = 0, std::string owner = "job-a",
                                    Admission admission = Admission::kNewWork) {
    auto stream =
        runtime_->CreateStream(device, {.owner = std::move(owner), .admission = admission});
    EXPECT_TRUE(stream.has_value()) << stream.error().ToString();
    return stream.has_value() ? std::move(*stream) : nullptr;
  }

  MemoryPool& Pool(int device = 0) { return **runtime_->Pool(device); }

  Allocation Alloc(std::uint64_t bytes, Stream& stream) {
    auto allocation = Pool(stream.DeviceIndex()).Allocate(bytes, stream);
    EXPECT_TRUE(allocation.has_value()) << allocation.error().ToString();
    return allocation.value_or(Allocation{});
  }

  void Upload(Stream& stream, DeviceAddress dst, const std::vector<float>& values) {
    ASSERT_TRUE(stream.CopyToDevice(dst, values.data(), values.size() * sizeof(float)).has_value());
    ASSERT_TRUE(stream.Synchronize(5s).has_value());
  }

  std::vector<float> Download(Stream& stream, DeviceAddress src, std::size_t count) {
    std::vector<float> values(count);
    EXPECT_TRUE(stream.CopyToHost(values.data(), src, count * sizeof(float)).has_value());
    const auto status = stream.Synchronize(5s);
    EXPECT_TRUE(status.has_value()) << status.error().ToString();
    return values;
  }

  drivers::SimDriver* sim_ = nullptr;
  std::unique_ptr<Runtime> runtime_;
};

}  // namespace rasd::runtime::testing
