#include "rasd/ras/infiniband_sysfs_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace rasd::ras {
namespace {

const std::string kFixture =
    std::string(RASD_TEST_DATA_DIR) + "/infiniband_sysfs/node_exporter-fixture";

// A writable copy of node_exporter's infiniband fixture (tests/data/
// infiniband_sysfs), so that tests can change counters and states.
class InfinibandSysfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rasd-ib-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    std::filesystem::copy(kFixture + "/sys", root_ / "sys",
                          std::filesystem::copy_options::recursive);
    MakeWritable(root_);
    host_ = std::make_unique<common::HostEnv>(root_, std::make_shared<common::ManualClock>());
  }
  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  static void MakeWritable(const std::filesystem::path& top) {
    std::filesystem::permissions(top, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(top)) {
      std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_write,
                                   std::filesystem::perm_options::add);
    }
  }
  std::filesystem::path Class() const { return root_ / "sys/class/infiniband"; }
  // Writes `value` to sys/class/infiniband/<path>, creating it if needed.
  void Set(const std::string& path, const std::string& value) {
    std::filesystem::create_directories((Class() / path).parent_path());
    std::ofstream(Class() / path, std::ios::trunc) << value << "\n";
  }

  std::filesystem::path root_;
  std::unique_ptr<common::HostEnv> host_;
};

// One sample of node_exporter's text output.
struct PromSample {
  std::string family;  // after "node_infiniband_"
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<PromSample> ReadPromFile(const std::string& path) {
  std::vector<PromSample> samples;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    PromSample sample;
    const std::size_t brace = line.find('{');
    const std::size_t close = line.rfind('}');
    if (brace == std::string::npos || close == std::string::npos) {
      ADD_FAILURE() << "unexpected sample without labels: " << line;
      continue;
    }
    const std::string name = line.substr(0, brace);
    EXPECT_EQ(name.rfind(kNodeExporterInfinibandPrefix, 0), 0u) << line;
    sample.family = name.substr(kNodeExporterInfinibandPrefix.size());
    // key="value",key="value" (no escapes in this file)
    std::string labels = line.substr(brace + 1, close - brace - 1);
    std::size_t at = 0;
    while (at < labels.size()) {
      const std::size_t equals = labels.find("=\"", at);
      const std::size_t end = labels.find('"', equals + 2);
      if (equals == std::string::npos || end == std::string::npos) {
        ADD_FAILURE() << "bad labels: " << line;
        break;
      }
      sample.labels[labels.substr(at, equals - at)] = labels.substr(equals + 2, end - equals - 2);
      at = end + 1;
      if (at < labels.size() && labels[at] == ',') ++at;
    }
    sample.value = std::stod(line.substr(close + 1));
    samples.push_back(std::move(sample));
  }
  return samples;
}

TEST(InfinibandParseTest, PortStates) {
  EXPECT_EQ(ParseInfinibandPortState("4: ACTIVE"), (InfinibandPortState{4, "ACTIVE"}));
  EXPECT_EQ(ParseInfinibandPortState(" 5: LinkUp\n"), (InfinibandPortState{5, "LinkUp"}));
  EXPECT_EQ(ParseInfinibandPortState("1: DOWN"), (InfinibandPortState{1, "DOWN"}));
  EXPECT_EQ(ParseInfinibandPortState("3:"), (InfinibandPortState{3, ""}));
  EXPECT_FALSE(ParseInfinibandPortState("ACTIVE"));
  EXPECT_FALSE(ParseInfinibandPortState(": ACTIVE"));
  EXPECT_FALSE(ParseInfinibandPortState("x4: ACTIVE"));
  EXPECT_FALSE(ParseInfinibandPortState("99999999999: ACTIVE"));
  EXPECT_FALSE(ParseInfinibandPortState(""));
}

TEST(InfinibandParseTest, RatesInBytesPerSecond) {
  EXPECT_EQ(ParseInfinibandRate("40 Gb/sec (4X QDR)"), 5'000'000'000u);
  EXPECT_EQ(ParseInfinibandRate("10 Gb/sec (4X)"), 1'250'000'000u);
  EXPECT_EQ(ParseInfinibandRate("2.5 Gb/sec (1X SDR)\n"), 312'500'000u);
  EXPECT_EQ(ParseInfinibandRate("100 Gb/sec (4X EDR)"), 12'500'000'000u);
  EXPECT_EQ(ParseInfinibandRate("400 Gb/sec (4X NDR)"), 50'000'000'000u);
  EXPECT_EQ(ParseInfinibandRate("53.125 Gb/sec"), 6'640'625'000u);
  EXPECT_EQ(ParseInfinibandRate("10 Gb/sec"), 1'250'000'000u);
  EXPECT_FALSE(ParseInfinibandRate("Gb/sec"));
  EXPECT_FALSE(ParseInfinibandRate("40"));
  EXPECT_FALSE(ParseInfinibandRate("40 Mb/sec"));
  EXPECT_FALSE(ParseInfinibandRate("40. Gb/sec"));
  EXPECT_FALSE(ParseInfinibandRate("99999999999999999999 Gb/sec"));
  EXPECT_FALSE(ParseInfinibandRate(""));
}

TEST(InfinibandParseTest, NodeExporterMappingAndErrorCounters) {
  EXPECT_EQ(NodeExporterName("counters/port_rcv_data"), "port_data_received_bytes_total");
  EXPECT_EQ(NodeExporterValue("counters/port_rcv_data", 10), 40u);
  EXPECT_EQ(NodeExporterValue("counters_ext/port_xmit_data_64", 10), 40u);
  EXPECT_EQ(NodeExporterValue("counters/port_rcv_packets", 10), 10u);
  EXPECT_EQ(NodeExporterName("counters_ext/port_rcv_packets_64"), "legacy_packets_received_total");
  EXPECT_EQ(NodeExporterName("counters/symbol_error"), "symbol_error_total");
  EXPECT_EQ(NodeExporterName("counters/VL15_dropped"), "vl15_dropped_total");
  EXPECT_EQ(NodeExporterValue("counters/symbol_error", 10), 10u);
  EXPECT_FALSE(NodeExporterName("hw_counters/out_of_buffer"));
  EXPECT_FALSE(NodeExporterName("port_rcv_data")) << "names carry their directory";
  EXPECT_TRUE(IsInfinibandErrorCounter("counters/symbol_error"));
  EXPECT_TRUE(IsInfinibandErrorCounter("hw_counters/rnr_nak_retry_err"));
  EXPECT_FALSE(IsInfinibandErrorCounter("counters/port_rcv_data"));
  EXPECT_FALSE(IsInfinibandErrorCounter("counters/port_xmit_wait"));
  EXPECT_FALSE(IsInfinibandErrorCounter("hw_counters/symbol_error"));
}

// Every value node_exporter reports for its own fixture is what the snapshot
// reads, through NodeExporterName/Value; and every counter that maps to a
// node_exporter family is in its output.
TEST(InfinibandFixtureTest, MatchesNodeExportersOutputForItsFixture) {
  common::HostEnv host(kFixture, std::make_shared<common::ManualClock>());
  const InfinibandSnapshot snapshot = ReadInfinibandSnapshot(host);
  const auto samples = ReadPromFile(kFixture + "/node_exporter-e2e-output.prom");
  ASSERT_EQ(samples.size(), 51u) << "the file's sample lines";
  std::size_t compared = 0;
  std::set<std::tuple<std::string, int, std::string>> published;
  for (const auto& sample : samples) {
    SCOPED_TRACE(sample.family + " " + sample.labels.at("device"));
    const auto device = snapshot.devices.find(sample.labels.at("device"));
    ASSERT_NE(device, snapshot.devices.end());
    if (sample.family == "info") {
      EXPECT_EQ(device->second.board_id, sample.labels.at("board_id"));
      EXPECT_EQ(device->second.fw_ver, sample.labels.at("firmware_version"));
      EXPECT_EQ(device->second.hca_type, sample.labels.at("hca_type"));
      ++compared;
      continue;
    }
    const int port_number = std::stoi(sample.labels.at("port"));
    const auto port = device->second.ports.find(port_number);
    ASSERT_NE(port, device->second.ports.end()) << "port " << port_number;
    const auto& p = port->second;
    if (sample.family == "state_id") {
      ASSERT_TRUE(p.state);
      EXPECT_EQ(p.state->id, sample.value);
    } else if (sample.family == "physical_state_id") {
      ASSERT_TRUE(p.phys_state);
      EXPECT_EQ(p.phys_state->id, sample.value);
    } else if (sample.family == "rate_bytes_per_second") {
      ASSERT_TRUE(p.rate_bytes_per_second);
      EXPECT_EQ(static_cast<double>(*p.rate_bytes_per_second), sample.value);
    } else {
      const std::string* counter = nullptr;
      for (const auto& [name, value] : p.counters) {
        if (NodeExporterName(name) == sample.family) counter = &name;
      }
      ASSERT_NE(counter, nullptr) << "no counter maps to " << sample.family;
      EXPECT_EQ(static_cast<double>(NodeExporterValue(*counter, p.counters.at(*counter))),
                sample.value)
          << *counter;
      published.insert({device->first, port_number, *counter});
    }
    ++compared;
  }
  EXPECT_EQ(compared, samples.size());
  for (const auto& [device_name, device] : snapshot.devices) {
    for (const auto& [number, port] : device.ports) {
      for (const auto& [counter, value] : port.counters) {
        if (!NodeExporterName(counter)) continue;
        EXPECT_TRUE(published.count({device_name, number, counter}))
            << device_name << " port " << number << " " << counter
            << " maps to node_exporter but it did not publish it";
      }
    }
  }
}

TEST(InfinibandFixtureTest, ReadsDevicesPortsAndLeavesNoPmaCountersOut) {
  common::HostEnv host(kFixture, std::make_shared<common::ManualClock>());
  const InfinibandSnapshot snapshot = ReadInfinibandSnapshot(host);
  ASSERT_EQ(snapshot.devices.size(), 2u);
  const auto& i40iw = snapshot.devices.at("i40iw0");
  ASSERT_EQ(i40iw.ports.size(), 1u);
  const auto& i40iw_port = i40iw.ports.at(1);
  EXPECT_TRUE(i40iw_port.counters.empty()) << "every counter reads N/A (no PMA)";
  EXPECT_EQ(i40iw_port.link_layer, "InfiniBand");
  EXPECT_EQ(i40iw_port.state, (InfinibandPortState{4, "ACTIVE"}));
  EXPECT_EQ(i40iw_port.phys_state, (InfinibandPortState{5, "LinkUp"}));
  EXPECT_FALSE(i40iw.pci_bdf) << "the fixture has no device link";
  const auto& mlx4 = snapshot.devices.at("mlx4_0");
  ASSERT_EQ(mlx4.ports.size(), 2u);
  EXPECT_EQ(mlx4.ports.at(1).counters.at("counters/port_xmit_discards"), 5u);
  EXPECT_EQ(mlx4.ports.at(1).counters.at("counters/port_rcv_packets"), 6'825'908'347u);
  EXPECT_EQ(mlx4.ports.at(1).counters.at("counters_ext/port_rcv_data_64"), 4'631'917u);
  EXPECT_EQ(mlx4.ports.at(1).counters.size(), 16u + 8u);
  EXPECT_EQ(mlx4.ports.at(2).counters.count("counters/port_rcv_errors"), 0u);
}

TEST(InfinibandFixtureTest, AHostWithoutInfinibandIsEmpty) {
  common::HostEnv host("/nonexistent-root", std::make_shared<common::ManualClock>());
  EXPECT_TRUE(ReadInfinibandSnapshot(host).devices.empty());
  InfinibandSysfsSource source(host);
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_TRUE(source.Poll().empty());
}

TEST_F(InfinibandSysfsTest, PciAddressFromTheDeviceLinkOrTheClassLink) {
  std::filesystem::create_directory_symlink("../../../0000:01:00.0", Class() / "mlx4_0/device");
  std::filesystem::create_directory_symlink("../../../virtual", Class() / "i40iw0/device");
  // A real class entry is a link into the PCI device's directory.
  const auto pci = root_ / "sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/infiniband/mlx5_0";
  std::filesystem::create_directories(pci / "ports/1");
  std::filesystem::create_directory_symlink(
      "../../devices/pci0000:40/0000:40:01.1/0000:41:00.0/infiniband/mlx5_0", Class() / "mlx5_0");
  const auto snapshot = ReadInfinibandSnapshot(*host_);
  EXPECT_EQ(snapshot.devices.at("mlx4_0").pci_bdf, "0000:01:00.0");
  EXPECT_FALSE(snapshot.devices.at("i40iw0").pci_bdf) << "not a PCI address";
  ASSERT_EQ(snapshot.devices.count("mlx5_0"), 1u);
  EXPECT_EQ(snapshot.devices.at("mlx5_0").pci_bdf, "0000:41:00.0");
  EXPECT_EQ(snapshot.devices.at("mlx5_0").ports.size(), 1u);
}

TEST_F(InfinibandSysfsTest, ErrorCounterIncreasesAreCeEventsTrafficIsNot) {
  std::filesystem::create_directory_symlink("../../../0000:01:00.0", Class() / "mlx4_0/device");
  InfinibandSysfsSource source(*host_);
  EXPECT_TRUE(source.Poll().empty()) << "the first poll is the baseline";
  EXPECT_TRUE(source.Poll().empty()) << "nothing changed";
  Set("mlx4_0/ports/1/counters/port_xmit_discards", "8");
  Set("mlx4_0/ports/1/counters/port_rcv_data", "9999999");
  Set("mlx4_0/ports/1/counters/unicast_rcv_packets", "70000");
  Set("mlx4_0/ports/1/counters/port_xmit_wait", "0");
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kCe);
  EXPECT_EQ(events[0].count, 3u);
  EXPECT_EQ(events[0].source, "infiniband_sysfs");
  EXPECT_EQ(events[0].origin, "infiniband");
  EXPECT_EQ(events[0].pci_bdf, "0000:01:00.0");
  EXPECT_NE(events[0].summary.find("mlx4_0 port 1: port_xmit_discards +3"), std::string::npos)
      << events[0].summary;
  EXPECT_EQ(
      source.Last().devices.at("mlx4_0").ports.at(1).counters.at("counters/port_xmit_discards"),
      8u);
  // A hw_counters file that appears is baselined; its next increase counts.
  Set("mlx4_0/ports/1/hw_counters/out_of_buffer", "10");
  Set("mlx4_0/ports/1/hw_counters/rx_write_requests", "10");
  EXPECT_TRUE(source.Poll().empty());
  Set("mlx4_0/ports/1/hw_counters/out_of_buffer", "12");
  Set("mlx4_0/ports/1/hw_counters/rx_write_requests", "50");
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, 2u);
  EXPECT_NE(events[0].summary.find("out_of_buffer"), std::string::npos) << events[0].summary;
}

TEST_F(InfinibandSysfsTest, AResetIsRebasedWithoutAnEvent) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  Set("mlx4_0/ports/1/counters/port_xmit_discards", "0");
  EXPECT_TRUE(source.Poll().empty());
  Set("mlx4_0/ports/1/counters/port_xmit_discards", "1");
  const auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, 1u);
}

// The error counters are at most 32 bits in the hardware: a step larger
// than that is a garbled or rewritten file, not 2^63 errors (they overflowed
// every sum downstream: helper's find).
TEST_F(InfinibandSysfsTest, AnImpossibleIncreaseIsRebasedWithoutAnEvent) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  Set("mlx4_0/ports/1/counters/symbol_error", "0");
  (void)source.Poll();
  Set("mlx4_0/ports/1/counters/symbol_error", "9223372036854775807");
  EXPECT_TRUE(source.Poll().empty());
  Set("mlx4_0/ports/1/counters/symbol_error", "9223372036854775809");
  const auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, 2u);
}

// A class directory rasd may not list says nothing about the hardware: no
// device is "gone", the last reading stands (helper's find).
TEST_F(InfinibandSysfsTest, AnUnlistableClassDirectoryIsNoDeviceGone) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  std::filesystem::permissions(Class(), std::filesystem::perms::none);
  // Root lists any directory: the poll looks as nobody does.
  const bool as_root = ::geteuid() == 0;
  if (as_root) {
    ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);
    ASSERT_EQ(::seteuid(65534), 0);
  }
  const auto events = source.Poll();
  if (as_root) {
    ASSERT_EQ(::seteuid(0), 0);
  }
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(source.Last().unreadable);
  EXPECT_EQ(source.Last().devices.size(), 2u);
  std::filesystem::permissions(Class(), std::filesystem::perms::owner_all);
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_FALSE(source.Last().unreadable);
}

TEST_F(InfinibandSysfsTest, NoPmaAndMissingCountersAreAbsentNotErrors) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  // N/A -> a number: the counter appears and is baselined.
  Set("i40iw0/ports/1/counters/symbol_error", "7");
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_EQ(source.Last().devices.at("i40iw0").ports.at(1).counters.at("counters/symbol_error"),
            7u);
  Set("i40iw0/ports/1/counters/symbol_error", "9");
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, 2u);
  EXPECT_FALSE(events[0].pci_bdf);
  // Back to N/A, or gone: absent, no event; then a value is a new baseline.
  Set("i40iw0/ports/1/counters/symbol_error", "N/A (no PMA)");
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_EQ(source.Last().devices.at("i40iw0").ports.at(1).counters.count("counters/symbol_error"),
            0u);
  std::filesystem::remove(Class() / "i40iw0/ports/1/counters/symbol_error");
  std::filesystem::remove_all(Class() / "mlx4_0/ports/1/counters_ext");
  std::filesystem::remove(Class() / "mlx4_0/ports/2/rate");
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_FALSE(source.Last().devices.at("mlx4_0").ports.at(2).rate_bytes_per_second);
  Set("i40iw0/ports/1/counters/symbol_error", "100");
  EXPECT_TRUE(source.Poll().empty()) << "a counter that comes back is a new baseline";
}

TEST_F(InfinibandSysfsTest, LinkDownIsUceAndLinkUpIsInfo) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  Set("mlx4_0/ports/2/state", "1: DOWN");
  Set("mlx4_0/ports/2/phys_state", "3: Disabled");
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kUce);
  EXPECT_EQ(events[0].origin, "infiniband");
  EXPECT_EQ(events[0].summary, "link down: mlx4_0 port 2: DOWN / Disabled");
  Set("mlx4_0/ports/2/phys_state", "2: Polling");
  EXPECT_TRUE(source.Poll().empty()) << "still down: one event per transition";
  Set("mlx4_0/ports/2/state", "4: ACTIVE");
  Set("mlx4_0/ports/2/phys_state", "5: LinkUp");
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kInfo);
  EXPECT_EQ(events[0].summary, "link up: mlx4_0 port 2: ACTIVE / LinkUp");
  // phys_state alone leaving LinkUp is down too.
  Set("mlx4_0/ports/1/phys_state", "6: LinkErrorRecovery");
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].summary, "link down: mlx4_0 port 1: ACTIVE / LinkErrorRecovery");
}

TEST_F(InfinibandSysfsTest, APortDownAtStartIsNotNewsUntilItComesUp) {
  Set("mlx4_0/ports/2/state", "1: DOWN");
  Set("mlx4_0/ports/2/phys_state", "2: Polling");
  InfinibandSysfsSource source(*host_);
  EXPECT_TRUE(source.Poll().empty());
  EXPECT_TRUE(source.Poll().empty());
  Set("mlx4_0/ports/2/state", "4: ACTIVE");
  Set("mlx4_0/ports/2/phys_state", "5: LinkUp");
  const auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kInfo);
}

TEST_F(InfinibandSysfsTest, PortsAndDevicesThatGoAndCome) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  std::filesystem::remove_all(Class() / "mlx4_0/ports/2");
  auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kUce);
  EXPECT_EQ(events[0].summary, "port gone: mlx4_0 port 2");
  std::filesystem::remove_all(Class() / "i40iw0");
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].severity, Severity::kUce);
  EXPECT_EQ(events[0].summary, "device gone: i40iw0 (ports 1)");
  EXPECT_TRUE(source.Poll().empty()) << "gone is reported once";
  // Back: baselined, announced once, its counters not counted as new errors.
  std::filesystem::copy(kFixture + "/sys/class/infiniband/i40iw0", Class() / "i40iw0",
                        std::filesystem::copy_options::recursive);
  MakeWritable(Class() / "i40iw0");
  std::filesystem::copy(kFixture + "/sys/class/infiniband/mlx4_0/ports/2",
                        Class() / "mlx4_0/ports/2", std::filesystem::copy_options::recursive);
  MakeWritable(Class() / "mlx4_0/ports/2");
  events = source.Poll();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].severity, Severity::kInfo);
  EXPECT_EQ(events[0].summary, "device appeared: i40iw0 (1 port(s))");
  EXPECT_EQ(events[1].severity, Severity::kInfo);
  EXPECT_EQ(events[1].summary, "port appeared: mlx4_0 port 2: ACTIVE / LinkUp");
  EXPECT_TRUE(source.Poll().empty());
  // The re-added device's link is tracked again.
  Set("i40iw0/ports/1/state", "1: DOWN");
  events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].summary, "link down: i40iw0 port 1: DOWN / LinkUp");
}

TEST_F(InfinibandSysfsTest, GarbageStateIsUnknownAndGivesNoLinkEvent) {
  InfinibandSysfsSource source(*host_);
  (void)source.Poll();
  Set("mlx4_0/ports/1/state", "garbage");
  Set("mlx4_0/ports/1/rate", "fast");
  Set("mlx4_0/ports/1/counters/port_xmit_discards", "lots");
  std::ofstream(Class() / "mlx4_0/ports/2/phys_state", std::ios::trunc | std::ios::binary)
      << std::string("\0\xff\x01:", 4);
  EXPECT_TRUE(source.Poll().empty());
  const auto& port1 = source.Last().devices.at("mlx4_0").ports.at(1);
  EXPECT_FALSE(port1.state);
  EXPECT_FALSE(port1.rate_bytes_per_second);
  EXPECT_EQ(port1.counters.count("counters/port_xmit_discards"), 0u);
  EXPECT_FALSE(source.Last().devices.at("mlx4_0").ports.at(2).phys_state);
  // Readable again: compared with the last state that could be read (up).
  Set("mlx4_0/ports/1/state", "1: DOWN");
  const auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].summary, "link down: mlx4_0 port 1: DOWN / LinkUp");
  // An empty port directory (half-created or half-removed) reads as a port
  // with nothing known.
  std::filesystem::create_directories(Class() / "mlx4_0/ports/3");
  std::filesystem::create_directories(Class() / "mlx4_0/ports/not-a-port");
  const auto appeared = source.Poll();
  ASSERT_EQ(appeared.size(), 1u);
  EXPECT_EQ(appeared[0].summary, "port appeared: mlx4_0 port 3: unknown / unknown");
  EXPECT_EQ(source.Last().devices.at("mlx4_0").ports.size(), 3u);
}

TEST_F(InfinibandSysfsTest, EventsTakeTheirTimeFromTheHostClock) {
  auto clock = std::make_shared<common::ManualClock>();
  common::HostEnv host(root_, clock);
  InfinibandSysfsSource source(host);
  (void)source.Poll();
  clock->Advance(std::chrono::seconds(42));
  Set("mlx4_0/ports/1/counters/link_downed", "1");
  const auto events = source.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].time, clock->Wall());
}

}  // namespace
}  // namespace rasd::ras
