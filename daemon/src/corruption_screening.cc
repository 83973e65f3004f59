#include "corruption_screening.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "rasd/common/logging.h"

namespace rasd::daemon {
namespace {

using std::chrono::nanoseconds;

// Rounds remembered per device: how far back a verdict can look for the
// clean screenings that bound when the corruption began.
constexpr std::size_t kKeptRounds = 256;
constexpr nanoseconds kMinTick = std::chrono::milliseconds(100);
constexpr nanoseconds kMaxTick = std::chrono::seconds(5);
// Clean elements that rule a rate out: exp(-7) is a 0.1% chance of missing it.
constexpr double kRuleOutExponent = 7.0;
// What a first screening is assumed to cost, until one is measured: the
// first comes once a device has earned this (20 s for each of 4 devices
// sharing 1%), not all at start.
constexpr nanoseconds kBusyDeferral = std::chrono::seconds(2);
constexpr nanoseconds kFirstCostEstimate = std::chrono::milliseconds(50);

std::string Seconds(nanoseconds duration) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(duration).count());
}

}  // namespace

CorruptionScreening::CorruptionScreening(common::EventLoop& loop, runtime::Runtime& runtime,
                                         DeviceHealth& health, Options options)
    : loop_(loop), runtime_(runtime), health_(health), options_(options) {}

CorruptionScreening::~CorruptionScreening() {
  *alive_ = false;
  if (timer_) timer_->Disarm();
  if (worker_.joinable()) worker_.join();
}

void CorruptionScreening::Start() {
  started_at_ = last_tick_ = loop_.Now();
  for (const auto& device : runtime_.Devices()) {
    auto& state = devices_[device->Index()];
    state.view.device = device->Index();
    state.last_cost = kFirstCostEstimate;
  }
  timer_ = loop_.CreateTimer([this] { Tick(); });
  Publish();
  if (options_.budget > 0) timer_->ArmAfter(kMinTick);
}

void CorruptionScreening::SetOptions(Options options) {
  const bool was_on = options_.budget > 0;
  options_ = options;
  if (timer_ && !was_on && options_.budget > 0) {
    last_tick_ = loop_.Now();
    timer_->ArmAfter(kMinTick);
  }
}

void CorruptionScreening::Tick() {
  if (options_.budget <= 0) return;
  const nanoseconds now = loop_.Now();
  const auto elapsed = now - last_tick_;
  last_tick_ = now;
  std::vector<int> ready;
  nanoseconds next_due = kMaxTick;
  auto in_service = [&](int device) {
    const auto health = health_.StateOf(device);
    return health == runtime::HealthState::kHealthy || health == runtime::HealthState::kDegraded;
  };
  const auto serving = std::count_if(devices_.begin(), devices_.end(),
                                     [&](const auto& entry) { return in_service(entry.first); });
  // The budget is the node's, shared by the devices in service: a job
  // spanning them (a collective steps at its slowest rank) waits for every
  // screening of every one, so its loss is their sum. The count is this
  // tick's, applied to the whole time since the last; the credit's cap
  // bounds what a device that left service meanwhile shifts to the others.
  const double share = serving > 0 ? options_.budget / static_cast<double>(serving) : 0;
  for (auto& [device, state] : devices_) {
    Forget(state, now);
    state.view.suspect = !state.mismatch_times.empty();
    if (!in_service(device)) {
      state.view.overdue = false;
      continue;
    }
    // Earned while in service; saved up to two screenings' worth, so that
    // time the device could not be screened (a full pool, another device's
    // turn) is not spent later in a burst.
    const auto cap = std::max(state.last_cost * 2, kFirstCostEstimate);
    state.credit =
        std::min(cap, state.credit + std::chrono::duration_cast<nanoseconds>(elapsed * share));
    state.view.overdue =
        now - (state.last_screened.count() > 0 ? state.last_screened : started_at_) >
        options_.interval;
    if (state.credit >= state.last_cost) {
      ready.push_back(device);
    } else {
      // In double: a tiny budget over many devices would overflow the
      // nanoseconds; past kMaxTick the timer comes back sooner anyway.
      const double wait_ns = static_cast<double>((state.last_cost - state.credit).count()) / share;
      next_due = std::min(next_due, wait_ns >= static_cast<double>(kMaxTick.count())
                                        ? kMaxTick
                                        : nanoseconds(static_cast<std::int64_t>(wait_ns)));
    }
  }
  if (!running_ && !ready.empty()) {
    // A suspect first; then the longest unscreened, a device a job uses
    // counting as screened kBusyDeferral later than it was: idle devices
    // go first, busy ones are not starved.
    auto rank = [&](int device) {
      const auto& state = devices_[device];
      const bool busy = !runtime_.JobsOn(device).empty();
      return std::pair(!state.view.suspect,
                       state.last_screened + (busy ? kBusyDeferral : nanoseconds{0}));
    };
    const int device = *std::min_element(ready.begin(), ready.end(),
                                         [&](int a, int b) { return rank(a) < rank(b); });
    Launch(device);
  }
  Publish();
  // Running, the finish re-arms; otherwise wake when the next is due.
  if (!running_)
    timer_->ArmAfter(std::clamp(ready.size() > 1 ? kMinTick : next_due, kMinTick, kMaxTick));
}

void CorruptionScreening::Launch(int device) {
  running_ = true;
  if (worker_.joinable()) worker_.join();  // the last one posted its result and returned
  const nanoseconds started = loop_.Now();
  // The screen is built once per size, on the worker: its known answers
  // are host work, O(elements), that the loop need not wait for.
  const bool rebuild = !screen_ || screen_elements_ != options_.elements;
  worker_ = std::thread([this, device, started, rebuild, elements = options_.elements,
                         screen = screen_, alive = alive_]() mutable {
    if (rebuild)
      screen =
          runtime::KnownAnswerScreen::Build(runtime_.Kernels().Names(), {.elements = elements});
    auto report =
        std::make_shared<runtime::ScreeningReport>(screen->Run(runtime_, device, loop_.GetClock()));
    loop_.Post([this, device, started, report, screen, elements, alive] {
      if (!*alive) return;
      screen_ = screen;
      screen_elements_ = elements;
      Finish(device, *report, started);
    });
  });
}

void CorruptionScreening::Finish(int device, const runtime::ScreeningReport& report,
                                 nanoseconds started) {
  running_ = false;
  const nanoseconds now = loop_.Now();
  DeviceState& state = devices_[device];
  state.credit -= report.device_time;
  state.last_cost = report.device_time;
  state.device_time += report.device_time;
  if (!report.completed) {
    ++state.view.incomplete;
    // Once per reason: a pool kept full by a job would say it every turn.
    if (report.error != state.last_incomplete)
      RASD_LOG_INFO("device {}: screening did not complete ({}); no verdict", device, report.error);
    state.last_incomplete = report.error;
  } else {
    state.last_incomplete.clear();
    ++state.view.screenings;
    state.view.kernels_checked += report.kernels.size();
    state.view.mismatches += report.mismatches.size();
    state.view.screened = true;
    state.view.last_at = loop_.GetClock().Wall();
    state.view.last_passed = report.Passed();
    state.view.last_summary = report.Summary();
    state.last_screened = now;
    state.rounds.push_back(
        {started, now, report.elements_checked, report.Passed(), report.wrong_elements});
    if (state.rounds.size() > kKeptRounds) state.rounds.pop_front();
    if (!report.mismatches.empty()) {
      state.mismatch_times.push_back(now);
      state.evidence.push_back(report.mismatches.front());
      state.evidence_screened.push_back(true);
      Judge(device, state, now);
    }
  }
  Publish();
  // The next is chosen at the next tick: one screening at a time, never
  // back to back.
  if (options_.budget > 0) timer_->ArmAfter(kMinTick);
}

void CorruptionScreening::Forget(DeviceState& state, nanoseconds now) const {
  const auto window = std::chrono::duration_cast<nanoseconds>(options_.window);
  while (!state.mismatch_times.empty() && now - state.mismatch_times.front() > window) {
    state.mismatch_times.pop_front();
    state.evidence.erase(state.evidence.begin());
    state.evidence_screened.erase(state.evidence_screened.begin());
  }
}

void CorruptionScreening::ReportCrossCheck(int device, const std::string& kind, bool agreed,
                                           runtime::ScreeningMismatch evidence) {
  auto found = devices_.find(device);
  if (found == devices_.end()) return;
  DeviceState& state = found->second;
  ++state.view.cross_checks[kind];
  if (!agreed) {
    ++state.view.cross_check_mismatches[kind];
    // Only while the device is in service: an answer computed before its
    // isolation may be judged after it.
    const auto health = health_.StateOf(device);
    if (health == runtime::HealthState::kHealthy || health == runtime::HealthState::kDegraded) {
      const nanoseconds now = loop_.Now();
      state.mismatch_times.push_back(now);
      state.evidence.push_back(std::move(evidence));
      state.evidence_screened.push_back(false);
      Judge(device, state, now);
    }
  }
  Publish();
}

void CorruptionScreening::Judge(int device, DeviceState& state, nanoseconds now) {
  Forget(state, now);
  const auto& latest = state.evidence.back();
  state.view.suspect = true;
  if (static_cast<int>(state.mismatch_times.size()) < options_.confirm) {
    RASD_LOG_WARN(
        "device {}: screening gave a wrong result ({} {}: {}); {} of {} to confirm within {} s",
        device, latest.kernel, latest.shape, latest.detail, state.mismatch_times.size(),
        options_.confirm, options_.window.count());
    return;
  }
  Verdict verdict;
  verdict.device = device;
  verdict.distrust_for = DistrustFor(state, now);
  verdict.evidence = state.evidence;
  const auto& first = state.evidence.front();
  const auto screened = static_cast<std::size_t>(
      std::count(state.evidence_screened.begin(), state.evidence_screened.end(), true));
  const auto cross_checked = state.evidence.size() - screened;
  std::string how;
  if (screened > 0) how = fmt::format("{} known-answer screening(s)", screened);
  if (cross_checked > 0)
    how += fmt::format("{}{} job result(s) outvoted by two other devices",
                       how.empty() ? "" : " and ", cross_checked);
  verdict.reason = fmt::format(
      "silent data corruption: {} {} computed wrong without reporting an error ({}); confirmed "
      "by {} wrong result(s) in {}: {}; results since {} before are distrusted",
      first.kernel, first.shape, first.detail, state.mismatch_times.size(),
      Seconds(now - state.mismatch_times.front()), how, Seconds(verdict.distrust_for));
  std::string evidence;
  for (const auto& mismatch : state.evidence)
    evidence +=
        fmt::format("{}{} {}", evidence.empty() ? "" : "; ", mismatch.kernel, mismatch.shape);
  state.mismatch_times.clear();
  state.evidence.clear();
  state.evidence_screened.clear();
  state.view.suspect = false;
  ++state.view.verdicts;
  if (on_verdict_) {
    if (auto spoiled = on_verdict_(verdict); !spoiled.empty()) evidence += "; " + spoiled;
  }
  auto decided = health_.DecideAndSave({.device = device,
                                        .cause = HealthCause::kSilentCorruption,
                                        .target = runtime::HealthState::kIsolated,
                                        .reason = verdict.reason,
                                        .rule = "screening",
                                        .evidence = "wrong: " + evidence});
  if (!decided) {
    RASD_LOG_ERROR("device {}: the silent-corruption isolation stands but was not saved: {}",
                   device, decided.error().message);
  }
  RASD_LOG_ERROR("device {} isolated: {}", device, verdict.reason);
}

nanoseconds CorruptionScreening::DistrustFor(const DeviceState& state, nanoseconds now) const {
  // The screenings from the first wrong result on.
  const auto& rounds = state.rounds;
  std::size_t first = rounds.size();
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    if (rounds[i].finished >= state.mismatch_times.front()) {
      first = i;
      break;
    }
  }
  std::uint64_t elements = 0, wrong = 0;
  for (std::size_t i = first; i < rounds.size(); ++i) {
    elements += rounds[i].elements;
    wrong += rounds[i].wrong_elements;
  }
  // An outvoted answer is at least one wrong element too.
  wrong += static_cast<std::uint64_t>(
      std::count(state.evidence_screened.begin(), state.evidence_screened.end(), false));
  if (elements == 0) {
    // Wrong answers only, no screening since to measure a rate by: back to
    // the last screening before them.
    return first > 0 ? now - rounds[first - 1].started : now;
  }
  // The rate they measure: the wrong elements over the elements screened
  // from the first wrong result on.
  const double rate =
      static_cast<double>(std::max<std::uint64_t>(wrong, 1)) / static_cast<double>(elements);
  // Back over the screenings before it until the clean ones would have
  // shown that rate; where the memory of them runs out first, nothing
  // the device did is trusted.
  double clean = 0;
  for (std::size_t i = first; i-- > 0;) {
    if (rounds[i].passed) clean += static_cast<double>(rounds[i].elements);
    if (clean * rate >= kRuleOutExponent) return now - rounds[i].started;
  }
  return now;
}

void CorruptionScreening::Publish() {
  const nanoseconds now = loop_.Now();
  std::vector<DeviceView> views;
  for (auto& [device, state] : devices_) {
    const auto alive = now - started_at_;
    state.view.budget_used = alive.count() > 0 ? static_cast<double>(state.device_time.count()) /
                                                     static_cast<double>(alive.count())
                                               : 0;
    views.push_back(state.view);
  }
  std::lock_guard lock(views_mutex_);
  views_ = std::move(views);
}

std::vector<CorruptionScreening::DeviceView> CorruptionScreening::Views() const {
  std::lock_guard lock(views_mutex_);
  return views_;
}

}  // namespace rasd::daemon
