#include "rasd/ras/infiniband_sysfs_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <limits>
#include <utility>

#include "rasd/ras/log_line.h"
#include "scan_util.h"

namespace rasd::ras {
namespace {

constexpr std::string_view kClassInfiniband = "/sys/class/infiniband";
constexpr std::uint64_t kBytesPerSecondPerGbit = 125'000'000;  // 1e9 bits / 8
constexpr int kStateActive = 4;
constexpr int kPhysStateLinkUp = 5;

// The counter directories of a port: the IBA PMA counters, their pre-4.5
// 64-bit forms, and the driver's own (mlx5's RoCE/transport counters).
constexpr std::uint64_t kMaxPlausibleIncrease = 0xFFFFFFFFull;

constexpr std::array<std::string_view, 3> kCounterDirectories = {"counters", "counters_ext",
                                                                 "hw_counters"};

// IBA PortCounters (counters/) that count errors, and the transport errors
// mlx5 reports in hw_counters/ (drivers/infiniband/hw/mlx5/counters.c: the
// q counters out_of_buffer, out_of_sequence and the retransmission group).
// Application-caused completion errors (req_cqe_error, *_flush_error) are
// not hardware health and stay out.
constexpr std::array<std::string_view, 19> kErrorCounters = {
    "counters/symbol_error",
    "counters/link_downed",
    "counters/link_error_recovery",
    "counters/port_rcv_errors",
    "counters/port_rcv_remote_physical_errors",
    "counters/port_rcv_switch_relay_errors",
    "counters/local_link_integrity_errors",
    "counters/excessive_buffer_overrun_errors",
    "counters/port_xmit_discards",
    "counters/port_rcv_constraint_errors",
    "counters/port_xmit_constraint_errors",
    "counters/VL15_dropped",
    "counters/port_rcv_discards",
    "hw_counters/out_of_buffer",
    "hw_counters/out_of_sequence",
    "hw_counters/packet_seq_err",
    "hw_counters/local_ack_timeout_err",
    "hw_counters/rnr_nak_retry_err",
    "hw_counters/implied_nak_seq_err",
};

// node_exporter's names (collector/infiniband_linux.go, 1.1 to 1.5 and
// later) for the counters procfs reads (sysfs/class_infiniband.go
// parseInfiniBandCounters).
constexpr std::array<std::pair<std::string_view, std::string_view>, 30> kNodeExporterNames = {{
    {"counters/link_downed", "link_downed_total"},
    {"counters/link_error_recovery", "link_error_recovery_total"},
    {"counters/multicast_rcv_packets", "multicast_packets_received_total"},
    {"counters/multicast_xmit_packets", "multicast_packets_transmitted_total"},
    {"counters/port_rcv_constraint_errors", "port_constraint_errors_received_total"},
    {"counters/port_xmit_constraint_errors", "port_constraint_errors_transmitted_total"},
    {"counters/port_rcv_data", "port_data_received_bytes_total"},
    {"counters/port_xmit_data", "port_data_transmitted_bytes_total"},
    {"counters/port_rcv_discards", "port_discards_received_total"},
    {"counters/port_xmit_discards", "port_discards_transmitted_total"},
    {"counters/port_rcv_errors", "port_errors_received_total"},
    {"counters/port_rcv_packets", "port_packets_received_total"},
    {"counters/port_xmit_packets", "port_packets_transmitted_total"},
    {"counters/port_xmit_wait", "port_transmit_wait_total"},
    {"counters/unicast_rcv_packets", "unicast_packets_received_total"},
    {"counters/unicast_xmit_packets", "unicast_packets_transmitted_total"},
    {"counters/symbol_error", "symbol_error_total"},
    {"counters/VL15_dropped", "vl15_dropped_total"},
    {"counters/local_link_integrity_errors", "local_link_integrity_errors_total"},
    {"counters/excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors_total"},
    {"counters/port_rcv_remote_physical_errors", "port_receive_remote_physical_errors_total"},
    {"counters/port_rcv_switch_relay_errors", "port_receive_switch_relay_errors_total"},
    {"counters_ext/port_multicast_rcv_packets", "legacy_multicast_packets_received_total"},
    {"counters_ext/port_multicast_xmit_packets", "legacy_multicast_packets_transmitted_total"},
    {"counters_ext/port_rcv_data_64", "legacy_data_received_bytes_total"},
    {"counters_ext/port_rcv_packets_64", "legacy_packets_received_total"},
    {"counters_ext/port_unicast_rcv_packets", "legacy_unicast_packets_received_total"},
    {"counters_ext/port_unicast_xmit_packets", "legacy_unicast_packets_transmitted_total"},
    {"counters_ext/port_xmit_data_64", "legacy_data_transmitted_bytes_total"},
    {"counters_ext/port_xmit_packets_64", "legacy_packets_transmitted_total"},
}};

// The whole of `text` (trimmed) as a decimal number: "N/A (no PMA)", an
// empty file and "12 junk" are not counters.
std::optional<std::uint64_t> ParseWholeNumber(std::string_view text) {
  text = TrimView(text);
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string ReadText(const common::HostEnv& host, const std::string& path) {
  auto text = host.ReadFile(path, 256);
  return text ? std::string(TrimView(*text)) : std::string();
}

// `unreadable`, when given, is set when the directory exists but cannot be
// listed (no permission): not the same as no entries.
std::vector<std::string> EntriesOf(const std::filesystem::path& directory,
                                   bool* unreadable = nullptr) {
  std::vector<std::string> names;
  std::error_code ec;
  std::filesystem::directory_iterator it(directory, ec);
  if (ec && unreadable != nullptr && ec != std::errc::no_such_file_or_directory &&
      ec != std::errc::not_a_directory) {
    *unreadable = true;
  }
  for (std::filesystem::directory_iterator end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<int> PortNumber(std::string_view name) {
  const auto number = ParseWholeNumber(name);
  if (!number || *number > 255 || name.size() > 3) return std::nullopt;  // u8 in the kernel
  return static_cast<int>(*number);
}

// The PCI function of an RDMA device: the target of its `device` link
// ("../../../0000:01:00.0"), else the directory above "infiniband" in the
// class entry's own link ("../../devices/pci0000:00/0000:00:01.0/
// 0000:01:00.0/infiniband/mlx5_0").
std::optional<std::string> PciAddressOf(const common::HostEnv& host, const std::string& base) {
  std::error_code ec;
  const auto device_link = std::filesystem::read_symlink(host.Resolve(base + "/device"), ec);
  if (!ec) {
    const std::string name = device_link.filename().string();
    if (scan::IsPciBdf(name)) return name;
  }
  const auto class_link = std::filesystem::read_symlink(host.Resolve(base), ec);
  if (ec) return std::nullopt;
  std::string previous;
  for (const auto& component : class_link) {
    if (component == "infiniband" && scan::IsPciBdf(previous)) return previous;
    previous = component.string();
  }
  return std::nullopt;
}

InfinibandSnapshot::Port ReadPort(const common::HostEnv& host, const std::string& port_path,
                                  int number) {
  InfinibandSnapshot::Port port;
  port.number = number;
  port.state = ParseInfinibandPortState(ReadText(host, port_path + "/state"));
  port.phys_state = ParseInfinibandPortState(ReadText(host, port_path + "/phys_state"));
  port.rate_bytes_per_second = ParseInfinibandRate(ReadText(host, port_path + "/rate"));
  port.link_layer = ReadText(host, port_path + "/link_layer");
  for (std::string_view directory : kCounterDirectories) {
    const std::string directory_path = port_path + "/" + std::string(directory);
    for (const auto& name : EntriesOf(host.Resolve(directory_path))) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(host.Resolve(directory_path + "/" + name), ec)) {
        continue;
      }
      // Unreadable (EACCES, EINVAL from a driver) or "N/A (no PMA)": absent.
      auto text = host.ReadFile(directory_path + "/" + name, 64);
      if (!text) continue;
      const auto value = ParseWholeNumber(*text);
      if (!value) continue;
      port.counters[std::string(directory) + "/" + name] = *value;
    }
  }
  return port;
}

bool IsUp(const InfinibandSnapshot::Port& port) {
  return port.state->id == kStateActive && port.phys_state->id == kPhysStateLinkUp;
}

std::string StateText(const std::optional<InfinibandPortState>& state) {
  if (!state) return "unknown";
  return state->name.empty() ? std::to_string(state->id) : state->name;
}

}  // namespace

std::optional<InfinibandPortState> ParseInfinibandPortState(std::string_view text) {
  text = TrimView(text);
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto id = ParseWholeNumber(text.substr(0, colon));
  if (!id || *id > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    return std::nullopt;
  }
  return InfinibandPortState{static_cast<int>(*id), std::string(TrimView(text.substr(colon + 1)))};
}

std::optional<std::uint64_t> ParseInfinibandRate(std::string_view text) {
  text = TrimView(text);
  std::uint64_t whole = 0;
  const char* const begin = text.data();
  const char* const end = text.data() + text.size();
  auto [cursor, ec] = std::from_chars(begin, end, whole);
  if (ec != std::errc() || cursor == begin) return std::nullopt;
  if (whole > std::numeric_limits<std::uint64_t>::max() / kBytesPerSecondPerGbit) {
    return std::nullopt;
  }
  std::uint64_t bytes = whole * kBytesPerSecondPerGbit;
  if (cursor != end && *cursor == '.') {
    ++cursor;
    std::uint64_t fraction = 0, scale = 1;
    int digits = 0;
    for (; cursor != end && *cursor >= '0' && *cursor <= '9'; ++cursor, ++digits) {
      if (digits >= 9) continue;  // finer than a byte per second
      fraction = fraction * 10 + static_cast<std::uint64_t>(*cursor - '0');
      scale *= 10;
    }
    if (digits == 0) return std::nullopt;
    bytes += fraction * kBytesPerSecondPerGbit / scale;
  }
  const std::string_view rest =
      TrimView(std::string_view(cursor, static_cast<std::size_t>(end - cursor)));
  if (!StartsWith(rest, "Gb/sec")) return std::nullopt;
  return bytes;
}

std::optional<std::string> InfinibandPciAddress(const common::HostEnv& host,
                                                const std::string& name) {
  return PciAddressOf(host, std::string(kClassInfiniband) + "/" + name);
}

std::optional<std::vector<std::string>> ListInfinibandDevices(const common::HostEnv& host) {
  bool unreadable = false;
  auto names = EntriesOf(host.Resolve(kClassInfiniband), &unreadable);
  if (unreadable) return std::nullopt;
  return names;
}

std::optional<InfinibandSnapshot::Device> ReadInfinibandDevice(const common::HostEnv& host,
                                                               const std::string& name) {
  const std::string base = std::string(kClassInfiniband) + "/" + name;
  std::error_code ec;
  if (!std::filesystem::is_directory(host.Resolve(base), ec)) return std::nullopt;
  InfinibandSnapshot::Device device;
  device.name = name;
  device.board_id = ReadText(host, base + "/board_id");
  device.fw_ver = ReadText(host, base + "/fw_ver");
  device.hca_type = ReadText(host, base + "/hca_type");
  device.pci_bdf = PciAddressOf(host, base);
  for (const auto& port_name : EntriesOf(host.Resolve(base + "/ports"))) {
    const auto number = PortNumber(port_name);
    if (!number) continue;
    device.ports[*number] = ReadPort(host, base + "/ports/" + port_name, *number);
  }
  return device;
}

InfinibandSnapshot ReadInfinibandSnapshot(const common::HostEnv& host) {
  InfinibandSnapshot snapshot;
  const auto names = ListInfinibandDevices(host);
  if (!names) {
    snapshot.unreadable = true;
    return snapshot;
  }
  for (const auto& name : *names) {
    if (auto device = ReadInfinibandDevice(host, name)) snapshot.devices[name] = std::move(*device);
  }
  return snapshot;
}

bool IsInfinibandErrorCounter(std::string_view counter) {
  return std::find(kErrorCounters.begin(), kErrorCounters.end(), counter) != kErrorCounters.end();
}

std::optional<std::string_view> NodeExporterName(std::string_view counter) {
  for (const auto& [ours, theirs] : kNodeExporterNames) {
    if (ours == counter) return theirs;
  }
  return std::nullopt;
}

std::uint64_t NodeExporterValue(std::string_view counter, std::uint64_t raw) {
  // procfs: Mellanox says the data counters "are divided by 4
  // unconditionally" (per lane); node_exporter multiplies them back.
  if (counter == "counters/port_rcv_data" || counter == "counters/port_xmit_data" ||
      counter == "counters_ext/port_rcv_data_64" || counter == "counters_ext/port_xmit_data_64") {
    return raw * 4;
  }
  return raw;
}

std::vector<RasEvent> InfinibandSysfsSource::Poll() {
  return Advance(ReadInfinibandSnapshot(host_));
}

std::vector<RasEvent> InfinibandSysfsSource::Advance(InfinibandSnapshot current) {
  // A class directory rasd may not list (permissions) says nothing about
  // the hardware: the last picture stands, and no device is "gone".
  if (current.unreadable) {
    last_.unreadable = true;
    return {};
  }
  std::vector<RasEvent> events;
  const auto now = host_.GetClock().Wall();
  auto emit = [&](const InfinibandSnapshot::Device& device, Severity severity, std::uint64_t count,
                  std::string summary, std::string raw) {
    RasEvent event;
    event.time = now;
    event.source = std::string(kSourceName);
    event.origin = std::string(kOrigin);
    event.severity = severity;
    event.pci_bdf = device.pci_bdf;
    event.count = count;
    event.summary = std::move(summary);
    event.raw = std::move(raw);
    events.push_back(std::move(event));
  };
  auto remember_link = [&](const std::string& device, const InfinibandSnapshot::Port& port) {
    if (port.state && port.phys_state) link_up_[{device, port.number}] = IsUp(port);
  };

  if (!have_baseline_) {
    have_baseline_ = true;
    for (const auto& [name, device] : current.devices) {
      for (const auto& [number, port] : device.ports) remember_link(name, port);
    }
    last_ = std::move(current);
    return events;
  }

  for (const auto& [name, before] : last_.devices) {
    const auto now_device = current.devices.find(name);
    if (now_device == current.devices.end()) {
      std::string ports;
      for (const auto& [number, port] : before.ports) {
        ports += (ports.empty() ? "" : ", ") + std::to_string(number);
        link_up_.erase({name, number});
      }
      emit(before, Severity::kUce, 1, fmt::format("device gone: {} (ports {})", name, ports),
           fmt::format("{} removed", name));
      continue;
    }
    for (const auto& [number, port] : before.ports) {
      if (now_device->second.ports.count(number) == 0) {
        link_up_.erase({name, number});
        emit(now_device->second, Severity::kUce, 1,
             fmt::format("port gone: {} port {}", name, number),
             fmt::format("{} port {} removed", name, number));
      }
    }
  }

  for (const auto& [name, device] : current.devices) {
    const auto before_device = last_.devices.find(name);
    if (before_device == last_.devices.end()) {
      for (const auto& [number, port] : device.ports) remember_link(name, port);
      emit(device, Severity::kInfo, 1,
           fmt::format("device appeared: {} ({} port(s){})", name, device.ports.size(),
                       device.pci_bdf ? ", " + *device.pci_bdf : std::string()),
           fmt::format("{} added", name));
      continue;
    }
    for (const auto& [number, port] : device.ports) {
      const auto before_port = before_device->second.ports.find(number);
      if (before_port == before_device->second.ports.end()) {
        remember_link(name, port);
        emit(device, Severity::kInfo, 1,
             fmt::format("port appeared: {} port {}: {} / {}", name, number, StateText(port.state),
                         StateText(port.phys_state)),
             fmt::format("{} port {} added", name, number));
        continue;
      }
      for (const auto& [counter, value] : port.counters) {
        if (!IsInfinibandErrorCounter(counter)) continue;
        const auto previous = before_port->second.counters.find(counter);
        if (previous == before_port->second.counters.end()) continue;  // new: baseline
        if (value <= previous->second) continue;  // unchanged, or reset: re-based below
        const std::uint64_t increase = value - previous->second;
        // The error counters are 16- and 32-bit in the hardware: a larger
        // step is a garbled file or a rewritten one, not errors (it would
        // also overflow every sum downstream). Re-based without an event.
        if (increase > kMaxPlausibleIncrease) continue;
        const std::string_view short_name = std::string_view(counter).substr(counter.find('/') + 1);
        emit(device, Severity::kCe, increase,
             fmt::format("{} port {}: {} +{} ({} since the counters were reset)", name, number,
                         short_name, increase, value),
             fmt::format("{} port {} {} {} -> {}", name, number, counter, previous->second, value));
      }
      if (!port.state || !port.phys_state) continue;  // unreadable: keep the last reference
      const bool up = IsUp(port);
      const auto known = link_up_.find({name, number});
      const bool was_up = known == link_up_.end() ? up : known->second;
      link_up_[{name, number}] = up;
      if (was_up && !up) {
        emit(device, Severity::kUce, 1,
             fmt::format("link down: {} port {}: {} / {}", name, number, StateText(port.state),
                         StateText(port.phys_state)),
             fmt::format("{} port {} state {}: {} phys_state {}: {}", name, number, port.state->id,
                         port.state->name, port.phys_state->id, port.phys_state->name));
      } else if (!was_up && up) {
        emit(device, Severity::kInfo, 1,
             fmt::format("link up: {} port {}: {} / {}", name, number, StateText(port.state),
                         StateText(port.phys_state)),
             fmt::format("{} port {} state {}: {} phys_state {}: {}", name, number, port.state->id,
                         port.state->name, port.phys_state->id, port.phys_state->name));
      }
    }
  }
  last_ = std::move(current);
  return events;
}

}  // namespace rasd::ras
