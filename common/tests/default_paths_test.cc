#include "rasd/common/default_paths.h"

#include <gtest/gtest.h>

#include <map>

namespace rasd::common {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> values) {
  return [values = std::move(values)](std::string_view name) -> std::optional<std::string> {
    auto it = values.find(std::string(name));
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

TEST(DefaultPathsTest, RootUsesSystemDirectories) {
  const auto paths = ComputeDefaultPaths(0, FakeEnv({{"HOME", "/root"}}));
  EXPECT_EQ(paths.state_dir, "/var/lib/rasd");
  EXPECT_EQ(paths.socket, "/run/rasd/rasd.sock");
}

TEST(DefaultPathsTest, RootUnderSystemdUsesItsDirectories) {
  const auto paths =
      ComputeDefaultPaths(0, FakeEnv({{"STATE_DIRECTORY", "/var/lib/rasd-x:/var/lib/other"},
                                      {"RUNTIME_DIRECTORY", "/run/rasd-x"}}));
  EXPECT_EQ(paths.state_dir, "/var/lib/rasd-x");
  EXPECT_EQ(paths.socket, "/run/rasd-x/rasd.sock");
}

TEST(DefaultPathsTest, UserPrefersXdgDirectories) {
  const auto paths = ComputeDefaultPaths(1000, FakeEnv({{"HOME", "/home/u"},
                                                        {"XDG_RUNTIME_DIR", "/run/user/1000"},
                                                        {"XDG_STATE_HOME", "/home/u/state"}}));
  EXPECT_EQ(paths.state_dir, "/home/u/state/rasd");
  EXPECT_EQ(paths.socket, "/run/user/1000/rasd/rasd.sock");
}

TEST(DefaultPathsTest, UserFallsBackToHome) {
  const auto paths =
      ComputeDefaultPaths(1000, FakeEnv({{"HOME", "/home/u"}, {"XDG_RUNTIME_DIR", ""}}));
  EXPECT_EQ(paths.state_dir, "/home/u/.local/state/rasd");
  EXPECT_EQ(paths.socket, "/home/u/.cache/rasd/rasd.sock");
}

TEST(DefaultPathsTest, UserWithoutHomeUsesTmp) {
  const auto paths = ComputeDefaultPaths(1234, FakeEnv({}));
  EXPECT_EQ(paths.state_dir, "/tmp/rasd-1234/state");
  EXPECT_EQ(paths.socket, "/tmp/rasd-1234/rasd.sock");
}

}  // namespace
}  // namespace rasd::common
