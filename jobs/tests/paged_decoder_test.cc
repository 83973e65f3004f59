// The decoder over a paged KV cache on the simulator, against the model's
// host reference: continuous batches of sequences that join and leave, and a
// poisoned page that costs only the sequences with a block on it.

#include "rasd/jobs/paged_decoder.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "sim_runtime_test.h"

namespace rasd::jobs {
namespace {

using namespace std::chrono_literals;

struct Sequence {
  std::vector<int> prompt;
  int wanted = 0;  // tokens to generate
  std::vector<int> generated;
  std::vector<int> History() const {
    std::vector<int> tokens = prompt;
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    return tokens;
  }
};

// 32 sequences with prompts of 1 to 40 tokens, each to generate 4 to 24.
std::map<SequenceId, Sequence> Sequences(const DecoderModel& model) {
  std::mt19937 random(11);
  std::map<SequenceId, Sequence> sequences;
  for (SequenceId id = 1; id <= 32; ++id) {
    Sequence& sequence = sequences[id];
    sequence.prompt.resize(std::uniform_int_distribution<int>(1, 40)(random));
    for (int& token : sequence.prompt)
      token = std::uniform_int_distribution<int>(0, model.vocab - 1)(random);
    sequence.wanted = std::uniform_int_distribution<int>(4, 24)(random);
  }
  return sequences;
}

class PagedDecoderTest : public testing::SimRuntimeTest {
 protected:
  std::unique_ptr<PagedDecoder> Decoder(std::uint32_t tokens_per_block) {
    auto decoder = PagedDecoder::Create(*runtime_, 0,
                                        {.model = model_,
                                         .owner = "llm",
                                         .kv_bytes = 1 << 20,
                                         .tokens_per_block = tokens_per_block});
    EXPECT_TRUE(decoder.has_value()) << decoder.error().message;
    return decoder ? std::move(*decoder) : nullptr;
  }
  // One step over every running sequence; the finished ones leave.
  Status StepAll(PagedDecoder& decoder, std::map<SequenceId, Sequence>& running,
                 std::map<SequenceId, Sequence>& done) {
    std::vector<PagedDecoder::Work> batch;
    for (const auto& [id, sequence] : running) batch.push_back({id, sequence.History()});
    auto next = decoder.Step(batch, 10s);
    if (!next) return Fail(next.error());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Sequence& sequence = running[batch[i].sequence];
      sequence.generated.push_back((*next)[i]);
      if (static_cast<int>(sequence.generated.size()) == sequence.wanted) {
        decoder.Release(batch[i].sequence);
        done[batch[i].sequence] = std::move(sequence);
        running.erase(batch[i].sequence);
      }
    }
    return {};
  }
  void ExpectReferenceAnswers(const std::map<SequenceId, Sequence>& done) {
    ASSERT_EQ(done.size(), 32u);
    std::set<int> tokens;
    std::set<std::vector<int>> answers;
    for (const auto& [id, sequence] : done) {
      EXPECT_EQ(sequence.generated, model_.ReferenceGenerate(sequence.prompt, sequence.wanted))
          << "sequence " << id;
      tokens.insert(sequence.generated.begin(), sequence.generated.end());
      answers.insert(sequence.generated);
    }
    // A model that said one thing to everyone would prove nothing.
    EXPECT_GT(tokens.size(), 16u);
    EXPECT_EQ(answers.size(), 32u);
  }

  DecoderModel model_;
};

TEST_F(PagedDecoderTest, ContinuousBatchesGenerateWhatTheHostReferenceDoes) {
  auto decoder = Decoder(16);
  ASSERT_NE(decoder, nullptr);
  auto waiting = Sequences(model_);
  std::map<SequenceId, Sequence> running, done;
  std::set<std::size_t> batch_sizes;
  while (!waiting.empty() || !running.empty()) {
    // Four join before each step while any wait: prefills and decodes mix.
    for (int joined = 0; joined < 4 && !waiting.empty(); ++joined) {
      running.insert(waiting.extract(waiting.begin()));
    }
    batch_sizes.insert(running.size());
    const auto stepped = StepAll(*decoder, running, done);
    ASSERT_TRUE(stepped.has_value()) << stepped.error().message;
  }
  ExpectReferenceAnswers(done);
  EXPECT_GT(batch_sizes.size(), 5u) << "the batch grew and shrank";
  const auto stats = decoder->Blocks().GetStats();
  EXPECT_EQ(stats.used, 0u);
  EXPECT_EQ(stats.free, stats.total) << "every block came back";
  EXPECT_EQ(stats.sequences, 0u);
}

// Four blocks to a page (4 tokens each): a poisoned page under blocks of
// two running sequences fails the step that reads it; retiring the page
// names exactly those two, whose caches are recomputed on healthy blocks by
// the next step (their whole history is new again); the other sequences
// lose only the failed step, and every answer is still the reference's.
TEST_F(PagedDecoderTest, APoisonedKvPageCostsOnlyTheSequencesWithABlockOnIt) {
  auto decoder = Decoder(4);
  ASSERT_NE(decoder, nullptr);
  constexpr std::uint64_t kPage = 4096;
  auto running = Sequences(model_);
  std::map<SequenceId, Sequence> done;
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(StepAll(*decoder, running, done).has_value());

  // A page with blocks of exactly two sequences.
  std::optional<drivers::DeviceAddress> page;
  std::set<SequenceId> on_page;
  for (drivers::DeviceAddress at = decoder->KvPagesBase();
       at < decoder->KvPagesBase() + decoder->KvPagesBytes(); at += kPage) {
    on_page = decoder->Blocks().SequencesOn(at, kPage);
    if (on_page.size() == 2) {
      page = at;
      break;
    }
  }
  ASSERT_TRUE(page.has_value()) << "no page shared by two sequences";
  std::map<SequenceId, std::uint64_t> cached_before;
  for (const auto& [id, sequence] : running) cached_before[id] = decoder->Blocks().Tokens(id);

  ASSERT_TRUE(sim_->InjectUncorrectedEcc(0, *page + 100).has_value());
  const auto consumed = StepAll(*decoder, running, done);
  ASSERT_FALSE(consumed.has_value()) << "the step read the poisoned page";
  EXPECT_EQ(consumed.error().code, ErrorCode::kDeviceFault) << consumed.error().message;
  for (const auto& [id, tokens] : cached_before) {
    EXPECT_EQ(decoder->Blocks().Tokens(id), tokens)
        << "the failed step left the caches as they were";
  }

  // What the service does with the address: its page's blocks leave for
  // good, in the cache and in the device's pool.
  const auto recomputed = decoder->Blocks().RetirePage(*page, kPage);
  EXPECT_EQ(recomputed, on_page);
  ASSERT_TRUE((*runtime_->Pool(0))->Retire(*page).has_value());
  for (const auto& [id, tokens] : cached_before) {
    EXPECT_EQ(decoder->Blocks().Tokens(id), recomputed.contains(id) ? 0u : tokens) << id;
  }
  ASSERT_TRUE(decoder->Usable());

  while (!running.empty()) {
    const auto stepped = StepAll(*decoder, running, done);
    ASSERT_TRUE(stepped.has_value()) << stepped.error().message;
    for (const auto& [id, sequence] : running) {
      const auto table = decoder->Blocks().BlockTable(id);
      for (const auto block : table) {
        EXPECT_FALSE(block >= *page && block < *page + kPage) << "a retired block handed out";
      }
    }
  }
  ExpectReferenceAnswers(done);
  const auto stats = decoder->Blocks().GetStats();
  EXPECT_EQ(stats.retired, 4u) << "the page's four blocks";
  EXPECT_EQ(stats.free, stats.total - 4);
  EXPECT_TRUE((*runtime_->Pool(0))->IsRetired(*page));
}

TEST_F(PagedDecoderTest, AStepThatDoesNotFitRunsNothingAndBadInputIsRefused) {
  auto decoder = PagedDecoder::Create(
      *runtime_, 0, {.model = model_, .kv_bytes = 8 * 4096, .tokens_per_block = 16});
  ASSERT_TRUE(decoder.has_value());
  PagedDecoder& d = **decoder;
  ASSERT_EQ(d.Blocks().GetStats().total, 8u);  // 8 blocks of 16 tokens
  std::vector<int> long_prompt(100, 3);        // 7 blocks
  ASSERT_TRUE(d.Step({{1, long_prompt}}, 10s).has_value());
  auto grown = long_prompt;
  grown.push_back(4);  // still 7 blocks; sequence 2 needs 3 of the 1 left
  const auto full = d.Step({{1, grown}, {2, std::vector<int>(40, 5)}}, 10s);
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code, ErrorCode::kOutOfMemory);
  const auto stats = d.Blocks().GetStats();
  EXPECT_EQ(stats.used, 7u) << "nothing taken by the step that did not fit";
  EXPECT_EQ(d.Blocks().Tokens(1), 100u);
  EXPECT_EQ(d.Blocks().Tokens(2), 0u);
  EXPECT_EQ(stats.sequences, 1u);

  EXPECT_EQ(d.Step({{3, {model_.vocab}}}, 10s).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(d.Step({{1, long_prompt}}, 10s).error().code, ErrorCode::kInvalidArgument)
      << "no token that is not cached";
  EXPECT_EQ(d.Step({{4, std::vector<int>(model_.max_positions + 1, 1)}}, 10s).error().code,
            ErrorCode::kInvalidArgument);
}

// Preemption by swap: sequences' caches go to the host between steps and
// come back, on the same decoder or one on another device; the next step
// computes only the tokens past them, and every answer is still the
// reference's (a cache that came back wrong would change the tokens).
TEST_F(PagedDecoderTest, ACacheSwappedToTheHostAndBackAnswersAsIfNeverMoved) {
  auto first = Decoder(4);
  ASSERT_NE(first, nullptr);
  auto second = PagedDecoder::Create(*runtime_, 1,
                                     {.model = model_, .kv_bytes = 1 << 20, .tokens_per_block = 4});
  ASSERT_TRUE(second.has_value());
  auto waiting = Sequences(model_);
  std::map<SequenceId, Sequence> on_first, on_second, on_host, done;
  std::map<SequenceId, PagedDecoder::SwappedKv> swapped;
  int swaps = 0, step = 0;
  while (!waiting.empty() || !on_first.empty() || !on_second.empty() || !swapped.empty()) {
    for (int joined = 0; joined < 4 && !waiting.empty(); ++joined) {
      on_first.insert(waiting.extract(waiting.begin()));
    }
    // Back from the host: to the other decoder every other time.
    for (auto it = swapped.begin(); it != swapped.end();) {
      PagedDecoder& target = (it->first + swaps) % 2 == 0 ? *first : **second;
      auto& where = &target == first.get() ? on_first : on_second;
      const std::uint64_t tokens = it->second.tokens;
      const auto in = target.SwapIn(it->first, std::move(it->second), 10s);
      ASSERT_TRUE(in.has_value()) << in.error().message;
      EXPECT_EQ(target.Blocks().Tokens(it->first), tokens);
      where.insert(on_host.extract(it->first));
      it = swapped.erase(it);
    }
    ASSERT_TRUE(StepAll(*first, on_first, done).has_value());
    ASSERT_TRUE(StepAll(**second, on_second, done).has_value());
    // Every third step, the first running sequence of each decoder goes to
    // the host (it waits out a step there).
    if (++step % 3 != 0) continue;
    for (auto [decoder, running] :
         {std::pair{first.get(), &on_first}, std::pair{second->get(), &on_second}}) {
      if (running->empty()) continue;
      const SequenceId id = running->begin()->first;
      auto out = decoder->SwapOut(id, 10s);
      ASSERT_TRUE(out.has_value()) << out.error().message;
      EXPECT_EQ(decoder->Blocks().Tokens(id), 0u) << "its blocks are free again";
      swapped.emplace(id, std::move(*out));
      on_host.insert(running->extract(id));
      ++swaps;
    }
  }
  ExpectReferenceAnswers(done);
  EXPECT_GT(swaps, 10);
  EXPECT_EQ(first->Blocks().GetStats().used, 0u);
  EXPECT_EQ((*second)->Blocks().GetStats().used, 0u);
}

// A swap-out that reads a poisoned block fails and frees nothing; the
// decoder goes on with a new stream.
TEST_F(PagedDecoderTest, ASwapOutThatReadsPoisonFailsAndKeepsTheBlocks) {
  auto decoder = Decoder(16);
  ASSERT_NE(decoder, nullptr);
  ASSERT_TRUE(decoder->Step({{1, std::vector<int>(40, 3)}}, 10s).has_value());
  const auto table = decoder->Blocks().BlockTable(1);
  ASSERT_EQ(table.size(), 3u);
  ASSERT_TRUE(sim_->InjectUncorrectedEcc(0, table[1] + 64).has_value());
  const auto out = decoder->SwapOut(1, 10s);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code, ErrorCode::kDeviceFault) << out.error().message;
  EXPECT_EQ(decoder->Blocks().Tokens(1), 40u);
  EXPECT_TRUE(decoder->Usable());
  EXPECT_EQ(decoder->SwapOut(2, 10s).error().code, ErrorCode::kNotFound);
}

// The blocks start on a page of the device, wherever the pool placed the
// region: a fault under a block retires a page that holds the KV cache and
// nothing else of the job (the weights before it stay usable).
TEST_F(PagedDecoderTest, TheBlocksStartOnAPageSoAFaultUnderOneCostsNoOtherBuffer) {
  auto stream = runtime_->CreateStream(0, {.owner = "other"});
  ASSERT_TRUE(stream.has_value());
  auto& pool = **runtime_->Pool(0);
  auto odd = pool.Allocate(3000, **stream);  // so that what follows is not page-aligned
  ASSERT_TRUE(odd.has_value());
  auto decoder = Decoder(16);
  ASSERT_NE(decoder, nullptr);
  const auto first = decoder->Blocks().NextFreeBlock();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first % 4096, 0u);
  EXPECT_EQ(*first, decoder->KvPagesBase());
  const std::uint64_t block_bytes = decoder->BlockBytes();
  EXPECT_EQ(decoder->Blocks().GetStats().total, (1u << 20) / block_bytes)
      << "the slack for the alignment is on top of the blocks asked for";
  const auto last_byte = *first + decoder->Blocks().GetStats().total * block_bytes - 1;
  EXPECT_LE(last_byte, decoder->KvPagesBase() + decoder->KvPagesBytes() - 1);
  EXPECT_EQ(decoder->KvPagesBytes() % 4096, 0u);
  // Every byte of the first and the last page is the cache's allocation.
  const auto cache = pool.OwnerOf(*first);
  ASSERT_TRUE(cache.has_value());
  const auto last_page_end = decoder->KvPagesBase() + decoder->KvPagesBytes() - 1;
  for (const auto address : {*first, *first + 4095, last_page_end - 4095, last_page_end}) {
    const auto owner = pool.OwnerOf(address);
    ASSERT_TRUE(owner.has_value());
    EXPECT_EQ(owner->address, cache->address) << "the page of a block holds only the cache";
  }
  ASSERT_TRUE(pool.Free(*odd).has_value());
}

// A block size that does not divide the page, in a region that is not a
// whole number of pages: the last block's page still holds nothing else.
TEST_F(PagedDecoderTest, TheLastBlocksPageHoldsNothingElseWhenBlocksDoNotFillIt) {
  auto stream = runtime_->CreateStream(0, {.owner = "other"});
  ASSERT_TRUE(stream.has_value());
  auto& pool = **runtime_->Pool(0);
  // Buffers of other sizes first: the region lands after them.
  for (const std::uint64_t before : {256, 3000, 70000}) {
    SCOPED_TRACE(before);
    auto odd = pool.Allocate(before, **stream);
    ASSERT_TRUE(odd.has_value());
    auto decoder = PagedDecoder::Create(
        *runtime_, 0, {.model = model_, .kv_bytes = 6 * 1024 + 100, .tokens_per_block = 4});
    ASSERT_TRUE(decoder.has_value()) << decoder.error().message;
    const auto& d = **decoder;
    const auto cache = pool.OwnerOf(d.KvPagesBase());
    ASSERT_TRUE(cache.has_value());
    const auto pages_end = d.KvPagesBase() + d.KvPagesBytes();
    EXPECT_GE(pages_end, d.KvPagesBase() + d.Blocks().GetStats().total * d.BlockBytes());
    EXPECT_LE(pages_end, cache->address + cache->size) << "the last page is inside the allocation";
    decoder->reset();
    ASSERT_TRUE(pool.Free(*odd).has_value());
  }
}

}  // namespace
}  // namespace rasd::jobs
