#include "rasd/runtime/memory_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "rasd/runtime/stream.h"

namespace rasd::runtime {
namespace {

constexpr std::uint64_t kAlignment = 256;
// Classes up to this size keep freed blocks in an exact-size cache instead
// of coalescing them at once: the common repeated-size case stays O(1).
constexpr std::uint64_t kMaxCachedClass = std::uint64_t{1} << 20;
// How many ineligible (other stream's, not yet completed) free blocks a
// best-fit search looks past before it treats the pool as under pressure.
constexpr int kMaxSearch = 32;
constexpr std::uint64_t kLargeStep = 64 * 1024;
// A stream's frees are promoted (made reusable by other streams) by one
// stream callback per batch: enqueueing one per free would cost more than
// the allocation itself.
constexpr std::size_t kPromotionBatch = 32;

std::uint64_t RoundUp(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

struct MemoryPool::State {
  enum class BlockState : std::uint8_t { kFree, kAllocated, kRetired };

  struct Arena;
  struct Block {
    drivers::DeviceAddress address = 0;
    std::uint64_t size = 0;
    Block* prev = nullptr;  // address neighbours within the arena
    Block* next = nullptr;
    Arena* arena = nullptr;
    BlockState state = BlockState::kFree;
    bool cached = false;
    std::uint64_t requested = 0;
    std::string owner;
    // Allocated: the allocating stream. Free: the stream whose completion
    // makes it reusable by others; 0 once it is reusable by every stream.
    std::uint64_t stream = 0;
    std::uint64_t free_sequence = 0;
    bool in_pending_list = false;  // listed once in its stream's PendingFrees
    // Allocated from an arena a device reset freed (ForgetArenas): in no
    // arena any more; its Free only settles the accounts.
    bool orphaned = false;
    // Bumped whenever the node is recycled, so that a list entry made for an
    // earlier use of the node is recognised as stale.
    std::uint64_t generation = 0;
    std::vector<std::pair<drivers::DeviceAddress, drivers::DeviceAddress>> retire_on_free;

    drivers::DeviceAddress End() const { return address + size; }
  };
  struct Arena {
    drivers::DeviceAddress base = 0;
    std::uint64_t size = 0;
    Block* first = nullptr;
  };
  struct PendingFrees {
    std::uint64_t sequence = 0;
    bool callback_in_flight = false;
    std::vector<std::pair<Block*, std::uint64_t>> blocks;  // with the node's generation
  };

  std::mutex mutex;
  std::map<std::pair<std::uint64_t, drivers::DeviceAddress>, Block*> free_blocks;  // best fit
  std::unordered_map<std::uint64_t, std::vector<Block*>> caches;                   // by class size
  std::map<drivers::DeviceAddress, Arena> arenas;
  std::unordered_map<std::uint64_t, PendingFrees> pending;  // by stream handle
  std::set<drivers::DeviceAddress> retired_pages;
  // Retired before any arena held them (re-applied at start, from the
  // store): taken out when an arena that covers them is reserved.
  std::set<drivers::DeviceAddress> pending_retired;
  std::deque<Block> block_storage;
  std::vector<Block*> spare_blocks;
  PoolStats stats;
  std::uint64_t retire_granularity = 4096;

  Block* NewBlock() {
    if (!spare_blocks.empty()) {
      Block* block = spare_blocks.back();
      spare_blocks.pop_back();
      const std::uint64_t generation = block->generation + 1;
      *block = Block{};
      block->generation = generation;
      return block;
    }
    return &block_storage.emplace_back();
  }
  void DropBlock(Block* block) {
    ++block->generation;
    block->in_pending_list = false;
    spare_blocks.push_back(block);
  }
  // Copies a block's description into a fresh node, keeping the node's identity.
  static void CopyInto(Block* node, const Block& from) {
    const std::uint64_t generation = node->generation;
    *node = from;
    node->generation = generation;
    node->in_pending_list = false;
    node->retire_on_free.clear();
  }

  static bool Eligible(const Block& block, std::uint64_t stream) {
    return block.stream == 0 || block.stream == stream;
  }

  void RemoveFree(Block* block) {
    if (block->cached) {
      auto& cache = caches[block->size];
      auto it = std::find(cache.begin(), cache.end(), block);
      if (it != cache.end()) {
        *it = cache.back();
        cache.pop_back();
      }
      block->cached = false;
    } else {
      free_blocks.erase({block->size, block->address});
    }
  }

  // Merges `block` into `into` (its left neighbour). Both must be out of the
  // free structures.
  void Absorb(Block* into, Block* block) {
    into->size += block->size;
    into->free_sequence = std::max(into->free_sequence, block->free_sequence);
    into->next = block->next;
    if (block->next != nullptr) block->next->prev = into;
    DropBlock(block);
  }

  // Free neighbours merge when they wait for the same stream (or for none):
  // a merged block is reusable by exactly the streams that could use both.
  static bool Mergeable(const Block* block, const Block* neighbour) {
    return neighbour != nullptr && neighbour->state == BlockState::kFree && !neighbour->cached &&
           neighbour->stream == block->stream;
  }

  // Puts a free block into the best-fit map, coalescing it with mergeable
  // neighbours. Returns the block that now holds its memory.
  Block* InsertFree(Block* block) {
    block->state = BlockState::kFree;
    block->cached = false;
    if (Mergeable(block, block->prev)) {
      Block* left = block->prev;
      RemoveFree(left);
      Absorb(left, block);
      block = left;
    }
    if (Mergeable(block, block->next)) {
      Block* right = block->next;
      RemoveFree(right);
      Absorb(block, right);
    }
    free_blocks.emplace(std::pair{block->size, block->address}, block);
    if (block->stream != 0) Track(block);
    return block;
  }

  // Releases a freed block to the cache or the best-fit map, and lists it
  // with its stream's pending frees.
  void Release(Block* block) {
    block->state = BlockState::kFree;
    if (block->size <= kMaxCachedClass && SizeClass(block->size) == block->size) {
      block->cached = true;
      caches[block->size].push_back(block);
      Track(block);
    } else {
      InsertFree(block);  // tracks whichever block survives the merge
    }
  }

  // Cuts [from, to) out of `block` (not in any free structure) as a new
  // block, leaving the pieces before and after as blocks of their own.
  // Returns the middle block.
  Block* Carve(Block* block, drivers::DeviceAddress from, drivers::DeviceAddress to) {
    if (from > block->address) {
      Block* left = NewBlock();
      CopyInto(left, *block);
      left->size = from - block->address;
      left->next = block;
      if (left->prev != nullptr) {
        left->prev->next = left;
      } else {
        left->arena->first = left;
      }
      block->prev = left;
      block->address = from;
      block->size -= left->size;
    }
    if (to < block->End()) {
      Block* right = NewBlock();
      CopyInto(right, *block);
      right->address = to;
      right->size = block->End() - to;
      right->prev = block;
      if (right->next != nullptr) right->next->prev = right;
      block->next = right;
      block->size = to - block->address;
    }
    return block;
  }

  // Splits `block` (out of the free structures, about to be allocated) so
  // that it is exactly `size`; the rest goes back as a free block.
  void Trim(Block* block, std::uint64_t size) {
    block->state = BlockState::kAllocated;  // so that the rest does not merge back into it
    if (block->size - size < kAlignment) return;
    Block* rest = NewBlock();
    rest->address = block->address + size;
    rest->size = block->size - size;
    rest->arena = block->arena;
    rest->prev = block;
    rest->next = block->next;
    rest->stream = block->stream;
    rest->free_sequence = block->free_sequence;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    InsertFree(rest);
  }

  Block* TakeFromCache(std::uint64_t size, std::uint64_t stream) {
    auto it = caches.find(size);
    if (it == caches.end()) return nullptr;
    auto& cache = it->second;
    for (std::size_t i = cache.size();
         i > 0 && cache.size() - i < static_cast<std::size_t>(kMaxSearch); --i) {
      Block* block = cache[i - 1];
      if (!Eligible(*block, stream)) continue;
      cache[i - 1] = cache.back();
      cache.pop_back();
      block->cached = false;
      return block;
    }
    return nullptr;
  }

  Block* TakeBestFit(std::uint64_t size, std::uint64_t stream) {
    int looked = 0;
    for (auto it = free_blocks.lower_bound({size, 0});
         it != free_blocks.end() && looked < kMaxSearch; ++it, ++looked) {
      Block* block = it->second;
      if (!Eligible(*block, stream)) continue;
      free_blocks.erase(it);
      Trim(block, size);
      return block;
    }
    return nullptr;
  }

  // Lists a free block that waits for its stream, once.
  // Drops the stream's entry when nothing of it waits: no frees to promote
  // and no callback to come (one enqueued earlier may still carry an older
  // sequence number, so an entry is never dropped under it).
  void ForgetIfIdle(std::uint64_t stream) {
    auto it = pending.find(stream);
    if (it != pending.end() && it->second.blocks.empty() && !it->second.callback_in_flight)
      pending.erase(it);
  }
  // A promotion callback of the stream ran, or could not be enqueued.
  void CallbackDone(std::uint64_t stream) {
    if (auto it = pending.find(stream); it != pending.end()) it->second.callback_in_flight = false;
    ForgetIfIdle(stream);
  }

  void Track(Block* block) {
    if (block->in_pending_list) return;
    block->in_pending_list = true;
    pending[block->stream].blocks.emplace_back(block, block->generation);
  }

  // Moves every cached block into the best-fit map, coalescing as it goes.
  void FlushCaches() {
    std::vector<Block*> blocks;
    for (auto& [size, cache] : caches) {
      blocks.insert(blocks.end(), cache.begin(), cache.end());
      cache.clear();
    }
    for (Block* block : blocks) {
      block->cached = false;
      InsertFree(block);
    }
  }

  // The stream's frees up to `up_to` are reusable by everyone now.
  void Promote(std::uint64_t stream, std::uint64_t up_to) {
    auto it = pending.find(stream);
    if (it == pending.end()) return;
    std::vector<std::pair<Block*, std::uint64_t>> ready;
    std::erase_if(it->second.blocks, [&](const std::pair<Block*, std::uint64_t>& entry) {
      Block* block = entry.first;
      if (block->generation != entry.second) return true;  // node recycled since
      // Reused by its own stream since: it is listed again when freed.
      if (block->state != BlockState::kFree || block->stream != stream) {
        block->in_pending_list = false;
        return true;
      }
      if (block->free_sequence > up_to)
        return false;  // freed again after the callback was enqueued
      block->in_pending_list = false;
      ready.push_back(entry);
      return true;
    });
    for (const auto& [block, generation] : ready) {
      if (block->generation != generation || block->state != BlockState::kFree ||
          block->stream != stream) {
        continue;  // merged into a neighbour meanwhile
      }
      block->stream = 0;
      if (!block->cached) {
        free_blocks.erase({block->size, block->address});
        InsertFree(block);
      }
    }
  }

  Block* FindBlock(drivers::DeviceAddress address) const {
    auto arena = arenas.upper_bound(address);
    if (arena == arenas.begin()) return nullptr;
    --arena;
    if (address >= arena->second.base + arena->second.size) return nullptr;
    for (Block* block = arena->second.first; block != nullptr; block = block->next) {
      if (address >= block->address && address < block->End()) return block;
    }
    return nullptr;
  }

  // Retires the pending pages that fall in a newly reserved arena, whose
  // one block is not in any free structure yet. Returns false (and touches
  // nothing) when there are none.
  bool ApplyPendingRetirements(Arena& arena) {
    auto first = pending_retired.lower_bound(arena.base);
    if (first == pending_retired.end() || *first >= arena.base + arena.size) return false;
    InsertFree(arena.first);
    while (first != pending_retired.end() && *first < arena.base + arena.size) {
      const drivers::DeviceAddress page = *first;
      const drivers::DeviceAddress end =
          std::min(page + retire_granularity, arena.base + arena.size);
      for (drivers::DeviceAddress cursor = page; cursor < end;) {
        Block* block = FindBlock(cursor);
        if (block == nullptr) break;
        const drivers::DeviceAddress to = std::min(end, block->End());
        if (block->state == BlockState::kFree) RetireFreeRange(block, cursor, to);
        cursor = to;
      }
      first = pending_retired.erase(first);
    }
    return true;
  }

  // Takes [from, to) of a free block out of service.
  void RetireFreeRange(Block* block, drivers::DeviceAddress from, drivers::DeviceAddress to) {
    RemoveFree(block);
    Block* middle = Carve(block, from, to);
    middle->state = BlockState::kRetired;
    middle->stream = 0;
    for (Block* piece : {middle->prev, middle->next}) {
      if (piece != nullptr && piece->state == BlockState::kFree && !piece->cached &&
          free_blocks.find({piece->size, piece->address}) == free_blocks.end()) {
        InsertFree(piece);
      }
    }
  }

  // Walks every arena and free structure; returns what is inconsistent.
  std::string Inconsistency() const {
    std::size_t uncached_free = 0;
    for (const auto& [base, arena] : arenas) {
      drivers::DeviceAddress expected = arena.base;
      const Block* previous = nullptr;
      for (const Block* block = arena.first; block != nullptr; block = block->next) {
        if (block->prev != previous)
          return fmt::format("broken prev link at 0x{:x}", block->address);
        if (block->address != expected)
          return fmt::format("gap or overlap at 0x{:x}", block->address);
        if (block->arena != &arena)
          return fmt::format("block 0x{:x} names the wrong arena", block->address);
        if (block->state == BlockState::kFree) {
          if (block->cached) {
            auto cache = caches.find(block->size);
            if (cache == caches.end() ||
                std::count(cache->second.begin(), cache->second.end(), block) != 1) {
              return fmt::format("cached block 0x{:x} is not in its cache once", block->address);
            }
          } else {
            auto entry = free_blocks.find({block->size, block->address});
            if (entry == free_blocks.end() || entry->second != block) {
              return fmt::format("free block 0x{:x}+{} is not in the free map", block->address,
                                 block->size);
            }
            ++uncached_free;
          }
        }
        expected = block->End();
        previous = block;
      }
      if (expected != arena.base + arena.size)
        return fmt::format("arena 0x{:x} is not fully covered", arena.base);
    }
    if (uncached_free != free_blocks.size()) {
      return fmt::format("free map has {} entries for {} free blocks", free_blocks.size(),
                         uncached_free);
    }
    return {};
  }

  void AddReserved(const Arena& arena) {
    stats.reserved_bytes += arena.size;
    stats.arenas += 1;
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
  }
};

std::uint64_t MemoryPool::SizeClass(std::uint64_t bytes) {
  if (bytes <= 2 * kAlignment) return RoundUp(std::max<std::uint64_t>(bytes, 1), kAlignment);
  // Above the cached classes, exact-size reuse matters less than waste:
  // 64 KiB steps waste at most 6% at 1 MiB and next to nothing beyond.
  if (bytes > kMaxCachedClass) return RoundUp(bytes, kLargeStep);
  const int log2 = std::bit_width(bytes) - 1;
  const std::uint64_t step = std::max(kAlignment, std::uint64_t{1} << (log2 - 3));
  return RoundUp(bytes, step);
}

MemoryPool::MemoryPool(drivers::Driver& driver, Device& device, PoolOptions options)
    : driver_(driver), device_(device), state_(std::make_shared<State>()) {
  state_->retire_granularity =
      std::max<std::uint64_t>(device.Properties().retire_granularity, kAlignment);
  arena_bytes_ = RoundUp(std::max(options.arena_bytes, state_->retire_granularity),
                         state_->retire_granularity);
}

MemoryPool::~MemoryPool() {
  std::lock_guard lock(state_->mutex);
  for (const auto& [base, arena] : state_->arenas)
    (void)driver_.ReleaseMemory(device_.Index(), base);
  state_->arenas.clear();
  state_->free_blocks.clear();
  state_->caches.clear();
  state_->pending.clear();
}

Result<Allocation> MemoryPool::Allocate(std::uint64_t bytes, const Stream& stream) {
  if (auto admitted = stream.GetDevice().CheckGate(stream.GetAdmission()); !admitted)
    return Fail(admitted.error());
  if (&stream.GetDevice() != &device_) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("stream of device {} cannot allocate from device {}'s pool",
                            stream.DeviceIndex(), device_.Index()));
  }
  if (bytes == 0) return Fail(ErrorCode::kInvalidArgument, "cannot allocate 0 bytes");
  const std::uint64_t size = SizeClass(bytes);
  const std::uint64_t stream_id = stream.Handle().value;
  State& state = *state_;
  std::unique_lock lock(state.mutex);

  State::Block* block = size <= kMaxCachedClass ? state.TakeFromCache(size, stream_id) : nullptr;
  if (block == nullptr) block = state.TakeBestFit(size, stream_id);
  if (block == nullptr) {
    state.FlushCaches();
    block = state.TakeBestFit(size, stream_id);
  }
  if (block == nullptr) {
    // Before growing, ask streams with frees still waiting for promotion to
    // report completion, so that the next allocations can reuse them.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> requests;
    for (auto& [id, frees] : state.pending) {
      if (!frees.blocks.empty() && !frees.callback_in_flight) {
        frees.callback_in_flight = true;
        requests.emplace_back(id, frees.sequence);
      }
    }
    if (!requests.empty()) {
      lock.unlock();
      for (const auto& [id, sequence] : requests) RequestPromotion(id, sequence);
      lock.lock();
    }
  }
  if (block == nullptr) {
    const std::uint64_t arena_size =
        std::max(arena_bytes_, RoundUp(size, state.retire_granularity));
    auto base = driver_.ReserveMemory(device_.Index(), arena_size);
    if (!base && base.error().code != ErrorCode::kOutOfMemory) return Fail(base.error());
    if (!base) {
      // Out of device memory: wait for other streams' frees to complete.
      std::vector<std::uint64_t> streams;
      for (const auto& [id, frees] : state.pending) {
        if (!frees.blocks.empty()) streams.push_back(id);
      }
      lock.unlock();
      for (std::uint64_t id : streams) {
        (void)driver_.SynchronizeStream(drivers::StreamHandle{id}, std::chrono::seconds(5));
      }
      lock.lock();
      for (std::uint64_t id : streams) {
        state.Promote(id, UINT64_MAX);
        state.ForgetIfIdle(id);
      }
      state.FlushCaches();
      block = state.TakeBestFit(size, stream_id);
      if (block == nullptr) {
        const std::uint64_t largest =
            state.free_blocks.empty() ? 0 : state.free_blocks.rbegin()->first.first;
        return Fail(
            ErrorCode::kOutOfMemory,
            fmt::format(
                "device {}: no {} bytes free ({} reserved, {} allocated, largest free block {})",
                device_.Index(), size, state.stats.reserved_bytes, state.stats.allocated_bytes,
                largest));
      }
    } else {
      State::Arena& arena = state.arenas[*base];
      arena.base = *base;
      arena.size = arena_size;
      block = state.NewBlock();
      block->address = *base;
      block->size = arena_size;
      block->arena = &arena;
      arena.first = block;
      state.AddReserved(arena);
      if (state.ApplyPendingRetirements(arena)) {
        // The arena is free memory with retired holes: take from it as from any other.
        block = state.TakeBestFit(size, stream_id);
        if (block == nullptr) {
          return Fail(ErrorCode::kOutOfMemory,
                      fmt::format("device {}: retired pages leave no {} contiguous bytes in a new "
                                  "arena",
                                  device_.Index(), size));
        }
      } else {
        state.Trim(block, size);
      }
    }
  }

  block->state = State::BlockState::kAllocated;
  block->requested = bytes;
  block->owner = stream.Owner();
  block->stream = stream_id;
  state.stats.allocated_bytes += bytes;
  state.stats.live_allocations += 1;
  state.stats.peak_allocated_bytes =
      std::max(state.stats.peak_allocated_bytes, state.stats.allocated_bytes);
  return Allocation{block->address, bytes, block};
}

Status MemoryPool::Free(Allocation& allocation) {
  State& state = *state_;
  auto* block = static_cast<State::Block*>(allocation.block);
  std::uint64_t stream_id = 0;
  bool enqueue_callback = false;
  std::uint64_t sequence = 0;
  {
    std::lock_guard lock(state.mutex);
    if (block != nullptr && block->orphaned && block->state == State::BlockState::kAllocated &&
        block->address == allocation.address) {
      state.stats.allocated_bytes -= block->requested;
      state.stats.live_allocations -= 1;
      block->orphaned = false;
      block->state = State::BlockState::kFree;  // a stale copy of the allocation is a double free
      state.DropBlock(block);
      allocation = Allocation{};
      return {};
    }
    if (block == nullptr || block->state != State::BlockState::kAllocated ||
        block->address != allocation.address) {
      return Fail(
          ErrorCode::kInvalidArgument,
          fmt::format("device {}: 0x{:x} is not a live allocation of this pool (double free?)",
                      device_.Index(), allocation.address));
    }
    state.stats.allocated_bytes -= block->requested;
    state.stats.live_allocations -= 1;
    stream_id = block->stream;
    block->owner.clear();
    block->requested = 0;
    auto& frees = state.pending[stream_id];
    sequence = ++frees.sequence;

    auto retire = std::move(block->retire_on_free);
    block->retire_on_free.clear();
    block->free_sequence = sequence;
    if (retire.empty()) {
      state.Release(block);
    } else {
      // Carve the retired ranges out; the pieces around them are free.
      block->state = State::BlockState::kFree;
      block->cached = false;
      state.free_blocks.emplace(std::pair{block->size, block->address}, block);
      for (const auto& [from, to] : retire) {
        State::Block* holder = state.FindBlock(from);
        if (holder != nullptr && holder->state == State::BlockState::kFree) {
          state.RetireFreeRange(holder, from, std::min(to, holder->End()));
        }
      }
      // Track the free pieces that belong to this stream's pending frees.
      for (State::Block* piece = block->arena->first; piece != nullptr; piece = piece->next) {
        if (piece->state == State::BlockState::kFree && piece->stream == stream_id &&
            piece->free_sequence == sequence) {
          state.Track(piece);
        }
      }
    }
    if (!frees.callback_in_flight && frees.blocks.size() >= kPromotionBatch) {
      frees.callback_in_flight = true;
      enqueue_callback = true;
    }
    state.ForgetIfIdle(stream_id);  // a free that left nothing waiting (it merged away)
  }
  allocation = Allocation{};
  if (enqueue_callback) RequestPromotion(stream_id, sequence);
  return {};
}

void MemoryPool::RequestPromotion(std::uint64_t stream_id, std::uint64_t sequence) {
  std::weak_ptr<State> weak = state_;
  auto enqueued = driver_.EnqueueCallback(drivers::StreamHandle{stream_id},
                                          [weak, stream_id, sequence](const Status&) {
                                            // Completed or dropped (abort, reset): either way the
                                            // stream no longer touches memory freed before this
                                            // point.
                                            if (auto shared = weak.lock()) {
                                              std::lock_guard lock(shared->mutex);
                                              shared->Promote(stream_id, sequence);
                                              shared->CallbackDone(stream_id);
                                            }
                                          });
  if (!enqueued) {
    // The stream is gone or failed: nothing of it runs any more.
    std::lock_guard lock(state_->mutex);
    state_->Promote(stream_id, UINT64_MAX);
    state_->CallbackDone(stream_id);
  }
}

Status MemoryPool::CheckConsistency() const {
  std::lock_guard lock(state_->mutex);
  if (std::string problem = state_->Inconsistency(); !problem.empty()) {
    return Fail(ErrorCode::kInternal, fmt::format("device {} pool: {}", device_.Index(), problem));
  }
  return {};
}

void MemoryPool::StreamCompleted(drivers::StreamHandle stream) {
  std::lock_guard lock(state_->mutex);
  state_->Promote(stream.value, UINT64_MAX);
  state_->ForgetIfIdle(stream.value);
}

void MemoryPool::StreamClosing(drivers::StreamHandle stream) {
  {
    std::lock_guard lock(state_->mutex);
    auto it = state_->pending.find(stream.value);
    if (it == state_->pending.end()) return;
    if (it->second.blocks.empty()) {
      state_->ForgetIfIdle(stream.value);
      return;
    }
    // Even with a callback in flight: it promotes only the frees before it.
    it->second.callback_in_flight = true;
  }
  RequestPromotion(stream.value, UINT64_MAX);
}

std::uint64_t MemoryPool::ForgetArenas() {
  State& state = *state_;
  std::lock_guard lock(state.mutex);
  std::uint64_t orphaned = 0;
  for (auto& [base, arena] : state.arenas) {
    for (State::Block* block = arena.first; block != nullptr;) {
      State::Block* next = block->next;
      if (block->state == State::BlockState::kAllocated) {
        block->orphaned = true;
        block->prev = block->next = nullptr;
        block->arena = nullptr;
        block->retire_on_free.clear();
        ++orphaned;
      } else {
        state.DropBlock(block);  // a stale PendingFrees entry is recognised by its generation
      }
      block = next;
    }
  }
  state.arenas.clear();
  state.free_blocks.clear();
  state.caches.clear();
  state.stats.reserved_bytes = 0;
  state.stats.arenas = 0;
  // A stable address names the same memory after the reset: kept out of
  // the arenas reserved from now on. Any other was a virtual address of
  // the context the reset destroyed and names nothing now.
  std::set<drivers::DeviceAddress> kept;
  for (drivers::DeviceAddress page : state.retired_pages) {
    if (driver_.IsStableDeviceAddress(device_.Index(), page)) kept.insert(page);
  }
  const std::uint64_t dropped = state.retired_pages.size() - kept.size();
  state.stats.retired_pages -= dropped;
  state.stats.retired_bytes -= dropped * state.retire_granularity;
  state.pending_retired = kept;
  state.retired_pages = std::move(kept);
  return orphaned;
}

bool MemoryPool::IsRetired(drivers::DeviceAddress address) const {
  State& state = *state_;
  std::lock_guard lock(state.mutex);
  return state.retired_pages.contains(address / state.retire_granularity *
                                      state.retire_granularity);
}

Status MemoryPool::Retire(drivers::DeviceAddress address) {
  State& state = *state_;
  std::lock_guard lock(state.mutex);
  const drivers::DeviceAddress page = address / state.retire_granularity * state.retire_granularity;
  const drivers::DeviceAddress page_end = page + state.retire_granularity;
  if (state.FindBlock(page) == nullptr) {
    // Not reserved yet: the device's memory, but no arena holds it. The
    // page is kept out when one does.
    if (!driver_.IsStableDeviceAddress(device_.Index(), address)) {
      return Fail(ErrorCode::kNotFound,
                  fmt::format("device {}: 0x{:x} is not in the pool", device_.Index(), address));
    }
    if (!state.retired_pages.insert(page).second) return {};
    state.pending_retired.insert(page);
    state.stats.retired_pages += 1;
    state.stats.retired_bytes += state.retire_granularity;
    return {};
  }
  if (!state.retired_pages.insert(page).second) return {};
  state.stats.retired_pages += 1;
  state.stats.retired_bytes += state.retire_granularity;
  drivers::DeviceAddress cursor = page;
  while (cursor < page_end) {
    State::Block* block = state.FindBlock(cursor);
    if (block == nullptr) break;
    const drivers::DeviceAddress to = std::min(page_end, block->End());
    switch (block->state) {
      case State::BlockState::kRetired:
        break;
      case State::BlockState::kAllocated:
        block->retire_on_free.emplace_back(cursor, to);
        break;
      case State::BlockState::kFree:
        state.RetireFreeRange(block, cursor, to);
        break;
    }
    cursor = to;
  }
  return {};
}

std::optional<AllocationOwner> MemoryPool::OwnerOf(drivers::DeviceAddress address) const {
  std::lock_guard lock(state_->mutex);
  const State::Block* block = state_->FindBlock(address);
  if (block == nullptr || block->state != State::BlockState::kAllocated) return std::nullopt;
  return AllocationOwner{block->address, block->requested, block->owner,
                         drivers::StreamHandle{block->stream}};
}

std::vector<AllocationOwner> MemoryPool::Allocations() const {
  std::lock_guard lock(state_->mutex);
  std::vector<AllocationOwner> allocations;
  for (const auto& [base, arena] : state_->arenas) {
    for (const State::Block* block = arena.first; block != nullptr; block = block->next) {
      if (block->state != State::BlockState::kAllocated) continue;
      allocations.push_back(
          {block->address, block->requested, block->owner, drivers::StreamHandle{block->stream}});
    }
  }
  return allocations;
}

PoolStats MemoryPool::Stats() const {
  std::lock_guard lock(state_->mutex);
  PoolStats stats = state_->stats;
  stats.streams_with_pending_frees = state_->pending.size();
  stats.largest_free_block = 0;
  if (!state_->free_blocks.empty())
    stats.largest_free_block = state_->free_blocks.rbegin()->first.first;
  for (const auto& [size, cache] : state_->caches) {
    if (!cache.empty()) stats.largest_free_block = std::max(stats.largest_free_block, size);
  }
  return stats;
}

}  // namespace rasd::runtime
