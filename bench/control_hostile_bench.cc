// The real rasd's control latency for an administrator while hostile local
// users hold its connections.
//
// One rasd (simulator devices, no metrics endpoint) with
// control.max_clients raised to kHeldConnections * 4, so that one uid's
// share (a quarter) can hold kHeldConnections. Then:
//
//   - idle baseline: kPings `ping`s from root on one connection, and
//     kConnectPings more each on a fresh connection (what rasctl does);
//   - hostile: a child as `nobody` opens kHeldConnections connections and
//     keeps them open (a `ping` on each every few seconds, so that the
//     client timeout does not close them); another child as a second
//     unprivileged uid keeps kNonReaders connections that send requests as
//     fast as the socket takes them and never read a reply (rasd drops them
//     by their timeout: they connect again); root measures again.
//
// Printed: p50, p99 and max of both, the p99 ratio hostile/idle, how many
// connections rasd admitted and refused. Target (issue 17): admin ping
// p99 <= 50 ms while hostile. A miss is reported, not an error.
//
// Needs root to connect as other uids (setuid in a forked child); without
// it the connections are held as this uid, which rasd counts as an
// administrator's (its own uid): the figures then say so.
//
// Runs once (Iterations(1)), in about 30 s.

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using rasd::testing::RasdInstance;
using rasd::testing::RawClient;

constexpr int kHeldConnections = 500;
constexpr int kNonReaders = 20;
constexpr int kPings = 2000;
constexpr int kConnectPings = 200;
constexpr auto kPingGap = 1ms;
constexpr auto kKeepAlivePeriod = 3s;
constexpr uid_t kNobody = 65534;
constexpr uid_t kOtherUser = 65533;
constexpr gid_t kNogroup = 65534;
constexpr double kTargetP99Ms = 50;

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
  std::size_t samples = 0;
};
Percentiles Summarize(std::vector<double> millis) {
  Percentiles result;
  result.samples = millis.size();
  if (millis.empty()) return result;
  std::sort(millis.begin(), millis.end());
  result.p50 = millis[millis.size() / 2];
  result.p99 = millis[std::min(millis.size() - 1, millis.size() * 99 / 100)];
  result.max = millis.back();
  return result;
}

// Round trips of `ping` from this process (root: an administrator), on one
// connection and on a fresh connection each; failures counted.
struct AdminLatency {
  std::vector<double> kept, fresh;
  int failures = 0;
};
AdminLatency MeasureAdmin(const std::filesystem::path& socket) {
  AdminLatency latency;
  RawClient client(socket);
  for (int i = 0; i < kPings; ++i) {
    const auto sent = Clock::now();
    if (!client.Connected() || !client.Send("{\"command\":\"ping\"}\n")) {
      ++latency.failures;
      break;
    }
    const auto reply = client.ReadLine(10s);
    if (!reply || reply->find("\"pong\"") == std::string::npos) {
      ++latency.failures;
      break;
    }
    latency.kept.push_back(Millis(Clock::now() - sent));
    std::this_thread::sleep_for(kPingGap);
  }
  for (int i = 0; i < kConnectPings; ++i) {
    const auto sent = Clock::now();
    RawClient once(socket);
    const bool ok = once.Connected() && once.Send("{\"command\":\"ping\"}\n");
    const auto reply = ok ? once.ReadLine(10s) : std::nullopt;
    if (!reply || reply->find("\"pong\"") == std::string::npos) {
      ++latency.failures;
      continue;
    }
    latency.fresh.push_back(Millis(Clock::now() - sent));
    std::this_thread::sleep_for(kPingGap);
  }
  return latency;
}

// A connected, then non-blocking, socket; -1 on failure. The connect
// blocks: a non-blocking one fails at once with EAGAIN while rasd's listen
// backlog is full.
int Connect(const sockaddr_un& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// What a child reports through its pipe.
struct ChildReport {
  int connections = 0;  // held (admitted) or, for the non-readers, open
  int refused = 0;      // answered at once and closed
  int dropped = 0;      // closed by rasd while held
  long long requests = 0;
};

// A forked child as `uid`, runs `body` with the release fd and exits; its
// pipe carries ChildReports. Only system calls and plain memory in the
// child (it is forked from a process with threads).
struct Child {
  pid_t pid = -1;
  int report_fd = -1;
  int release_fd = -1;
};
template <typename Body>
std::optional<Child> Fork(std::optional<uid_t> uid, Body body) {
  int report[2], release[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return std::nullopt;
  if (::pipe2(release, O_CLOEXEC) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    ::close(report[0]);
    ::close(release[1]);
    if (uid && (::setgid(kNogroup) != 0 || ::setuid(*uid) != 0)) ::_exit(2);
    body(report[1], release[0]);
    ::_exit(0);
  }
  ::close(report[1]);
  ::close(release[0]);
  return Child{pid, report[0], release[1]};
}

void Send(int fd, const ChildReport& report) { (void)!::write(fd, &report, sizeof report); }

std::optional<ChildReport> Receive(int fd, std::chrono::milliseconds timeout) {
  pollfd ready{fd, POLLIN, 0};
  if (::poll(&ready, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  ChildReport report;
  if (::read(fd, &report, sizeof report) != static_cast<ssize_t>(sizeof report))
    return std::nullopt;
  return report;
}

bool Released(int release_fd, int wait_ms) {
  pollfd ready{release_fd, POLLIN, 0};
  return ::poll(&ready, 1, wait_ms) > 0;
}

// Opens kHeldConnections and keeps the admitted ones: a refusal answers at
// once and closes, an admitted connection says nothing. Reports once held,
// then keeps them alive until released, and reports again.
void HoldConnections(const sockaddr_un& address, int report_fd, int release_fd) {
  std::vector<int> fds;
  for (int i = 0; i < kHeldConnections; ++i) {
    const int fd = Connect(address);
    if (fd >= 0) fds.push_back(fd);
  }
  ::usleep(500'000);
  std::vector<pollfd> ready;
  for (int fd : fds) ready.push_back({fd, POLLIN, 0});
  (void)::poll(ready.data(), ready.size(), 0);
  ChildReport report;
  std::vector<int> held;
  for (const auto& entry : ready) {
    if (entry.revents == 0) {
      held.push_back(entry.fd);
    } else {
      ++report.refused;
      ::close(entry.fd);
    }
  }
  report.connections = static_cast<int>(held.size());
  Send(report_fd, report);
  static constexpr char kPing[] = "{\"command\":\"ping\"}\n";
  char sink[4096];
  const int period_ms = static_cast<int>(std::chrono::milliseconds(kKeepAlivePeriod).count());
  while (!Released(release_fd, period_ms)) {
    for (int& fd : held) {
      if (fd < 0) continue;
      bool closed = false;
      while (true) {
        const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0) continue;
        closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        break;
      }
      if (!closed && ::send(fd, kPing, sizeof kPing - 1, MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
        ++report.requests;
        continue;
      }
      if (closed || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        ++report.dropped;
        ::close(fd);
        fd = -1;
      }
    }
  }
  report.connections =
      static_cast<int>(std::count_if(held.begin(), held.end(), [](int fd) { return fd >= 0; }));
  Send(report_fd, report);
}

// kNonReaders connections that send `ping`s as fast as the socket takes
// them and never read; one rasd drops is opened again.
void FloodWithoutReading(const sockaddr_un& address, int report_fd, int release_fd) {
  std::string burst;
  for (int i = 0; i < 256; ++i) burst += "{\"command\":\"ping\"}\n";
  std::vector<int> fds(kNonReaders, -1);
  ChildReport report;
  bool reported = false;
  while (!Released(release_fd, 1)) {
    for (int& fd : fds) {
      if (fd < 0) {
        fd = Connect(address);
        if (fd < 0) {
          ++report.refused;
          continue;
        }
      }
      const ssize_t n = ::send(fd, burst.data(), burst.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        report.requests += n / static_cast<ssize_t>(sizeof "{\"command\":\"ping\"}\n" - 1);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        ++report.dropped;
        ::close(fd);
        fd = -1;
      }
    }
    if (!reported) {
      report.connections =
          static_cast<int>(std::count_if(fds.begin(), fds.end(), [](int fd) { return fd >= 0; }));
      Send(report_fd, report);
      reported = true;
    }
  }
  report.connections =
      static_cast<int>(std::count_if(fds.begin(), fds.end(), [](int fd) { return fd >= 0; }));
  Send(report_fd, report);
}

// Releases the child and returns its last report (-1s if none came).
ChildReport Finish(Child& child) {
  (void)!::write(child.release_fd, "x", 1);
  ::close(child.release_fd);
  const auto report = Receive(child.report_fd, 10s);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  ::close(child.report_fd);
  return report.value_or(ChildReport{-1, -1, -1, -1});
}

void Report(const char* what, const Percentiles& p) {
  std::fprintf(stderr, "  %-38s p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms  (n %zu)\n", what, p.p50,
               p.p99, p.max, p.samples);
}

void BM_AdminPingUnderHostileClients(benchmark::State& state) {
  const bool root = ::geteuid() == 0;
  for (auto _ : state) {
    RasdInstance rasd;  // SIGTERM, then SIGKILL after 5 s, however this ends
    rasd.WriteConfig(
        "runtime:\n  driver: sim\n"
        "simulator:\n  devices: 2\n"
        "ras:\n  kmsg: false\n  tracefs: false\n  nvml: false\n"
        "control:\n  max_clients: " +
        std::to_string(kHeldConnections * 4) + "\n");
    std::string why;
    if (!rasd.Start({"--metrics-listen", "off"}, {}, &why)) {
      state.SkipWithError(why.c_str());
      break;
    }
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", rasd.Socket().c_str());

    const auto idle = MeasureAdmin(rasd.Socket());

    auto holder = Fork(
        root ? std::optional<uid_t>(kNobody) : std::nullopt,
        [&](int report_fd, int release_fd) { HoldConnections(address, report_fd, release_fd); });
    if (!holder) {
      state.SkipWithError("fork failed");
      break;
    }
    const auto held = Receive(holder->report_fd, 30s);
    auto flooder = Fork(root ? std::optional<uid_t>(kOtherUser) : std::nullopt,
                        [&](int report_fd, int release_fd) {
                          FloodWithoutReading(address, report_fd, release_fd);
                        });
    const auto flooding = flooder ? Receive(flooder->report_fd, 30s) : std::nullopt;
    std::optional<AdminLatency> hostile;
    if (held && flooding) {
      std::this_thread::sleep_for(500ms);  // the non-readers' buffers fill
      hostile = MeasureAdmin(rasd.Socket());
    }
    const auto status = rasd.RasctlJson({"status"});
    const ChildReport flooded = flooder ? Finish(*flooder) : ChildReport{-1, -1, -1, -1};
    const ChildReport kept = Finish(*holder);
    if (!held || !flooding || !hostile) {
      state.SkipWithError("the hostile clients did not start");
      break;
    }

    const auto idle_kept = Summarize(idle.kept), idle_fresh = Summarize(idle.fresh);
    const auto hostile_kept = Summarize(hostile->kept), hostile_fresh = Summarize(hostile->fresh);
    const double ratio = idle_kept.p99 > 0 ? hostile_kept.p99 / idle_kept.p99 : 0;
    state.counters["held_connections"] = held->connections;
    state.counters["held_refused"] = held->refused;
    state.counters["held_dropped"] = kept.dropped;
    state.counters["nonreader_requests"] = static_cast<double>(flooded.requests);
    state.counters["nonreader_reconnects"] = flooded.dropped;
    state.counters["ping_idle_p50_ms"] = idle_kept.p50;
    state.counters["ping_idle_p99_ms"] = idle_kept.p99;
    state.counters["ping_idle_max_ms"] = idle_kept.max;
    state.counters["ping_hostile_p50_ms"] = hostile_kept.p50;
    state.counters["ping_hostile_p99_ms"] = hostile_kept.p99;
    state.counters["ping_hostile_max_ms"] = hostile_kept.max;
    state.counters["ping_p99_hostile_over_idle"] = ratio;
    state.counters["connect_ping_idle_p99_ms"] = idle_fresh.p99;
    state.counters["connect_ping_hostile_p99_ms"] = hostile_fresh.p99;
    state.counters["ping_failures"] = idle.failures + hostile->failures;
    state.counters["refused_connections"] =
        status["control"].value("refused_connections", std::int64_t{-1});

    std::fprintf(stderr, "rasd control under hostile clients (%s):\n",
                 root ? "held as uid 65534, flooded as uid 65533"
                      : "not root: held and flooded as this uid, which rasd counts as an admin");
    std::fprintf(stderr,
                 "  held %d of %d connections (%d refused, %d dropped while held); %d clients "
                 "that never read sent %lld requests, reconnected %d times\n",
                 held->connections, kHeldConnections, held->refused, kept.dropped, kNonReaders,
                 flooded.requests, flooded.dropped);
    Report("admin ping idle, one connection", idle_kept);
    Report("admin ping hostile, one connection", hostile_kept);
    Report("admin connect+ping idle", idle_fresh);
    Report("admin connect+ping hostile", hostile_fresh);
    std::fprintf(
        stderr, "  p99 hostile/idle %.2f; admin p99 %.3f ms, target <= %.0f ms: %s\n", ratio,
        hostile_kept.p99, kTargetP99Ms,
        hostile_kept.p99 <= kTargetP99Ms && hostile_fresh.p99 <= kTargetP99Ms ? "met" : "MISSED");
    if (idle.failures + hostile->failures > 0)
      state.SkipWithError("an admin ping failed: rasd did not answer root");
  }
}
BENCHMARK(BM_AdminPingUnderHostileClients)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
