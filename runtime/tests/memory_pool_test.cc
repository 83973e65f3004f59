#include "rasd/runtime/memory_pool.h"

#include <map>
#include <random>
#include <set>
#include <thread>

#include "rasd/testing/eventually.h"
#include "runtime_test_util.h"

namespace rasd::runtime::testing {
namespace {

class MemoryPoolTest : public RuntimeTest {
 protected:
  // Allocates on `stream` (keeping what it gets, so that the pool cannot
  // hand the same other block back) until `address` comes back.
  bool WaitUntilReusable(DeviceAddress address, Stream& stream, int max_tries,
                         std::uint64_t bytes = 8192) {
    std::vector<Allocation> held;
    bool reused = false;
    (void)::rasd::testing::Eventually(
        [&] {
          if (static_cast<int>(held.size()) >= max_tries) return true;
          held.push_back(Alloc(bytes, stream));
          reused = held.back().address == address;
          return reused;
        },
        2s);
    for (auto& allocation : held) EXPECT_TRUE(Pool().Free(allocation).has_value());
    return reused;
  }
};

TEST(SizeClassTest, ClassesAreAlignedAndWasteLittle) {
  EXPECT_EQ(MemoryPool::SizeClass(1), 256u);
  EXPECT_EQ(MemoryPool::SizeClass(256), 256u);
  EXPECT_EQ(MemoryPool::SizeClass(257), 512u);
  EXPECT_EQ(MemoryPool::SizeClass(1 << 20), 1u << 20);
  for (std::uint64_t bytes = 1; bytes < (std::uint64_t{1} << 32); bytes = bytes * 3 / 2 + 1) {
    const std::uint64_t size = MemoryPool::SizeClass(bytes);
    ASSERT_GE(size, bytes);
    ASSERT_EQ(size % 256, 0u) << bytes;
    if (bytes > 2048) {
      ASSERT_LE(static_cast<double>(size) / static_cast<double>(bytes), 1.125) << bytes;
    }
  }
}

TEST_F(MemoryPoolTest, AllocationsAreDisjointAndCounted) {
  auto stream = NewStream();
  std::vector<Allocation> live;
  for (std::uint64_t bytes : {1u, 256u, 1000u, 4096u, 100000u, 3u << 20})
    live.push_back(Alloc(bytes, *stream));
  std::map<DeviceAddress, DeviceAddress> ranges;
  for (const auto& allocation : live) {
    EXPECT_EQ(allocation.address % 256, 0u);
    ranges[allocation.address] = allocation.address + MemoryPool::SizeClass(allocation.size);
  }
  DeviceAddress previous_end = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_GE(begin, previous_end);
    previous_end = end;
  }
  auto stats = Pool().Stats();
  EXPECT_EQ(stats.allocated_bytes, 1u + 256 + 1000 + 4096 + 100000 + (3u << 20));
  EXPECT_EQ(stats.live_allocations, 6u);
  EXPECT_EQ(stats.reserved_bytes, 8u << 20) << "all fit in one 8 MiB arena";
  for (auto& allocation : live) ASSERT_TRUE(Pool().Free(allocation).has_value());
  stats = Pool().Stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.live_allocations, 0u);
  EXPECT_EQ(stats.peak_allocated_bytes, 1u + 256 + 1000 + 4096 + 100000 + (3u << 20));
}

TEST_F(MemoryPoolTest, DoubleFreeIsAnError) {
  auto stream = NewStream();
  auto allocation = Alloc(512, *stream);
  Allocation copy = allocation;
  ASSERT_TRUE(Pool().Free(allocation).has_value());
  EXPECT_FALSE(allocation);
  const auto again = Pool().Free(copy);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(MemoryPoolTest, FreedMemoryCoalescesIntoLargeBlocks) {
  auto stream = NewStream();
  std::vector<Allocation> small;
  for (int i = 0; i < 64; ++i)
    small.push_back(Alloc(100 * 1024, *stream));  // ~6.6 MiB of one arena
  const auto reserved_before = Pool().Stats().reserved_bytes;
  for (auto& allocation : small) ASSERT_TRUE(Pool().Free(allocation).has_value());
  ASSERT_TRUE(stream->Synchronize(5s).has_value());
  auto big = Alloc(7 << 20, *stream);
  EXPECT_EQ(Pool().Stats().reserved_bytes, reserved_before) << "the freed pieces must merge back";
  EXPECT_TRUE(Pool().Free(big).has_value());
}

TEST_F(MemoryPoolTest, FreedMemoryIsReusedAtOnceOnItsOwnStreamOnly) {
  auto first = NewStream(0, "job-a");
  auto second = NewStream(0, "job-b");
  const KernelArg sleep[] = {KernelArg::Int(100000)};
  ASSERT_TRUE(first->Launch("sleep_us", sleep).has_value());  // first's work is still running
  auto allocation = Alloc(4096, *first);
  const DeviceAddress address = allocation.address;
  ASSERT_TRUE(Pool().Free(allocation).has_value());

  auto on_other = Alloc(4096, *second);
  EXPECT_NE(on_other.address, address) << "another stream must wait for the freeing stream's work";
  auto on_same = Alloc(4096, *first);
  EXPECT_EQ(on_same.address, address) << "the freeing stream may reuse it at once";
  ASSERT_TRUE(Pool().Free(on_same).has_value());

  ASSERT_TRUE(first->Synchronize(5s).has_value());
  auto after_sync = Alloc(4096, *second);
  EXPECT_EQ(after_sync.address, address)
      << "after the freeing stream completed, anyone may reuse it";
  EXPECT_TRUE(Pool().Free(on_other).has_value());
  EXPECT_TRUE(Pool().Free(after_sync).has_value());
}

TEST_F(MemoryPoolTest, StreamCallbackReleasesFreesWithoutASynchronize) {
  auto first = NewStream(0, "job-a");
  auto second = NewStream(0, "job-b");
  // A batch of frees makes the pool enqueue a callback on `first`, which
  // releases them to every stream as soon as `first` reaches it.
  std::vector<Allocation> batch;
  for (int i = 0; i < 40; ++i) batch.push_back(Alloc(8192, *first));
  const DeviceAddress address = batch.front().address;
  for (auto& allocation : batch) ASSERT_TRUE(Pool().Free(allocation).has_value());
  EXPECT_TRUE(WaitUntilReusable(address, *second, 40));
}

TEST_F(MemoryPoolTest, StreamsThatComeAndGoLeaveNothingBehindInThePool) {
  // A collective makes new streams at every re-form: the pool keeps no
  // entry for a stream once nothing of it waits.
  for (int round = 0; round < 100; ++round) {
    auto stream = NewStream(0, "job-a");
    ASSERT_NE(stream, nullptr);
    std::vector<Allocation> batch;
    const int count = round % 2 == 0 ? 40 : 3;  // a promotion callback's batch, or a few
    for (int i = 0; i < count; ++i) batch.push_back(Alloc(8192, *stream));
    for (auto& allocation : batch) ASSERT_TRUE(Pool().Free(allocation).has_value());
    if (round % 2 == 1) {
      ASSERT_TRUE(stream->Synchronize(5s).has_value());
    }
  }
  EXPECT_TRUE(::rasd::testing::Eventually(
      [&] { return Pool().Stats().streams_with_pending_frees == 0; }, 5s))
      << Pool().Stats().streams_with_pending_frees << " stream(s) still kept";
  EXPECT_TRUE(Pool().CheckConsistency().has_value());
}

TEST_F(MemoryPoolTest, ShortageReleasesOtherStreamsFreesBeforeGrowing) {
  MakeRuntime(1, 64 << 20, 4 << 20);
  auto first = NewStream(0, "job-a");
  auto second = NewStream(0, "job-b");
  auto big = Alloc(3 << 20, *first);
  const DeviceAddress address = big.address;
  ASSERT_TRUE(Pool().Free(big).has_value());  // one free: no callback yet
  // `second` finds nothing it may use; the pool asks `first` to report,
  // grows meanwhile, and reuses the block once `first` has answered.
  EXPECT_TRUE(WaitUntilReusable(address, *second, 8, 3 << 20));
}

TEST_F(MemoryPoolTest, RetiredFreePageIsNeverHandedOutAgain) {
  auto stream = NewStream();
  auto allocation = Alloc(64 * 1024, *stream);
  const DeviceAddress bad = allocation.address + 5 * 4096 + 17;
  const DeviceAddress bad_page = allocation.address + 5 * 4096;
  ASSERT_TRUE(Pool().Free(allocation).has_value());
  ASSERT_TRUE(stream->Synchronize(5s).has_value());
  ASSERT_TRUE(Pool().Retire(bad).has_value());
  ASSERT_TRUE(Pool().Retire(bad + 1).has_value()) << "retiring the same page twice is fine";
  auto stats = Pool().Stats();
  EXPECT_EQ(stats.retired_pages, 1u);
  EXPECT_EQ(stats.retired_bytes, 4096u);
  std::vector<Allocation> all;
  for (int i = 0; i < 2000; ++i) {
    auto next = Pool().Allocate(4096, *stream);
    if (!next) break;
    EXPECT_FALSE(next->address <= bad_page && bad_page < next->address + 4096)
        << "retired page reissued";
    all.push_back(*next);
  }
  EXPECT_GT(all.size(), 1000u);
  for (auto& allocation_to_free : all) ASSERT_TRUE(Pool().Free(allocation_to_free).has_value());
}

TEST_F(MemoryPoolTest, RetiringAnAllocatedPageTakesEffectOnFree) {
  auto stream = NewStream(0, "job-llm");
  auto allocation = Alloc(32 * 1024, *stream);
  const DeviceAddress bad_page = allocation.address + 2 * 4096;
  ASSERT_TRUE(Pool().Retire(bad_page + 8).has_value());
  auto owner = Pool().OwnerOf(bad_page + 8);
  ASSERT_TRUE(owner.has_value()) << "the page is still in use by its allocation";
  EXPECT_EQ(owner->owner, "job-llm");
  EXPECT_EQ(owner->address, allocation.address);
  ASSERT_TRUE(Pool().Free(allocation).has_value());
  ASSERT_TRUE(stream->Synchronize(5s).has_value());
  EXPECT_FALSE(Pool().OwnerOf(bad_page).has_value());
  for (int i = 0; i < 64; ++i) {
    auto next = Alloc(4096, *stream);
    EXPECT_NE(next.address, bad_page);
  }
  EXPECT_EQ(Pool().Retire(0x1234).error().code, ErrorCode::kNotFound);
}

// After a reset that freed the device's memory: the arenas are forgotten,
// never released; a live allocation's Free settles the accounts; retired
// pages at stable addresses (the simulator's) stay out.
TEST_F(MemoryPoolTest, ForgettingTheArenasKeepsTheAccountsAndReservesAfresh) {
  auto stream = NewStream(0, "job-a");
  auto live = Alloc(10000, *stream);
  auto freed = Alloc(64 * 1024, *stream);
  const DeviceAddress bad_page = freed.address + 4096;
  ASSERT_TRUE(Pool().Free(freed).has_value());
  ASSERT_TRUE(Pool().Retire(bad_page).has_value());
  const PoolStats before = Pool().Stats();
  ASSERT_GE(before.arenas, 1u);

  EXPECT_EQ(Pool().ForgetArenas(), 1u);
  PoolStats after = Pool().Stats();
  EXPECT_EQ(after.arenas, 0u);
  EXPECT_EQ(after.reserved_bytes, 0u);
  EXPECT_EQ(after.live_allocations, 1u) << "its holder still has it";
  EXPECT_EQ(after.allocated_bytes, 10000u);
  EXPECT_EQ(after.retired_pages, 1u) << "a stable address names the same memory";
  EXPECT_TRUE(Pool().IsRetired(bad_page));
  EXPECT_FALSE(Pool().OwnerOf(live.address).has_value()) << "in no arena any more";
  EXPECT_TRUE(Pool().Allocations().empty());
  ASSERT_TRUE(Pool().CheckConsistency().has_value());

  auto fresh = Alloc(4096, *stream);
  EXPECT_EQ(Pool().Stats().arenas, 1u) << "reserved afresh";
  auto owner = Pool().OwnerOf(fresh.address);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->owner, "job-a");

  const Allocation stale = live;
  ASSERT_TRUE(Pool().Free(live).has_value());
  Allocation twice = stale;
  EXPECT_EQ(Pool().Free(twice).error().code, ErrorCode::kInvalidArgument);
  after = Pool().Stats();
  EXPECT_EQ(after.live_allocations, 1u);
  EXPECT_EQ(after.allocated_bytes, 4096u);
  ASSERT_TRUE(Pool().Free(fresh).has_value());
  ASSERT_TRUE(Pool().CheckConsistency().has_value());
}

TEST_F(MemoryPoolTest, OwnerOfNamesTheAllocationItsJobAndStream) {
  auto llm = NewStream(0, "llm-0");
  auto train = NewStream(0, "train-3");
  auto a = Alloc(10000, *llm);
  auto b = Alloc(300, *train);
  auto owner_a = Pool().OwnerOf(a.address + 9999);
  ASSERT_TRUE(owner_a.has_value());
  EXPECT_EQ(owner_a->owner, "llm-0");
  EXPECT_EQ(owner_a->stream, llm->Handle());
  EXPECT_EQ(owner_a->size, 10000u);
  auto owner_b = Pool().OwnerOf(b.address);
  ASSERT_TRUE(owner_b.has_value());
  EXPECT_EQ(owner_b->owner, "train-3");
  EXPECT_FALSE(Pool().OwnerOf(0xdead).has_value());
}

TEST_F(MemoryPoolTest, OutOfMemoryIsATypedErrorAndLeavesThePoolUsable) {
  MakeRuntime(1, 16 << 20, 4 << 20);
  auto stream = NewStream();
  std::vector<Allocation> held;
  for (int i = 0; i < 4; ++i) held.push_back(Alloc(3 << 20, *stream));
  auto refused = Pool().Allocate(6 << 20, *stream);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kOutOfMemory);
  ASSERT_TRUE(Pool().Free(held.back()).has_value());
  held.pop_back();
  EXPECT_TRUE(Pool().Allocate(3 << 20, *stream).has_value());
}

struct RandomizedCase {
  int streams;
  bool synchronize;  // also exercise Synchronize-driven promotion
  int steps;
  // Now and then a reset that freed the memory: the pool forgets its arenas
  // (the live allocations become orphans, freed later).
  bool forget = false;
};

class RandomizedPoolTest : public MemoryPoolTest,
                           public ::testing::WithParamInterface<RandomizedCase> {};

// Random allocate/free/retire/synchronize (and forget) sequences against a
// model of what is live; every so often the pool walks its own structures.
TEST_P(RandomizedPoolTest, KeepsTheInvariants) {
  const RandomizedCase param = GetParam();
  // Forgotten arenas are never returned to the simulator: room for them.
  MakeRuntime(1, param.forget ? std::uint64_t{2} << 30 : 256 << 20, 16 << 20);
  auto streams = std::vector<std::unique_ptr<Stream>>();
  for (int i = 0; i < param.streams; ++i)
    streams.push_back(NewStream(0, "job-" + std::to_string(i)));
  std::mt19937_64 random(12345);
  std::map<DeviceAddress, Allocation> live;  // by address
  std::set<DeviceAddress> retired;
  std::uint64_t live_bytes = 0;
  std::vector<Allocation> orphans;  // held across a forget: no memory, still to free
  std::uint64_t orphan_bytes = 0;
  bool forgot = false;
  for (int step = 0; step < param.steps; ++step) {
    const int action = static_cast<int>(random() % 100);
    Stream& stream = *streams[random() % streams.size()];
    if (action < 55 || live.empty()) {
      const std::uint64_t bytes =
          (random() % 4 == 0) ? (random() % (4 << 20)) + 1 : (random() % 8192) + 1;
      auto allocation = Pool().Allocate(bytes, stream);
      if (!allocation) {
        ASSERT_EQ(allocation.error().code, ErrorCode::kOutOfMemory);
        continue;
      }
      const DeviceAddress begin = allocation->address, end = begin + MemoryPool::SizeClass(bytes);
      // No overlap with any live allocation.
      auto after = live.lower_bound(begin);
      if (after != live.end()) {
        ASSERT_GE(after->first, end) << "overlap at step " << step;
      }
      if (after != live.begin()) {
        auto before = std::prev(after);
        ASSERT_LE(before->first + MemoryPool::SizeClass(before->second.size), begin)
            << "overlap at step " << step;
      }
      // No retired page reissued.
      auto page = retired.lower_bound(begin / 4096 * 4096);
      ASSERT_TRUE(page == retired.end() || *page >= end)
          << "retired page reissued at step " << step;
      live.emplace(begin, *allocation);
      live_bytes += bytes;
    } else if (action < 95) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(random() % live.size()));
      live_bytes -= it->second.size;
      ASSERT_TRUE(Pool().Free(it->second).has_value());
      live.erase(it);
    } else if (action < 98) {
      // Retire a page inside a live allocation or anywhere in the pool.
      auto it = live.begin();
      std::advance(it, static_cast<long>(random() % live.size()));
      const DeviceAddress address = it->first + random() % it->second.size;
      ASSERT_TRUE(Pool().Retire(address).has_value());
      retired.insert(address / 4096 * 4096);
    } else if (param.forget && action == 99 && random() % 20 == 0) {
      ASSERT_EQ(Pool().ForgetArenas(), live.size()) << "step " << step;
      for (auto& [address, allocation] : live) {
        orphans.push_back(allocation);
        orphan_bytes += allocation.size;
      }
      live.clear();
      live_bytes = 0;
      forgot = true;
      ASSERT_EQ(Pool().Stats().reserved_bytes, 0u);
    } else if (param.forget && action == 98 && !orphans.empty()) {
      const std::size_t which = random() % orphans.size();
      Allocation stale = orphans[which];
      orphan_bytes -= orphans[which].size;
      ASSERT_TRUE(Pool().Free(orphans[which]).has_value()) << "step " << step;
      orphans.erase(orphans.begin() + static_cast<std::ptrdiff_t>(which));
      ASSERT_FALSE(Pool().Free(stale).has_value()) << "an orphan freed twice, step " << step;
    } else if (param.synchronize) {
      ASSERT_TRUE(stream.Synchronize(5s).has_value());
    }
    if (step % 50 == 0) {
      const auto consistent = Pool().CheckConsistency();
      ASSERT_TRUE(consistent.has_value()) << "step " << step << ": " << consistent.error().message;
    }
    if (step % 1000 == 0) {
      const auto stats = Pool().Stats();
      ASSERT_EQ(stats.allocated_bytes, live_bytes + orphan_bytes);
      ASSERT_EQ(stats.live_allocations, live.size() + orphans.size());
      ASSERT_EQ(stats.retired_pages, retired.size());
      // Orphans and retired pages no arena holds yet are outside the arenas.
      if (!forgot) {
        ASSERT_LE(stats.allocated_bytes + stats.retired_bytes, stats.reserved_bytes);
      }
    }
  }
  for (auto& [address, allocation] : live) ASSERT_TRUE(Pool().Free(allocation).has_value());
  for (auto& allocation : orphans) ASSERT_TRUE(Pool().Free(allocation).has_value());
  EXPECT_EQ(Pool().Stats().allocated_bytes, 0u);
  EXPECT_EQ(Pool().Stats().live_allocations, 0u);
  ASSERT_TRUE(Pool().CheckConsistency().has_value());
  if (param.forget) {
    EXPECT_TRUE(forgot) << "the case never forgot its arenas";
  }
}

INSTANTIATE_TEST_SUITE_P(Pool, RandomizedPoolTest,
                         ::testing::Values(RandomizedCase{3, true, 20000},
                                           RandomizedCase{1, false, 20000},
                                           RandomizedCase{2, false, 20000},
                                           RandomizedCase{3, true, 20000, true},
                                           RandomizedCase{2, false, 20000, true}));

}  // namespace
}  // namespace rasd::runtime::testing
