#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/runtime/memory_pool.h"
#include "rasd/runtime/stream.h"

namespace rasd::runtime {

class Runtime;

// A group of ranks, one per device, for collective operations; NCCL's
// communicator is the model. Each rank has its own stream; AllReduce is a
// ring (reduce-scatter, then all-gather) of peer copies and add kernels on
// those streams, ordered by events.
//
// Abort() is ncclCommAbort: every rank's pending and blocked operations
// fail with kAborted at once (a rank blocked waiting for a dead peer is
// released within a few milliseconds, not after a 10-minute watchdog), and
// the communicator takes no more work. The job then re-forms a new
// communicator on the healthy devices.
//
// Thread-safe for Abort(); AllReduce and Synchronize are called by one
// thread at a time. Must be destroyed before its Runtime.
class Communicator {
 public:
  // `devices` lists one device per rank, in rank order; a device may appear
  // only once.
  static Result<std::unique_ptr<Communicator>> Create(Runtime& runtime, std::vector<int> devices,
                                                      StreamOptions options = {});
  ~Communicator();

  int Size() const { return static_cast<int>(ranks_.size()); }
  int DeviceOf(int rank) const { return ranks_[static_cast<std::size_t>(rank)].device; }
  Stream& RankStream(int rank) { return *ranks_[static_cast<std::size_t>(rank)].stream; }

  // Sums `count` floats across ranks, in place: buffers[r] lives on rank r's
  // device. Asynchronous: enqueued on the ranks' streams; Synchronize() waits.
  Status AllReduce(std::span<const drivers::DeviceAddress> buffers, std::uint64_t count);

  // Waits for every rank's work; the first error, kTimeout, or kAborted.
  Status Synchronize(std::chrono::nanoseconds timeout);

  void Abort(std::string_view reason);
  bool Aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  struct Rank {
    int device = 0;
    MemoryPool* pool = nullptr;
    std::unique_ptr<Stream> stream;
    Allocation scratch;
    std::unique_ptr<Event> ready;              // recorded when an AllReduce starts on this rank
    std::unique_ptr<Event> reduced;            // recorded when its reduce-scatter is done
    std::vector<std::unique_ptr<Event>> sent;  // one per reduce-scatter step
    std::vector<std::unique_ptr<Event>> forwarded;  // one per all-gather step
  };
  Communicator(Runtime& runtime, std::vector<Rank> ranks);
  Status EnsureScratch(std::uint64_t floats);
  Status RunRing(std::span<const drivers::DeviceAddress> buffers, std::uint64_t count);

  Runtime& runtime_;
  std::vector<Rank> ranks_;
  std::atomic<bool> aborted_{false};
};

}  // namespace rasd::runtime
