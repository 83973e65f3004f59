#include "status_text.h"

#include <gtest/gtest.h>

namespace rasd::ctl {
namespace {

TEST(StatusTextTest, FormatsDurations) {
  EXPECT_EQ(FormatDuration(0.4), "0s");
  EXPECT_EQ(FormatDuration(59), "59s");
  EXPECT_EQ(FormatDuration(61), "1m 1s");
  EXPECT_EQ(FormatDuration(3 * 3600 + 120), "3h 2m");
  EXPECT_EQ(FormatDuration(2 * 86400 + 5 * 3600), "2d 5h");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(StatusTextTest, RendersTheStatusFields) {
  const auto status = nlohmann::json::parse(R"({
    "version": "0.1.0", "pid": 42, "uptime_seconds": 75.5,
    "config": {"path": null, "generation": 3, "log_level": "info",
               "last_reload": {"time": "2026-11-29T10:00:00Z", "ok": false,
                               "errors": ["/etc/rasd.yaml:2:3: unknown key 'x'"]}},
    "host_root": "/", "state_dir": "/var/lib/rasd",
    "socket": {"path": "/run/rasd/rasd.sock", "activated": true},
    "database": {"schema_version": 1},
    "devices": {"driver": "sim", "count": 4,
                "by_health": {"healthy": 3, "degraded": 0, "draining": 0, "isolated": 1},
                "list": [{"index": 3, "name": "rasd-sim", "health": "isolated",
                          "pool": {"reserved_bytes": 67108864, "allocated_bytes": 4096, "retired_pages": 2}}]},
    "jobs": {"count": 0},
    "liveness": {"period_ms": 1000, "deadline_ms": 2000, "misses": 2,
                 "devices": [{"device": 3, "beats": 120, "misses": 2, "hangs": 1, "op_timeouts": 4,
                              "last_latency_ms": 0.4}]},
    "metrics": {"listen": "127.0.0.1:0", "port": 40123, "error": null},
    "scheduler": {"kind": "slurm", "node": "node7", "drained": true},
    "events": {"total": 5, "by_severity": {"FATAL": 1, "UCE": 0, "SRAR": 0, "SRAO": 0,
                                             "UCNA": 0, "CE": 4, "INFO": 0}},
    "ras": {"kmsg_records": 900, "kmsg_untrusted": 2, "kmsg_before_start": 7, "crash_records_read": 1,
            "sources": {"kmsg": {"state": "active", "reason": "the kernel's records from /dev/kmsg"},
                        "pstore": {"state": "absent", "reason": "neither /sys/fs/pstore nor /var/lib/systemd/pstore exists; looked for again in 40 s"},
                        "tracefs": {"state": "no_permission", "reason": "create tracing instance: EPERM"},
                        "infiniband": {"state": "absent", "reason": "no /sys/class/infiniband"}}}
  })");
  const std::string text = FormatStatus(status);
  EXPECT_NE(text.find("rasd 0.1.0 (pid 42), up 1m 15s\n"), std::string::npos) << text;
  EXPECT_NE(text.find("built-in defaults (generation 3, log level info)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("REJECTED at 2026-11-29T10:00:00Z: /etc/rasd.yaml:2:3: unknown key 'x'"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("/run/rasd/rasd.sock (systemd socket activation)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("4 sim: 3 healthy, 0 degraded, 0 draining, 1 isolated"), std::string::npos)
      << text;
  EXPECT_NE(text.find("5 total: FATAL 1, UCE 0, SRAR 0, SRAO 0, UCNA 0, CE 4, INFO 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kernel log  900 record(s) read, 2 from user space (never acted on), 7 "
                      "event(s) logged before rasd's first start in this boot, 1 crash record(s) "
                      "read\n"),
            std::string::npos)
      << text;
  // Every name, even the longest, stands apart from its state.
  EXPECT_NE(text.find("sources\n"
                      "  infiniband  absent         no /sys/class/infiniband\n"
                      "  kmsg        active         the kernel's records from /dev/kmsg\n"
                      "  pstore      absent         neither /sys/fs/pstore nor "
                      "/var/lib/systemd/pstore exists; looked for again in 40 s\n"
                      "  tracefs     no_permission  create tracing instance: EPERM\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("   3 rasd-sim   isolated  pool 64.0 MiB reserved, 4.0 KiB allocated, 2 "
                      "retired page(s)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("liveness    a heartbeat every 1000 ms, deadline 2000 ms, hung after 2 "
                      "missed\n   3 120 beat(s), 2 missed, 1 hang(s), 4 op timeout(s), last 0.4 "
                      "ms\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("metrics     http://127.0.0.1:40123/metrics\n"), std::string::npos) << text;
  EXPECT_NE(text.find("scheduler   slurm, node node7, DRAINED by rasd\n"), std::string::npos)
      << text;
}

TEST(StatusTextTest, NamesEachDriverCallPastTheProbeDeadline) {
  const std::string text = FormatStatus(nlohmann::json::parse(R"({
    "probe": {"deadline_ms": 5000, "isolate_after": 3, "interval_ms": 1000,
              "watched": ["NVML", "sim device queries"],
              "stuck": [{"device": 1, "source": "NVML", "function": "nvmlDeviceGetTotalEccErrors",
                         "name": "0000:07:00.0", "running_ms": 7250}]}
  })"));
  EXPECT_NE(text.find("probes      driver calls past 5000 ms drain their device, past 3 deadlines "
                      "isolate it: NVML, sim device queries\n"
                      "   1 NVML nvmlDeviceGetTotalEccErrors on 0000:07:00.0 has not returned for "
                      "7250 ms\n"),
            std::string::npos)
      << text;
}

TEST(StatusTextTest, SaysWhetherTheLinksAreStillTraining) {
  EXPECT_NE(FormatStatus(nlohmann::json::parse(R"({"links": {"settle_s": 300,
                "settling_until": "2026-12-06T10:05:00Z", "settles_in_s": 120.4}})"))
                .find("links       training after a boot or driver load: their states are "
                      "decided in 120 s (2026-12-06T10:05:00Z)\n"),
            std::string::npos);
  EXPECT_NE(FormatStatus(nlohmann::json::parse(
                             R"({"links": {"settle_s": 300, "settling_until": null,
                                           "settles_in_s": null}})"))
                .find("links       settled (decided as read; 300 s settle window after a boot or "
                      "driver load)\n"),
            std::string::npos);
  EXPECT_NE(FormatStatus(nlohmann::json::parse(R"({"links": {"settle_s": 0}})"))
                .find("links       no settle window (policy.link_settle_s: 0)\n"),
            std::string::npos);
}

TEST(StatusTextTest, SaysWhyMetricsAreNotServed) {
  EXPECT_NE(FormatStatus(nlohmann::json::parse(R"({"metrics": {"listen": "off"}})"))
                .find("metrics     off (metrics.listen)\n"),
            std::string::npos);
  const std::string text = FormatStatus(nlohmann::json::parse(
      R"({"metrics": {"listen": "127.0.0.1:9470", "port": null,
                      "error": "metrics: cannot listen on 127.0.0.1:9470: address in use"},
          "liveness": {"period_ms": 0, "devices": []},
          "scheduler": {"kind": "none"}})"));
  EXPECT_NE(text.find("metrics     NOT SERVED: metrics: cannot listen on 127.0.0.1:9470: address "
                      "in use\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("liveness    off (liveness.period_ms: 0)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("scheduler   none (scheduler.kind)\n"), std::string::npos) << text;
}

TEST(StatusTextTest, ADatabaseDamagedAtStartIsSaid) {
  const auto status = nlohmann::json::parse(R"({
    "state_dir": "/var/lib/rasd",
    "database": {"schema_version": 5,
                 "damaged_at_start": {"problem": "rasd.db-wal: not a SQLite write-ahead log",
                                      "kept_as": "/var/lib/rasd/rasd.db.damaged-1"}}
  })");
  const std::string text = FormatStatus(status);
  EXPECT_NE(text.find("database    DAMAGED AT START: rasd.db-wal: not a SQLite write-ahead log; "
                      "kept as /var/lib/rasd/rasd.db.damaged-1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(FormatStatus(nlohmann::json::parse(R"({"database": {"damaged_at_start": null}})"))
                .find("DAMAGED"),
            std::string::npos);
}

TEST(StatusTextTest, MissingFieldsShowAsQuestionMarks) {
  const std::string text = FormatStatus(nlohmann::json::object());
  EXPECT_NE(text.find("rasd ? (pid ?), up ?"), std::string::npos) << text;
  EXPECT_NE(text.find("devices     ? ?:"), std::string::npos) << text;
}

}  // namespace
}  // namespace rasd::ctl
