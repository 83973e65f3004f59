#include "rasd/common/logging.h"

#include <gtest/gtest.h>

namespace rasd::common {
namespace {

TEST(LoggingTest, EveryLineGetsAComponentFromItsLoggerOrItsFile) {
  EXPECT_EQ(ComponentOf("scheduler", "daemon/src/daemon.cc"), "scheduler");
  EXPECT_EQ(ComponentOf("rasd", "daemon/src/control_server.cc"), "control");
  EXPECT_EQ(ComponentOf("rasd", "daemon/src/device_heartbeat.cc"), "liveness");
  EXPECT_EQ(ComponentOf("rasd", "daemon/src/actuator.cc"), "policy");
  EXPECT_EQ(ComponentOf("rasd", "ras/src/state_store.cc"), "store");
  EXPECT_EQ(ComponentOf("rasd", "ras/src/sources/kmsg_source.cc"), "ras");
  EXPECT_EQ(ComponentOf("rasd", "drivers_shim/cuda/cuda_driver.cc"), "driver");
  EXPECT_EQ(ComponentOf("rasd", "jobs/src/collective_job.cc"), "jobs");
  EXPECT_EQ(ComponentOf("rasd", "k8s/src/device_plugin.cc"), "k8s");
  EXPECT_EQ(ComponentOf("rasd", "daemon/src/main.cc"), "daemon");
  // A build without the prefix map still names the library, never the
  // directories above the tree.
  EXPECT_EQ(ComponentOf("rasd", "/home/build/rasd/runtime/src/stream.cc"), "runtime");
  EXPECT_EQ(ComponentOf("rasd", "/home/ras/daemon/src/main.cc"), "daemon");
  EXPECT_EQ(ComponentOf("", ""), "daemon");
}

TEST(LoggingTest, TheCallersFileIsRelativeToTheSourceTree) {
  // What CODE_FILE carries: __FILE__ as the log macros see it.
  const std::string_view file = __FILE__;
  EXPECT_EQ(file, "common/tests/logging_test.cc");
}

}  // namespace
}  // namespace rasd::common
