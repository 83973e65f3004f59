// How fast rasd's verdicts reach processes outside it, with the real rasd.
//
// BM_IsolationToDrainMessage: a child process (`sleep`) is attached on
// device 1 by an administrator's connection (drain signal SIGCONT, which
// changes nothing for a running sleep; workloads.on_drain: notify, so it is
// never killed); a second connection isolates device 1 and the time from
// sending `isolate` to the `drain` message arriving on the attach
// connection is measured; `undrain --force` returns the device between
// rounds (the `returned` message is awaited, so rounds do not overlap).
//
// BM_XidToConsumerKilled: a child attached on device 1 is named by an
// Xid 94 line (pid=) appended to rasd's kmsg; the time from the append to
// the child's exit (SIGKILL, seen by waitpid) is measured, a fresh child
// per round.
//
// Printed: p50 and p99 in ms, and how many rounds. Runs in about 10 s.

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

constexpr int kRounds = 40;

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void Report(benchmark::State& state, std::vector<double> millis) {
  std::sort(millis.begin(), millis.end());
  state.counters["rounds"] = static_cast<double>(millis.size());
  if (millis.empty()) return;
  state.counters["p50_ms"] = millis[millis.size() / 2];
  state.counters["p99_ms"] = millis[std::min(millis.size() - 1, millis.size() * 99 / 100)];
}

pid_t StartSleeper() {
  const pid_t child = ::fork();
  if (child == 0) {
    ::execlp("sleep", "sleep", "600", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return child;
}

// The next message on `client` whose "event" is `event`, within `timeout`.
std::optional<nlohmann::json> Await(RawClient& client, const std::string& event,
                                    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto line = client.ReadLine(std::max(left, 1ms));
    if (!line) return std::nullopt;
    auto message = nlohmann::json::parse(*line, nullptr, false);
    if (message.is_object() && message.value("event", std::string()) == event) return message;
  }
  return std::nullopt;
}

bool Call(RawClient& client, const nlohmann::json& request) {
  if (!client.Send(request.dump() + "\n")) return false;
  auto line = client.ReadLine(5s);
  if (!line) return false;
  auto reply = nlohmann::json::parse(*line, nullptr, false);
  return reply.is_object() && reply.value("ok", false);
}

bool StartRasd(RasdInstance& rasd, benchmark::State& state) {
  rasd.WriteConfig("liveness:\n  period_ms: 0\nworkloads:\n  on_drain: notify\n");
  std::string why;
  if (!rasd.Start({"--metrics-listen", "off"}, {}, &why)) {
    state.SkipWithError(("rasd did not start: " + why).c_str());
    return false;
  }
  return true;
}

void BM_IsolationToDrainMessage(benchmark::State& state) {
  for (auto _ : state) {
    RasdInstance rasd;
    if (!StartRasd(rasd, state)) return;
    const pid_t sleeper = StartSleeper();
    RawClient attach(rasd.Socket()), operator_(rasd.Socket());
    if (!Call(attach, {{"command", "attach"},
                       {"args", {{"pid", sleeper}, {"devices", {1}}, {"drain_signal", "CONT"}}}})) {
      state.SkipWithError("attach refused");
      ::kill(sleeper, SIGKILL);
      ::waitpid(sleeper, nullptr, 0);
      return;
    }
    std::vector<double> millis;
    for (int round = 0; round < kRounds; ++round) {
      const auto sent = Clock::now();
      if (!operator_.Send(
              nlohmann::json{{"command", "isolate"}, {"args", {{"device", 1}, {"reason", "bench"}}}}
                  .dump() +
              "\n"))
        break;
      if (!Await(attach, "drain", 5s)) break;
      millis.push_back(Millis(Clock::now() - sent));
      (void)operator_.ReadLine(5s);  // the isolate's reply
      if (!Call(operator_, {{"command", "undrain"}, {"args", {{"device", 1}, {"force", true}}}}))
        break;
      if (!Await(attach, "returned", 5s)) break;
    }
    ::kill(sleeper, SIGKILL);
    ::waitpid(sleeper, nullptr, 0);
    Report(state, std::move(millis));
  }
}
BENCHMARK(BM_IsolationToDrainMessage)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

void BM_XidToConsumerKilled(benchmark::State& state) {
  for (auto _ : state) {
    RasdInstance rasd;
    if (!StartRasd(rasd, state)) return;
    std::vector<double> millis;
    for (int round = 0; round < kRounds; ++round) {
      const pid_t sleeper = StartSleeper();
      RawClient attach(rasd.Socket());
      if (!Call(attach, {{"command", "attach"},
                         {"args", {{"pid", sleeper}, {"devices", {1}}, {"name", "victim"}}}})) {
        ::kill(sleeper, SIGKILL);
        ::waitpid(sleeper, nullptr, 0);
        break;
      }
      const auto appended = Clock::now();
      rasd.AppendKmsg(fmt::format("3,{},{},-;NVRM: Xid (PCI:ffff:c2:00): 94, pid={}, name=sleep, "
                                  "Contained: SM (0x1). RST: No, D-RST: No\n",
                                  1000 + round, 9'000'000 + round * 1000, sleeper));
      int status = 0;
      bool killed = false;
      while (Clock::now() - appended < 5s) {
        if (::waitpid(sleeper, &status, WNOHANG) == sleeper) {
          killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
          break;
        }
        std::this_thread::sleep_for(100us);
      }
      if (!killed) {
        ::kill(sleeper, SIGKILL);
        ::waitpid(sleeper, nullptr, 0);
        break;
      }
      millis.push_back(Millis(Clock::now() - appended));
    }
    Report(state, std::move(millis));
  }
}
BENCHMARK(BM_XidToConsumerKilled)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
