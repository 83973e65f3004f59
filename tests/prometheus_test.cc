// A real Prometheus server (Debian's `prometheus`) scrapes the real rasd
// every second; a fault injected through the kernel-log seam shows up in
// Prometheus's own query API. promtool checks a real scrape.

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace rasd::testing {
namespace {

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kPromtool = "/usr/bin/promtool";

// The value of an instant query's first sample, or nullopt.
std::optional<double> Query(int port, const std::string& promql) {
  const auto samples = PrometheusQuery(port, promql);
  if (samples.empty()) return std::nullopt;
  return samples.front().second;
}

int MetricsPort(RasdInstance& rasd) {
  const auto status = nlohmann::json::parse(rasd.Rasctl({"--json", "status"}).out, nullptr, false);
  if (!status.is_object() || !status["metrics"]["port"].is_number()) return 0;
  return status["metrics"]["port"].get<int>();
}

TEST(PrometheusTest, ARealPrometheusSeesAnIsolationRasdActedOn) {
  // A project dependency (scripts/bootstrap installs the prometheus
  // package): missing is a broken setup, not a reason to skip.
  ASSERT_EQ(::access(kPrometheus, X_OK), 0)
      << kPrometheus << " is missing: run scripts/bootstrap (package prometheus)";
  ASSERT_EQ(::access(kPromtool, X_OK), 0) << kPromtool << " is missing: run scripts/bootstrap";
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const int metrics_port = MetricsPort(rasd);
  ASSERT_GT(metrics_port, 0) << rasd.Rasctl({"status"}).out;

  // promtool on a real scrape.
  const std::string scrape = Http(metrics_port, "GET", "/metrics");
  ASSERT_NE(scrape.find("rasd_build_info"), std::string::npos);
  WriteText(rasd.Dir() / "scrape.txt", scrape);
  const auto checked = RunToCompletion({.argv = {"/bin/sh", "-c",
                                                 std::string(kPromtool) + " check metrics < " +
                                                     (rasd.Dir() / "scrape.txt").string()}});
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;

  const int prometheus_port = FreePort();
  WriteText(rasd.Dir() / "prometheus.yml",
            fmt::format("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: rasd\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:{}']\n",
                        metrics_port));
  std::filesystem::create_directories(rasd.Dir() / "tsdb");
  Process prometheus(
      {.argv = {kPrometheus, "--config.file=" + (rasd.Dir() / "prometheus.yml").string(),
                "--storage.tsdb.path=" + (rasd.Dir() / "tsdb").string(),
                fmt::format("--web.listen-address=127.0.0.1:{}", prometheus_port),
                "--web.enable-lifecycle"},
       .stderr_path = rasd.Dir() / "prometheus.log"});

  // The first scrape lands a few seconds after start (a fixed throttle).
  ASSERT_TRUE(WaitUntil([&] { return Query(prometheus_port, "up{job=\"rasd\"}") == 1.0; }, 30s))
      << ReadText(rasd.Dir() / "prometheus.log");
  EXPECT_EQ(Query(prometheus_port, R"(rasd_device_health{device="1",state="healthy"})"), 1.0);

  rasd.AppendKmsg(
      "4,1,1000,-;NVRM: Xid (PCI:ffff:c2:00): 79, pid=1, GPU has fallen off the bus.\n");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Query(prometheus_port, R"(rasd_device_health{device="1",state="isolated"})") == 1.0;
      },
      20s));
  EXPECT_EQ(Query(prometheus_port,
                  R"(rasd_ras_events_total{origin="nvidia_xid",severity="FATAL",device="1"})"),
            1.0);
  EXPECT_EQ(Query(prometheus_port, R"(rasd_actions_total{action="isolate-device",result="ok"})"),
            1.0);
  EXPECT_EQ(Query(prometheus_port, "rasd_fault_to_isolation_seconds_count"), 1.0);
  EXPECT_EQ(Query(prometheus_port, R"(rasd_device_health{device="0",state="healthy"})"), 1.0);

  (void)Http(prometheus_port, "POST", "/-/quit");
  EXPECT_TRUE(prometheus.Wait(10s).has_value());
}

}  // namespace
}  // namespace rasd::testing
