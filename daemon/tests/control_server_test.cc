// The control server's push stream (what `watch` and `attach` use) against
// a subscriber that never reads: on the real sd-event loop, with a real
// Unix socket. Pushed messages that pile up unread end the connection (past
// 4 MiB at once, or after client_timeout once 64 KiB wait), the handler's
// token tells the subscriber's owner, and a subscriber that reads is served
// throughout.

#include "control_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <thread>

#include "rasd/common/event_loop.h"
#include "rasd/common/host_env.h"
#include "rasd/testing/eventually.h"
#include "sim_node.h"

namespace rasd::daemon {
namespace {

using namespace std::chrono_literals;

int Connect(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads up to the first newline (the subscribe reply); empty on EOF.
std::string ReadLine(int fd) {
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

class ControlServerPushTest : public ::testing::Test {
 protected:
  void Start(std::chrono::milliseconds client_timeout) {
    dir_ = testing::FreshTestDir("control-push");
    std::filesystem::create_directories(dir_);
    socket_path_ = dir_ / "sock";
    auto loop = common::CreateSdEventLoop(std::make_shared<common::SystemClock>());
    ASSERT_TRUE(loop.has_value()) << loop.error().message;
    loop_ = std::move(*loop);

    common::UniqueFd listen_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path_.c_str(), sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(listen_fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listen_fd.Get(), 16), 0);

    Command subscribe;
    subscribe.run_subscribe = [this](const common::control::Request&, const PeerCredentials&,
                                     Push push) -> Result<Subscribed> {
      const int id = next_id_++;
      auto token = std::make_shared<int>(id);
      subscribers_[id] = {std::move(push), token};
      return Subscribed{{{"subscriber", id}}, token};
    };
    ControlServer::Options options;
    options.client_timeout = client_timeout;
    auto server = ControlServer::Create(*loop_, std::move(listen_fd), options,
                                        Authorizer{.daemon_uid = ::getuid()},
                                        {{"subscribe", subscribe}});
    ASSERT_TRUE(server.has_value()) << server.error().message;
    server_ = std::move(*server);
    loop_thread_ = std::thread([this] { loop_->Run(); });
  }

  // Runs `task` on the loop thread and returns what it returned.
  template <typename Task>
  auto OnLoop(Task task) {
    std::promise<decltype(task())> done;
    auto result = done.get_future();
    loop_->Post([&] { done.set_value(task()); });
    return result.get();
  }

  void TearDown() override {
    if (loop_) {
      OnLoop([this] {
        server_.reset();
        subscribers_.clear();
        loop_->Exit(0);
        return 0;
      });
      loop_thread_.join();
    }
    std::filesystem::remove_all(dir_);
  }

  // Connects and subscribes; returns the connection and the subscriber id.
  std::pair<int, int> Subscribe() {
    const int fd = Connect(socket_path_);
    EXPECT_GE(fd, 0);
    const std::string request = "{\"command\":\"subscribe\"}\n";
    EXPECT_EQ(::write(fd, request.data(), request.size()),
              static_cast<ssize_t>(request.size()));
    const auto reply = nlohmann::json::parse(ReadLine(fd), nullptr, false);
    EXPECT_TRUE(reply.is_object()) << reply.dump();
    return {fd, reply.value("/result/subscriber"_json_pointer, -1)};
  }

  // Pushes `count` messages of `bytes` each to subscriber `id`; returns how
  // many were taken before a push said the client is gone.
  int PushTo(int id, int count, std::size_t bytes) {
    return OnLoop([&] {
      const nlohmann::json message = {{"event", "pad"}, {"pad", std::string(bytes, 'a')}};
      for (int i = 0; i < count; ++i) {
        if (!subscribers_.at(id).push(message)) return i;
      }
      return count;
    });
  }
  bool Gone(int id) {
    return OnLoop([&] { return subscribers_.at(id).token.expired(); });
  }

  struct Subscriber {
    daemon::Push push;
    std::weak_ptr<int> token;
  };
  std::filesystem::path dir_;
  std::filesystem::path socket_path_;
  std::unique_ptr<common::EventLoop> loop_;
  std::unique_ptr<ControlServer> server_;
  std::thread loop_thread_;
  std::map<int, Subscriber> subscribers_;  // loop thread only, once started
  int next_id_ = 1;
};

TEST_F(ControlServerPushTest, ASubscriberThatNeverReadsIsDroppedPastFourMegabytes) {
  Start(/*client_timeout=*/60s);  // only the size bound can drop it in this test
  const auto [fd, id] = Subscribe();
  ASSERT_GT(id, 0);
  const int taken = PushTo(id, 200, 64 * 1024);  // 12.5 MiB, never read
  EXPECT_LT(taken, 200) << "a push must fail once the client is dropped";
  EXPECT_GE(taken, 4 * 16) << "4 MiB wait before the client is dropped, not less";
  EXPECT_TRUE(Gone(id)) << "the subscriber's token ends with its connection";
  ::close(fd);
}

TEST_F(ControlServerPushTest, UnreadMessagesPastTheHighWaterDropTheClientAfterItsTimeout) {
  Start(/*client_timeout=*/1s);
  const auto [idle_fd, idle] = Subscribe();
  const auto [reader_fd, reader] = Subscribe();
  ASSERT_GT(idle, 0);
  ASSERT_GT(reader, 0);
  // The reader drains its connection all along.
  std::atomic<std::size_t> read_bytes{0};
  std::thread drain([fd = reader_fd, &read_bytes] {
    char buffer[65536];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) read_bytes += n;
  });
  // 1 MiB to each: under the size bound, far over what the socket holds.
  EXPECT_EQ(PushTo(idle, 16, 64 * 1024), 16);
  EXPECT_EQ(PushTo(reader, 16, 64 * 1024), 16);
  EXPECT_FALSE(Gone(idle)) << "not dropped before its timeout";
  (void)rasd::testing::Eventually([&] { return Gone(idle); }, 5s, 20ms);
  EXPECT_TRUE(Gone(idle)) << "a subscriber that left 1 MiB unread for its timeout is dropped";
  EXPECT_FALSE(Gone(reader)) << "one that reads is not";
  EXPECT_EQ(PushTo(reader, 1, 16), 1);
  ::shutdown(reader_fd, SHUT_RDWR);
  drain.join();
  EXPECT_GT(read_bytes.load(), 16U * 64 * 1024) << "the reader got every message";
  ::close(reader_fd);
  ::close(idle_fd);
}

}  // namespace
}  // namespace rasd::daemon
