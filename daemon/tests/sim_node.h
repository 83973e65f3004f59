#pragma once

// What the daemon's unit tests start from: a state directory of the test's
// own, a simulator runtime, and RAS sources all off. Header-only, for
// daemon/tests.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "rasd/daemon/config.h"
#include "rasd/drivers_shim/sim_driver.h"
#include "rasd/runtime/runtime.h"

namespace rasd::daemon::testing {

// <temp>/rasd-<prefix>-<pid>-<test name>, emptied: tests running at once
// (ctest -j, one process per test) never share one.
inline std::filesystem::path FreshTestDir(std::string_view prefix) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("rasd-" + std::string(prefix) + "-" + std::to_string(::getpid()) + "-" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  return dir;
}

struct SimRuntimeOptions {
  int devices = 2;
  std::uint64_t memory_bytes_per_device = 16 << 20;
  std::uint64_t arena_bytes = 4 << 20;
};

// A runtime on `devices` simulated devices; null (with the test failed)
// when it cannot be made. `sim`, when given, is pointed at the driver.
inline std::unique_ptr<runtime::Runtime> SimRuntime(SimRuntimeOptions options = {},
                                                    drivers::SimDriver** sim = nullptr) {
  auto driver =
      drivers::SimDriver::Create({.device_count = options.devices,
                                  .memory_bytes_per_device = options.memory_bytes_per_device});
  if (!driver) {
    ADD_FAILURE() << "simulator: " << driver.error().ToString();
    return nullptr;
  }
  if (sim != nullptr) *sim = driver->get();
  auto runtime =
      runtime::Runtime::Create(std::move(*driver), {.pool = {.arena_bytes = options.arena_bytes}});
  if (!runtime) {
    ADD_FAILURE() << "runtime: " << runtime.error().ToString();
    return nullptr;
  }
  return std::move(*runtime);
}

// The RAS sources' settings with every source off (no kernel log, NVML,
// tracefs, EDAC or RDMA poll): a RasIngest that only injection feeds.
inline Config::Ras NoRasSources() {
  Config::Ras sources;
  sources.kmsg = false;
  sources.nvml = false;
  sources.tracefs = false;
  sources.edac_poll = std::chrono::milliseconds(0);
  sources.infiniband_poll = std::chrono::milliseconds(0);
  return sources;
}

}  // namespace rasd::daemon::testing
