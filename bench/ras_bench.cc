// RAS ingestion throughput: kmsg records through decode, classification and
// the SQLite store, on a mixed log where one record in five is a RAS
// record (lines of the real-record corpus) and the rest are ordinary kernel
// chatter. Baseline in the same process: splitting the log into lines.

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rasd/common/host_env.h"
#include "rasd/ras/kernel_log_scanner.h"
#include "rasd/ras/kmsg_source.h"
#include "rasd/ras/state_store.h"

namespace {

constexpr std::size_t kRecords = 200'000;

// "prio,seq,usec,-;text" records, as /dev/kmsg hands them out.
const std::vector<std::string>& MixedKmsg() {
  static const std::vector<std::string> records = [] {
    std::vector<std::string> ras_lines;
    std::ifstream corpus(std::string(RASD_TEST_DATA_DIR) + "/kernel-ras-records.jsonl");
    for (std::string line; std::getline(corpus, line);) {
      auto json = nlohmann::json::parse(line, nullptr, false);
      if (json.is_discarded()) continue;
      const std::string text = json.value("text", "");
      std::size_t start = 0;
      while (start < text.size()) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        if (end > start) ras_lines.push_back(text.substr(start, end - start));
        start = end + 1;
      }
    }
    if (ras_lines.empty())
      ras_lines.push_back("EDAC MC0: 1 CE memory read error on DIMM (page:0x1 offset:0x2)");
    const char* chatter[] = {"usb 1-1: new high-speed USB device number 7 using xhci_hcd",
                             "systemd[1]: Started Session 42 of user root.",
                             "EXT4-fs (sda1): mounted filesystem with ordered data mode",
                             "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"};
    std::vector<std::string> out;
    out.reserve(kRecords);
    for (std::size_t i = 0; i < kRecords; ++i) {
      const std::string& text =
          i % 5 == 0 ? ras_lines[(i / 5) % ras_lines.size()] : std::string(chatter[i % 4]);
      out.push_back(fmt::format("6,{},{},-;{}", i + 1, 1'000'000 + i * 10, text));
    }
    return out;
  }();
  return records;
}

void BM_SplitOnlyBaseline(benchmark::State& state) {
  const auto& records = MixedKmsg();
  for (auto _ : state) {
    std::size_t bytes = 0;
    for (const auto& record : records) bytes += record.find(';');
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records.size()));
}
BENCHMARK(BM_SplitOnlyBaseline)->Unit(benchmark::kMillisecond);

void BM_DecodeAndClassify(benchmark::State& state) {
  const auto& records = MixedKmsg();
  std::size_t events = 0;
  for (auto _ : state) {
    rasd::ras::KernelLogScanner scanner;
    events = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto decoded = rasd::ras::DecodeKmsgRecord(records[i]);
      scanner.AddLine(decoded->text, decoded->usec);
      if (i % 1024 == 0) events += scanner.TakeCompleted().size();
    }
    events += scanner.Finish().size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records.size()));
  state.counters["events"] = static_cast<double>(events);
}
BENCHMARK(BM_DecodeAndClassify)->Unit(benchmark::kMillisecond);

// Decode, classify, turn into events and store them in a real SQLite file,
// one transaction per batch as the daemon does.
void BM_DecodeClassifyStore(benchmark::State& state) {
  const auto& records = MixedKmsg();
  char pattern[] = "/tmp/rasd-bench-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(pattern);
  auto store = std::move(*rasd::ras::StateStore::Open(dir / "state"));
  std::size_t stored = 0;
  for (auto _ : state) {
    rasd::ras::KernelLogScanner scanner;
    std::vector<rasd::ras::RasEvent> batch;
    auto flush = [&](std::vector<rasd::ras::ScannedRecord> completed) {
      for (const auto& record : completed) {
        batch.push_back(
            rasd::ras::EventFromRecord(record, "kmsg", std::chrono::system_clock::now()));
      }
      if (!batch.empty()) {
        (void)store->RecordEvents(batch);
        stored += batch.size();
        batch.clear();
      }
    };
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto decoded = rasd::ras::DecodeKmsgRecord(records[i]);
      scanner.AddLine(decoded->text, decoded->usec);
      if (i % 1024 == 0) flush(scanner.TakeCompleted());
    }
    flush(scanner.Finish());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records.size()));
  state.counters["events_stored"] = static_cast<double>(stored);
  store.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DecodeClassifyStore)->Unit(benchmark::kMillisecond);

// One daemon turn's writes: 1000 events and an action about each. Results
// are "ok", so that neither path below merges rows.
constexpr int kTurnRows = 1000;

rasd::ras::StoreBatch TurnBatch() {
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  rasd::ras::StoreBatch batch;
  for (int i = 0; i < kTurnRows; ++i) {
    batch.events.push_back({.time = t0 + std::chrono::milliseconds(i),
                            .source = "kmsg",
                            .origin = "nvidia_xid",
                            .severity = rasd::ras::Severity::kFatal,
                            .device = i % 8,
                            .vendor_code = 79,
                            .summary = "Xid 79: GPU has fallen off the bus",
                            .raw = "NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off the bus."});
    batch.actions.push_back({.record = {.time = t0 + std::chrono::milliseconds(i),
                                        .action = "isolate-device",
                                        .device = i % 8,
                                        .rule = "fatal-device",
                                        .reason = "FATAL nvidia_xid",
                                        .result = "ok",
                                        .detail = "healthy -> isolated"},
                             .event_index = static_cast<std::size_t>(i)});
  }
  batch.cursors.push_back({"kmsg", "boot-a", "1000"});
  return batch;
}

// The turn as one Commit: one transaction, statements prepared once.
void BM_StoreTurnCommit(benchmark::State& state) {
  char pattern[] = "/tmp/rasd-bench-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(pattern);
  auto store = std::move(*rasd::ras::StateStore::Open(dir / "state"));
  const auto batch = TurnBatch();
  for (auto _ : state) {
    auto stored = store->Commit(batch);
    if (!stored) {
      state.SkipWithError(stored.error().message.c_str());
      break;
    }
    benchmark::DoNotOptimize(stored->action_ids.data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * kTurnRows);
  store.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StoreTurnCommit)->Unit(benchmark::kMillisecond);

// The same turn the way the daemon wrote it before Commit: the events in one
// transaction, then RecordAction and SaveCursor row by row, each its own
// transaction.
void BM_StoreTurnPerRow(benchmark::State& state) {
  char pattern[] = "/tmp/rasd-bench-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(pattern);
  auto store = std::move(*rasd::ras::StateStore::Open(dir / "state"));
  const auto batch = TurnBatch();
  std::vector<rasd::ras::ActionRecord> actions;
  for (const auto& action : batch.actions) actions.push_back(action.record);
  for (auto _ : state) {
    auto ids = store->RecordEvents(batch.events);
    if (!ids) {
      state.SkipWithError(ids.error().message.c_str());
      break;
    }
    for (int i = 0; i < kTurnRows; ++i) {
      actions[static_cast<std::size_t>(i)].event_id = (*ids)[static_cast<std::size_t>(i)];
      auto id = store->RecordAction(actions[static_cast<std::size_t>(i)]);
      benchmark::DoNotOptimize(id);
    }
    (void)store->SaveCursor(batch.cursors.front());
  }
  state.SetItemsProcessed(state.iterations() * 2 * kTurnRows);
  store.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StoreTurnPerRow)->Unit(benchmark::kMillisecond);

// A corrected-error storm: 10M EDAC CE records through decode, storm
// coalescing and the store, as the daemon's kmsg path runs them. Reports the
// process's peak RSS (goal: at most 64 MiB).
void BM_CeStormPeakRss(benchmark::State& state) {
  char pattern[] = "/tmp/rasd-storm-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(pattern);
  auto store = std::move(*rasd::ras::StateStore::Open(dir / "state"));
  constexpr std::uint64_t kStorm = 10'000'000;
  std::uint64_t stored_rows = 0, errors = 0;
  for (auto _ : state) {
    rasd::ras::KernelLogScanner scanner;
    std::vector<rasd::ras::RasEvent> batch;
    std::string record;
    for (std::uint64_t i = 1; i <= kStorm; ++i) {
      record = fmt::format(
          "3,{},{},-;EDAC MC{}: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#{}_DIMM#0 "
          "(channel:{} slot:0 page:0x{:x} offset:0x0 grain:32 syndrome:0x0)",
          i, 1'000'000 + i, i % 2, i % 4, i % 4, 0x1000 + i % 64);
      const auto decoded = rasd::ras::DecodeKmsgRecord(record);
      scanner.AddLine(decoded->text, decoded->usec);
      if (i % 4096 == 0 || i == kStorm) {
        auto completed = i == kStorm ? scanner.Finish() : scanner.TakeCompleted();
        for (const auto& scanned : completed) {
          batch.push_back(
              rasd::ras::EventFromRecord(scanned, "kmsg", std::chrono::system_clock::now()));
        }
        batch = rasd::ras::CoalesceStorm(std::move(batch), 64);
        for (const auto& event : batch) errors += event.count;
        stored_rows += batch.size();
        (void)store->RecordEvents(batch);
        batch.clear();
      }
    }
  }
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
  state.counters["stored_rows"] = static_cast<double>(stored_rows);
  state.counters["errors_counted"] = static_cast<double>(errors);
  state.SetItemsProcessed(static_cast<std::int64_t>(kStorm));
  store.reset();
  std::filesystem::remove_all(dir);
}
// The peak RSS counts the whole process: run it alone
// (--benchmark_filter=CeStorm) so that the other benchmarks' test data
// does not inflate it.
BENCHMARK(BM_CeStormPeakRss)->Iterations(1)->Unit(benchmark::kSecond);

// The library's part of the daemon's storm path (daemon_storm_bench):
// KmsgSource follows a file of 200k sb_edac CE records (one DIMM, 256
// distinct addresses), taken in slices of 4096 records as the daemon's loop
// takes them, and each slice is storm-coalesced. Policy, actions and the
// store are left out: BM_StoreTurnCommit and daemon_storm_bench cover them.
void BM_KmsgCeStormSlices(benchmark::State& state) {
  constexpr std::uint64_t kStormLines = 200'000;
  constexpr std::size_t kSlice = 4096;
  char pattern[] = "/tmp/rasd-kmsg-storm-XXXXXX";
  const std::filesystem::path root = ::mkdtemp(pattern);
  std::filesystem::create_directories(root / "dev");
  {
    std::ofstream out(root / "dev/kmsg");
    for (std::uint64_t i = 0; i < kStormLines; ++i) {
      out << fmt::format(
          "4,{},{},-;EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 "
          "(channel:2 slot:0 page:0x{:x} offset:0x{:x} grain:32 syndrome:0x0 -  "
          "area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)\n",
          i + 1, 1'000'000 + i, 0x849900 + (i * 7919) % 256, (i % 64) * 0x40);
    }
  }
  const rasd::common::HostEnv host(root, std::make_shared<rasd::common::SystemClock>());
  std::uint64_t events = 0, rows = 0;
  for (auto _ : state) {
    rasd::ras::KmsgSource source(host, "boot-a", std::nullopt);
    if (!source.Open()) {
      state.SkipWithError("cannot open the kmsg file");
      break;
    }
    events = rows = 0;
    do {
      auto slice = source.Poll(kSlice);
      events += slice.size();
      rows += rasd::ras::CoalesceStorm(std::move(slice), 64).size();
    } while (!source.Exhausted());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kStormLines));
  state.counters["events"] = static_cast<double>(events);
  state.counters["coalesced_rows"] = static_cast<double>(rows);
  std::filesystem::remove_all(root);
}
BENCHMARK(BM_KmsgCeStormSlices)->Unit(benchmark::kMillisecond);

// One storm slice as the daemon's pipeline coalesces it: 4096 CE events of
// one DIMM over 256 addresses, in one minute.
void BM_CoalesceStormSlice(benchmark::State& state) {
  std::vector<rasd::ras::RasEvent> slice;
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::minutes(28'000'000));
  for (std::uint64_t i = 0; i < 4096; ++i) {
    const std::uint64_t page = 0x849900 + (i * 7919) % 256, offset = (i % 64) * 0x40;
    slice.push_back({.time = t0 + std::chrono::microseconds(i),
                     .source = "kmsg",
                     .origin = "edac",
                     .severity = rasd::ras::Severity::kCe,
                     .mc = 0,
                     .address = rasd::ras::Address::Of(page << 12 | offset),
                     .summary = fmt::format("EDAC MC0: 1 CE memory read error (page:0x{:x})", page),
                     .raw = fmt::format("EDAC MC0: 1 CE memory read error (page:0x{:x} "
                                        "offset:0x{:x} grain:32 syndrome:0x0)",
                                        page, offset)});
  }
  std::size_t rows = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto events = slice;
    state.ResumeTiming();
    rows = rasd::ras::CoalesceStorm(std::move(events), 64).size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * slice.size()));
  state.counters["rows"] = static_cast<double>(rows);
}
BENCHMARK(BM_CoalesceStormSlice)->Unit(benchmark::kMicrosecond);

// `rasctl --json scan` against `grep -cE` for the scanner's words over the
// same realistic 1M-line dmesg log: 80% ordinary kernel lines of mixed
// lengths, 17% one-line RAS records and 3% multi-line RAS blocks (the
// corpus' records). Both run as the processes a user runs, with their
// output read from a pipe by this process (GNU grep stops at the first
// match when its output is /dev/null).
std::string scan_log_created;  // removed at exit

const std::string& ScanLogFile() {
  static const std::string path = [] {
    std::vector<std::string> singles;
    std::vector<std::string> blocks;
    std::ifstream corpus(std::string(RASD_TEST_DATA_DIR) + "/kernel-ras-records.jsonl");
    for (std::string line; std::getline(corpus, line);) {
      auto json = nlohmann::json::parse(line, nullptr, false);
      if (json.is_discarded()) continue;
      const std::string text = json.value("text", "");
      (text.find('\n') == std::string::npos ? singles : blocks).push_back(text);
    }
    if (singles.empty()) singles.push_back("EDAC MC0: 1 CE memory read error on DIMM (page:0x1)");
    if (blocks.empty()) blocks.push_back(singles.front() + "\n" + singles.front());
    const char* chatter[] = {
        "usb 1-1: new high-speed USB device number 7 using xhci_hcd",
        "systemd[1]: Started Session 42 of user root.",
        "EXT4-fs (sda1): mounted filesystem with ordered data mode. Quota mode: none.",
        "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
        "audit: type=1400 audit(1690000000.123:456): apparmor=\"STATUS\" "
        "operation=\"profile_load\" profile=\"unconfined\" name=\"/usr/bin/man\" pid=1234 "
        "comm=\"apparmor_parser\"",
        "nvme nvme0: 32/0/0 default/read/poll queues",
        "e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex, Flow Control: Rx/Tx",
        "kauditd_printk_skb: 12 callbacks suppressed",
        "IPVS: Creating netns size=2048 id=12",
        "docker0: port 1(veth1234567) entered forwarding state",
        "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate "
        "to 79750",
        "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Sending cookies.  Check SNMP "
        "counters."};
    const std::string file =
        (std::filesystem::temp_directory_path() / fmt::format("rasd-scan-bench-{}.log", ::getpid()))
            .string();
    std::ofstream out(file);
    std::uint64_t seed = 1;
    auto next = [&seed] {  // xorshift: the same log on every machine
      seed ^= seed << 13;
      seed ^= seed >> 7;
      seed ^= seed << 17;
      return seed;
    };
    std::uint64_t usec = 0;
    for (std::size_t lines = 0; lines < 1'000'000;) {
      usec += next() % 10'000;
      const std::uint64_t pick = next() % 100;
      if (pick < 80) {
        out << fmt::format("[{:>5}.{:06}] {}\n", usec / 1'000'000, usec % 1'000'000,
                           chatter[next() % std::size(chatter)]);
        ++lines;
      } else if (pick < 97) {
        out << singles[next() % singles.size()] << '\n';
        ++lines;
      } else {
        const std::string& block = blocks[next() % blocks.size()];
        out << block << '\n';
        lines += 1 + static_cast<std::size_t>(std::count(block.begin(), block.end(), '\n'));
      }
    }
    scan_log_created = file;
    return file;
  }();
  return path;
}

// The scanner's family words (kernel_log_scanner.cc) as one extended regex.
constexpr const char* kScanWordsRegex =
    "Hardware Error|BERT|ERST|HEST|EINJ|pstore|EDAC|mc_event|mce|MCE|Machine Check|emory "
    "failure|memory_failure|HardwareCorrupted|hardware memory corruption|AER|PCIe "
    "Bus|NVRM|fallen off|amdgpu|EEPROM_VERSION|_SCHEMA|BAD_PAGE|ECC_BLOCK|ascend|heartbeat|drv "
    "api|npu-smi|507|rasdaemon|events:|Memory errors|/edac/|<<<edac>>>";

// Runs `command`, reading its standard output from a pipe until it ends;
// returns the seconds it took, or a negative number when it failed.
double TimePiped(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  static std::vector<char> sink(1 << 20);
  while (std::fread(sink.data(), 1, sink.size(), pipe) > 0) {
  }
  const int status = ::pclose(pipe);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status == 0 || WEXITSTATUS(status) == 1 ? seconds : -1;  // grep: 1 = no match
}

// Each iteration times grep and rasctl once, alternately; the counters
// are the median of each over the iterations and their ratio (the goal:
// ratio >= 0.5), and the median of the iterations' own ratios beside it.
void BM_ScanVsGrep(benchmark::State& state) {
  const std::string grep = fmt::format("grep -cE '{}' {}", kScanWordsRegex, ScanLogFile());
  const std::string rasctl =
      fmt::format("{} --json scan {} 2>/dev/null", RASD_RASCTL, ScanLogFile());
  std::vector<double> grep_seconds, rasctl_seconds, ratios;
  for (auto _ : state) {
    const double grep_took = TimePiped(grep);
    const double rasctl_took = TimePiped(rasctl);
    if (grep_took < 0 || rasctl_took < 0) {
      state.SkipWithError("grep or rasctl failed");
      break;
    }
    grep_seconds.push_back(grep_took);
    rasctl_seconds.push_back(rasctl_took);
    ratios.push_back(grep_took / rasctl_took);
  }
  if (grep_seconds.empty()) return;
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  const double grep_median = median(grep_seconds);
  const double rasctl_median = median(rasctl_seconds);
  state.counters["grep_ms"] = grep_median * 1e3;
  state.counters["rasctl_ms"] = rasctl_median * 1e3;
  state.counters["rasctl_lines_per_s"] = 1e6 / rasctl_median;
  state.counters["ratio"] = grep_median / rasctl_median;
  state.counters["ratio_median_of_runs"] = median(ratios);
}
BENCHMARK(BM_ScanVsGrep)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

// An online backup of a state database with 1M event rows (kmsg-like text):
// the whole copy, and one slice of the size the daemon copies per turn of
// its loop (ControlApi::kBackupPagesPerSlice, 256 pages).
class StoreWithMillionEvents {
 public:
  static StoreWithMillionEvents& Get() {
    static StoreWithMillionEvents instance;
    return instance;
  }
  rasd::ras::StateStore& Store() { return *store_; }
  const std::filesystem::path& Dir() const { return dir_; }

 private:
  StoreWithMillionEvents() {
    char pattern[] = "/tmp/rasd-backup-bench-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    store_ = std::move(*rasd::ras::StateStore::Open(dir_ / "state"));
    std::vector<rasd::ras::RasEvent> batch;
    for (int i = 0; i < 1'000'000; ++i) {
      batch.push_back(
          {.time = std::chrono::system_clock::now(),
           .source = "kmsg",
           .origin = "edac",
           .severity = rasd::ras::Severity::kCe,
           .summary = fmt::format("EDAC MC0: 1 CE memory read error on DIMM {}", i % 8),
           .raw = fmt::format("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#{}_DIMM#0 "
                              "(channel:{} slot:0 page:0x{:x} offset:0x0 grain:32 syndrome:0x0)",
                              i % 4, i % 4, 0x1000 + i)});
      if (batch.size() == 10'000) {
        (void)store_->RecordEvents(batch);
        batch.clear();
      }
    }
    (void)store_->Checkpoint();
  }
  ~StoreWithMillionEvents() {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<rasd::ras::StateStore> store_;
};

void BM_StoreBackupWhole(benchmark::State& state) {
  auto& fixture = StoreWithMillionEvents::Get();
  const auto copy = fixture.Dir() / "copy.db";
  for (auto _ : state) {
    auto summary = fixture.Store().Backup(copy, /*replace=*/true);
    if (!summary) {
      state.SkipWithError(summary.error().message.c_str());
      break;
    }
    state.counters["pages"] = summary->pages;
    state.counters["MiB"] = static_cast<double>(summary->bytes) / (1 << 20);
  }
  std::filesystem::remove(copy);
}
BENCHMARK(BM_StoreBackupWhole)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_StoreBackupSlice(benchmark::State& state) {
  auto& fixture = StoreWithMillionEvents::Get();
  const auto copy = fixture.Dir() / "slices.db";
  auto backup = fixture.Store().StartBackup(copy, /*replace=*/true);
  if (!backup) {
    state.SkipWithError(backup.error().message.c_str());
    return;
  }
  for (auto _ : state) {
    auto done = (*backup)->Step(static_cast<int>(state.range(0)));
    if (!done || *done) {
      state.PauseTiming();
      backup = fixture.Store().StartBackup(copy, /*replace=*/true);
      state.ResumeTiming();
    }
  }
  backup->reset();
}
BENCHMARK(BM_StoreBackupSlice)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!scan_log_created.empty()) std::filesystem::remove(scan_log_created);
  return 0;
}
