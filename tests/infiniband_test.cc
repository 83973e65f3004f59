// RDMA ports with the real rasd: node_exporter's infiniband fixture as the
// host's /sys/class/infiniband; the metrics, a counter's increase as a CE
// event, a port going down as a UCE event, the source's state in status;
// the same series as the node_exporter Debian packages, for the same tree.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_support.h"

namespace rasd::testing {
namespace {

std::filesystem::path Fixture() {
  return std::filesystem::path(RASD_TEST_DATA_DIR) /
         "infiniband_sysfs/node_exporter-fixture/sys/class/infiniband";
}

nlohmann::json InfinibandEvents(RasdInstance& rasd) {
  nlohmann::json found = nlohmann::json::array();
  const nlohmann::json reply = rasd.RasctlJson({"events", "--limit", "1000"});
  for (const auto& event : reply["events"]) {
    if (event["origin"] == "infiniband") found.push_back(event);
  }
  return found;
}

TEST(InfinibandTest, PortsAreMetricsCounterIncreasesAndLinkDownsAreEvents) {
  ASSERT_TRUE(std::filesystem::exists(Fixture()))
      << Fixture() << " (tests/data of the checkout)";
  RasdInstance rasd;
  const auto tree = rasd.HostRoot() / "sys/class/infiniband";
  std::filesystem::create_directories(tree.parent_path());
  std::filesystem::copy(
      Fixture(), tree,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  auto status = rasd.RasctlJson({"status"});
  EXPECT_EQ(status["ras"]["sources"]["infiniband"]["state"], "active") << status["ras"].dump();
  const int port = status["metrics"]["port"];
  const std::string metrics = Http(port, "GET", "/metrics");
  EXPECT_NE(metrics.find("rasd_infiniband_state_id{device=\"mlx4_0\",port=\"1\"} 4\n"),
            std::string::npos)
      << metrics.substr(0, 2000);
  EXPECT_NE(metrics.find("rasd_infiniband_port_discards_transmitted_total{device=\"mlx4_0\","
                         "port=\"1\"} 5\n"),
            std::string::npos);
  // The baseline is not news.
  EXPECT_TRUE(InfinibandEvents(rasd).empty());

  ReplaceText(tree / "mlx4_0/ports/1/counters/port_xmit_discards", "8\n");
  ASSERT_TRUE(WaitUntil([&] { return InfinibandEvents(rasd).size() == 1; }, 10s))
      << InfinibandEvents(rasd).dump(2) << rasd.Stderr();
  auto event = InfinibandEvents(rasd)[0];
  EXPECT_EQ(event["severity"], "CE");
  EXPECT_EQ(event["count"], 3);
  EXPECT_NE(event["summary"].get<std::string>().find("port_xmit_discards"), std::string::npos);

  ReplaceText(tree / "mlx4_0/ports/2/state", "1: DOWN\n");
  ReplaceText(tree / "mlx4_0/ports/2/phys_state", "3: Disabled\n");
  ASSERT_TRUE(WaitUntil([&] { return InfinibandEvents(rasd).size() == 2; }, 10s))
      << InfinibandEvents(rasd).dump(2);
  event = InfinibandEvents(rasd)[1];
  EXPECT_EQ(event["severity"], "UCE");
  EXPECT_NE(event["summary"].get<std::string>().find("link down: mlx4_0 port 2"), std::string::npos)
      << event.dump();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Http(port, "GET", "/metrics")
                   .find("rasd_infiniband_state_id{device=\"mlx4_0\",port=\"2\"} 1\n") !=
               std::string::npos;
      },
      10s));
  // rasd's own devices are not touched by a NIC's port.
  const nlohmann::json devices = rasd.RasctlJson({"devices"});
  for (const auto& device : devices["devices"]) {
    EXPECT_EQ(device["state"], "healthy") << device.dump();
  }
}

// Simulated device 1 is ffff:c2:00.0; the NIC ffff:c9:00.0 sits on the
// same PCIe switch.
void PlaceDeviceOneBesideNic(const std::filesystem::path& host) {
  auto add = [&](const std::string& bdf, const std::string& path) {
    std::filesystem::create_directories(host / "sys/devices" / path);
    ReplaceText(host / "sys/devices" / path / "numa_node", "0\n");
    std::filesystem::create_directories(host / "sys/bus/pci/devices");
    std::filesystem::create_directory_symlink("../../../devices/" + path,
                                              host / "sys/bus/pci/devices" / bdf);
  };
  add("ffff:c2:00.0", "pciffff:00/ffff:00:01.0/ffff:01:00.0/ffff:02:08.0/ffff:c2:00.0");
  add("ffff:c9:00.0", "pciffff:00/ffff:00:01.0/ffff:01:00.0/ffff:02:10.0/ffff:c9:00.0");
}

// mlx4_0 is that NIC.
void ServeDeviceOneFromMlx4(const std::filesystem::path& host, const std::filesystem::path& tree) {
  PlaceDeviceOneBesideNic(host);
  std::filesystem::create_directory_symlink(
      "../../../devices/pciffff:00/ffff:00:01.0/ffff:01:00.0/ffff:02:10.0/ffff:c9:00.0",
      tree / "mlx4_0/device");
}

void CopyFixture(const std::filesystem::path& tree) {
  std::filesystem::create_directories(tree.parent_path());
  std::filesystem::copy(
      Fixture(), tree,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
}

// node_exporter's tree as the host's RDMA devices, mlx4_0 serving device 1.
std::filesystem::path FixtureWithDeviceOneOnMlx4(const RasdInstance& rasd) {
  const auto tree = rasd.HostRoot() / "sys/class/infiniband";
  CopyFixture(tree);
  ServeDeviceOneFromMlx4(rasd.HostRoot(), tree);
  return tree;
}

// node_exporter as Debian 12 packages it (1.5.0), run on the tree by hand.
constexpr const char* kNodeExporter = "/usr/bin/prometheus-node-exporter";

// The samples of a text exposition whose name starts with `prefix`, keyed
// by the name after it and the labels sorted by name (prometheus-cpp keeps
// the order they were added in, client_golang sorts them): "state_id
// {device="mlx4_0",port="1"}" -> 4. Values as numbers: node_exporter prints
// 1.8527668e+07 where prometheus-cpp prints 18527668.
std::map<std::string, double> Samples(const std::string& text, const std::string& prefix) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(prefix)) continue;
    std::size_t at = prefix.size();
    const std::string name = line.substr(at, line.find_first_of("{ ", at) - at);
    at += name.size();
    std::vector<std::string> labels;
    if (line[at] == '{') {
      ++at;
      while (line[at] != '}') {
        const auto equals = line.find('=', at);
        std::string label = line.substr(at, equals - at) + "=\"";
        for (at = equals + 2; line[at] != '"'; ++at) {
          label += line[at];
          if (line[at] == '\\') label += line[++at];
        }
        labels.push_back(label + '"');
        at += line[at + 1] == ',' ? 2 : 1;
      }
      ++at;
    }
    std::sort(labels.begin(), labels.end());
    std::string key = name + "{";
    for (const auto& label : labels) key += (key.back() == '{' ? "" : ",") + label;
    samples[key + "}"] = std::stod(line.substr(at + 1));
  }
  return samples;
}

// Starts the packaged node_exporter on `rasd`'s host tree (its sys/ as
// --path.sysfs, the infiniband collector alone) and rasd on the same tree,
// and checks that the two print the same infiniband series with the same
// values, node_ for rasd_: every one of node_exporter's has a twin, and
// every one of rasd's but its own rasd_infiniband_other_errors_total has
// one in node_exporter's. `node` gets node_exporter's samples.
void ExpectTheSameSeriesAsNodeExporter(RasdInstance& rasd, std::map<std::string, double>& node) {
  const int port = FreePort();
  ProcessOptions options;
  options.argv = {kNodeExporter, "--path.sysfs=" + (rasd.HostRoot() / "sys").string(),
                  "--collector.disable-defaults", "--collector.infiniband",
                  fmt::format("--web.listen-address=127.0.0.1:{}", port)};
  options.stderr_path = rasd.Dir() / "node_exporter.stderr";
  Process node_exporter(options);
  std::string theirs;
  ASSERT_TRUE(WaitUntil(
      [&] {
        theirs = Http(port, "GET", "/metrics");
        return !theirs.empty();
      },
      10s))
      << ReadText(options.stderr_path);
  // Without this a tree node_exporter gave up on would compare as empty.
  ASSERT_NE(theirs.find("node_scrape_collector_success{collector=\"infiniband\"} 1\n"),
            std::string::npos)
      << ReadText(options.stderr_path) << theirs;

  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const int metrics_port = rasd.RasctlJson({"status"})["metrics"]["port"];
  node = Samples(theirs, "node_infiniband_");
  std::map<std::string, double> ours;
  ASSERT_TRUE(WaitUntil(
      [&] {
        ours = Samples(Http(metrics_port, "GET", "/metrics"), "rasd_infiniband_");
        return std::any_of(ours.begin(), ours.end(),
                           [](const auto& sample) { return sample.first.starts_with("info{"); });
      },
      10s))
      << "rasd published no RDMA device; " << rasd.Stderr();
  for (const auto& [series, value] : node) {
    const auto twin = ours.find(series);
    if (twin == ours.end()) {
      ADD_FAILURE() << "rasd has no rasd_infiniband_" << series;
    } else {
      EXPECT_DOUBLE_EQ(twin->second, value) << "rasd_infiniband_" << series;
    }
  }
  for (const auto& [series, value] : ours) {
    if (series.starts_with("other_errors_total{")) continue;
    EXPECT_TRUE(node.contains(series)) << "node_exporter has no node_infiniband_" << series;
  }
}

TEST(InfinibandTest, TheSeriesAreDebiansNodeExportersForItsOwnFixture) {
  // A project dependency: missing is a broken setup, not a reason to skip.
  ASSERT_TRUE(std::filesystem::exists(kNodeExporter))
      << kNodeExporter << " is missing: run scripts/bootstrap (package prometheus-node-exporter)";
  RasdInstance rasd;
  CopyFixture(rasd.HostRoot() / "sys/class/infiniband");
  std::map<std::string, double> node;
  ASSERT_NO_FATAL_FAILURE(ExpectTheSameSeriesAsNodeExporter(rasd, node));
  // Its e2e output's 51: the info, state, rate and the counters that are
  // numbers (i40iw0's read "N/A (no PMA)").
  EXPECT_EQ(node.size(), 51u);
}

// A tree no one fitted rasd to: the fixture with every counter changed
// (each its own value, some past 32 bits), i40iw0's counters numbers where
// they read "N/A (no PMA)" but one, the six error counters node_exporter
// exports under their own names added to mlx4_0's ports, and one port down.
TEST(InfinibandTest, TheSeriesAreDebiansNodeExportersForAChangedTree) {
  // A project dependency: missing is a broken setup, not a reason to skip.
  ASSERT_TRUE(std::filesystem::exists(kNodeExporter))
      << kNodeExporter << " is missing: run scripts/bootstrap (package prometheus-node-exporter)";
  RasdInstance rasd;
  const auto tree = rasd.HostRoot() / "sys/class/infiniband";
  CopyFixture(tree);
  for (const char* port : {"mlx4_0/ports/1", "mlx4_0/ports/2"}) {
    for (const char* counter :
         {"symbol_error", "VL15_dropped", "local_link_integrity_errors",
          "excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors",
          "port_rcv_switch_relay_errors"}) {
      ReplaceText(tree / port / "counters" / counter, "0\n");
    }
  }
  ReplaceText(tree / "mlx4_0/ports/2/state", "1: DOWN\n");
  ReplaceText(tree / "mlx4_0/ports/2/phys_state", "3: Disabled\n");
  ReplaceText(tree / "mlx4_0/ports/1/rate", "56 Gb/sec (4X FDR)\n");
  std::vector<std::filesystem::path> counters;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(tree)) {
    const auto directory = entry.path().parent_path().filename();
    if (entry.is_regular_file() && (directory == "counters" || directory == "counters_ext"))
      counters.push_back(entry.path());
  }
  std::sort(counters.begin(), counters.end());
  const auto kept = tree / "i40iw0/ports/1/counters/port_xmit_wait";
  ASSERT_EQ(ReadText(kept), "N/A (no PMA)\n");
  std::uint64_t k = 0;
  for (const auto& counter : counters) {
    if (counter == kept) continue;
    ++k;
    const std::uint64_t value = k % 5 == 0 ? (std::uint64_t{1} << 40) + k : 1009 * k + 17;
    ReplaceText(counter, std::to_string(value) + "\n");
  }
  std::map<std::string, double> node;
  ASSERT_NO_FATAL_FAILURE(ExpectTheSameSeriesAsNodeExporter(rasd, node));
  for (const char* family :
       {"symbol_error_total", "vl15_dropped_total", "local_link_integrity_errors_total",
        "excessive_buffer_overrun_errors_total", "port_receive_remote_physical_errors_total",
        "port_receive_switch_relay_errors_total"}) {
    for (const char* port : {"device=\"i40iw0\",port=\"1\"", "device=\"mlx4_0\",port=\"1\"",
                             "device=\"mlx4_0\",port=\"2\""}) {
      EXPECT_TRUE(node.contains(fmt::format("{}{{{}}}", family, port)))
          << "node_exporter did not print " << family << " for " << port;
    }
  }
  EXPECT_FALSE(node.contains("port_transmit_wait_total{device=\"i40iw0\",port=\"1\"}"));
  // The fixture's 51, i40iw0's 16 counters that are numbers now, and the six
  // added on each of mlx4_0's two ports.
  EXPECT_EQ(node.size(), 51u + 16u + 12u);
}

// A port down under a collective's rank: the rank leaves (the job re-forms
// on the others), the device is Degraded, not isolated; once the port has
// stayed up for the debounce the device is Healthy and the job grows back,
// with every checksum equal to a fault-free run's.
TEST(InfinibandTest, APortDownMovesTheCollectiveOffItsDeviceUntilTheLinkIsStable) {
  RasdInstance rasd;
  const auto tree = FixtureWithDeviceOneOnMlx4(rasd);
  rasd.WriteConfig(R"(ras:
  infiniband_poll_ms: 100
policy:
  link_up_debounce_s: 1
)" + std::string(kAllreduceJob));
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 1, 2, 3});
      },
      10s))
      << Job(rasd, "allreduce").dump();
  ReplaceText(tree / "mlx4_0/ports/1/state", "1: DOWN\n");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 2, 3});
      },
      10s))
      << Job(rasd, "allreduce").dump() << rasd.Stderr();
  auto device = DeviceOf(rasd, 1);
  EXPECT_EQ(device["state"], "degraded");  // its compute is fine
  EXPECT_NE(device["reason"].get<std::string>().find("RDMA link down (mlx4_0 port 1)"),
            std::string::npos)
      << device.dump();
  const auto up_at = std::chrono::steady_clock::now();
  ReplaceText(tree / "mlx4_0/ports/1/state", "4: ACTIVE\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "healthy"; }, 10s))
      << rasd.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - up_at, 900ms) << "rejoined before the debounce";
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 1, 2, 3});
      },
      15s))
      << Job(rasd, "allreduce").dump();
  const auto job = Job(rasd, "allreduce");
  EXPECT_EQ(job["checksums_match"], true) << job.dump();
  EXPECT_GE(job["grown"], 1) << job.dump();

  // Degraded by its link when rasd stops: after a restart it is kept out
  // until the link has stayed up again, then Healthy (helper's find: it
  // stayed Degraded for good).
  ReplaceText(tree / "mlx4_0/ports/1/state", "1: DOWN\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "degraded"; }, 10s));
  ASSERT_TRUE(rasd.Stop().has_value());
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_EQ(DeviceOf(rasd, 1)["links_usable"], false);
  ReplaceText(tree / "mlx4_0/ports/1/state", "4: ACTIVE\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "healthy"; }, 10s))
      << rasd.Stderr();
  EXPECT_EQ(DeviceOf(rasd, 1)["links_usable"], true);
}

// An mlx5 NIC's fatal health is a link fault of the accelerator behind it
// (the same PCIe switch), read from the kernel log of the real rasd: the
// collective goes on without that device, Degraded, not isolated, and the
// node is not drained for one NIC. With no further fatal record for
// policy.nic_fault_hold_s it rejoins, after the links' debounce. The NIC
// has no RDMA device here (an Ethernet function): the hold alone decides.
TEST(InfinibandTest, ANicsFatalHealthIsALinkFaultOfTheDeviceBehindItNotADrain) {
  RasdInstance rasd;
  PlaceDeviceOneBesideNic(rasd.HostRoot());
  rasd.WriteConfig("policy:\n  link_up_debounce_s: 1\n  nic_fault_hold_s: 2\n" +
                   std::string(kAllreduceJob));
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 1, 2, 3});
      },
      10s))
      << Job(rasd, "allreduce").dump();
  rasd.AppendKmsg(
      "2,1,1000,-;mlx5_core ffff:c9:00.0: poll_health:800:(pid 0): Fatal error 1 detected\n");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 2, 3});
      },
      10s))
      << Job(rasd, "allreduce").dump() << rasd.Stderr();
  const auto out_at = std::chrono::steady_clock::now();
  auto device = DeviceOf(rasd, 1);
  EXPECT_EQ(device["state"], "degraded") << device.dump();
  EXPECT_NE(device["reason"].get<std::string>().find("mlx5 ffff:c9:00.0 fatal health"),
            std::string::npos)
      << device.dump();
  for (int other : {0, 2, 3}) EXPECT_EQ(DeviceOf(rasd, other)["state"], "healthy") << other;
  // The record's own rule (fatal-nic) only records it: the one action is
  // the link's.
  const auto actions = nlohmann::json::parse(rasd.Rasctl({"--json", "actions"}).out)["actions"];
  ASSERT_EQ(actions.size(), 1U) << actions.dump(2);
  EXPECT_EQ(actions[0]["action"], "degrade-device");
  EXPECT_EQ(actions[0]["rule"], "link-down");
  EXPECT_EQ(actions[0]["device"], 1);
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "healthy"; }, 15s))
      << rasd.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - out_at, 2500ms)
      << "back before the hold and the debounce";
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 1, 2, 3});
      },
      15s))
      << Job(rasd, "allreduce").dump();

  // Out for its NIC when rasd stops: kept out after the restart (the fault
  // is not saved, the link's hold is), and back once the hold passed
  // since the start with no fatal record.
  rasd.AppendKmsg(
      "2,2,9000,-;mlx5_core ffff:c9:00.0: mlx5_health_try_recover:335:(pid 7): health "
      "recovery flow aborted, PCI reads still not working\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "degraded"; }, 10s))
      << rasd.Stderr();
  ASSERT_TRUE(rasd.Stop().has_value());
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const auto started_at = std::chrono::steady_clock::now();
  EXPECT_EQ(DeviceOf(rasd, 1)["links_usable"], false);
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "healthy"; }, 15s))
      << rasd.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - started_at, 2500ms);
}

// Corrected errors past their threshold while the link holds the device
// Degraded are a decision of their own: the link's return does not lift it
// (helper's find: it did).
TEST(InfinibandTest, TheLinksReturnDoesNotLiftADegradationDecidedMeanwhile) {
  RasdInstance rasd;
  const auto tree = FixtureWithDeviceOneOnMlx4(rasd);
  rasd.WriteConfig(
      "ras:\n  infiniband_poll_ms: 100\npolicy:\n  link_up_debounce_s: 1\n  "
      "ce_device_threshold: 2\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ReplaceText(tree / "mlx4_0/ports/1/state", "1: DOWN\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "degraded"; }, 10s));
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(rasd.Rasctl({"inject", "xid", "92", "--device", "1"}).exit_code, 0);
  }
  ASSERT_TRUE(
      WaitUntil([&] { return rasd.Stderr().find("already degraded") != std::string::npos; }, 5s))
      << rasd.Stderr();
  ReplaceText(tree / "mlx4_0/ports/1/state", "4: ACTIVE\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["links_usable"] == true; }, 10s));
  EXPECT_EQ(DeviceOf(rasd, 1)["state"], "degraded");
}

// A link that keeps going down keeps its device out until an operator acts.
TEST(InfinibandTest, AFlappingLinkKeepsItsDeviceOutUntilAnOperatorUndrains) {
  RasdInstance rasd;
  const auto tree = FixtureWithDeviceOneOnMlx4(rasd);
  rasd.WriteConfig(
      "ras:\n  infiniband_poll_ms: 100\npolicy:\n  link_up_debounce_s: 1\n  link_flap_limit: 2\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  // Each change is seen by a poll before the next one is made: the poll's
  // own event says so.
  auto seen = [&](const std::string& what, std::size_t times) {
    return WaitUntil(
        [&] {
          std::size_t found = 0;
          for (const auto& event : InfinibandEvents(rasd))
            if (event["summary"].get<std::string>().starts_with(what)) ++found;
          return found >= times;
        },
        10s);
  };
  for (std::size_t flap = 1; flap <= 2; ++flap) {
    ReplaceText(tree / "mlx4_0/ports/2/state", "1: DOWN\n");
    ASSERT_TRUE(seen("link down: mlx4_0 port 2", flap)) << InfinibandEvents(rasd).dump(1);
    ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "degraded"; }, 10s));
    ReplaceText(tree / "mlx4_0/ports/2/state", "4: ACTIVE\n");  // up, within the debounce
    ASSERT_TRUE(seen("link up: mlx4_0 port 2", flap)) << InfinibandEvents(rasd).dump(1);
  }
  ASSERT_TRUE(WaitUntil([&] { return rasd.Stderr().find("flapping") != std::string::npos; }, 5s))
      << rasd.Stderr();
  // Flapping is decided for good: no debounce runs that could let it back
  // (LinkPolicy's tests show that on a simulated clock); it says how it
  // clears.
  auto out_until_undrain = [&] {
    const auto device = DeviceOf(rasd, 1);
    EXPECT_EQ(device["state"], "degraded") << device.dump();
    EXPECT_EQ(device["links_usable"], false) << device.dump();
    EXPECT_NE(device["clears"].get<std::string>().find("undrain (its links were flapping)"),
              std::string::npos)
        << device.dump();
  };
  out_until_undrain();
  // The hold outlives a restart (helper's find: it rejoined).
  ASSERT_TRUE(rasd.Stop().has_value());
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  out_until_undrain();
  ASSERT_EQ(rasd.Rasctl({"undrain", "1"}).exit_code, 0);
  EXPECT_EQ(DeviceOf(rasd, 1)["state"], "healthy");
  // Usable once a poll of the restarted rasd has seen the links up (an
  // undrain at once after a start may come before the first).
  EXPECT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["links_usable"] == true; }, 10s))
      << DeviceOf(rasd, 1).dump();
}

// The NIC behind the same PCIe switch as simulated device 1 serves it: the
// devices view says so, and a port's fault names the device it reaches.
TEST(InfinibandTest, APortsFaultNamesTheAcceleratorsBehindItsSwitch) {
  RasdInstance rasd;
  const auto host = rasd.HostRoot();
  const auto tree = host / "sys/class/infiniband";
  std::filesystem::create_directories(tree.parent_path());
  std::filesystem::copy(
      Fixture(), tree,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  ServeDeviceOneFromMlx4(host, tree);
  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  const nlohmann::json devices = rasd.RasctlJson({"devices"});
  EXPECT_EQ(devices["devices"][1]["rdma_ports"],
            nlohmann::json::parse(R"([{"device": "mlx4_0", "port": 1, "how": "same PCIe switch"},
                                      {"device": "mlx4_0", "port": 2, "how": "same PCIe switch"}])"));
  EXPECT_TRUE(devices["devices"][0]["rdma_ports"].empty());
  EXPECT_NE(rasd.Rasctl({"devices", "1"})
                .out.find("RDMA: mlx4_0 port 1, mlx4_0 port 2 (same PCIe "
                          "switch)"),
            std::string::npos);
  ReplaceText(tree / "mlx4_0/ports/1/state", "1: DOWN\n");
  ASSERT_TRUE(WaitUntil([&] { return InfinibandEvents(rasd).size() == 1; }, 10s)) << rasd.Stderr();
  EXPECT_NE(InfinibandEvents(rasd)[0]["summary"].get<std::string>().find(
                "[serves device(s) 1: same PCIe switch]"),
            std::string::npos)
      << InfinibandEvents(rasd)[0].dump();
}

// A reload during the debounce keeps the deadline the link was armed with,
// and the messages quote that one (helper's find: they quoted the new value).
TEST(InfinibandTest, AReloadDuringTheDebounceKeepsItsDeadlineAndSaysSo) {
  RasdInstance rasd;
  const auto tree = FixtureWithDeviceOneOnMlx4(rasd);
  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\npolicy:\n  link_up_debounce_s: 2\n");
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  ReplaceText(tree / "mlx4_0/ports/1/state", "1: DOWN\n");
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "degraded"; }, 10s));
  EXPECT_NE(DeviceOf(rasd, 1)["reason"].get<std::string>().find("until it stays up 2 s"),
            std::string::npos)
      << DeviceOf(rasd, 1).dump();
  ReplaceText(tree / "mlx4_0/ports/1/state", "4: ACTIVE\n");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return DeviceOf(rasd, 1)["clears"].get<std::string>().find("stayed up 2 s") !=
               std::string::npos;
      },
      10s))
      << DeviceOf(rasd, 1).dump();
  rasd.WriteConfig("ras:\n  infiniband_poll_ms: 100\npolicy:\n  link_up_debounce_s: 60\n");
  ASSERT_EQ(rasd.Rasctl({"reload"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "healthy"; }, 10s))
      << "the armed deadline was not kept; " << DeviceOf(rasd, 1).dump();
  EXPECT_EQ(DeviceOf(rasd, 1)["reason"], "links up for 2 s") << DeviceOf(rasd, 1).dump();
}

// The simulator's link fault through the real path (simulator.link_sysfs):
// rasd writes each simulated device's RDMA NIC into the fixture sysfs tree,
// `rasctl inject link` takes both devices' ports down there, the RDMA
// poller sees it, and the collective re-forms without the two devices, which
// are Degraded, not isolated; `inject link-up` brings the ports back and,
// after the debounce, the devices and the job's ranks, with every checksum
// equal to a fault-free run's.
TEST(InfinibandTest, TheSimulatorsLinkFaultMovesTheCollectiveThroughItsSysfsTree) {
  RasdInstance rasd;
  rasd.WriteConfig(R"(ras:
  infiniband_poll_ms: 100
simulator:
  link_sysfs: true
policy:
  link_up_debounce_s: 1
)" + std::string(kAllreduceJob));
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_TRUE(
      std::filesystem::exists(rasd.HostRoot() / "sys/class/infiniband/rasdsim_2/ports/1/state"));
  EXPECT_EQ(
      DeviceOf(rasd, 1)["rdma_ports"],
      nlohmann::json::parse(R"([{"device": "rasdsim_1", "port": 1, "how": "same PCIe switch"}])"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 1, 2, 3});
      },
      10s))
      << Job(rasd, "allreduce").dump();
  const auto injected = rasd.Rasctl({"inject", "link", "--device", "1", "--peer", "2"});
  ASSERT_EQ(injected.exit_code, 0) << injected.out;
  EXPECT_EQ(ReadText(rasd.HostRoot() / "sys/class/infiniband/rasdsim_1/ports/1/state"),
            "1: DOWN\n");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 3});
      },
      10s))
      << Job(rasd, "allreduce").dump() << rasd.Stderr();
  for (int index : {1, 2}) {
    const auto device = DeviceOf(rasd, index);
    EXPECT_EQ(device["state"], "degraded") << device.dump();  // not isolated
    EXPECT_NE(device["reason"].get<std::string>().find(
                  fmt::format("RDMA link down (rasdsim_{} port 1)", index)),
              std::string::npos)
        << device.dump();
  }
  EXPECT_EQ(DeviceOf(rasd, 0)["state"], "healthy");
  const auto up_at = std::chrono::steady_clock::now();
  ASSERT_EQ(rasd.Rasctl({"inject", "link-up", "--device", "1", "--peer", "2"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return DeviceOf(rasd, 1)["state"] == "healthy" && DeviceOf(rasd, 2)["state"] == "healthy";
      },
      10s))
      << rasd.Stderr();
  EXPECT_GE(std::chrono::steady_clock::now() - up_at, 900ms) << "rejoined before the debounce";
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Job(rasd, "allreduce")["devices"] == nlohmann::json({0, 1, 2, 3});
      },
      15s))
      << Job(rasd, "allreduce").dump();
  const auto job = Job(rasd, "allreduce");
  EXPECT_EQ(job["checksums_match"], true) << job.dump();
  EXPECT_GE(job["grown"], 1) << job.dump();
}

// Without simulator.link_sysfs the simulator's link fault keeps its old
// path (an isolating report), and link-up says what it needs.
TEST(InfinibandTest, WithoutTheSysfsTreeTheSimulatorsLinkFaultIsItsOwnReport) {
  RasdInstance rasd;
  std::string why;
  ASSERT_TRUE(rasd.Start({}, {}, &why)) << why;
  EXPECT_FALSE(std::filesystem::exists(rasd.HostRoot() / "sys/class/infiniband/rasdsim_1"));
  const auto up = rasd.Rasctl({"inject", "link-up", "--device", "1", "--peer", "2"});
  EXPECT_NE(up.exit_code, 0);
  EXPECT_NE((up.out + up.err).find("simulator.link_sysfs"), std::string::npos) << up.out << up.err;
  ASSERT_EQ(rasd.Rasctl({"inject", "link", "--device", "1", "--peer", "2"}).exit_code, 0);
  EXPECT_TRUE(WaitUntil([&] { return DeviceOf(rasd, 1)["state"] == "isolated"; }, 5s));
}

}  // namespace
}  // namespace rasd::testing
