// The LLM service over the simulator: answers equal to the model's host
// reference, a poisoned KV page that costs only the sequences on it, and a
// drain that moves sequences to another replica with nothing lost.

#include "rasd/jobs/llm_service.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "rasd/testing/eventually.h"
#include "sim_runtime_test.h"

namespace rasd::jobs {
namespace {

using namespace std::chrono_literals;
using rasd::testing::Eventually;

struct Request {
  std::vector<int> prompt;
  int wanted = 0;
};

std::vector<Request> Requests(const DecoderModel& model, int count, int wanted) {
  std::mt19937 random(23);
  std::vector<Request> requests(static_cast<std::size_t>(count));
  for (auto& request : requests) {
    request.prompt.resize(std::uniform_int_distribution<int>(1, 40)(random));
    for (int& token : request.prompt)
      token = std::uniform_int_distribution<int>(0, model.vocab - 1)(random);
    request.wanted = wanted;
  }
  return requests;
}

class LlmServiceTest : public testing::SimRuntimeTest {
 protected:
  // Submits every request; answers land in answers_ by request id.
  std::map<std::uint64_t, const Request*> Submit(LlmService& service,
                                                 const std::vector<Request>& requests) {
    std::map<std::uint64_t, const Request*> ids;
    for (const auto& request : requests) {
      auto id = service.Submit(request.prompt, request.wanted,
                               [this](std::uint64_t answered_id, LlmService::Answer answer) {
                                 std::lock_guard lock(mutex_);
                                 ++answered_[answered_id];
                                 answers_.insert_or_assign(answered_id, std::move(answer));
                               });
      EXPECT_TRUE(id.has_value());
      if (id) ids[*id] = &request;
    }
    return ids;
  }
  std::size_t Answered() {
    std::lock_guard lock(mutex_);
    return answers_.size();
  }
  void ExpectReferenceAnswers(const std::map<std::uint64_t, const Request*>& ids) {
    std::lock_guard lock(mutex_);
    ASSERT_EQ(answers_.size(), ids.size());
    for (const auto& [id, request] : ids) {
      EXPECT_EQ(answered_[id], 1) << "request " << id << " answered once";
      const auto& answer = answers_.at(id);
      ASSERT_TRUE(answer.has_value()) << id << ": " << answer.error().message;
      EXPECT_EQ(*answer, model_.ReferenceGenerate(request->prompt, request->wanted))
          << "request " << id;
    }
  }

  DecoderModel model_;
  std::mutex mutex_;
  std::map<std::uint64_t, LlmService::Answer> answers_;
  std::map<std::uint64_t, int> answered_;
};

TEST_F(LlmServiceTest, ConcurrentRequestsOnTwoDevicesAnswerWhatTheReferenceDoes) {
  auto service = LlmService::Create(*runtime_, {.devices = {0, 1}, .model = model_});
  ASSERT_TRUE(service.has_value()) << service.error().message;
  const auto requests = Requests(model_, 48, 12);
  const auto ids = Submit(**service, requests);
  ASSERT_TRUE(Eventually([&] { return Answered() == ids.size(); }, 30s));
  ExpectReferenceAnswers(ids);
  const auto stats = (*service)->GetStats();
  EXPECT_EQ(stats.served, 48u);
  EXPECT_EQ(stats.tokens, 48u * 12u);
  ASSERT_EQ(stats.replicas.size(), 2u);
  for (const auto& replica : stats.replicas) {
    EXPECT_GT(replica.steps, 0u) << "device " << replica.device << " served too";
    EXPECT_EQ(replica.blocks.used, 0u);
  }
  EXPECT_EQ((*service)->Submit({model_.vocab}, 1, nullptr).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ((*service)->Submit({1}, model_.max_positions + 1, nullptr).error().code,
            ErrorCode::kInvalidArgument);
}

// Thirty-two sequences run in one batch; poison lands on a KV page whose
// four blocks belong to two of them. Exactly those two are recomputed; the
// page's blocks stay out of the cache; every answer is still the reference's, each given
// once; no other sequence is preempted, moved or restarted.
TEST_F(LlmServiceTest, APoisonedKvPageUnderTwoOfThirtyTwoSequencesCostsThoseTwoOnly) {
  auto service = LlmService::Create(
      *runtime_,
      {.devices = {0}, .model = model_, .tokens_per_block = 4, .max_batch_sequences = 64});
  ASSERT_TRUE(service.has_value()) << service.error().message;
  LlmService& llm = **service;
  const auto requests = Requests(model_, 32, 48);
  const auto ids = Submit(llm, requests);
  ASSERT_TRUE(Eventually(
      [&] {
        const auto stats = llm.GetStats();
        return stats.replicas[0].running == 32 && stats.replicas[0].steps >= 2;
      },
      10s));

  // A page whose blocks are all in use, by exactly two sequences.
  const auto blocks = llm.KvBlocks(0);
  ASSERT_TRUE(blocks.has_value());
  constexpr std::uint64_t kPage = 4096;
  std::optional<drivers::DeviceAddress> page;
  std::set<SequenceId> on_page;
  std::map<drivers::DeviceAddress, int> used_blocks_on_page;
  for (const auto& [id, request] : ids) {
    for (const auto block : blocks->BlockTable(id)) ++used_blocks_on_page[block & ~(kPage - 1)];
  }
  for (const auto& [start, used] : used_blocks_on_page) {
    if (used != 4) continue;
    const auto sequences = blocks->SequencesOn(start, kPage);
    if (sequences.size() == 2) {
      page = start;
      on_page = sequences;
      break;
    }
  }
  ASSERT_TRUE(page.has_value()) << "no full page shared by two sequences";
  ASSERT_TRUE(sim_->InjectUncorrectedEcc(0, *page + 200).has_value());

  ASSERT_TRUE(Eventually([&] { return Answered() == ids.size(); }, 30s));
  ExpectReferenceAnswers(ids);
  const auto stats = llm.GetStats();
  EXPECT_EQ(stats.replicas[0].recomputed, 2u);
  EXPECT_EQ(stats.replicas[0].preempted, 0u);
  EXPECT_EQ(stats.replicas[0].moved_out, 0u);
  EXPECT_EQ(stats.replicas[0].blocks.retired, 4u);
  const auto after = llm.KvBlocks(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->GetStats().free, after->GetStats().total - 4) << "the page's blocks stay out";
}

// A device drained under load: its sequences move to the other replica and
// are recomputed there; every request is answered once, correctly.
TEST_F(LlmServiceTest, ADrainUnderLoadMovesSequencesAndLosesNothing) {
  auto service = LlmService::Create(*runtime_, {.devices = {0, 1}, .model = model_});
  ASSERT_TRUE(service.has_value());
  LlmService& llm = **service;
  const auto requests = Requests(model_, 32, 40);
  const auto ids = Submit(llm, requests);
  ASSERT_TRUE(Eventually([&] { return llm.GetStats().replicas[1].steps >= 2; }, 10s));
  Device(1).SetHealth(runtime::HealthState::kDraining);
  llm.Reconsider();
  ASSERT_TRUE(Eventually([&] { return Answered() == ids.size(); }, 30s));
  ExpectReferenceAnswers(ids);
  const auto stats = llm.GetStats();
  EXPECT_GT(stats.replicas[1].moved_out, 0u);
  EXPECT_EQ(stats.served, 32u);
}

// When the cache is full, the sequence that joined last is preempted and
// recomputed when it rejoins: answers stay the reference's.
TEST_F(LlmServiceTest, AFullCachePreemptsTheLastToJoinAndItsAnswerIsStillRight) {
  // 24 blocks of 16 tokens: a few sequences of up to 80 tokens at a time.
  const std::uint64_t block_bytes = PagedDecoder::BlockBytes(model_, 16);
  auto service = LlmService::Create(
      *runtime_, {.devices = {0}, .model = model_, .kv_bytes_per_device = 24 * block_bytes});
  ASSERT_TRUE(service.has_value());
  const auto requests = Requests(model_, 16, 40);
  const auto ids = Submit(**service, requests);
  ASSERT_TRUE(Eventually([&] { return Answered() == ids.size(); }, 60s)) << [&] {
    const auto stats = (*service)->GetStats();
    const auto& r = stats.replicas[0];
    return ::testing::PrintToString(std::vector<std::uint64_t>{stats.served, r.running, r.waiting,
                                                               r.steps, r.preempted, r.blocks.free,
                                                               r.blocks.used, r.blocks.total});
  }();
  ExpectReferenceAnswers(ids);
  EXPECT_GT((*service)->GetStats().replicas[0].preempted, 0u);
}

// The same with preemption by swap: the preempted caches go to the host and
// come back when their sequences rejoin; answers are still the reference's
// (a cache that came back wrong would change them), and no host memory is
// held at the end. With a budget of two blocks, most preemptions find no
// room on the host and recompute instead.
TEST_F(LlmServiceTest, PreemptionBySwapBringsTheCacheBackAndKeepsToItsHostBudget) {
  const std::uint64_t block_bytes = PagedDecoder::BlockBytes(model_, 16);
  for (const std::uint64_t budget : {std::uint64_t{0}, 2 * block_bytes}) {
    SCOPED_TRACE(budget);
    {
      std::lock_guard lock(mutex_);
      answers_.clear();
      answered_.clear();
    }
    auto service = LlmService::Create(*runtime_, {.devices = {0},
                                                  .model = model_,
                                                  .kv_bytes_per_device = 24 * block_bytes,
                                                  .preemption = Preemption::kSwap,
                                                  .swap_bytes = budget});
    ASSERT_TRUE(service.has_value());
    const auto requests = Requests(model_, 16, 40);
    const auto ids = Submit(**service, requests);
    ASSERT_TRUE(Eventually([&] { return Answered() == ids.size(); }, 60s));
    ExpectReferenceAnswers(ids);
    const auto stats = (*service)->GetStats();
    const auto& replica = stats.replicas[0];
    EXPECT_GT(replica.preempted, 0u);
    EXPECT_EQ(replica.swapped_in, replica.swapped_out) << "every swapped cache came back";
    EXPECT_EQ(stats.swap_bytes, 0u);
    if (budget == 0) {
      EXPECT_EQ(replica.swapped_out, replica.preempted) << "room on the host for every one";
    } else {
      EXPECT_LT(replica.swapped_out, replica.preempted) << "the budget held some back";
    }
  }
}

}  // namespace
}  // namespace rasd::jobs
