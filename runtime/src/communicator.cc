#include "rasd/runtime/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "rasd/common/real_time.h"
#include "rasd/runtime/runtime.h"

namespace rasd::runtime {
namespace {

using drivers::DeviceAddress;
using drivers::KernelArg;

struct Chunk {
  std::uint64_t offset = 0;  // in floats
  std::uint64_t length = 0;
};

Chunk ChunkOf(std::uint64_t count, int ranks, int index) {
  const auto n = static_cast<std::uint64_t>(ranks);
  const auto i = static_cast<std::uint64_t>(index);
  const std::uint64_t begin = count * i / n;
  const std::uint64_t end = count * (i + 1) / n;
  return {begin, end - begin};
}

int Mod(int value, int n) { return ((value % n) + n) % n; }

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::Create(Runtime& runtime,
                                                           std::vector<int> devices,
                                                           StreamOptions options) {
  if (devices.empty())
    return Fail(ErrorCode::kInvalidArgument, "a communicator needs at least one rank");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    return Fail(ErrorCode::kInvalidArgument, "a device may hold only one rank");
  }
  const int size = static_cast<int>(devices.size());
  std::vector<Rank> ranks;
  for (int device : devices) {
    Rank rank;
    rank.device = device;
    auto pool = runtime.Pool(device);
    if (!pool) return Fail(pool.error());
    rank.pool = *pool;
    auto stream = runtime.CreateStream(device, options);
    if (!stream) return Fail(stream.error());
    rank.stream = std::move(*stream);
    auto make_event = [&]() -> Result<std::unique_ptr<Event>> {
      return runtime.CreateEvent(device);
    };
    auto ready = make_event();
    if (!ready) return Fail(ready.error());
    rank.ready = std::move(*ready);
    auto reduced = make_event();
    if (!reduced) return Fail(reduced.error());
    rank.reduced = std::move(*reduced);
    for (int step = 0; step + 1 < size; ++step) {
      auto sent = make_event();
      if (!sent) return Fail(sent.error());
      rank.sent.push_back(std::move(*sent));
      auto forwarded = make_event();
      if (!forwarded) return Fail(forwarded.error());
      rank.forwarded.push_back(std::move(*forwarded));
    }
    ranks.push_back(std::move(rank));
  }
  return std::unique_ptr<Communicator>(new Communicator(runtime, std::move(ranks)));
}

Communicator::Communicator(Runtime& runtime, std::vector<Rank> ranks)
    : runtime_(runtime), ranks_(std::move(ranks)) {}

Communicator::~Communicator() {
  for (auto& rank : ranks_) {
    if (rank.scratch) (void)rank.pool->Free(rank.scratch);
  }
}

Status Communicator::EnsureScratch(std::uint64_t floats) {
  const std::uint64_t bytes = std::max<std::uint64_t>(floats, 1) * sizeof(float);
  for (auto& rank : ranks_) {
    if (rank.scratch && rank.scratch.size >= bytes) continue;
    if (rank.scratch) {
      if (auto freed = rank.pool->Free(rank.scratch); !freed) return freed;
    }
    auto allocation = rank.pool->Allocate(bytes, *rank.stream);
    if (!allocation) return Fail(allocation.error());
    rank.scratch = *allocation;
  }
  return {};
}

Status Communicator::AllReduce(std::span<const DeviceAddress> buffers, std::uint64_t count) {
  if (Aborted()) return Fail(ErrorCode::kAborted, "communicator was aborted");
  if (buffers.size() != ranks_.size()) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("AllReduce needs one buffer per rank: {} ranks, {} buffers",
                            ranks_.size(), buffers.size()));
  }
  const int size = Size();
  if (size == 1 || count == 0) return {};
  const std::uint64_t max_chunk =
      (count + static_cast<std::uint64_t>(size) - 1) / static_cast<std::uint64_t>(size);
  if (auto scratch = EnsureScratch(max_chunk * static_cast<std::uint64_t>(size - 1)); !scratch)
    return scratch;
  return RunRing(buffers, count);
}

Status Communicator::RunRing(std::span<const DeviceAddress> buffers, std::uint64_t count) {
  const int size = Size();
  const std::uint64_t max_chunk =
      (count + static_cast<std::uint64_t>(size) - 1) / static_cast<std::uint64_t>(size);
  auto rank_at = [&](int r) -> Rank& { return ranks_[static_cast<std::size_t>(Mod(r, size))]; };
  auto buffer_at = [&](int r) { return buffers[static_cast<std::size_t>(Mod(r, size))]; };

  // A rank writes into its successor's scratch and buffer; it must not start
  // before the successor has finished its previous collective.
  for (int r = 0; r < size; ++r) {
    if (auto s = rank_at(r).stream->Record(*rank_at(r).ready); !s) return s;
  }
  for (int r = 0; r < size; ++r) {
    if (auto s = rank_at(r).stream->Wait(*rank_at(r + 1).ready); !s) return s;
  }

  // Reduce-scatter: after step s, rank r has added the chunk it received
  // into its own; after size-1 steps it holds the full sum of chunk r+1.
  for (int step = 0; step + 1 < size; ++step) {
    for (int r = 0; r < size; ++r) {
      Rank& rank = rank_at(r);
      Rank& next = rank_at(r + 1);
      const Chunk chunk = ChunkOf(count, size, Mod(r - step, size));
      const DeviceAddress slot =
          next.scratch.address + static_cast<std::uint64_t>(step) * max_chunk * sizeof(float);
      if (chunk.length > 0) {
        if (auto s = rank.stream->CopyDeviceToDevice(slot, next.device,
                                                     buffer_at(r) + chunk.offset * sizeof(float),
                                                     chunk.length * sizeof(float));
            !s) {
          return s;
        }
      }
      if (auto s = rank.stream->Record(*rank.sent[static_cast<std::size_t>(step)]); !s) return s;
    }
    for (int r = 0; r < size; ++r) {
      Rank& rank = rank_at(r);
      Rank& previous = rank_at(r - 1);
      if (auto s = rank.stream->Wait(*previous.sent[static_cast<std::size_t>(step)]); !s) return s;
      const Chunk chunk = ChunkOf(count, size, Mod(r - 1 - step, size));
      if (chunk.length == 0) continue;
      const DeviceAddress mine = buffer_at(r) + chunk.offset * sizeof(float);
      const DeviceAddress slot =
          rank.scratch.address + static_cast<std::uint64_t>(step) * max_chunk * sizeof(float);
      const KernelArg args[] = {KernelArg::Int(static_cast<std::int64_t>(chunk.length)),
                                KernelArg::Address(mine), KernelArg::Address(slot),
                                KernelArg::Address(mine)};
      if (auto s = rank.stream->Launch("add", args); !s) return s;
    }
  }
  for (int r = 0; r < size; ++r) {
    if (auto s = rank_at(r).stream->Record(*rank_at(r).reduced); !s) return s;
  }
  for (int r = 0; r < size; ++r) {
    if (auto s = rank_at(r).stream->Wait(*rank_at(r + 1).reduced); !s) return s;
  }

  // All-gather: each rank forwards the fully reduced chunk it has or has
  // just received into its successor's buffer.
  for (int step = 0; step + 1 < size; ++step) {
    for (int r = 0; r < size; ++r) {
      Rank& rank = rank_at(r);
      Rank& next = rank_at(r + 1);
      const Chunk chunk = ChunkOf(count, size, Mod(r + 1 - step, size));
      if (chunk.length > 0) {
        const std::uint64_t offset = chunk.offset * sizeof(float);
        if (auto s = rank.stream->CopyDeviceToDevice(buffer_at(r + 1) + offset, next.device,
                                                     buffer_at(r) + offset,
                                                     chunk.length * sizeof(float));
            !s) {
          return s;
        }
      }
      if (auto s = rank.stream->Record(*rank.forwarded[static_cast<std::size_t>(step)]); !s)
        return s;
    }
    for (int r = 0; r < size; ++r) {
      if (auto s =
              rank_at(r).stream->Wait(*rank_at(r - 1).forwarded[static_cast<std::size_t>(step)]);
          !s)
        return s;
    }
  }
  return {};
}

Status Communicator::Synchronize(std::chrono::nanoseconds timeout) {
  // Real time: this deadline is split among the streams' own blocking
  // waits, which run on the caller's thread.
  const auto deadline = common::Deadline::After(timeout);
  Status first_error;
  for (auto& rank : ranks_) {
    auto status = rank.stream->Synchronize(deadline.Left());
    if (!status && status.error().code == ErrorCode::kTimeout && timeout.count() > 0) {
      // Evidence for liveness, not a verdict: a rank that waits on a hung
      // peer times out too, and only the heartbeat tells them apart.
      rank.stream->GetDevice().NoteOpTimeout();
    }
    if (!status && first_error) first_error = status;
  }
  return first_error;
}

void Communicator::Abort(std::string_view reason) {
  aborted_.store(true, std::memory_order_release);
  for (auto& rank : ranks_) (void)rank.stream->Abort(reason);
}

}  // namespace rasd::runtime
