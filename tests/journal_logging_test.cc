// When systemd connects stderr to the journal (JOURNAL_STREAM), rasd logs
// straight to the journal with structured fields. The test stands in for
// journald by binding its socket.

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "test_support.h"

namespace rasd::testing {
namespace {

constexpr const char* kJournalSocket = "/run/systemd/journal/socket";

TEST(JournalLoggingTest, StructuredFieldsGoToTheJournalWhenStderrIsTheJournal) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root: the test binds journald's socket at " << kJournalSocket;
  }
  if (std::filesystem::exists(kJournalSocket)) {
    GTEST_SKIP() << "a journald already listens at " << kJournalSocket << "; not taking its socket";
  }
  std::filesystem::create_directories("/run/systemd/journal");
  common::UniqueFd journal(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, kJournalSocket);
  ASSERT_EQ(::bind(journal.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0)
      << std::strerror(errno);
  struct Unlink {
    ~Unlink() { ::unlink(kJournalSocket); }
  } unlink_on_exit;

  TempDir dir;
  const auto stderr_path = dir / "stderr";
  WriteText(stderr_path, "");
  struct stat st {};
  ASSERT_EQ(::stat(stderr_path.c_str(), &st), 0);
  NotifyListener notify(dir / "notify.sock");
  Process rasd(
      {.argv = {RASD_BINARY, "--state-dir", (dir / "state").string(), "--socket",
                (dir / "rasd.sock").string()},
       .set_env = {{"NOTIFY_SOCKET", notify.Path().string()},
                   {"JOURNAL_STREAM", std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)}},
       .stderr_path = stderr_path});
  ASSERT_TRUE(notify.WaitFor("READY=1", 10s)) << ReadText(stderr_path);

  std::string started;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (started.empty() && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{journal.Get(), POLLIN, 0};
    if (::poll(&pfd, 1, 500) <= 0) continue;
    char buffer[8192];
    const ssize_t n = ::recv(journal.Get(), buffer, sizeof buffer, 0);
    if (n <= 0) continue;
    std::string entry(buffer, static_cast<std::size_t>(n));
    if (entry.find("MESSAGE=rasd ") != std::string::npos &&
        entry.find(" started: ") != std::string::npos) {
      started = entry;
    }
  }
  ASSERT_FALSE(started.empty()) << "no start-up entry reached the journal socket";
  EXPECT_NE(started.find("PRIORITY=6\n"), std::string::npos) << started;
  EXPECT_NE(started.find("SYSLOG_IDENTIFIER=rasd\n"), std::string::npos) << started;
  EXPECT_NE(started.find("RASD_COMPONENT=rasd\n"), std::string::npos) << started;

  rasd.Signal(SIGTERM);
  EXPECT_EQ(rasd.Wait(2s), 0);
  EXPECT_EQ(ReadText(stderr_path), "") << "with the journal attached, nothing should go to stderr";
}

}  // namespace
}  // namespace rasd::testing
