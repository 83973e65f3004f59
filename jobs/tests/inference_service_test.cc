// The inference service on the simulator: every admitted request answered
// exactly once with the model's output, through drains, a device falling
// off the bus, a kill of the job's streams, and a hung device past the
// drain deadline.

#include "rasd/jobs/inference_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "rasd/testing/eventually.h"
#include "sim_runtime_test.h"

namespace rasd::jobs {
namespace {

using namespace std::chrono_literals;

std::vector<float> InputFor(std::uint64_t n, int size) {
  std::mt19937 random(static_cast<std::uint32_t>(n));
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> input(static_cast<std::size_t>(size));
  for (auto& value : input) value = uniform(random);
  return input;
}

class InferenceTest : public testing::SimRuntimeTest {
 protected:
  std::unique_ptr<InferenceService> Service(std::vector<int> devices, std::string id = "llm",
                                            std::chrono::milliseconds drain_deadline = 30s) {
    auto service = InferenceService::Create(*runtime_, {.id = id,
                                                        .devices = std::move(devices),
                                                        .max_batch = 16,
                                                        .max_wait = 200us,
                                                        .drain_deadline = drain_deadline,
                                                        .batch_timeout = 5s});
    EXPECT_TRUE(service.has_value()) << service.error().ToString();
    return service ? std::move(*service) : nullptr;
  }


  // Submits `count` requests (input n for request n) from `threads` threads,
  // calling `midway` once half are submitted; waits for every answer and
  // checks each came exactly once, right.
  void RunLoad(InferenceService& service, int count, const std::function<void()>& midway,
               int threads = 4) {
    const MlpModel model;
    std::vector<std::atomic<int>> answers(static_cast<std::size_t>(count));
    std::vector<std::vector<float>> outputs(static_cast<std::size_t>(count));
    std::atomic<int> errors{0}, submitted{0}, done{0};
    std::mutex outputs_mutex;
    std::vector<std::thread> clients;
    std::atomic<bool> midway_called{false};
    for (int t = 0; t < threads; ++t) {
      clients.emplace_back([&, t] {
        for (int n = t; n < count; n += threads) {
          auto id = service.Submit(InputFor(static_cast<std::uint64_t>(n), model.inputs),
                                   [&, n](std::uint64_t, InferenceService::Output output) {
                                     answers[static_cast<std::size_t>(n)]++;
                                     if (!output) {
                                       ++errors;
                                     } else {
                                       std::lock_guard lock(outputs_mutex);
                                       outputs[static_cast<std::size_t>(n)] = std::move(*output);
                                     }
                                     ++done;
                                   });
          ASSERT_TRUE(id.has_value()) << id.error().ToString();
          if (++submitted == count / 2 && !midway_called.exchange(true) && midway) midway();
          if (n % 64 == 0) std::this_thread::sleep_for(200us);  // a steady stream, not one burst
        }
      });
    }
    for (auto& client : clients) client.join();
    (void)rasd::testing::Eventually([&] { return done >= count; }, 30s);
    ASSERT_EQ(done.load(), count) << "answers missing";
    EXPECT_EQ(errors.load(), 0);
    for (int n = 0; n < count; ++n) {
      ASSERT_EQ(answers[static_cast<std::size_t>(n)].load(), 1) << "request " << n;
      const auto want = model.Reference(InputFor(static_cast<std::uint64_t>(n), model.inputs));
      const auto& got = outputs[static_cast<std::size_t>(n)];
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i])))
            << "request " << n << " output " << i;
      }
    }
  }
};

TEST_F(InferenceTest, AnswersEachRequestOnceAndTheSameWhicheverReplica) {
  auto service = Service({0, 1, 2, 3});
  RunLoad(*service, 2000, nullptr);
  const auto stats = service->GetStats();
  EXPECT_EQ(stats.served, 2000u);
  int busy = 0;
  for (const auto& replica : stats.replicas) busy += replica.served > 0 ? 1 : 0;
  EXPECT_GE(busy, 2) << "the router spreads the load";
  // One input, many times: identical bits from every replica.
  std::map<std::vector<float>, int> distinct;
  for (int i = 0; i < 200; ++i) {
    auto output = service->Infer(InputFor(7, 64), 5s);
    ASSERT_TRUE(output.has_value());
    distinct[*output]++;
  }
  EXPECT_EQ(distinct.size(), 1u);
  EXPECT_FALSE(service->Infer(std::vector<float>(3), 1s).has_value()) << "wrong input size";
}

// Cross-checks: a sample of answered requests runs again on another
// replica; a replica that computes wrong is outvoted by two that agree, and
// nobody else is accused.
class CrossCheckTest : public InferenceTest {
 protected:
  std::unique_ptr<InferenceService> Checked(std::uint32_t one_in) {
    auto service =
        InferenceService::Create(*runtime_, {.id = "chat",
                                             .devices = {0, 1, 2, 3},
                                             .max_batch = 16,
                                             .max_wait = 200us,
                                             .verify_one_in = one_in,
                                             .on_cross_check = [this](const CrossCheck& check) {
                                               std::lock_guard lock(mutex_);
                                               checks_.push_back(check);
                                             }});
    EXPECT_TRUE(service.has_value()) << service.error().ToString();
    return service ? std::move(*service) : nullptr;
  }
  std::vector<CrossCheck> Checks() {
    std::lock_guard lock(mutex_);
    return checks_;
  }
  // What callers of a reviewed service were answered and corrected with,
  // and the review's outcome. Guarded by `mutex`; `changed` is notified.
  struct Answers {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::uint64_t, std::vector<float>> given, corrections;
    std::map<std::uint64_t, int> input_of;
    std::set<std::uint64_t> asked;
    int answered = 0;
    std::optional<AnswerReview> review;
    // The requests whose answer differs from the host's model.
    std::vector<std::uint64_t> WrongByModel(const MlpModel& model) {
      std::vector<std::uint64_t> wrong;
      for (const auto& [request, output] : given)
        if (output !=
            model.Reference(InputFor(static_cast<std::uint64_t>(input_of[request]), model.inputs)))
          wrong.push_back(request);
      return wrong;
    }
  };
  // Replicas on devices 0, 1 and 2, reporting to `answers`.
  std::unique_ptr<InferenceService> Reviewed(std::size_t max_batch,
                                             std::chrono::microseconds max_wait, Answers& answers) {
    auto service = InferenceService::Create(*runtime_, {.id = "chat",
                                                        .devices = {0, 1, 2},
                                                        .max_batch = max_batch,
                                                        .max_wait = max_wait,
                                                        .on_cross_check =
                                                            [this](const CrossCheck& check) {
                                                              std::lock_guard lock(mutex_);
                                                              checks_.push_back(check);
                                                            },
                                                        .on_review =
                                                            [&answers](const AnswerReview& done) {
                                                              std::lock_guard lock(answers.mutex);
                                                              answers.review = done;
                                                              answers.changed.notify_all();
                                                            }});
    EXPECT_TRUE(service.has_value()) << service.error().ToString();
    return service ? std::move(*service) : nullptr;
  }
  // Submits the model's input number `n`; its answer and any correction
  // (the caller asks for one when `asks`) go to `answers`.
  static void SubmitRecorded(InferenceService& service, Answers& answers, int n, bool asks) {
    const MlpModel model;
    auto id = service.Submit(
        InputFor(static_cast<std::uint64_t>(n), model.inputs),
        [&answers](std::uint64_t request, InferenceService::Output output) {
          std::lock_guard lock(answers.mutex);
          if (output) answers.given[request] = *output;
          ++answers.answered;
          answers.changed.notify_all();
        },
        asks ? InferenceService::Callback([&answers](std::uint64_t request,
                                                     InferenceService::Output output) {
          std::lock_guard lock(answers.mutex);
          ASSERT_TRUE(output.has_value());
          EXPECT_TRUE(answers.given.contains(request)) << "the answer came first";
          EXPECT_TRUE(answers.corrections.emplace(request, *output).second) << "at most once";
        })
             : nullptr);
    ASSERT_TRUE(id.has_value());
    std::lock_guard lock(answers.mutex);
    answers.input_of[*id] = n;
    if (asks) answers.asked.insert(*id);
  }
  // Submits inputs 0 to count - 1 (every `asks_every`th caller asks for
  // corrections) and waits until the service has answered and counted them
  // all, so that its replicas' statistics hold every request.
  static void AnswerAll(InferenceService& service, Answers& answers, int count, int asks_every) {
    for (int n = 0; n < count; ++n) SubmitRecorded(service, answers, n, n % asks_every == 0);
    {
      std::unique_lock lock(answers.mutex);
      ASSERT_TRUE(answers.changed.wait_for(lock, 20s, [&] { return answers.answered == count; }));
    }
    // The replicas count a batch once all its callers have their answers.
    ASSERT_TRUE(rasd::testing::Eventually(
        [&] { return service.GetStats().served == static_cast<std::uint64_t>(count); }, 5s));
  }
  // Answers inputs 0 to kAnsweredWrongOn2 - 1 (AnswerAll) while device 2's
  // gemm flips a bit in about one output element in 1000 (from `seed`),
  // then ends the fault; `served_2` is what device 2 answered.
  static constexpr int kAnsweredWrongOn2 = 600;
  void AnswerWithDevice2ComputingWrong(InferenceService& service, Answers& answers,
                                       std::uint64_t seed, int asks_every,
                                       std::uint64_t& served_2) {
    ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "gemm", seed).has_value());
    ASSERT_NO_FATAL_FAILURE(AnswerAll(service, answers, kAnsweredWrongOn2, asks_every));
    ASSERT_TRUE(sim_->InjectSilentCorruption(2, 0, "", 0).has_value());
    served_2 = service.GetStats().replicas[2].served;
    ASSERT_GT(served_2, 50u);
    ASSERT_LE(served_2, InferenceService::kKeptAnswers);
  }
  std::mutex mutex_;
  std::vector<CrossCheck> checks_;
};

TEST_F(CrossCheckTest, HealthyReplicasAgreeAndNobodyIsAccused) {
  auto service = Checked(10);
  RunLoad(*service, 1000, nullptr);
  ASSERT_TRUE(rasd::testing::Eventually(
      [&] { return Checks().size() >= 2 * service->GetStats().cross_checks; }, 10s));
  const auto stats = service->GetStats();
  EXPECT_GE(stats.cross_checks, 90u) << "one in ten of 1000";
  EXPECT_EQ(stats.disagreements, 0u);
  EXPECT_EQ(stats.served, 1000u) << "re-runs are no answers";
  for (const auto& check : Checks()) EXPECT_TRUE(check.agreed) << check.detail;
}

TEST_F(CrossCheckTest, AReplicaComputingWrongIsOutvotedAndItsUncheckedAnswersListed) {
  auto service = Checked(4);
  // Device 2's gemm flips a bit in about one output element in 1000: most
  // of its batches carry a wrong answer somewhere. Nothing reports it.
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "gemm", 9).has_value());
  for (int n = 0; n < 2000; ++n) {
    ASSERT_TRUE(service
                    ->Submit(InputFor(static_cast<std::uint64_t>(n), 64),
                             [](std::uint64_t, InferenceService::Output) {})
                    .has_value());
    if (n % 64 == 0) std::this_thread::sleep_for(200us);
  }
  // The listener hears of a vote after the service counted it: wait for what it heard.
  auto outvoted_heard = [&] {
    const auto checks = Checks();
    return std::count_if(checks.begin(), checks.end(),
                         [](const CrossCheck& check) { return !check.agreed; });
  };
  ASSERT_TRUE(rasd::testing::Eventually([&] { return outvoted_heard() >= 2; }, 20s));
  int outvoted_2 = 0;
  for (const auto& check : Checks()) {
    if (check.agreed) continue;
    EXPECT_EQ(check.device, 2) << check.detail;
    EXPECT_NE(check.detail.find("where devices "), std::string::npos) << check.detail;
    outvoted_2 += check.device == 2 ? 1 : 0;
  }
  EXPECT_GE(outvoted_2, 2);
  // What device 2 answered since its last answer another replica agreed
  // with is listed; nothing from before that.
  std::uint64_t last_agreed = 0;
  for (const auto& check : Checks())
    if (check.agreed && check.device == 2) last_agreed = std::max(last_agreed, check.request);
  const auto unchecked = service->AnsweredSinceLastCheck(2);
  for (const auto request : unchecked.requests) EXPECT_GT(request, last_agreed);
  const auto served_2 = service->GetStats().replicas[2].served;
  EXPECT_LE(unchecked.requests.size(), served_2);
}

// A device found computing wrong: the answers its replica gave since its
// last clean check run again elsewhere, and the review names exactly the
// wrong ones (each checked here against the host's model) and answers them
// again to the callers who asked.
TEST_F(CrossCheckTest, AReviewNamesExactlyTheWrongAnswersAndCorrectsThoseAskedFor) {
  Answers answers;
  auto created = Reviewed(16, 200us, answers);
  ASSERT_TRUE(created);
  auto& service = *created;
  const MlpModel model;
  std::uint64_t served_2 = 0;
  // Half the callers ask for corrections.
  ASSERT_NO_FATAL_FAILURE(AnswerWithDevice2ComputingWrong(service, answers, 11, 2, served_2));
  Device(2).SetHealth(runtime::HealthState::kIsolated);
  EXPECT_EQ(service.ReviewAnswers(2), served_2);

  std::unique_lock lock(answers.mutex);
  ASSERT_TRUE(answers.changed.wait_for(lock, 20s, [&] { return answers.review.has_value(); }));
  const auto& review = answers.review;
  const auto wrong = answers.WrongByModel(model);  // every replica's answers
  ASSERT_FALSE(wrong.empty()) << "the fault spoiled some answers";
  EXPECT_LT(wrong.size(), served_2) << "and not all of device 2's";
  EXPECT_EQ(review->device, 2);
  EXPECT_EQ(review->reviewed, served_2);
  EXPECT_EQ(review->unreviewed, 0u);
  EXPECT_EQ(review->wrong, wrong);
  std::set<std::uint64_t> corrected_wanted;
  for (const auto request : wrong)
    if (answers.asked.contains(request)) corrected_wanted.insert(request);
  EXPECT_EQ(review->corrected, corrected_wanted.size());
  ASSERT_EQ(answers.corrections.size(), corrected_wanted.size());
  for (const auto& [request, output] : answers.corrections) {
    EXPECT_TRUE(corrected_wanted.contains(request)) << request;
    EXPECT_EQ(output, model.Reference(InputFor(
                          static_cast<std::uint64_t>(answers.input_of[request]), model.inputs)))
        << "the right answer, from a healthy replica";
  }
  lock.unlock();
  EXPECT_EQ(service.AnsweredSinceLastCheck(2).requests.size(), 0u) << "reviewed: forgotten";
  EXPECT_EQ(service.GetStats().served, static_cast<std::uint64_t>(kAnsweredWrongOn2))
      << "re-runs are no answers";
}

// The verdict comes while the load runs: a batch device 2 was running when
// the review began answers after it, and joins it; nothing device 2 answered
// wrong is missed.
TEST_F(CrossCheckTest, AReviewUnderLoadTakesInTheBatchThatWasRunning) {
  Answers answers;
  auto created = Reviewed(32, 2ms, answers);
  ASSERT_TRUE(created);
  auto& service = *created;
  const MlpModel model;
  ASSERT_TRUE(sim_->InjectSilentCorruption(2, 1e-3, "gemm", 12).has_value());
  constexpr int kRequests = 3000;
  for (int n = 0; n < kRequests; ++n) {
    SubmitRecorded(service, answers, n, true);
    if (n == kRequests / 2) {
      // As the daemon does: the review, then the isolation.
      (void)service.ReviewAnswers(2);
      Device(2).SetHealth(runtime::HealthState::kIsolated);
      service.Reconsider();
    }
    if (n % 16 == 0) std::this_thread::sleep_for(100us);
  }
  std::unique_lock lock(answers.mutex);
  ASSERT_TRUE(answers.changed.wait_for(
      lock, 30s, [&] { return answers.answered == kRequests && answers.review; }));
  const auto wrong = answers.WrongByModel(model);
  ASSERT_FALSE(wrong.empty());
  EXPECT_EQ(answers.review->wrong, wrong) << "every wrong answer named, and nothing else";
  EXPECT_EQ(answers.review->unreviewed, 0u);
  std::set<std::uint64_t> corrected;
  for (const auto& [request, output] : answers.corrections) corrected.insert(request);
  EXPECT_EQ(corrected, std::set<std::uint64_t>(wrong.begin(), wrong.end()));
}

// The device reviewed was right and a re-run came out wrong on another
// device (also computing wrong, unknown yet): a third replica sides with
// the answer given, so no right answer is "corrected", and the device that
// re-ran it wrong is the one outvoted.
TEST_F(CrossCheckTest, AReviewAsksAThirdReplicaWhenARerunDiffersAndCorrectsNoRightAnswer) {
  Answers answers;
  auto created = Reviewed(16, 200us, answers);
  ASSERT_TRUE(created);
  auto& service = *created;
  const MlpModel model;
  constexpr int kRequests = 300;
  ASSERT_NO_FATAL_FAILURE(AnswerAll(service, answers, kRequests, 1));
  {
    std::lock_guard lock(answers.mutex);
    EXPECT_TRUE(answers.WrongByModel(model).empty()) << "every answer right";
  }
  const auto served_2 = service.GetStats().replicas[2].served;
  ASSERT_GT(served_2, 20u);
  // Device 1 now flips a bit in every gemm output; device 2 is reviewed.
  ASSERT_TRUE(sim_->InjectSilentCorruption(1, 1.0, "gemm", 13).has_value());
  Device(2).SetHealth(runtime::HealthState::kIsolated);
  EXPECT_EQ(service.ReviewAnswers(2), served_2);
  {
    std::unique_lock lock(answers.mutex);
    ASSERT_TRUE(answers.changed.wait_for(lock, 20s, [&] { return answers.review.has_value(); }));
    EXPECT_EQ(answers.review->reviewed, served_2);
    EXPECT_EQ(answers.review->unreviewed, 0u);
    EXPECT_TRUE(answers.review->wrong.empty()) << answers.review->wrong.size() << " named wrong";
    EXPECT_EQ(answers.review->corrected, 0u);
    EXPECT_TRUE(answers.corrections.empty()) << "no right answer replaced";
  }
  // The listener hears of a vote just after the service counted it.
  auto outvoted_heard = [&] {
    const auto checks = Checks();
    return static_cast<std::uint64_t>(std::count_if(
        checks.begin(), checks.end(), [](const CrossCheck& check) { return !check.agreed; }));
  };
  EXPECT_TRUE(rasd::testing::Eventually(
      [&] { return outvoted_heard() == service.GetStats().outvoted; }, 5s));
  EXPECT_GT(outvoted_heard(), 0u) << "re-runs went to device 1 as well as to device 0";
  for (const auto& check : Checks()) {
    if (!check.agreed) {
      EXPECT_EQ(check.device, 1) << check.detail;
    }
  }
  ASSERT_TRUE(sim_->InjectSilentCorruption(1, 0, "", 0).has_value());
}

// No third replica in service: a re-run that differs from the device found
// computing wrong is trusted, so the review still finishes and still names
// exactly the wrong answers.
TEST_F(CrossCheckTest, AReviewWithNoThirdReplicaTrustsTheRerunOverTheDeviceFoundWrong) {
  Answers answers;
  auto created = Reviewed(16, 200us, answers);
  ASSERT_TRUE(created);
  auto& service = *created;
  const MlpModel model;
  std::uint64_t served_2 = 0;
  ASSERT_NO_FATAL_FAILURE(AnswerWithDevice2ComputingWrong(service, answers, 14, 1, served_2));
  Device(0).SetHealth(runtime::HealthState::kIsolated);
  Device(2).SetHealth(runtime::HealthState::kIsolated);
  EXPECT_EQ(service.ReviewAnswers(2), served_2);
  std::unique_lock lock(answers.mutex);
  ASSERT_TRUE(answers.changed.wait_for(lock, 20s, [&] { return answers.review.has_value(); }));
  const auto wrong = answers.WrongByModel(model);
  ASSERT_FALSE(wrong.empty()) << "the fault spoiled some answers";
  EXPECT_EQ(answers.review->reviewed, served_2);
  EXPECT_EQ(answers.review->wrong, wrong);
  EXPECT_EQ(answers.corrections.size(), wrong.size());
}

// One replica: nowhere to run its answers again. The review says so at
// once, and the service goes on answering.
TEST_F(CrossCheckTest, AReviewWithNoOtherReplicaReportsItsAnswersUnreviewed) {
  std::optional<AnswerReview> review;
  auto created = InferenceService::Create(
      *runtime_, {.id = "solo", .devices = {0}, .on_review = [&](const AnswerReview& done) {
                    review = done;
                  }});
  ASSERT_TRUE(created.has_value()) << created.error().ToString();
  auto& service = **created;
  const MlpModel model;
  for (int n = 0; n < 20; ++n)
    ASSERT_TRUE(service.Infer(InputFor(static_cast<std::uint64_t>(n), model.inputs), 5s));
  EXPECT_EQ(service.ReviewAnswers(0), 0u);
  ASSERT_TRUE(review.has_value());
  EXPECT_EQ(review->unreviewed, 20u);
  EXPECT_EQ(review->reviewed, 0u);
  EXPECT_TRUE(service.Infer(InputFor(99, model.inputs), 5s).has_value());
  review.reset();
  EXPECT_EQ(service.ReviewAnswers(3), 0u) << "no replica there";
  EXPECT_FALSE(review.has_value()) << "and no outcome to report";
}

TEST_F(InferenceTest, ADrainUnderLoadLosesNothingAndTheDeviceTakesNoNewWork) {
  auto service = Service({0, 1, 2, 3});
  std::uint64_t served_at_drain = 0;
  RunLoad(*service, 4000, [&] {
    Device(1).SetHealth(runtime::HealthState::kDraining);
    service->Reconsider();
    std::this_thread::sleep_for(50ms);  // what was in flight finishes
    served_at_drain = service->GetStats().replicas[1].served;
  });
  const auto stats = service->GetStats();
  EXPECT_EQ(stats.served, 4000u);
  EXPECT_EQ(stats.replicas[1].served, served_at_drain) << "nothing new after the drain";
  EXPECT_EQ(stats.failed, 0u);
}

TEST_F(InferenceTest, ADeviceFallingOffTheBusMidRunLosesNothing) {
  auto service = Service({0, 1, 2, 3});
  RunLoad(*service, 4000, [&] {
    ASSERT_TRUE(sim_->InjectFallOffBus(2).has_value());
    // The policy isolates it a moment later; until then batches there fail
    // and are re-run elsewhere.
    std::this_thread::sleep_for(5ms);
    Device(2).SetHealth(runtime::HealthState::kIsolated);
    service->Reconsider();
  });
  const auto stats = service->GetStats();
  EXPECT_EQ(stats.served, 4000u);
  EXPECT_EQ(stats.failed, 0u);
}

TEST_F(InferenceTest, KillingOneJobsStreamsRestartsItAndLeavesTheOtherJobAlone) {
  auto victim = Service({0, 1}, "job-a");
  auto neighbour = Service({0, 1}, "job-b");
  std::thread other([&] { RunLoad(*neighbour, 1500, nullptr, 2); });
  RunLoad(*victim, 1500, [&] {
    // Its replicas make their streams with their first batch.
    std::size_t aborted = 0;
    (void)rasd::testing::Eventually(
        [&] { return (aborted = runtime_->AbortOwner("job-a", "consumed poison")) > 0; }, 5s);
    EXPECT_GE(aborted, 1u);
  });
  other.join();
  std::uint64_t victim_restarts = 0, neighbour_restarts = 0;
  for (const auto& replica : victim->GetStats().replicas) victim_restarts += replica.restarts;
  for (const auto& replica : neighbour->GetStats().replicas) neighbour_restarts += replica.restarts;
  EXPECT_GE(victim_restarts, 1u);
  EXPECT_EQ(neighbour_restarts, 0u) << "the other job on the same devices kept running";
}

TEST_F(InferenceTest, AHungDeviceBeingDrainedGivesUpItsBatchAtTheDeadline) {
  auto service = Service({0, 1}, "llm", 30s);
  service->SetDrainDeadline(1, 300ms);  // an operator's `rasctl drain --deadline 300ms`
  // Warm both replicas.
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(service->Infer(InputFor(i, 64), 5s).has_value());
  ASSERT_TRUE(sim_->InjectHang(1).has_value());
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 64; ++i) {
    clients.emplace_back([&, i] {
      if (service->Infer(InputFor(1000 + i, 64), 10s)) ++ok;
    });
  }
  std::this_thread::sleep_for(20ms);
  Device(1).SetHealth(runtime::HealthState::kDraining);
  service->Reconsider();
  for (auto& client : clients) client.join();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(ok.load(), 64);
  EXPECT_LT(took, 2s) << "a hung batch is re-run after the 300 ms drain deadline, not 5 s";
  EXPECT_GE(service->GetStats().rerun, 1u);
  ASSERT_TRUE(sim_->ResetDevice(1).has_value());
}

TEST_F(InferenceTest, StoppingAnswersWhatIsLeft) {
  std::atomic<int> answered{0}, aborted{0};
  {
    auto service = Service({3});
    Device(3).SetHealth(runtime::HealthState::kIsolated);  // nothing can run
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(service
                      ->Submit(InputFor(i, 64),
                               [&](std::uint64_t, InferenceService::Output output) {
                                 ++answered;
                                 if (!output && output.error().code == ErrorCode::kAborted)
                                   ++aborted;
                               })
                      .has_value());
    }
    EXPECT_EQ(service->GetStats().waiting, 10u);
  }
  EXPECT_EQ(answered.load(), 10);
  EXPECT_EQ(aborted.load(), 10);
}

TEST_F(InferenceTest, BeyondMaxQueueRequestsAreRefusedAsOverloadedAndCounted) {
  std::atomic<int> answered{0};
  {
    auto created = InferenceService::Create(
        *runtime_, {.id = "small", .devices = {2}, .max_batch = 4, .max_queued = 8});
    ASSERT_TRUE(created.has_value());
    auto& service = **created;
    Device(2).SetHealth(runtime::HealthState::kIsolated);  // nothing runs: all of them wait
    auto count = [&](std::uint64_t, InferenceService::Output) { ++answered; };
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(service.Submit(InputFor(i, 64), count).has_value());
    for (int i = 0; i < 5; ++i) {
      auto refused = service.Submit(InputFor(i, 64), count);
      ASSERT_FALSE(refused.has_value());
      EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
      EXPECT_NE(refused.error().message.find("overloaded"), std::string::npos);
    }
    const auto stats = service.GetStats();
    EXPECT_EQ(stats.waiting, 8u) << "the queue stays at its bound";
    EXPECT_EQ(stats.rejected, 5u) << "every refusal counted";
  }
  EXPECT_EQ(answered.load(), 8) << "the admitted ones are answered (aborted) at stop, none dropped";
}

}  // namespace
}  // namespace rasd::jobs
