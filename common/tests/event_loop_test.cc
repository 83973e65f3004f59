#include "rasd/common/event_loop.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <thread>
#include <vector>

#include "rasd/common/simulated_event_loop.h"
#include "rasd/common/unique_fd.h"

namespace rasd::common {
namespace {

using std::chrono::milliseconds;

TEST(SimulatedEventLoopTest, TimersFireAtTheirDeadlinesInOrder) {
  SimulatedEventLoop loop;
  std::vector<std::pair<int, std::chrono::nanoseconds>> fired;
  auto late = loop.CreateTimer([&] { fired.emplace_back(2, loop.Now()); });
  auto early = loop.CreateTimer([&] { fired.emplace_back(1, loop.Now()); });
  late->ArmAfter(milliseconds(300));
  early->ArmAfter(milliseconds(100));
  loop.AdvanceBy(milliseconds(99));
  EXPECT_TRUE(fired.empty());
  loop.AdvanceBy(milliseconds(500));
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].first, 1);
  EXPECT_EQ(fired[0].second, milliseconds(100));
  EXPECT_EQ(fired[1].second, milliseconds(300));
  EXPECT_EQ(loop.Now(), milliseconds(599));
  EXPECT_EQ(loop.ArmedTimers(), 0u);
}

TEST(SimulatedEventLoopTest, ATimerReArmsItselfAndCanBeCancelled) {
  SimulatedEventLoop loop;
  int ticks = 0;
  std::unique_ptr<Timer> timer;
  timer = loop.CreateTimer([&] {
    ++ticks;
    timer->ArmAfter(milliseconds(10));
  });
  timer->ArmAfter(milliseconds(10));
  loop.AdvanceBy(milliseconds(55));
  EXPECT_EQ(ticks, 5);
  timer->Disarm();
  loop.AdvanceBy(milliseconds(100));
  EXPECT_EQ(ticks, 5);
  timer->ArmAfter(milliseconds(1));
  timer.reset();  // destroying cancels
  loop.AdvanceBy(milliseconds(100));
  EXPECT_EQ(ticks, 5);
}

TEST(SimulatedEventLoopTest, ACallbackMayDestroyAnotherTimerDueAtTheSameTime) {
  SimulatedEventLoop loop;
  int second_fired = 0;
  std::unique_ptr<Timer> second = loop.CreateTimer([&] { ++second_fired; });
  auto first = loop.CreateTimer([&] { second.reset(); });
  first->ArmAfter(milliseconds(5));
  second->ArmAfter(milliseconds(5));
  loop.AdvanceBy(milliseconds(10));
  EXPECT_EQ(second_fired, 0);
}

TEST(SimulatedEventLoopTest, PostedTasksFromOtherThreadsRunOnTheLoop) {
  SimulatedEventLoop loop;
  std::vector<int> seen;
  std::thread worker([&] {
    for (int i = 0; i < 100; ++i) loop.Post([&seen, i] { seen.push_back(i); });
  });
  worker.join();
  EXPECT_EQ(loop.RunUntilIdle(), 100u);
  ASSERT_EQ(seen.size(), 100u);
  EXPECT_EQ(seen.back(), 99);
}

TEST(SimulatedEventLoopTest, WatchesRealDescriptors) {
  SimulatedEventLoop loop;
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
  UniqueFd left(pair[0]), right(pair[1]);
  std::string received;
  auto watch = loop.WatchFd(right.Get(), EPOLLIN, [&](std::uint32_t revents) {
    EXPECT_TRUE(revents & EPOLLIN);
    char buffer[64];
    const ssize_t n = ::read(right.Get(), buffer, sizeof buffer);
    if (n > 0) received.append(buffer, static_cast<std::size_t>(n));
  });
  ASSERT_TRUE(watch.has_value());
  EXPECT_EQ(loop.RunUntilIdle(), 0u);
  ASSERT_EQ(::write(left.Get(), "ping", 4), 4);
  loop.RunUntilIdle();
  EXPECT_EQ(received, "ping");
  (*watch)->SetEnabled(false);
  ASSERT_EQ(::write(left.Get(), "more", 4), 4);
  EXPECT_EQ(loop.RunUntilIdle(), 0u);
  EXPECT_EQ(received, "ping");
}

TEST(SimulatedEventLoopTest, SignalsAndExit) {
  SimulatedEventLoop loop;
  auto watch = loop.WatchSignal(SIGTERM, [&] { loop.Exit(3); });
  ASSERT_TRUE(watch.has_value());
  EXPECT_FALSE(loop.WatchSignal(SIGTERM, [] {}).has_value());
  EXPECT_FALSE(loop.Raise(SIGHUP));
  auto timer = loop.CreateTimer([&] { loop.Raise(SIGTERM); });
  timer->ArmAfter(std::chrono::hours(1));
  // Run jumps the clock to the timer, whose signal ends the loop.
  EXPECT_EQ(loop.Run(), 3);
  EXPECT_EQ(loop.Now(), std::chrono::hours(1));
}

TEST(SimulatedEventLoopTest, RunReturnsWhenNothingCanHappen) {
  SimulatedEventLoop loop;
  EXPECT_EQ(loop.Run(), -1);
}

TEST(SdEventLoopTest, TimersPostsAndExitOnTheRealLoop) {
  auto created = CreateSdEventLoop(std::make_shared<SystemClock>());
  ASSERT_TRUE(created.has_value()) << created.error().message;
  EventLoop& loop = **created;
  int ticks = 0;
  std::unique_ptr<Timer> timer;
  timer = loop.CreateTimer([&] {
    if (++ticks == 3) {
      std::thread([&loop] { loop.Post([&loop] { loop.Exit(7); }); }).detach();
      return;
    }
    timer->ArmAfter(milliseconds(1));
  });
  EXPECT_FALSE(timer->Armed());
  timer->ArmAfter(milliseconds(1));
  EXPECT_TRUE(timer->Armed());
  const auto start = loop.Now();
  EXPECT_EQ(loop.Run(), 7);
  EXPECT_EQ(ticks, 3);
  EXPECT_GE(loop.Now() - start, milliseconds(3));
}

TEST(SdEventLoopTest, ARegularFileCannotBeWatched) {
  auto created = CreateSdEventLoop(std::make_shared<SystemClock>());
  ASSERT_TRUE(created.has_value());
  char path[] = "/tmp/rasd-loop-XXXXXX";
  UniqueFd file(::mkstemp(path));
  ASSERT_TRUE(file);
  ::unlink(path);
  auto watch = (*created)->WatchFd(file.Get(), EPOLLIN, [](std::uint32_t) {});
  ASSERT_FALSE(watch.has_value());
  EXPECT_NE(watch.error().message.find("watch descriptor"), std::string::npos);
}

}  // namespace
}  // namespace rasd::common
