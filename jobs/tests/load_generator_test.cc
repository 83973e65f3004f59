// The load generator on the simulator: every request sent is answered
// once and right, and what it holds does not grow with the requests sent
// (it runs inside rasd for as long as the daemon does).

#include "rasd/jobs/load_generator.h"

#include <gtest/gtest.h>

#include <thread>

#include "rasd/testing/eventually.h"
#include "sim_runtime_test.h"

namespace rasd::jobs {
namespace {

using namespace std::chrono_literals;

class LoadGeneratorTest : public testing::SimRuntimeTest {
 protected:
  std::unique_ptr<InferenceService> Service() {
    auto service = InferenceService::Create(
        *runtime_, {.id = "llm", .devices = {0, 1, 2, 3}, .max_batch = 16, .max_wait = 200us});
    EXPECT_TRUE(service.has_value()) << service.error().ToString();
    return service ? std::move(*service) : nullptr;
  }
};

TEST_F(LoadGeneratorTest, HoldsTheLatestWindowOfLatenciesAndOnlyOutstandingRequests) {
  auto service = Service();
  ASSERT_NE(service, nullptr);
  constexpr std::size_t kWindow = 64;
  constexpr std::uint64_t kRequests = 20 * kWindow;
  LoadGenerator load(*service, MlpModel{}, 5000, kWindow);
  LoadGenerator::Stats stats;
  std::size_t most_samples = 0, most_outstanding = 0;
  (void)rasd::testing::Eventually(
      [&] {
        stats = load.GetStats();
        // Bounded at every moment, not only at the end.
        most_samples = std::max(most_samples, stats.latency_samples);
        most_outstanding = std::max<std::size_t>(most_outstanding, stats.outstanding);
        return stats.answered >= kRequests;
      },
      30s, 5ms);
  ASSERT_LE(most_samples, kWindow);
  ASSERT_LE(most_outstanding, InferenceOptions{}.max_queued);
  load.Stop();
  stats = load.GetStats();
  ASSERT_GE(stats.answered, kRequests) << "the service answered too slowly";
  EXPECT_EQ(stats.latency_samples, kWindow);
  EXPECT_EQ(stats.outstanding, 0u);
  EXPECT_EQ(stats.unanswered, 0u);
  EXPECT_EQ(stats.answered + stats.rejected, stats.sent);
  EXPECT_EQ(stats.wrong, 0u);
  EXPECT_EQ(stats.errors, 0u);
  EXPECT_EQ(stats.duplicates, 0u);
  EXPECT_GT(stats.p99_ms, 0.0);
  EXPECT_GE(stats.p99_ms, stats.p50_ms);
}

TEST_F(LoadGeneratorTest, PercentilesSinceATimeAreOverTheAnswersSinceThen) {
  auto service = Service();
  ASSERT_NE(service, nullptr);
  LoadGenerator load(*service, MlpModel{}, 2000, 1 << 12);
  const auto wait_for = [&](std::uint64_t answered) {
    (void)rasd::testing::Eventually([&] { return load.GetStats().answered >= answered; }, 30s, 5ms);
  };
  wait_for(200);
  // The count first, then the time: an answer stamped at or after `since`
  // is then never also among `before` (the other order let one answered
  // between the two reads count on both sides).
  const std::uint64_t before = load.GetStats().answered;
  const auto since = service->GetClock().Monotonic();
  wait_for(before + 200);
  load.Stop();
  const auto all = load.GetStats();
  const auto recent = load.GetStats(since);
  EXPECT_EQ(all.latency_samples, all.answered);
  EXPECT_GT(recent.latency_samples, 0u);
  EXPECT_LE(recent.latency_samples, all.answered - before);
  EXPECT_EQ(load.GetStats(service->GetClock().Monotonic() + 1h).latency_samples, 0u);
}

}  // namespace
}  // namespace rasd::jobs
