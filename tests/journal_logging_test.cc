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
#include <set>

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

  // Every entry up to the start-up line (the runtime's, the sources', the
  // daemon's).
  std::string started;
  std::vector<std::string> entries;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (started.empty() && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{journal.Get(), POLLIN, 0};
    if (::poll(&pfd, 1, 500) <= 0) continue;
    char buffer[8192];
    const ssize_t n = ::recv(journal.Get(), buffer, sizeof buffer, 0);
    if (n <= 0) continue;
    std::string entry(buffer, static_cast<std::size_t>(n));
    entries.push_back(entry);
    if (entry.find("MESSAGE=rasd ") != std::string::npos &&
        entry.find(" started: ") != std::string::npos) {
      started = entry;
    }
  }
  ASSERT_FALSE(started.empty()) << "no start-up entry reached the journal socket";
  EXPECT_NE(started.find("PRIORITY=6\n"), std::string::npos) << started;
  EXPECT_NE(started.find("SYSLOG_IDENTIFIER=rasd\n"), std::string::npos) << started;
  EXPECT_NE(started.find("RASD_COMPONENT=daemon\n"), std::string::npos) << started;
  // The caller's location, relative to the source tree; not the sink's.
  EXPECT_NE(started.find("CODE_FILE=daemon/src/daemon.cc\n"), std::string::npos) << started;
  EXPECT_NE(started.find("CODE_FUNC=Initialize\n"), std::string::npos) << started;
  EXPECT_NE(started.find("CODE_LINE="), std::string::npos) << started;
  // Every entry names a component and its caller; none the build path or
  // the journal sink.
  for (const auto& entry : entries) {
    EXPECT_NE(entry.find("RASD_COMPONENT="), std::string::npos) << entry;
    EXPECT_NE(entry.find("CODE_FILE="), std::string::npos) << entry;
    EXPECT_EQ(entry.find("logging.cc"), std::string::npos) << entry;
    EXPECT_EQ(entry.find(RASD_SOURCE_DIR), std::string::npos) << entry;
  }
  EXPECT_GE(entries.size(), 3U);
  std::set<std::string> components;
  for (const auto& entry : entries) {
    const auto at = entry.find("RASD_COMPONENT=");
    components.insert(entry.substr(at + 15, entry.find('\n', at) - at - 15));
  }
  EXPECT_GE(components.size(), 2U) << "start-up lines come from more than one component";

  rasd.Signal(SIGTERM);
  EXPECT_EQ(rasd.Wait(2s), 0);
  EXPECT_EQ(ReadText(stderr_path), "") << "with the journal attached, nothing should go to stderr";
}

}  // namespace
}  // namespace rasd::testing
