#include "rasd/jobs/kv_block_pool.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::jobs {

Result<KvBlockPool> KvBlockPool::Create(const Options& options) {
  if (options.block_bytes == 0 || options.tokens_per_block == 0)
    return Fail(ErrorCode::kInvalidArgument,
                "a KV block needs a size and at least one token per block");
  if (options.bytes / options.block_bytes == 0)
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("a region of {} bytes holds no block of {} bytes", options.bytes,
                            options.block_bytes));
  return KvBlockPool(options);
}

KvBlockPool::KvBlockPool(const Options& options)
    : options_(options), blocks_(options.bytes / options.block_bytes) {
  for (std::uint64_t block = 0; block < blocks_; ++block) free_.insert(free_.end(), block);
}

std::uint64_t KvBlockPool::BlocksFor(std::uint64_t tokens) const {
  return (tokens + options_.tokens_per_block - 1) / options_.tokens_per_block;
}

bool KvBlockPool::CanGrow(SequenceId sequence, std::uint64_t tokens) const {
  const auto it = sequences_.find(sequence);
  const std::uint64_t now = it == sequences_.end() ? 0 : it->second.tokens;
  const std::uint64_t held = it == sequences_.end() ? 0 : it->second.blocks.size();
  const std::uint64_t needed = BlocksFor(now + tokens);
  return needed <= held || needed - held <= free_.size();
}

Status KvBlockPool::Grow(SequenceId sequence, std::uint64_t tokens) {
  if (!CanGrow(sequence, tokens))
    return Fail(ErrorCode::kOutOfMemory,
                fmt::format("sequence {} needs {} more token(s); {} free block(s) of {} tokens",
                            sequence, tokens, free_.size(), options_.tokens_per_block));
  SequenceState& state = sequences_[sequence];
  state.tokens += tokens;
  while (state.blocks.size() < BlocksFor(state.tokens)) {
    state.blocks.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  return {};
}

void KvBlockPool::Truncate(SequenceId sequence, std::uint64_t tokens) {
  const auto it = sequences_.find(sequence);
  if (it == sequences_.end() || tokens >= it->second.tokens) return;
  SequenceState& state = it->second;
  state.tokens = tokens;
  while (state.blocks.size() > BlocksFor(tokens)) {
    free_.insert(state.blocks.back());
    state.blocks.pop_back();
  }
}

void KvBlockPool::Release(SequenceId sequence) {
  const auto it = sequences_.find(sequence);
  if (it == sequences_.end()) return;
  free_.insert(it->second.blocks.begin(), it->second.blocks.end());
  sequences_.erase(it);
}

std::vector<drivers::DeviceAddress> KvBlockPool::BlockTable(SequenceId sequence) const {
  std::vector<drivers::DeviceAddress> table;
  const auto it = sequences_.find(sequence);
  if (it == sequences_.end()) return table;
  for (const std::uint64_t block : it->second.blocks)
    table.push_back(options_.base + block * options_.block_bytes);
  return table;
}

std::optional<drivers::DeviceAddress> KvBlockPool::NextFreeBlock() const {
  if (free_.empty()) return std::nullopt;
  return options_.base + *free_.begin() * options_.block_bytes;
}

std::vector<SequenceId> KvBlockPool::Sequences() const {
  std::vector<SequenceId> sequences;
  for (const auto& [sequence, state] : sequences_) sequences.push_back(sequence);
  return sequences;
}

std::uint64_t KvBlockPool::Tokens(SequenceId sequence) const {
  const auto it = sequences_.find(sequence);
  return it == sequences_.end() ? 0 : it->second.tokens;
}

std::uint64_t KvBlockPool::BlockOf(drivers::DeviceAddress address) const {
  return (address - options_.base) / options_.block_bytes;
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> KvBlockPool::BlocksOverlapping(
    drivers::DeviceAddress address, std::uint64_t bytes) const {
  const drivers::DeviceAddress end = options_.base + blocks_ * options_.block_bytes;
  if (bytes == 0 || address >= end || address + bytes <= options_.base) return std::nullopt;
  return std::pair{BlockOf(std::max(address, options_.base)),
                   BlockOf(std::min(address + bytes, end) - 1)};
}

std::set<SequenceId> KvBlockPool::SequencesOn(drivers::DeviceAddress address,
                                              std::uint64_t bytes) const {
  std::set<SequenceId> on;
  const auto blocks = BlocksOverlapping(address, bytes);
  if (!blocks) return on;
  const auto [first, last] = *blocks;
  for (const auto& [sequence, state] : sequences_)
    for (const std::uint64_t block : state.blocks)
      if (block >= first && block <= last) on.insert(sequence);
  return on;
}

std::set<SequenceId> KvBlockPool::RetirePage(drivers::DeviceAddress page,
                                             std::uint64_t page_bytes) {
  const auto blocks = BlocksOverlapping(page, page_bytes);
  if (!blocks) return {};
  const auto [first, last] = *blocks;
  const std::set<SequenceId> hit = SequencesOn(page, page_bytes);
  for (std::uint64_t block = first; block <= last; ++block) {
    retired_.insert(block);
    free_.erase(block);
  }
  for (const SequenceId sequence : hit) {
    SequenceState& state = sequences_[sequence];
    for (const std::uint64_t block : state.blocks)
      if (!retired_.contains(block)) free_.insert(block);
    state.blocks.clear();
    state.tokens = 0;
  }
  return hit;
}

KvBlockPool::Stats KvBlockPool::GetStats() const {
  Stats stats{.total = blocks_,
              .free = free_.size(),
              .retired = retired_.size(),
              .sequences = sequences_.size()};
  for (const auto& [sequence, state] : sequences_) stats.used += state.blocks.size();
  return stats;
}

}  // namespace rasd::jobs
