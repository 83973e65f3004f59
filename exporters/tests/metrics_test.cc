// The exposition: node_exporter's EDAC values for the same sysfs tree, every
// counter that exists on a partial tree, one-hot device health, and a text
// that promtool accepts; served over HTTP by the exposer.

#include "rasd/exporters/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "rasd/common/unique_fd.h"

namespace rasd::exporters {
namespace {

ras::EdacSnapshot Edac(const std::string& tree) {
  common::HostEnv host(std::string(RASD_TEST_DATA_DIR) + "/edac_sysfs/" + tree,
                       std::make_shared<common::SystemClock>());
  return ras::ReadEdacSnapshot(host);
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, EdacCountersAreNodeExportersForTheSameTree) {
  MetricsSnapshot snapshot;
  snapshot.edac = Edac("node_exporter-fixture");
  const std::string text = RenderText(snapshot);
  // node_exporter's own output for this fixture (tests/data/README.md).
  for (const char* line : {
           R"(rasd_edac_correctable_errors_total{controller="0"} 1)",
           R"(rasd_edac_uncorrectable_errors_total{controller="0"} 5)",
           R"(rasd_edac_csrow_correctable_errors_total{controller="0",csrow="unknown"} 2)",
           R"(rasd_edac_csrow_uncorrectable_errors_total{controller="0",csrow="unknown"} 6)",
           R"(rasd_edac_csrow_correctable_errors_total{controller="0",csrow="0"} 3)",
           R"(rasd_edac_csrow_uncorrectable_errors_total{controller="0",csrow="0"} 4)",
           R"(rasd_edac_csrow_correctable_errors_total{controller="0",csrow="1"} 0)",
           R"(rasd_edac_csrow_uncorrectable_errors_total{controller="0",csrow="1"} 4)",
           R"(rasd_edac_csrow_correctable_errors_total{controller="0",csrow="2"} 0)",
           R"(rasd_edac_csrow_uncorrectable_errors_total{controller="0",csrow="2"} 5)",
       }) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
}

// Every sample node_exporter 1.x printed for its own infiniband fixture
// (beside the tree in the corpus) is in rasd's exposition with rasd_ for
// node_, the same labels and the same value.
TEST(MetricsTest, InfinibandIsNodeExportersForTheSameTree) {
  const std::string fixture =
      std::string(RASD_TEST_DATA_DIR) + "/infiniband_sysfs/node_exporter-fixture";
  common::HostEnv host(fixture, std::make_shared<common::SystemClock>());
  MetricsSnapshot snapshot;
  snapshot.infiniband = ras::ReadInfinibandSnapshot(host);
  ASSERT_EQ(snapshot.infiniband.devices.size(), 2u);
  const std::string text = RenderText(snapshot);
  std::ifstream expected(fixture + "/node_exporter-e2e-output.prom");
  ASSERT_TRUE(expected) << fixture;
  std::string line;
  int compared = 0;
  while (std::getline(expected, line)) {
    if (line.empty() || line.starts_with("#")) continue;
    ASSERT_TRUE(line.starts_with("node_infiniband_")) << line;
    // node_exporter prints 1.8527668e+07 where prometheus-cpp prints
    // 18527668: compare the numbers, not the text.
    const auto space = line.rfind(' ');
    const std::string series = "rasd_" + line.substr(5, space - 5);
    const double value = std::stod(line.substr(space + 1));
    const auto at = text.find(series + " ");
    ASSERT_NE(at, std::string::npos) << series << "\n" << text;
    const auto end = text.find('\n', at);
    const double ours = std::stod(text.substr(at + series.size() + 1, end - at - series.size() - 1));
    EXPECT_DOUBLE_EQ(ours, value) << series;
    ++compared;
  }
  EXPECT_EQ(compared, 51);
  // i40iw0's symbol_error reads "N/A (no PMA)": nothing invented, under
  // either name.
  EXPECT_EQ(text.find("counter=\"counters/symbol_error\""), std::string::npos);
  EXPECT_EQ(text.find("rasd_infiniband_symbol_error_total{"), std::string::npos);
}

// The six counters/ error counters node_exporter (1.1 and later) exports
// under names of their own have those names here, with its labels; they stay
// in rasd's own family too, which also has what node_exporter leaves out.
TEST(MetricsTest, TheErrorCountersNodeExporterNamesHaveItsNamesAndStayInRasdsFamily) {
  MetricsSnapshot snapshot;
  ras::InfinibandSnapshot::Port port;
  port.number = 1;
  port.counters = {{"counters/symbol_error", 1},
                   {"counters/VL15_dropped", 2},
                   {"counters/local_link_integrity_errors", 3},
                   {"counters/excessive_buffer_overrun_errors", 4},
                   {"counters/port_rcv_remote_physical_errors", 5},
                   {"counters/port_rcv_switch_relay_errors", 6},
                   {"counters/link_downed", 7},
                   {"hw_counters/out_of_buffer", 8}};
  ras::InfinibandSnapshot::Device device;
  device.name = "mlx5_0";
  device.ports[1] = port;
  snapshot.infiniband.devices["mlx5_0"] = device;
  const std::string text = RenderText(snapshot);
  const std::string labels = R"({device="mlx5_0",port="1"})";
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, int>>{{"symbol_error_total", 1},
                                                {"vl15_dropped_total", 2},
                                                {"local_link_integrity_errors_total", 3},
                                                {"excessive_buffer_overrun_errors_total", 4},
                                                {"port_receive_remote_physical_errors_total", 5},
                                                {"port_receive_switch_relay_errors_total", 6},
                                                {"link_downed_total", 7}}) {
    EXPECT_TRUE(Has(text, "rasd_infiniband_" + name + labels + " " + std::to_string(value)))
        << name << "\n"
        << text;
  }
  for (const auto& [counter, value] :
       std::vector<std::pair<std::string, int>>{{"counters/symbol_error", 1},
                                                {"counters/VL15_dropped", 2},
                                                {"counters/local_link_integrity_errors", 3},
                                                {"counters/excessive_buffer_overrun_errors", 4},
                                                {"counters/port_rcv_remote_physical_errors", 5},
                                                {"counters/port_rcv_switch_relay_errors", 6},
                                                {"hw_counters/out_of_buffer", 8}}) {
    EXPECT_TRUE(
        Has(text, R"(rasd_infiniband_other_errors_total{device="mlx5_0",port="1",counter=")" +
                      counter + R"("} )" + std::to_string(value)))
        << counter << "\n"
        << text;
  }
  EXPECT_EQ(text.find(R"(counter="counters/link_downed")"), std::string::npos)
      << "link_downed has only node_exporter's family, as before";
}

// A firmware string that is not UTF-8 must not cost the whole scrape
// (Prometheus rejects the text): the label is cleaned (helper's find).
TEST(MetricsTest, ALabelThatIsNotUtf8IsCleanedNotPassedOn) {
  MetricsSnapshot snapshot;
  ras::InfinibandSnapshot::Device device;
  device.name = "mlx5_0";
  device.hca_type = std::string("\xff\xfe\x01" "bad" "\xc3\xa9");
  snapshot.infiniband.devices["mlx5_0"] = device;
  const std::string text = RenderText(snapshot);
  EXPECT_NE(text.find("hca_type=\"?? bad\xc3\xa9\""), std::string::npos) << text.substr(0, 400);
  EXPECT_EQ(text.find('\xff'), std::string::npos);
}

TEST(MetricsTest, APartialTreeStillReportsEveryCounterThatExists) {
  MetricsSnapshot snapshot;
  snapshot.edac = Edac("edac-utils-15");
  const std::string text = RenderText(snapshot);
  // mc0/ce_count is missing there (node_exporter 1.5 gives up on the tree):
  // no invented zero, but the rank counters are all there.
  EXPECT_EQ(text.find(R"(rasd_edac_correctable_errors_total{controller="0"})"), std::string::npos);
  EXPECT_NE(
      text.find(R"(rasd_edac_dimm_correctable_errors_total{controller="0",dimm="rank4",label=)"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("rasd_edac_dimm_correctable_errors_total{controller=\"0\",dimm=\"rank4\""),
            std::string::npos);
  std::size_t nonzero = 0;
  for (const auto& unit : snapshot.edac.units) nonzero += unit.ce > 0 ? 1 : 0;
  EXPECT_EQ(nonzero, 1u) << "only mc0/rank4/dimm_ce_count is non-zero";
}

MetricsSnapshot Busy() {
  MetricsSnapshot snapshot;
  snapshot.version = "0.1.0";
  snapshot.devices = {{0, "sim", "rasd-sim", "0000:c1:00.0", "healthy", 8 << 20, 1 << 20, 0, 0},
                      {1, "sim", "rasd-sim", "0000:c2:00.0", "isolated", 8 << 20, 0, 4096, 1}};
  snapshot.events[{"nvidia_xid", "FATAL", "1"}] = 1;
  snapshot.events[{"edac", "CE", ""}] = 12;
  snapshot.actions[{"isolate-device", "ok"}] = 1;
  snapshot.jobs[{"inference", "serving"}] = 1;
  snapshot.requests[{"llm", "served"}] = 1000;
  snapshot.requests[{"llm", "lost"}] = 0;
  snapshot.llm_replicas[{"chat", 1}] = {
      .kv_used = 120, .kv_free = 8, .kv_retired = 4, .running = 7, .recomputed = 2};
  snapshot.source_errors["kmsg"] = 2;
  snapshot.kmsg_gaps = 1;
  snapshot.kmsg_untrusted = 3;
  snapshot.fault_to_isolation.Observe(0.00002);
  snapshot.fault_to_isolation.Observe(0.3);
  snapshot.edac = Edac("node_exporter-fixture");
  return snapshot;
}

TEST(MetricsTest, DevicesJobsAndHistogramsAreRendered) {
  const std::string text = RenderText(Busy());
  for (const char* line : {
           R"(rasd_build_info{version="0.1.0"} 1)",
           R"(rasd_device_health{device="1",state="isolated"} 1)",
           R"(rasd_device_health{device="1",state="healthy"} 0)",
           R"(rasd_device_info{device="0",vendor="sim",model="rasd-sim",bdf="0000:c1:00.0"} 1)",
           R"(rasd_device_memory_bytes{device="0",kind="allocated"} 1048576)",
           R"(rasd_retired_pages_total{device="1"} 1)",
           R"(rasd_ras_events_total{origin="nvidia_xid",severity="FATAL",device="1"} 1)",
           R"(rasd_actions_total{action="isolate-device",result="ok"} 1)",
           R"(rasd_requests_total{job="llm",outcome="served"} 1000)",
           R"(rasd_llm_kv_blocks{job="chat",device="1",state="retired"} 4)",
           R"(rasd_llm_kv_blocks{job="chat",device="1",state="used"} 120)",
           R"(rasd_llm_sequences{job="chat",device="1",state="running"} 7)",
           R"(rasd_llm_sequence_events_total{job="chat",device="1",event="recomputed"} 2)",
           R"(rasd_source_errors_total{source="kmsg"} 2)",
           R"(rasd_kmsg_gaps_total 1)",
           R"(rasd_kmsg_untrusted_records_total 3)",
           R"(rasd_fault_to_isolation_seconds_count 2)",
           R"(rasd_fault_to_isolation_seconds_bucket{le="0.0001"} 1)",
           R"(rasd_fault_to_isolation_seconds_bucket{le="+Inf"} 2)",
       }) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
}

TEST(MetricsTest, PromtoolFindsNoProblems) {
  // scripts/bootstrap installs it (package prometheus): missing fails.
  ASSERT_EQ(::access("/usr/bin/promtool", X_OK), 0)
      << "promtool is missing: run scripts/bootstrap (package prometheus)";
  const std::string path = ::testing::TempDir() + "rasd-metrics-" + std::to_string(::getpid());
  std::ofstream(path) << RenderText(Busy());
  const std::string command = "/usr/bin/promtool check metrics < " + path + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  std::remove(path.c_str());
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool's complaints";
}

std::string HttpGet(int port, const std::string& path) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return {};
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)::write(fd.Get(), request.data(), request.size());
  std::string response;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = ::read(fd.Get(), buffer, sizeof buffer)) > 0)
    response.append(buffer, static_cast<std::size_t>(got));
  return response;
}

TEST(MetricsServerTest, ServesEachScrapeFromTheProviderAndRefusesABusyPort) {
  std::atomic<int> scrapes{0};
  auto server = MetricsServer::Start("127.0.0.1:0", [&] {
    ++scrapes;
    return Busy();
  });
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  ASSERT_GT((*server)->Port(), 0);
  const std::string response = HttpGet((*server)->Port(), "/metrics");
  EXPECT_NE(response.find("200 OK"), std::string::npos) << response.substr(0, 200);
  EXPECT_NE(response.find(R"(rasd_device_health{device="1",state="isolated"} 1)"),
            std::string::npos);
  EXPECT_EQ(scrapes.load(), 1);
  auto busy = MetricsServer::Start("127.0.0.1:" + std::to_string((*server)->Port()),
                                   [] { return MetricsSnapshot{}; });
  ASSERT_FALSE(busy.has_value());
  EXPECT_NE(busy.error().message.find("cannot serve metrics"), std::string::npos);
}

}  // namespace
}  // namespace rasd::exporters
