// The shipped systemd units, checked by systemd's own verifier.

#include <gtest/gtest.h>
#include <unistd.h>

#include "test_support.h"

namespace rasd::testing {
namespace {

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST(UnitFilesTest, SystemdAnalyzeVerifyIsSilent) {
  const char* analyze = "/usr/bin/systemd-analyze";
  if (::access(analyze, X_OK) != 0) {
    GTEST_SKIP()
        << "systemd-analyze is not installed (package systemd); scripts/bootstrap installs it";
  }
  // verify fails when ExecStart's binary is missing: point it at the build,
  // through a link whose path has no space (a checkout's path may).
  TempDir dir;
  std::filesystem::create_symlink(RASD_BINARY, dir / "rasd");
  const std::string service = Replace(ReadText(RASD_SOURCE_DIR "/packaging/rasd.service"),
                                      "/usr/bin/rasd", (dir / "rasd").string());
  ASSERT_NE(service.find((dir / "rasd").string()), std::string::npos);
  WriteText(dir / "rasd.service", service);
  WriteText(dir / "rasd.socket", ReadText(RASD_SOURCE_DIR "/packaging/rasd.socket"));
  // systemd-analyze exits 0 on unknown keys and bad values, so any output fails.
  const auto result =
      RunToCompletion({.argv = {analyze, "verify", "--man=no", (dir / "rasd.service").string(),
                                (dir / "rasd.socket").string()},
                       .set_env = {{"SYSTEMD_LOG_LEVEL", "notice"}}},
                      60s);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out + result.err, "");

  // The verifier must actually be reading our files: a bad key is reported.
  WriteText(dir / "rasd.service", Replace(service, "[Install]", "NoSuchKey=1\n[Install]"));
  const auto broken =
      RunToCompletion({.argv = {analyze, "verify", "--man=no", (dir / "rasd.service").string()},
                       .set_env = {{"SYSTEMD_LOG_LEVEL", "notice"}}},
                      60s);
  EXPECT_NE((broken.out + broken.err).find("Unknown key 'NoSuchKey'"), std::string::npos)
      << broken.out << broken.err;
}

TEST(UnitFilesTest, ServiceIsANotifyServiceWithAWatchdog) {
  const std::string service = ReadText(RASD_SOURCE_DIR "/packaging/rasd.service");
  for (const char* line :
       {"Type=notify\n", "WatchdogSec=", "Restart=on-failure\n", "StateDirectory=rasd\n",
        "RuntimeDirectory=rasd\n", "NoNewPrivileges=yes\n", "ProtectSystem=strict\n",
        "PrivateTmp=yes\n", "ExecReload="}) {
    EXPECT_NE(service.find(line), std::string::npos) << "missing " << line;
  }
  const std::string socket = ReadText(RASD_SOURCE_DIR "/packaging/rasd.socket");
  EXPECT_NE(socket.find("ListenStream=/run/rasd/rasd.sock\n"), std::string::npos);
}

}  // namespace
}  // namespace rasd::testing
