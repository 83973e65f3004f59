#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::jobs {

using SequenceId = std::uint64_t;

// The KV cache's blocks: fixed-size pieces of one device region (an
// allocation of the device's memory pool), handed to sequences a block at a
// time as their keys and values grow, as PagedAttention manages them. Each
// sequence has a block table: the blocks holding its tokens, in order.
//
// A memory fault costs the sequences on the faulty page, not the cache:
// RetirePage takes every block overlapping the page out of use for good and
// names the sequences that had one, whose tables are then empty (their
// cache is recomputed on healthy blocks: re-prefilled from the prompt and
// the tokens generated so far). Blocks of theirs on healthy pages return to
// the free list.
//
// Not thread-safe: one inference replica's scheduler owns it.
class KvBlockPool {
 public:
  struct Options {
    drivers::DeviceAddress base = 0;  // the region's first byte
    std::uint64_t bytes = 0;          // the region's size
    std::uint64_t block_bytes = 0;    // one block: tokens_per_block tokens' keys and values
    std::uint32_t tokens_per_block = 16;
  };
  struct Stats {
    std::uint64_t total = 0;    // blocks in the region, retired ones included
    std::uint64_t used = 0;     // in a sequence's table
    std::uint64_t free = 0;     // ready to hand out
    std::uint64_t retired = 0;  // on a faulty page: never handed out again
    std::uint64_t sequences = 0;
  };

  // kInvalidArgument for a region that holds no block, or a block size or
  // tokens per block of 0.
  static Result<KvBlockPool> Create(const Options& options);

  // Blocks a sequence of `tokens` tokens needs.
  std::uint64_t BlocksFor(std::uint64_t tokens) const;
  // Whether `tokens` more tokens of `sequence` (a new one: all of them)
  // fit in the free blocks now: admission and preemption ask this.
  bool CanGrow(SequenceId sequence, std::uint64_t tokens) const;
  // Grows `sequence` (a new one is started) to hold `tokens` more tokens,
  // taking the lowest free blocks. kOutOfMemory, with nothing taken, when
  // the free blocks do not suffice.
  Status Grow(SequenceId sequence, std::uint64_t tokens);
  // Cuts `sequence` back to its first `tokens` tokens (a step that grew it
  // failed before its keys and values were stored): the blocks past them
  // return to the free list. More tokens than it holds: nothing.
  void Truncate(SequenceId sequence, std::uint64_t tokens);
  // Ends `sequence`: its blocks return to the free list. Unknown: nothing.
  void Release(SequenceId sequence);

  // The sequence's blocks, in token order, as device addresses; empty for
  // an unknown sequence.
  std::vector<drivers::DeviceAddress> BlockTable(SequenceId sequence) const;
  std::uint64_t Tokens(SequenceId sequence) const;
  // The free block handed out next (the lowest), or unset when none is free.
  std::optional<drivers::DeviceAddress> NextFreeBlock() const;
  // Every sequence it knows, ascending.
  std::vector<SequenceId> Sequences() const;
  // The sequences with a block overlapping [address, address + bytes).
  std::set<SequenceId> SequencesOn(drivers::DeviceAddress address, std::uint64_t bytes) const;

  // The device page [page, page + page_bytes) is faulty: its blocks are
  // retired and the sequences that used them lose their whole cache (their
  // other blocks are freed; the sequence stays known with 0 tokens, to be
  // grown again by its recompute). Returns those sequences. A page outside
  // the region retires nothing.
  std::set<SequenceId> RetirePage(drivers::DeviceAddress page, std::uint64_t page_bytes);

  Stats GetStats() const;

 private:
  explicit KvBlockPool(const Options& options);
  std::uint64_t BlockOf(drivers::DeviceAddress address) const;
  // The first and last block overlapping [address, address + bytes), or
  // nullopt when none does.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> BlocksOverlapping(
      drivers::DeviceAddress address, std::uint64_t bytes) const;

  Options options_;
  std::uint64_t blocks_ = 0;
  std::set<std::uint64_t> free_;  // block indexes; the lowest goes first
  std::set<std::uint64_t> retired_;
  struct SequenceState {
    std::vector<std::uint64_t> blocks;
    std::uint64_t tokens = 0;
  };
  std::map<SequenceId, SequenceState> sequences_;
};

}  // namespace rasd::jobs
