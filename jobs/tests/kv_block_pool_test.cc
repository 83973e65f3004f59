#include "rasd/jobs/kv_block_pool.h"

#include <gtest/gtest.h>

#include <map>

namespace rasd::jobs {
namespace {

constexpr drivers::DeviceAddress kBase = 0x7f0000100000;
constexpr std::uint64_t kPage = 4096;

// 64 blocks of 16 tokens, two blocks to a device page.
KvBlockPool Pool(std::uint64_t blocks = 64) {
  auto pool = KvBlockPool::Create(
      {.base = kBase, .bytes = blocks * 2048, .block_bytes = 2048, .tokens_per_block = 16});
  EXPECT_TRUE(pool.has_value());
  return std::move(*pool);
}

TEST(KvBlockPoolTest, ARegionWithoutABlockOrABlockWithoutTokensIsRefused) {
  EXPECT_EQ(KvBlockPool::Create({.base = kBase, .bytes = 1000, .block_bytes = 2048}).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(KvBlockPool::Create({.base = kBase, .bytes = 4096, .block_bytes = 0}).has_value());
  EXPECT_FALSE(KvBlockPool::Create(
                   {.base = kBase, .bytes = 4096, .block_bytes = 2048, .tokens_per_block = 0})
                   .has_value());
}

TEST(KvBlockPoolTest, ASequenceTakesABlockPerSixteenTokensAndGivesThemBackAtItsEnd) {
  KvBlockPool pool = Pool(4);
  ASSERT_TRUE(pool.Grow(1, 17).has_value());  // prefill: 17 tokens, 2 blocks
  EXPECT_EQ(pool.BlockTable(1), (std::vector<drivers::DeviceAddress>{kBase, kBase + 2048}));
  ASSERT_TRUE(pool.Grow(1, 15).has_value());  // decode to 32: still 2 blocks
  EXPECT_EQ(pool.GetStats().used, 2u);
  ASSERT_TRUE(pool.Grow(1, 1).has_value());  // the 33rd token opens a third
  EXPECT_EQ(pool.BlockTable(1).size(), 3u);
  EXPECT_EQ(pool.Tokens(1), 33u);

  // Admission by free blocks: one block left, a 20-token prompt needs two.
  EXPECT_TRUE(pool.CanGrow(2, 16));
  EXPECT_FALSE(pool.CanGrow(2, 20));
  const auto refused = pool.Grow(2, 20);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kOutOfMemory);
  EXPECT_TRUE(pool.BlockTable(2).empty()) << "nothing taken";
  EXPECT_EQ(pool.GetStats().free, 1u);

  pool.Release(1);
  EXPECT_EQ(pool.GetStats().free, 4u);
  EXPECT_EQ(pool.GetStats().sequences, 0u);
  EXPECT_TRUE(pool.Grow(2, 20).has_value());
}

// The case: 32 running sequences, poison in a page whose two
// blocks belong to two of them. Exactly those two lose their cache; the
// page's blocks never come back; the rest keep theirs block for block.
TEST(KvBlockPoolTest, APoisonedPageCostsTheTwoSequencesOnItAndItsBlocksForGood) {
  KvBlockPool pool = Pool(128);
  std::map<SequenceId, std::vector<drivers::DeviceAddress>> before;
  // Interleaved growth, as continuous batching decodes: prompts of 20
  // tokens (2 blocks), then 20 more tokens each (a 3rd block), so
  // sequences' blocks alternate through the region.
  for (SequenceId s = 0; s < 32; ++s) ASSERT_TRUE(pool.Grow(s, 20).has_value());
  for (SequenceId s = 0; s < 32; ++s) ASSERT_TRUE(pool.Grow(s, 20).has_value());
  for (SequenceId s = 0; s < 32; ++s) before[s] = pool.BlockTable(s);
  EXPECT_EQ(pool.GetStats().used, 96u);

  // Sequence 7's third block sits at block 64 + 7 = 71 (odd); its page
  // [70, 71] holds sequence 6's third block too.
  const drivers::DeviceAddress poisoned = before[7][2] + 100;
  const drivers::DeviceAddress page = poisoned & ~(kPage - 1);
  EXPECT_EQ(pool.SequencesOn(poisoned, 1), (std::set<SequenceId>{7}));
  const auto hit = pool.RetirePage(page, kPage);
  EXPECT_EQ(hit, (std::set<SequenceId>{6, 7}));
  for (SequenceId s = 0; s < 32; ++s) {
    if (hit.contains(s)) {
      EXPECT_TRUE(pool.BlockTable(s).empty()) << s;
      EXPECT_EQ(pool.Tokens(s), 0u) << s;
    } else {
      EXPECT_EQ(pool.BlockTable(s), before[s]) << s << " untouched";
    }
  }
  const auto stats = pool.GetStats();
  EXPECT_EQ(stats.retired, 2u);
  EXPECT_EQ(stats.used, 90u);
  EXPECT_EQ(stats.free, 128u - 90u - 2u) << "their healthy blocks are free again";

  // The recompute: both re-prefill 40 tokens on healthy blocks; no block of
  // the page is ever handed out again, even with every sequence gone.
  ASSERT_TRUE(pool.Grow(6, 40).has_value());
  ASSERT_TRUE(pool.Grow(7, 40).has_value());
  for (SequenceId s : {6, 7})
    for (const auto block : pool.BlockTable(s)) EXPECT_FALSE(block >= page && block < page + kPage);
  for (SequenceId s = 0; s < 32; ++s) pool.Release(s);
  EXPECT_EQ(pool.GetStats().free, 126u);
  ASSERT_TRUE(pool.Grow(99, 126 * 16).has_value()) << "every healthy block, and only those";
  for (const auto block : pool.BlockTable(99)) EXPECT_FALSE(block >= page && block < page + kPage);
  EXPECT_FALSE(pool.CanGrow(99, 1));
}

TEST(KvBlockPoolTest, APageOutsideTheRegionOrAtItsEdgesRetiresOnlyWhatItOverlaps) {
  KvBlockPool pool = Pool(4);
  ASSERT_TRUE(pool.Grow(1, 64).has_value());  // all 4 blocks
  EXPECT_TRUE(pool.RetirePage(kBase - kPage, kPage).empty());
  EXPECT_TRUE(pool.RetirePage(kBase + 4 * 2048, kPage).empty());
  EXPECT_TRUE(pool.SequencesOn(kBase + 4 * 2048, 1).empty());
  EXPECT_EQ(pool.GetStats().retired, 0u);
  // A page straddling the region's start covers its first block only.
  EXPECT_EQ(pool.RetirePage(kBase - 2048, kPage), (std::set<SequenceId>{1}));
  EXPECT_EQ(pool.GetStats().retired, 1u);
  EXPECT_EQ(pool.GetStats().free, 3u);
}

}  // namespace
}  // namespace rasd::jobs
