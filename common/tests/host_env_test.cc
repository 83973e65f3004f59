#include "rasd/common/host_env.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace rasd::common {
namespace {

class HostEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rasd-hostenv-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    std::filesystem::create_directories(root_ / "sys/devices/system/edac/mc/mc0");
    std::ofstream(root_ / "sys/devices/system/edac/mc/mc0/ce_count") << "7\n";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
};

TEST_F(HostEnvTest, ResolvesAbsoluteHostPathsUnderTheRoot) {
  HostEnv env(root_, std::make_shared<SystemClock>());
  EXPECT_EQ(env.Resolve("/sys/devices"), root_ / "sys/devices");
  EXPECT_EQ(env.Resolve("proc/self"), root_ / "proc/self");
  EXPECT_EQ(env.Resolve("/"), root_);
  HostEnv real("/", std::make_shared<SystemClock>());
  EXPECT_EQ(real.Resolve("/dev/kmsg"), "/dev/kmsg");
}

TEST_F(HostEnvTest, ReadsFilesInTheFixtureTree) {
  HostEnv env(root_, std::make_shared<SystemClock>());
  auto content = env.ReadFile("/sys/devices/system/edac/mc/mc0/ce_count");
  ASSERT_TRUE(content.has_value()) << content.error().ToString();
  EXPECT_EQ(*content, "7\n");
  EXPECT_TRUE(env.Exists("/sys/devices/system/edac/mc/mc0"));
}

TEST_F(HostEnvTest, VanishedFileIsNotFound) {
  HostEnv env(root_, std::make_shared<SystemClock>());
  auto content = env.ReadFile("/sys/devices/system/edac/mc/mc1/ce_count");
  ASSERT_FALSE(content.has_value());
  EXPECT_EQ(content.error().code, ErrorCode::kNotFound);
  EXPECT_NE(content.error().message.find("mc1/ce_count"), std::string::npos);
}

TEST_F(HostEnvTest, ReadIsBounded) {
  std::ofstream(root_ / "big") << std::string(10000, 'x');
  HostEnv env(root_, std::make_shared<SystemClock>());
  auto content = env.ReadFile("/big", 100);
  ASSERT_TRUE(content.has_value());
  EXPECT_EQ(content->size(), 100u);
}

// A FIFO where an attribute belongs must not stall the reader (the event
// loop): refused at once, as any file that is not a regular one.
TEST_F(HostEnvTest, AFifoOrADeviceNodeIsRefusedWithoutWaiting) {
  const auto fifo = root_ / "sys/devices/system/edac/mc/mc0/ue_count";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  HostEnv host(root_, std::make_shared<SystemClock>());
  auto read = host.ReadFile("/sys/devices/system/edac/mc/mc0/ue_count");
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(read.error().message.find("not a regular file"), std::string::npos);
  std::filesystem::create_symlink("/dev/zero", root_ / "zero");
  EXPECT_FALSE(host.ReadFile("/zero"));
}

TEST(ManualClockTest, MovesOnlyWhenAdvanced) {
  ManualClock clock;
  const auto wall = clock.Wall();
  EXPECT_EQ(clock.Monotonic().count(), 0);
  clock.Advance(std::chrono::seconds(3));
  EXPECT_EQ(clock.Monotonic(), std::chrono::seconds(3));
  EXPECT_EQ(clock.Wall() - wall, std::chrono::seconds(3));
}

TEST_F(HostEnvTest, WritesUnderTheRootAndCreatesOnlyWhenAsked) {
  HostEnv env(root_, std::make_shared<SystemClock>());
  auto missing = env.WriteFile("/sys/devices/system/memory/soft_offline_page", "0x1000\n");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(env.Exists("/sys/devices/system/memory/soft_offline_page"));
  ASSERT_TRUE(env.WriteFile("/sys/devices/system/edac/mc/mc1/dimm0/dimm_ce_count", "4\n", true));
  EXPECT_EQ(*env.ReadFile("/sys/devices/system/edac/mc/mc1/dimm0/dimm_ce_count"), "4\n");
  ASSERT_TRUE(env.WriteFile("/sys/devices/system/edac/mc/mc1/dimm0/dimm_ce_count", "5\n"));
  EXPECT_EQ(*env.ReadFile("/sys/devices/system/edac/mc/mc1/dimm0/dimm_ce_count"), "5\n");
}

}  // namespace
}  // namespace rasd::common
