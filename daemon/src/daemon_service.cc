// The daemon as a systemd service: the signals it stops and reloads on,
// READY/STATUS/STOPPING notifications, the watchdog, and the loop's run.
#include <fmt/format.h>
#include <systemd/sd-daemon.h>

#include <csignal>
#include <cstring>

#include "daemon.h"
#include "rasd/common/logging.h"

namespace rasd::daemon {

Status Daemon::WatchSignals() {
  auto add_signal = [this](int signal, std::function<void()> handler) -> Status {
    auto watch = loop_->WatchSignal(signal, std::move(handler));
    if (!watch) return Fail(watch.error());
    signals_.push_back(std::move(*watch));
    return {};
  };
  for (int signal : {SIGTERM, SIGINT}) {
    if (auto added = add_signal(signal,
                                [this, signal] {
                                  RASD_LOG_INFO("received {}; stopping", ::strsignal(signal));
                                  loop_->Exit(0);
                                });
        !added)
      return added;
  }
  // Reload logs its own outcome.
  if (auto added = add_signal(SIGHUP, [this] { (void)Reload(); }); !added) return added;

  if (sd_watchdog_enabled(/*unset_environment=*/0, &watchdog_usec_) > 0 && watchdog_usec_ > 0) {
    watchdog_timer_ = loop_->CreateTimer([this] { OnWatchdog(); });
    watchdog_timer_->ArmAfter(std::chrono::microseconds(watchdog_usec_ / 2));
  }

  return {};
}

int Daemon::Run() {
  Notify("READY=1");
  NotifyStatus();
  const int rc = loop_->Run();
  Notify("STOPPING=1\nSTATUS=stopping");
  if (rc < 0) {
    RASD_LOG_ERROR("event loop failed: {}", std::strerror(-rc));
    return 1;
  }
  RASD_LOG_INFO("rasd stopped");
  return 0;
}

void Daemon::Notify(const std::string& message) {
  // No NOTIFY_SOCKET (not under systemd) is a no-op, not an error.
  if (int rc = sd_notify(0, message.c_str()); rc < 0) {
    RASD_LOG_DEBUG("sd_notify failed: {}", std::strerror(-rc));
  }
}

void Daemon::NotifyStatus() {
  Notify(
      fmt::format("STATUS=serving {}; control socket {}", DevicesPhrase(), socket_path_.string()));
}

void Daemon::OnWatchdog() {
  // Sent from the loop itself: a wedged loop stops the pings and systemd
  // restarts us, which is the point.
  Notify("WATCHDOG=1");
  watchdog_timer_->ArmAfter(std::chrono::microseconds(watchdog_usec_ / 2));
}

}  // namespace rasd::daemon
