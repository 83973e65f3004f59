// soak: the real rasd on 4 simulated devices with both kinds of job under
// load (an inference service with its load generator, a collective job)
// for --minutes, with one fault every --fault-every-seconds from a
// rotation the system recovers from. Every --sample-seconds it samples
// rasd's resident memory, threads and open fds, the simulator's device
// memory and the jobs' accounting. It fails on any lost or wrong request,
// a collective checksum that differs from a fault-free run, rasd dying,
// a job or device that stops recovering, fds or threads that keep growing,
// or resident memory growing faster than --max-slope-mib-per-hour beyond
// the simulator's own device memory (made resident before the clock
// starts; see PrimeDeviceMemory) and SQLite's heap (its page cache fills
// as the database grows, for about an hour at this load, to its bound;
// that bound is checked on its own, kSqliteLimitMib). `make soak` runs it;
// it is not part of `make test` (it runs for half an hour by default).
//
// Exit codes: 0 every check held; 1 a check failed (each failure is named
// on stdout and in the JSON); 2 bad command line or rasd did not start.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace rasd::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kDevices = 4;
constexpr const char* kInferenceJob = "llm";
constexpr const char* kCollectiveJob = "allreduce";
constexpr int kLoadRps = 200;
constexpr std::int64_t kCollectiveElements = 65536;
constexpr std::int64_t kCollectiveSteps = 100'000'000;  // the config's maximum
constexpr std::int64_t kCheckpointEvery = 10;
// A device the policy isolated is recovered by rasd itself (policy.auto_recover):
// past this long it counts as not recovered and the soak undrains it.
constexpr std::chrono::seconds kRecoveryLimit{60};
// A job whose counters stand still this long has stopped recovering.
constexpr std::chrono::seconds kStallLimit{60};
// What fds and threads may grow between the first and the last third of
// the measured samples before that counts as steady growth.
constexpr int kFdAllowance = 4;
constexpr int kThreadAllowance = 4;
// SQLite's heap in rasd (`status`: ras.store_sqlite_bytes): one connection's
// page cache, bounded by cache_size (SQLite's default, 2000 KiB, about
// 2.2 MiB with the pages' headers), plus schema and prepared statements.
// Above this, something in SQLite grows that is not the cache.
constexpr double kSqliteLimitMib = 4;

// Set by SIGINT and SIGTERM: the run ends early, rasd is stopped and the
// summary printed (a signal's default action would leave rasd running).
volatile std::sig_atomic_t interrupted_by_signal = 0;

void OnSignal(int) { interrupted_by_signal = 1; }

struct Options {
  double minutes = 30;
  double fault_every_seconds = 5;
  double sample_seconds = 10;
  double max_slope_mib_per_hour = 1.0;
  std::optional<double> warmup_seconds;  // default: see WarmupSeconds()
  std::string json_path;
  // Silent data corruption on one device from corrupt_at_seconds on (-1:
  // none): it alone must be isolated for it, the collective's checksums
  // right after its roll-back, and every wrong answer answered again.
  int corrupt_device = -1;
  double corrupt_rate = 1e-6;
  double corrupt_at_seconds = 60;
};

constexpr const char* kUsage =
    "usage: soak [--minutes M] [--fault-every-seconds S] [--sample-seconds T]\n"
    "            [--max-slope-mib-per-hour X] [--warmup-seconds W] [--json FILE]\n"
    "  --minutes M                 how long rasd runs under load and faults (default 30)\n"
    "  --fault-every-seconds S     one fault from the rotation every S seconds (default 5)\n"
    "  --sample-seconds T          RSS, threads, fds and the jobs every T seconds (default 10)\n"
    "  --max-slope-mib-per-hour X  the largest RSS slope (the median of the samples'\n"
    "                              pairwise slopes, beyond the simulator's device memory\n"
    "                              and SQLite's bounded heap) that passes (default 1.0)\n"
    "  --warmup-seconds W          samples before W are not fitted (default: 20% of the\n"
    "                              run or 2 minutes, whichever is longer, at most half)\n"
    "  --json FILE                 write the samples, faults and verdict as JSON\n"
    "  --corrupt-device N          device N computes wrong without an error (rasctl inject\n"
    "                              sdc) from --corrupt-at-seconds (default 60) at\n"
    "                              --corrupt-rate (default 1e-6): it alone must be isolated\n"
    "                              within 300 s, the collective right after its roll-back,\n"
    "                              every wrong answer answered again; the rotation skips it\n";

std::optional<double> PositiveNumber(const std::string& text) {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used != text.size() || !(value > 0)) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The options, or nullopt with the reason in `why` ("" for --help).
std::optional<Options> ParseOptions(int argc, char** argv, std::string* why) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      *why = "";
      return std::nullopt;
    }
    if (i + 1 >= argc) {
      *why = flag + " needs a value";
      return std::nullopt;
    }
    const std::string value = argv[++i];
    if (flag == "--json") {
      options.json_path = value;
      continue;
    }
    if (flag == "--corrupt-device") {
      if (value.empty() || value.size() > 2 ||
          value.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(value) >= kDevices) {
        *why = "--corrupt-device must be a device, 0 to " + std::to_string(kDevices - 1) +
               ", not '" + value + "'";
        return std::nullopt;
      }
      options.corrupt_device = std::stoi(value);
      continue;
    }
    const auto number = PositiveNumber(value);
    if (!number) {
      *why = flag + " must be a positive number, not '" + value + "'";
      return std::nullopt;
    }
    if (flag == "--minutes") {
      options.minutes = *number;
    } else if (flag == "--fault-every-seconds") {
      options.fault_every_seconds = *number;
    } else if (flag == "--sample-seconds") {
      options.sample_seconds = *number;
    } else if (flag == "--max-slope-mib-per-hour") {
      options.max_slope_mib_per_hour = *number;
    } else if (flag == "--warmup-seconds") {
      options.warmup_seconds = *number;
    } else if (flag == "--corrupt-rate" && *number <= 1) {
      options.corrupt_rate = *number;
    } else if (flag == "--corrupt-at-seconds") {
      options.corrupt_at_seconds = *number;
    } else if (flag == "--corrupt-rate") {
      *why = "--corrupt-rate must be at most 1, not '" + value + "'";
      return std::nullopt;
    } else {
      *why = "unknown option " + flag;
      return std::nullopt;
    }
  }
  return options;
}

double WarmupSeconds(const Options& options) {
  const double run = options.minutes * 60;
  if (options.warmup_seconds) return std::min(*options.warmup_seconds, run / 2);
  return std::min(std::max(run * 0.2, 120.0), run / 2);
}

std::string Config() {
  // Retirement escalation is off: every CE storm and SRAR retires a page
  // for good, and over a long soak the default thresholds (8 degrade, 64
  // isolate per device a day) would take devices out of service for good,
  // which is policy working, not a recovery to measure. The isolating
  // faults are recovered by rasd itself (reset, self-test, back).
  std::ostringstream yaml;
  yaml << "simulator:\n  devices: " << kDevices << "\n  memory_mib: 128\n"
       << "inject:\n  allow_sources: true\n"
       << "ras:\n  edac_poll_ms: 1000\n"
       // The built-in recovery table suggests a reboot for Xid 79 (RESTART_BM),
       // and escalates a device recovered twice in a day to an inspection;
       // no automatic recovery does either. The soak's faults are the
       // simulator's, which a reset clears, and the rotation comes back to
       // every device many times: the site's rows say reset, every time.
       << "  recovery:\n"
       << "    - match: {origin: nvidia_xid, vendor_code: 79}\n"
       << "      action: reset-device\n"
       << "      escalate_after: 1000\n"
       << "    - match: {severity: UCE}\n"
       << "      action: reset-device\n"
       << "      escalate_after: 1000\n"
       << "policy:\n"
       << "  auto_recover: true\n"
       << "  auto_recover_delay_ms: 1000\n"
       << "  auto_recover_window_s: 1\n"
       << "  degrade_after_retirements: 1000000\n"
       << "  isolate_after_retirements: 1000000\n"
       << "jobs:\n"
       << "  - name: " << kInferenceJob << "\n    kind: inference\n    load_rps: " << kLoadRps
       << "\n"
       << "  - name: " << kCollectiveJob << "\n    kind: collective\n"
       << "    elements: " << kCollectiveElements << "\n"
       << "    steps: " << kCollectiveSteps << "\n"
       << "    checkpoint_every: " << kCheckpointEvery << "\n";
  return yaml.str();
}

// ---- what is sampled ----

struct Resources {
  std::int64_t rss_kib = -1;
  int threads = -1;
  int fds = -1;
};

int CountEntries(const fs::path& directory) {
  std::error_code ec;
  int count = 0;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) ++count;
  return ec ? -1 : count;
}

// rasd's resources from procfs; -1 where a file could not be read (rasd gone).
Resources ReadResources(pid_t pid) {
  const fs::path proc = fs::path("/proc") / std::to_string(pid);
  Resources resources;
  std::ifstream status(proc / "status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      fields >> resources.rss_kib;
    }
  }
  resources.threads = CountEntries(proc / "task");
  resources.fds = CountEntries(proc / "fd");
  return resources;
}

struct Sample {
  double t_s = 0;
  Resources resources;
  std::int64_t device_reserved_bytes = 0;  // the simulator's device memory in use
  std::int64_t sqlite_bytes = 0;           // SQLite's heap in rasd
  std::map<std::string, std::string> device_states;
  // Inference.
  std::int64_t served = 0, lost = 0, wrong = 0, overloaded = 0, sent = 0;
  // Answers the service found wrong later and answered again; of the wrong
  // ones, those; corrections not the reference either.
  std::int64_t corrected = 0, wrong_corrected = 0, corrections_wrong = 0;
  std::int64_t requeued = 0, rerun = 0;
  double p99_ms = 0;
  std::string inference_state;
  // Collective.
  std::int64_t step = 0, reforms = 0;
  bool checksums_match = true;
  std::string collective_state;

  double RssMib() const { return static_cast<double>(resources.rss_kib) / 1024.0; }
  double DeviceMib() const { return static_cast<double>(device_reserved_bytes) / (1 << 20); }
  double SqliteMib() const { return static_cast<double>(sqlite_bytes) / (1 << 20); }
  // Resident memory not explained by the simulator's device memory (an
  // upper bound of what of it is resident: new[] pages are resident once
  // touched) nor by SQLite's heap (a bounded cache, checked on its own).
  double HostMib() const { return RssMib() - DeviceMib() - SqliteMib(); }
};

nlohmann::json SampleJson(const Sample& sample) {
  return {{"t_s", sample.t_s},
          {"rss_kib", sample.resources.rss_kib},
          {"threads", sample.resources.threads},
          {"fds", sample.resources.fds},
          {"device_reserved_bytes", sample.device_reserved_bytes},
          {"sqlite_bytes", sample.sqlite_bytes},
          {"device_states", sample.device_states},
          {"inference",
           {{"state", sample.inference_state},
            {"sent", sample.sent},
            {"served", sample.served},
            {"requeued", sample.requeued},
            {"rerun", sample.rerun},
            {"lost", sample.lost},
            {"wrong", sample.wrong},
            {"corrected", sample.corrected},
            {"wrong_corrected", sample.wrong_corrected},
            {"corrections_wrong", sample.corrections_wrong},
            {"overloaded", sample.overloaded},
            {"p99_ms", sample.p99_ms}}},
          {"collective",
           {{"state", sample.collective_state},
            {"step", sample.step},
            {"reforms", sample.reforms},
            {"checksums_match", sample.checksums_match}}}};
}

// ---- the fault rotation ----

// Each entry is a fault the system recovers from without an operator:
// memory faults inside the inference job's allocations (the page is
// retired; an SRAR kills and restarts exactly that job), host records
// through the kernel-log decoder and the simulated EDAC counters, and
// device faults that isolate a device until rasd's automatic recovery
// (reset, self-test) returns it (Xid 79 through a site recovery row, see
// Config()). A device that falls off the bus
// (`inject fatal`) is left out: the simulator, like the hardware, cannot
// reset it, so it would leave the run for good.
enum class FaultKind { kCeStorm, kSrar, kSticky, kHostCe, kLink, kSrao, kXid79, kEdac, kUcna };

constexpr FaultKind kRotation[] = {FaultKind::kCeStorm, FaultKind::kSrar, FaultKind::kSticky,
                                   FaultKind::kHostCe,  FaultKind::kLink, FaultKind::kSrao,
                                   FaultKind::kXid79,   FaultKind::kEdac, FaultKind::kUcna};

const char* FaultName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kCeStorm:
      return "ce-storm";
    case FaultKind::kSrar:
      return "srar";
    case FaultKind::kSticky:
      return "uce-sticky";
    case FaultKind::kHostCe:
      return "kmsg-host-ce";
    case FaultKind::kLink:
      return "link";
    case FaultKind::kSrao:
      return "srao";
    case FaultKind::kXid79:
      return "xid-79";
    case FaultKind::kEdac:
      return "edac-ce";
    case FaultKind::kUcna:
      return "ucna";
  }
  return "?";
}

bool IsolatesADevice(FaultKind kind) {
  return kind == FaultKind::kSticky || kind == FaultKind::kLink || kind == FaultKind::kXid79;
}

struct FaultRecord {
  double t_s = 0;
  std::string kind;
  int device = -1;
  bool injected = false;
  std::string error;
};

// ---- fits and checks ----

// Least-squares slope of y over x; nullopt with fewer than 3 points.
std::optional<double> Slope(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 3) return std::nullopt;
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mean_x += x[i];
    mean_y += y[i];
  }
  mean_x /= static_cast<double>(n);
  mean_y /= static_cast<double>(n);
  double covariance = 0, variance = 0;
  for (std::size_t i = 0; i < n; ++i) {
    covariance += (x[i] - mean_x) * (y[i] - mean_y);
    variance += (x[i] - mean_x) * (x[i] - mean_x);
  }
  if (variance == 0) return std::nullopt;
  return covariance / variance;
}

// The median of the slopes between every two samples (Theil-Sen): the
// growth the samples share. A sample taken while a self-test's buffers are
// resident (several MiB for a second or two) sways a least-squares fit,
// the more the nearer it falls to the run's ends; here it takes part in
// n - 1 of n(n - 1)/2 slopes, and the median holds until about 29% of the
// samples are such. Beyond kMaxFitted samples (a soak of days) an evenly
// spaced subset is fitted, so that the pairs stay a few million. nullopt
// with fewer than 3 points.
std::optional<double> MedianSlope(const std::vector<double>& x, const std::vector<double>& y) {
  constexpr std::size_t kMaxFitted = 2000;
  const std::size_t stride = (x.size() + kMaxFitted - 1) / kMaxFitted;
  std::vector<std::size_t> fitted;
  for (std::size_t i = 0; i < x.size(); i += std::max<std::size_t>(stride, 1)) fitted.push_back(i);
  const std::size_t n = fitted.size();
  if (n < 3) return std::nullopt;
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = a + 1; b < n; ++b) {
      const std::size_t i = fitted[a], j = fitted[b];
      if (x[j] != x[i]) slopes.push_back((y[j] - y[i]) / (x[j] - x[i]));
    }
  if (slopes.empty()) return std::nullopt;
  const auto middle = slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2);
  std::nth_element(slopes.begin(), middle, slopes.end());
  return *middle;
}

struct ThirdsCheck {
  int first_max = 0;
  int last_max = 0;
  bool grew = false;
};

// The first third's and the last third's maximum; growth beyond
// `allowance` is steady growth (a spike during a recovery shows in one
// third only when it does not repeat; a leak shows in every later one).
ThirdsCheck CompareThirds(const std::vector<int>& values, int allowance) {
  ThirdsCheck check;
  if (values.size() < 3) return check;
  const std::size_t third = values.size() / 3;
  check.first_max = *std::max_element(values.begin(), values.begin() + third);
  check.last_max = *std::max_element(values.end() - third, values.end());
  check.grew = check.last_max > check.first_max + allowance;
  return check;
}

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// ---- the run ----

class Soak {
 public:
  explicit Soak(Options options) : options_(std::move(options)) {}

  // Runs the whole soak; the exit code.
  int Run();

 private:
  // `rasctl --json ARGS`: the reply, or nullopt with rasctl's error in `why`.
  std::optional<nlohmann::json> Query(std::vector<std::string> args, std::string* why = nullptr);
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // Records a failure; `key` names its kind, reported once.
  void Fail(const std::string& key, const std::string& failure);

  bool WaitForJobs();
  bool PrimeDeviceMemory();
  std::optional<Sample> TakeSample();
  void CheckSample(const Sample& sample);
  void InjectNext();
  FaultRecord Inject(FaultKind kind);
  bool AllDevicesHealthy();
  void WatchRecoveries();
  void StartCorruption();
  // The corrupting device once rasd isolated it for silent corruption:
  // nothing the rotation or the recovery watch does touches it again.
  bool CorruptionIsolated() const { return sdc_isolated_at_s_ >= 0; }
  bool IsCorrupting(int device) const { return corrupting_ && device == options_.corrupt_device; }
  void Evaluate();
  void PrintSummary() const;
  void WriteJson() const;

  Options options_;
  RasdInstance rasd_;
  Clock::time_point start_;
  std::vector<Sample> samples_;
  std::vector<FaultRecord> faults_;
  std::vector<std::string> failures_;
  std::set<std::string> failed_keys_;
  std::size_t rotation_ = 0;
  int next_device_ = 0;
  int host_page_ = 0;
  int collective_restarts_ = 0;
  int skipped_ticks_ = 0;  // samples and faults missed while this process stalled
  bool collective_checksums_ever_wrong_ = false;
  std::map<std::string, Clock::time_point> out_of_service_since_;
  std::map<int, int> undrained_by_soak_;
  // Silent-corruption screening per device: screenings and inference
  // cross-checks seen last, and the devices accused (a failure each, once).
  std::map<int, std::uint64_t> screenings_, cross_checks_;
  std::set<int> accused_;
  // --corrupt-device: when the corruption began and when rasd isolated the
  // device for it (-1: not yet), with the reason it gave.
  bool corrupting_ = false;
  double sdc_injected_at_s_ = -1, sdc_isolated_at_s_ = -1;
  std::string sdc_reason_;
  // Where each job last moved, for the stall check.
  std::int64_t last_served_ = -1, last_step_ = -1;
  Clock::time_point served_moved_at_, step_moved_at_;
  // Results of Evaluate().
  nlohmann::json results_;
};

std::optional<nlohmann::json> Soak::Query(std::vector<std::string> args, std::string* why) {
  args.insert(args.begin(), "--json");
  const auto result = rasd_.Rasctl(std::move(args));
  if (result.exit_code != 0) {
    if (why != nullptr) *why = result.err.empty() ? result.out : result.err;
    return std::nullopt;
  }
  auto reply = nlohmann::json::parse(result.out, nullptr, false);
  if (reply.is_discarded()) {
    if (why != nullptr) *why = "rasctl printed no JSON: " + result.out;
    return std::nullopt;
  }
  return reply;
}

void Soak::Fail(const std::string& key, const std::string& failure) {
  // Each kind of failure once, with the time it was first seen.
  if (!failed_keys_.insert(key).second) return;
  const std::string line = Format("t=%.0fs: ", Elapsed()) + failure;
  std::printf("FAIL %s\n", line.c_str());
  failures_.push_back(line);
}

bool Soak::WaitForJobs() {
  return WaitUntil(
      [&] {
        std::this_thread::sleep_for(200ms);
        const auto jobs = Query({"jobs"});
        if (!jobs) return false;
        std::int64_t served = 0, step = 0;
        for (const auto& job : (*jobs)["jobs"]) {
          if (job["name"] == kInferenceJob) served = job["requests"].value("served", 0);
          if (job["name"] == kCollectiveJob) step = job.value("step", 0);
        }
        return served > 200 && step > 20;
      },
      30s);
}

bool Soak::PrimeDeviceMemory() {
  // The simulator's device memory is host memory, resident once touched:
  // the first self-test on a device (rasd's automatic recovery runs one)
  // reserves and writes all of its free memory, and RSS jumps by up to
  // simulator.memory_mib. So each device is isolated and undrained once
  // before the clock starts: all device memory is reserved and resident,
  // and what RSS does afterwards is rasd's own.
  for (int device = 0; device < kDevices; ++device) {
    const std::string d = std::to_string(device);
    std::string why;
    if (!Query({"isolate", d, "--reason", "soak: touch the device memory"}, &why) ||
        !Query({"undrain", d}, &why)) {
      std::printf("priming device %d: %s\n", device, why.c_str());
      return false;
    }
  }
  return WaitForJobs();
}

std::optional<Sample> Soak::TakeSample() {
  Sample sample;
  sample.t_s = Elapsed();
  sample.resources = ReadResources(rasd_.Proc().Pid());
  const auto status = Query({"status"});
  const auto jobs = Query({"jobs"});
  if (!status || !jobs) return std::nullopt;
  sample.sqlite_bytes = (*status)["ras"].value("store_sqlite_bytes", std::int64_t{0});
  for (const auto& device : (*status)["devices"]["list"]) {
    sample.device_reserved_bytes += device["pool"].value("reserved_bytes", std::int64_t{0});
    sample.device_states[std::to_string(device.value("index", -1))] =
        device.value("health", std::string("?"));
  }
  for (const auto& job : (*jobs)["jobs"]) {
    if (job["name"] == kInferenceJob) {
      const auto& requests = job["requests"];
      sample.served = requests.value("served", 0);
      sample.requeued = requests.value("requeued", 0);
      sample.rerun = requests.value("rerun", 0);
      sample.lost = requests.value("lost", 0);
      sample.overloaded = requests.value("overloaded", 0);
      sample.sent = job["load"].value("sent", 0);
      sample.wrong = job["load"].value("wrong", 0);
      sample.corrected = job["load"].value("corrected", 0);
      sample.wrong_corrected = job["load"].value("wrong_corrected", 0);
      sample.corrections_wrong = job["load"].value("corrections_wrong", 0);
      sample.p99_ms = job["load"].value("p99_ms", 0.0);
      sample.inference_state = job.value("state", std::string());
    } else if (job["name"] == kCollectiveJob) {
      sample.step = job.value("step", 0);
      sample.reforms = job.value("reforms", 0);
      sample.checksums_match = job.value("checksums_match", false);
      sample.collective_state = job.value("state", std::string());
    }
  }
  return sample;
}

void Soak::CheckSample(const Sample& sample) {
  if (sample.inference_state.empty())
    Fail("inference-gone", "the inference job is gone from `rasctl jobs`");
  if (sample.collective_state.empty())
    Fail("collective-gone", "the collective job is gone from `rasctl jobs`");
  if (sample.lost > 0)
    Fail("lost", "inference requests lost: " + std::to_string(sample.lost) +
                     " (rasctl jobs: requests.lost)");
  // With a corrupting device, answers are wrong until it is found and
  // the collective is wrong until its roll-back: judged once it is out.
  const bool settling =
      corrupting_ && (!CorruptionIsolated() || Elapsed() < sdc_isolated_at_s_ + 30);
  if (sample.wrong > 0 && !corrupting_)
    Fail("wrong",
         "inference answers wrong: " + std::to_string(sample.wrong) + " (rasctl jobs: load.wrong)");
  if (corrupting_ && !settling && sample.wrong != sample.wrong_corrected)
    Fail("wrong-uncorrected",
         "inference answers wrong: " + std::to_string(sample.wrong) +
             ", of which answered again: " + std::to_string(sample.wrong_corrected));
  if (sample.corrections_wrong > 0)
    Fail("corrections-wrong",
         std::to_string(sample.corrections_wrong) + " answer(s) were answered again wrong");
  if (!sample.checksums_match && !settling) {
    collective_checksums_ever_wrong_ = true;
    Fail("checksums",
         "collective checksum mismatch against the fault-free run (checksums_match false)");
  }
  const auto now = Clock::now();
  if (sample.served != last_served_) {
    last_served_ = sample.served;
    served_moved_at_ = now;
  } else if (now - served_moved_at_ > kStallLimit) {
    Fail("inference-stall",
         "the inference job served nothing for over 60 s (state " + sample.inference_state + ")");
  }
  if (sample.step != last_step_) {
    last_step_ = sample.step;
    step_moved_at_ = now;
  } else if (now - step_moved_at_ > kStallLimit && sample.collective_state != "finished") {
    Fail("collective-stall",
         "the collective made no step for over 60 s (state " + sample.collective_state + ")");
  }
  if (sample.collective_state == "failed") {
    Fail("collective-failed", "the collective job gave up (state failed); restarted it to go on");
  }
  if (sample.collective_state == "finished" || sample.collective_state == "failed") {
    // Start it again so that both jobs run the whole time; its checksums
    // were checked above, before the new job's count starts over.
    std::string why;
    if (!Query({"job", "stop", kCollectiveJob}, &why))
      Fail("collective-restart", "job stop " + std::string(kCollectiveJob) + ": " + why);
    if (!Query({"job", "start", "collective", kCollectiveJob, "--steps",
                std::to_string(kCollectiveSteps), "--elements", std::to_string(kCollectiveElements),
                "--checkpoint-every", std::to_string(kCheckpointEvery)},
               &why)) {
      Fail("collective-restart", "job start collective: " + why);
    }
    ++collective_restarts_;
    last_step_ = -1;
  }
}

bool Soak::AllDevicesHealthy() {
  const auto devices = Query({"devices"});
  if (!devices) return false;
  for (const auto& device : (*devices)["devices"]) {
    if (IsCorrupting(device.value("index", -1))) continue;  // out for good, once found
    if (device.value("state", std::string()) != "healthy") return false;
  }
  return true;
}

FaultRecord Soak::Inject(FaultKind kind) {
  FaultRecord record;
  record.t_s = Elapsed();
  record.kind = FaultName(kind);
  if (IsCorrupting(next_device_)) next_device_ = (next_device_ + 1) % kDevices;
  const int device = next_device_;
  next_device_ = (next_device_ + 1) % kDevices;
  const std::string d = std::to_string(device);
  std::vector<std::string> args;
  switch (kind) {
    case FaultKind::kCeStorm:
      args = {"inject", "ce", "--device", d, "--job", kInferenceJob, "--count", "60"};
      break;
    case FaultKind::kSrar:
      args = {"inject", "srar", "--device", d, "--job", kInferenceJob};
      break;
    case FaultKind::kSrao:
      args = {"inject", "srao", "--device", d, "--job", kInferenceJob};
      break;
    case FaultKind::kUcna:
      args = {"inject", "ucna", "--device", d, "--job", kInferenceJob};
      break;
    case FaultKind::kSticky:
      args = {"inject", "uce", "--device", d};
      break;
    case FaultKind::kLink:
      args = {"inject", "link", "--device", d, "--peer", std::to_string((device + 1) % kDevices)};
      break;
    case FaultKind::kXid79:
      args = {"inject", "xid", "79", "--device", d};
      break;
    case FaultKind::kHostCe: {
      // A different host page each time: the same page 50 times would be
      // soft-offlined (disabled by default; still a different path).
      char page[32];
      std::snprintf(page, sizeof page, "0x%x", 0x10000 + host_page_++);
      args = {"inject", "kmsg",
              std::string("EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0 slot:0 page:") +
                  page + " offset:0x0 grain:32 syndrome:0x0)"};
      break;
    }
    case FaultKind::kEdac:
      args = {"inject", "edac", "--mc", "0", "--dimm", std::to_string(device), "--ce", "3"};
      break;
  }
  if (kind != FaultKind::kHostCe && kind != FaultKind::kEdac) record.device = device;
  std::string why;
  record.injected = Query(args, &why).has_value();
  if (!record.injected) {
    record.error = why;
    while (!record.error.empty() && record.error.back() == '\n') record.error.pop_back();
  }
  return record;
}

void Soak::InjectNext() {
  FaultKind kind = kRotation[rotation_ % std::size(kRotation)];
  ++rotation_;
  // One device out of service at a time: both jobs keep running on the
  // others, and each isolation is a recovery of its own to watch.
  if (IsolatesADevice(kind) && !AllDevicesHealthy()) kind = FaultKind::kCeStorm;
  faults_.push_back(Inject(kind));
  const auto& fault = faults_.back();
  if (!fault.injected) {
    std::printf("  t=%5.0fs fault %-12s device %d refused: %s\n", fault.t_s, fault.kind.c_str(),
                fault.device, fault.error.c_str());
  }
}

void Soak::StartCorruption() {
  const std::string d = std::to_string(options_.corrupt_device);
  char rate[32];
  std::snprintf(rate, sizeof rate, "%g", options_.corrupt_rate);
  std::string why;
  if (!Query({"inject", "sdc", "--device", d, "--rate", rate, "--seed", "7"}, &why)) {
    Fail("sdc-inject", "inject sdc --device " + d + ": " + why);
    return;
  }
  corrupting_ = true;
  sdc_injected_at_s_ = Elapsed();
  std::printf("  t=%5.0fs device %s computes wrong from now on (rate %s per element)\n",
              sdc_injected_at_s_, d.c_str(), rate);
}

void Soak::WatchRecoveries() {
  const auto devices = Query({"devices"});
  if (!devices) return;
  const auto now = Clock::now();
  for (const auto& device : (*devices)["devices"]) {
    const int index = device.value("index", -1);
    const std::string key = std::to_string(index);
    const std::string state = device.value("state", std::string());
    if (IsCorrupting(index)) {
      // Found and isolated for it, and kept out: not a recovery to wait for.
      if (!CorruptionIsolated() && state == "isolated" &&
          device.value("reason", std::string()).starts_with("silent data corruption")) {
        sdc_isolated_at_s_ = Elapsed();
        sdc_reason_ = device.value("reason", std::string());
        std::printf(
            "  t=%5.0fs device %d isolated for silent corruption, %.0f s after it began: %s\n",
            sdc_isolated_at_s_, index, sdc_isolated_at_s_ - sdc_injected_at_s_,
            sdc_reason_.c_str());
      }
      if (!CorruptionIsolated() && Elapsed() - sdc_injected_at_s_ > 300)
        Fail("sdc-missed", "device " + key + " computed wrong for 300 s and is still " + state);
      if (CorruptionIsolated()) {
        if (state != "isolated")
          Fail("sdc-returned", "device " + key + " came back (" + state + ") while still wrong");
        continue;
      }
    }
    // Silent corruption is injected on one device at most: screening and
    // cross-checks must accuse nobody else, whatever the other faults do.
    if (!IsCorrupting(index) && device.contains("screening") && device["screening"].is_object()) {
      const auto& screening = device["screening"];
      std::uint64_t wrong = screening.value("mismatches", std::uint64_t{0});
      if (screening.contains("cross_check_mismatches"))
        for (const auto& [kind, count] : screening["cross_check_mismatches"].items())
          wrong += count.get<std::uint64_t>();
      if (wrong > 0 && !accused_.contains(index)) {
        accused_.insert(index);
        Fail("sdc-" + key,
             "device " + key +
                 " was accused of silent data corruption with none "
                 "injected (" +
                 std::to_string(wrong) +
                 " wrong result(s); last "
                 "screening: " +
                 (screening["last"].is_object() ? screening["last"].value("summary", std::string())
                                                : std::string("none")) +
                 ")");
      }
      screenings_[index] = screening.value("screenings", std::uint64_t{0});
      if (screening.contains("cross_checks"))
        for (const auto& [kind, count] : screening["cross_checks"].items())
          cross_checks_[index] = count.get<std::uint64_t>();
    }
    if (state == "healthy" || state == "degraded") {
      out_of_service_since_.erase(key);
      continue;
    }
    auto since = out_of_service_since_.try_emplace(key, now).first->second;
    if (now - since < kRecoveryLimit) continue;
    Fail("recovery-" + key, "device " + key + " stayed " + state +
                                " for over 60 s: rasd did not recover it (" +
                                device.value("reason", std::string()) + ")");
    // Bring it back so that the run goes on: a self-test first, then force.
    std::string why;
    if (!Query({"undrain", key}, &why) && !Query({"undrain", key, "--force"}, &why)) {
      Fail("undrain-" + key, "undrain --force " + key + ": " + why);
    }
    ++undrained_by_soak_[index];
    out_of_service_since_.erase(key);
  }
}

void Soak::Evaluate() {
  const double warmup = WarmupSeconds(options_);
  if (corrupting_) {
    if (!CorruptionIsolated()) {
      Fail("sdc-missed", "device " + std::to_string(options_.corrupt_device) +
                             " computed wrong to the end and was never isolated for it");
    } else if (!samples_.empty()) {
      const Sample& last = samples_.back();
      if (!last.checksums_match)
        Fail("sdc-checksums", "the collective's checksums are wrong at the end");
      if (last.wrong != last.wrong_corrected)
        Fail("sdc-answers", "of " + std::to_string(last.wrong) + " wrong answers, " +
                                std::to_string(last.wrong_corrected) + " were answered again");
    }
  }
  std::vector<double> hours, rss, host, device, sqlite;
  std::vector<int> threads, fds;
  for (const auto& sample : samples_) {
    if (sample.t_s < warmup) continue;
    hours.push_back(sample.t_s / 3600.0);
    rss.push_back(sample.RssMib());
    host.push_back(sample.HostMib());
    device.push_back(sample.DeviceMib());
    sqlite.push_back(sample.SqliteMib());
    threads.push_back(sample.resources.threads);
    fds.push_back(sample.resources.fds);
  }
  const auto rss_slope = Slope(hours, rss);
  const auto host_slope = MedianSlope(hours, host);
  const auto host_least_squares = Slope(hours, host);
  const auto device_slope = Slope(hours, device);
  const auto sqlite_slope = Slope(hours, sqlite);
  double sqlite_max = 0;
  for (const auto& sample : samples_) sqlite_max = std::max(sqlite_max, sample.SqliteMib());
  if (!host_slope) {
    Fail("slope", "too few samples after the warm-up to fit a slope (" +
                      std::to_string(hours.size()) + " of at least 3): run longer");
  } else if (*host_slope > options_.max_slope_mib_per_hour) {
    Fail("slope", Format("RSS grows %.2f MiB/h", *host_slope) +
                      " beyond the simulator's device memory and SQLite's heap" +
                      Format(" (least squares: %.2f MiB/h)", host_least_squares.value_or(0)) +
                      Format(" (limit %.2f MiB/h; ", options_.max_slope_mib_per_hour) +
                      Format("RSS alone %.2f MiB/h, ", rss_slope.value_or(0)) +
                      Format("device memory %.2f MiB/h, ", device_slope.value_or(0)) +
                      Format("SQLite %.2f MiB/h)", sqlite_slope.value_or(0)));
  }
  if (sqlite_max > kSqliteLimitMib) {
    Fail("sqlite", Format("SQLite's heap reached %.2f MiB", sqlite_max) +
                       Format(" (limit %.1f MiB:", kSqliteLimitMib) +
                       " one connection's page cache and statements)");
  }
  const auto thread_check = CompareThirds(threads, kThreadAllowance);
  const auto fd_check = CompareThirds(fds, kFdAllowance);
  if (thread_check.grew) {
    Fail("threads", "threads grow: first third's max " + std::to_string(thread_check.first_max) +
                        ", last third's max " + std::to_string(thread_check.last_max));
  }
  if (fd_check.grew) {
    Fail("fds", "open fds grow: first third's max " + std::to_string(fd_check.first_max) +
                    ", last third's max " + std::to_string(fd_check.last_max));
  }
  auto optional_number = [](const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json();
  };
  results_ = {
      {"warmup_s", warmup},
      {"fitted_samples", hours.size()},
      {"rss_slope_mib_per_hour", optional_number(rss_slope)},
      {"device_memory_slope_mib_per_hour", optional_number(device_slope)},
      {"sqlite_slope_mib_per_hour", optional_number(sqlite_slope)},
      {"sqlite_max_mib", sqlite_max},
      {"sqlite_limit_mib", kSqliteLimitMib},
      {"rss_beyond_device_memory_and_sqlite_slope_mib_per_hour", optional_number(host_slope)},
      {"rss_beyond_device_memory_and_sqlite_least_squares_mib_per_hour",
       optional_number(host_least_squares)},
      {"max_slope_mib_per_hour", options_.max_slope_mib_per_hour},
      {"threads",
       {{"first_third_max", thread_check.first_max},
        {"last_third_max", thread_check.last_max},
        {"allowance", kThreadAllowance}}},
      {"fds",
       {{"first_third_max", fd_check.first_max},
        {"last_third_max", fd_check.last_max},
        {"allowance", kFdAllowance}}},
      {"collective_restarts", collective_restarts_},
      {"skipped_ticks", skipped_ticks_},
      {"collective_checksums_ever_wrong", collective_checksums_ever_wrong_},
      {"corruption",
       {{"device", options_.corrupt_device},
        {"rate", options_.corrupt_rate},
        {"injected_at_s", sdc_injected_at_s_},
        {"isolated_at_s", sdc_isolated_at_s_},
        {"reason", sdc_reason_}}}};
}

void Soak::PrintSummary() const {
  std::printf("\n== soak summary: %.1f min, %zu samples, %zu faults\n", Elapsed() / 60.0,
              samples_.size(), faults_.size());
  if (!samples_.empty()) {
    const Sample& first = samples_.front();
    const Sample& last = samples_.back();
    auto range = [&](auto value) {
      double low = value(first), high = low;
      for (const auto& sample : samples_) {
        low = std::min(low, value(sample));
        high = std::max(high, value(sample));
      }
      return std::pair{low, high};
    };
    std::printf("%-28s %10s %10s %10s %10s\n", "", "first", "last", "min", "max");
    auto row = [&](const char* name, auto value, const char* format) {
      const auto [low, high] = range(value);
      std::printf("%-28s %10s %10s %10s %10s\n", name, Format(format, value(first)).c_str(),
                  Format(format, value(last)).c_str(), Format(format, low).c_str(),
                  Format(format, high).c_str());
    };
    row(
        "RSS (MiB)", [](const Sample& s) { return s.RssMib(); }, "%.1f");
    row(
        "device memory (MiB)", [](const Sample& s) { return s.DeviceMib(); }, "%.1f");
    row(
        "SQLite heap (MiB)", [](const Sample& s) { return s.SqliteMib(); }, "%.2f");
    row(
        "RSS - device - SQLite (MiB)", [](const Sample& s) { return s.HostMib(); }, "%.1f");
    row(
        "threads", [](const Sample& s) { return static_cast<double>(s.resources.threads); },
        "%.0f");
    row(
        "open fds", [](const Sample& s) { return static_cast<double>(s.resources.fds); }, "%.0f");
    std::printf(
        "requests: %lld sent, %lld served, %lld requeued, %lld re-run, %lld lost, "
        "%lld wrong, %lld overloaded; p99 %.1f ms at the end\n",
        static_cast<long long>(last.sent), static_cast<long long>(last.served),
        static_cast<long long>(last.requeued), static_cast<long long>(last.rerun),
        static_cast<long long>(last.lost), static_cast<long long>(last.wrong),
        static_cast<long long>(last.overloaded), last.p99_ms);
    std::printf("collective: step %lld, %lld re-forms, %d restarts, checksums %s\n",
                static_cast<long long>(last.step), static_cast<long long>(last.reforms),
                collective_restarts_, collective_checksums_ever_wrong_ ? "WRONG" : "all match");
  }
  std::map<std::string, std::pair<int, int>> by_kind;
  for (const auto& fault : faults_) {
    auto& [done, refused] = by_kind[fault.kind];
    ++(fault.injected ? done : refused);
  }
  std::printf("faults (injected/refused):");
  for (const auto& [kind, counts] : by_kind)
    std::printf(" %s %d/%d", kind.c_str(), counts.first, counts.second);
  std::printf("\n");
  std::printf("silent-corruption screenings (cross-checks) per device:");
  for (const auto& [device, count] : screenings_)
    std::printf(" %d: %llu (%llu)", device, static_cast<unsigned long long>(count),
                static_cast<unsigned long long>(
                    cross_checks_.count(device) ? cross_checks_.at(device) : 0));
  std::printf("; devices accused: %zu\n", accused_.size());
  if (corrupting_) {
    std::printf("silent corruption on device %d (rate %g) from t=%.0fs: ", options_.corrupt_device,
                options_.corrupt_rate, sdc_injected_at_s_);
    if (CorruptionIsolated())
      std::printf("isolated %.0f s later\n", sdc_isolated_at_s_ - sdc_injected_at_s_);
    else
      std::printf("never isolated\n");
    if (!samples_.empty()) {
      const Sample& last = samples_.back();
      std::printf(
          "answers: %lld wrong, %lld answered again (of the wrong ones %lld), %lld corrections "
          "wrong\n",
          static_cast<long long>(last.wrong), static_cast<long long>(last.corrected),
          static_cast<long long>(last.wrong_corrected),
          static_cast<long long>(last.corrections_wrong));
    }
  }
  if (!undrained_by_soak_.empty()) {
    std::printf("devices the soak had to undrain:");
    for (const auto& [device, count] : undrained_by_soak_) std::printf(" %d (x%d)", device, count);
    std::printf("\n");
  }
  if (results_.is_object()) {
    auto slope = [&](const char* key) {
      return results_[key].is_number() ? Format("%+.2f", results_[key].get<double>())
                                       : std::string("n/a");
    };
    std::printf(
        "slopes after %.0f s of warm-up (%zu samples, MiB/h, least squares): RSS %s, device "
        "memory %s, SQLite %s; RSS beyond device memory and SQLite %s (median of pairwise "
        "slopes; least squares %s; limit %.2f)\n",
        results_["warmup_s"].get<double>(), results_["fitted_samples"].get<std::size_t>(),
        slope("rss_slope_mib_per_hour").c_str(), slope("device_memory_slope_mib_per_hour").c_str(),
        slope("sqlite_slope_mib_per_hour").c_str(),
        slope("rss_beyond_device_memory_and_sqlite_slope_mib_per_hour").c_str(),
        slope("rss_beyond_device_memory_and_sqlite_least_squares_mib_per_hour").c_str(),
        options_.max_slope_mib_per_hour);
    if (skipped_ticks_ > 0) {
      std::printf("samples and faults skipped while the soak stalled (machine overloaded?): %d\n",
                  skipped_ticks_);
    }
    std::printf("threads: first third max %d, last third max %d; fds: %d, %d (allowance %d, %d)\n",
                results_["threads"]["first_third_max"].get<int>(),
                results_["threads"]["last_third_max"].get<int>(),
                results_["fds"]["first_third_max"].get<int>(),
                results_["fds"]["last_third_max"].get<int>(), kThreadAllowance, kFdAllowance);
  }
  if (failures_.empty()) {
    std::printf("soak PASSED\n");
  } else {
    std::printf("soak FAILED:\n");
    for (const auto& failure : failures_) std::printf("  - %s\n", failure.c_str());
  }
}

void Soak::WriteJson() const {
  if (options_.json_path.empty()) return;
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& sample : samples_) samples.push_back(SampleJson(sample));
  nlohmann::json faults = nlohmann::json::array();
  for (const auto& fault : faults_) {
    faults.push_back(
        {{"t_s", fault.t_s},
         {"kind", fault.kind},
         {"device", fault.device < 0 ? nlohmann::json() : nlohmann::json(fault.device)},
         {"injected", fault.injected},
         {"error", fault.error}});
  }
  const nlohmann::json document = {{"options",
                                    {{"minutes", options_.minutes},
                                     {"fault_every_seconds", options_.fault_every_seconds},
                                     {"sample_seconds", options_.sample_seconds},
                                     {"max_slope_mib_per_hour", options_.max_slope_mib_per_hour},
                                     {"warmup_s", WarmupSeconds(options_)}}},
                                   {"passed", failures_.empty()},
                                   {"failures", failures_},
                                   {"results", results_},
                                   {"samples", std::move(samples)},
                                   {"faults", std::move(faults)}};
  std::ofstream file(options_.json_path, std::ios::trunc);
  file << document.dump(1) << "\n";
  if (!file) std::printf("cannot write %s\n", options_.json_path.c_str());
}

int Soak::Run() {
  rasd_.WriteConfig(Config());
  std::string why;
  if (!rasd_.Start({}, {}, &why)) {
    std::printf("rasd did not start: %s\n", why.c_str());
    return 2;
  }
  std::printf(
      "soak: rasd pid %d on %d simulated devices; %s (inference, %d requests/s) and %s "
      "(collective); %.1f min, a fault every %.0f s, a sample every %.0f s\n",
      static_cast<int>(rasd_.Proc().Pid()), kDevices, kInferenceJob, kLoadRps, kCollectiveJob,
      options_.minutes, options_.fault_every_seconds, options_.sample_seconds);
  if (!WaitForJobs()) {
    std::printf("the jobs did not start within 30 s; rasd's log:\n%s\n", rasd_.Stderr().c_str());
    return 2;
  }
  if (!PrimeDeviceMemory()) return 2;
  start_ = Clock::now();
  served_moved_at_ = step_moved_at_ = start_;
  const auto end = start_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(options_.minutes * 60));
  const auto fault_period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.fault_every_seconds));
  const auto sample_period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.sample_seconds));
  auto next_fault = start_ + fault_period;
  auto next_sample = start_;
  auto next_watch = start_;
  // After a stall of this process (an overloaded machine), the ticks it
  // missed are skipped, not made up in a burst: a burst of faults hits a
  // device again right after it recovered, inside policy.auto_recover's
  // window, and then needs an operator: policy working, not a recovery to
  // measure. Skipped ticks are counted and reported.
  auto advance = [&](Clock::time_point& next, Clock::duration period, Clock::time_point now) {
    next += period;
    if (next > now) return;
    const auto missed = (now - next) / period + 1;
    skipped_ticks_ += static_cast<int>(missed);
    next += missed * period;
  };
  bool alive = true;
  while (Clock::now() < end && interrupted_by_signal == 0) {
    if (!rasd_.Proc().Running()) {
      alive = false;
      break;
    }
    const auto now = Clock::now();
    // A sample comes first at a tick both fall on: taken 5 s after the
    // last fault rather than in the middle of a recovery.
    if (now >= next_sample) {
      advance(next_sample, sample_period, now);
      if (auto sample = TakeSample()) {
        CheckSample(*sample);
        samples_.push_back(std::move(*sample));
        const Sample& s = samples_.back();
        std::printf(
            "  t=%5.0fs rss %7.1f MiB (device %6.1f, sqlite %4.2f) threads %3d fds %3d | "
            "served %lld lost %lld wrong %lld | step %lld reforms %lld checksums %s\n",
            s.t_s, s.RssMib(), s.DeviceMib(), s.SqliteMib(), s.resources.threads, s.resources.fds,
            static_cast<long long>(s.served), static_cast<long long>(s.lost),
            static_cast<long long>(s.wrong), static_cast<long long>(s.step),
            static_cast<long long>(s.reforms), s.checksums_match ? "ok" : "WRONG");
      } else if (rasd_.Proc().Running()) {
        Fail("rasctl", "rasctl status/jobs did not answer");
      }
    }
    if (now >= next_fault) {
      advance(next_fault, fault_period, now);
      InjectNext();
    }
    if (options_.corrupt_device >= 0 && !corrupting_ && Elapsed() >= options_.corrupt_at_seconds &&
        !failed_keys_.contains("sdc-inject"))
      StartCorruption();
    if (now >= next_watch) {
      next_watch += 1s;
      WatchRecoveries();
    }
    std::this_thread::sleep_until(std::min({next_sample, next_fault, next_watch, end}));
  }
  if (interrupted_by_signal != 0)
    Fail("interrupted", "interrupted by a signal before the end of the run");
  if (!alive) {
    const auto code = rasd_.Proc().Wait(0ms);
    Fail(
        "died",
        "rasd died (exit status " + std::to_string(code.value_or(-1)) + "); its log ends:\n" + [&] {
          const std::string log = rasd_.Stderr();
          return log.size() > 4000 ? log.substr(log.size() - 4000) : log;
        }());
  } else {
    // A last look at the jobs, then a clean stop.
    if (auto sample = TakeSample()) {
      CheckSample(*sample);
      samples_.push_back(std::move(*sample));
    }
    const auto code = rasd_.Stop(30s);
    if (code != 0)
      Fail("stop",
           "rasd did not stop cleanly (exit status " + std::to_string(code.value_or(-1)) + ")");
  }
  Evaluate();
  PrintSummary();
  WriteJson();
  return failures_.empty() ? 0 : 1;
}

}  // namespace
}  // namespace rasd::testing

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string why;
  const auto options = rasd::testing::ParseOptions(argc, argv, &why);
  if (!options) {
    if (why.empty()) {
      std::fputs(rasd::testing::kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "soak: %s\n%s", why.c_str(), rasd::testing::kUsage);
    return 2;
  }
  struct sigaction action {};
  action.sa_handler = rasd::testing::OnSignal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  rasd::testing::Soak soak(*options);
  return soak.Run();
}
