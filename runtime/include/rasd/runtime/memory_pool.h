#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"
#include "rasd/runtime/device.h"

namespace rasd::runtime {

class Stream;

struct PoolOptions {
  // Device memory is reserved from the driver in arenas of this size (a
  // larger allocation gets an arena of its own).
  std::uint64_t arena_bytes = std::uint64_t{64} << 20;
};

// A live allocation. `address` and `size` (as requested) are the caller's;
// the rest is the pool's bookkeeping.
struct Allocation {
  drivers::DeviceAddress address = 0;
  std::uint64_t size = 0;
  void* block = nullptr;

  explicit operator bool() const { return block != nullptr; }
};

// Who holds a piece of device memory: the answer to "which job consumed the
// poisoned address".
struct AllocationOwner {
  drivers::DeviceAddress address = 0;  // start of the allocation
  std::uint64_t size = 0;
  std::string owner;  // the allocating stream's owner (job id)
  drivers::StreamHandle stream;
};

struct PoolStats {
  std::uint64_t reserved_bytes = 0;   // arenas held from the driver
  std::uint64_t allocated_bytes = 0;  // live allocations, as requested
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t retired_bytes = 0;  // never handed out again
  std::uint64_t retired_pages = 0;
  std::uint64_t largest_free_block = 0;
  std::uint64_t live_allocations = 0;
  std::uint64_t arenas = 0;
  // Streams whose frees wait for promotion, or whose promotion callback is
  // still to come. A stream with neither is not kept: streams come and go
  // (each re-form of a collective makes new ones).
  std::uint64_t streams_with_pending_frees = 0;
};

// The memory pool of one device: arenas reserved from the driver,
// sub-allocated in size classes (geometric, at most 12.5% rounding above
// 2 KiB), split on allocation and coalesced on free, with exact-class caches
// that make a repeated allocate/free of one size O(1).
//
// Stream-ordered reuse: memory freed by a stream may be reused at once by
// work on that same stream (it runs after the free in stream order), and by
// other streams only once the freeing stream's work up to the free has
// completed: a synchronize says so, and so does a stream callback that the
// pool enqueues once per batch of frees or when it runs short of memory.
//
// Retire(address) takes the device page holding `address` out of service
// for good: at once if it is free, when its allocation is freed otherwise.
// OwnerOf(address) names the live allocation holding an address.
//
// Thread-safe. The pool must be destroyed before its driver; it returns its
// arenas then.
class MemoryPool {
 public:
  MemoryPool(drivers::Driver& driver, Device& device, PoolOptions options = {});
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Memory for work on `stream`, owned by the stream's owner. Checks the
  // device's gate first (kDeviceIsolated). kOutOfMemory when the device has
  // no room even after waiting for other streams' frees to complete.
  Result<Allocation> Allocate(std::uint64_t bytes, const Stream& stream);
  // Returns memory in the allocating stream's order; resets `allocation`.
  // kInvalidArgument for an allocation this pool does not hold (double free).
  Status Free(Allocation& allocation);

  // kNotFound when `address` is not in this pool's arenas.
  Status Retire(drivers::DeviceAddress address);
  // The page holding `address` was retired before.
  bool IsRetired(drivers::DeviceAddress address) const;
  std::optional<AllocationOwner> OwnerOf(drivers::DeviceAddress address) const;
  // Every live allocation, in address order (fault injection picks one of
  // a job's; diagnostics). O(blocks).
  std::vector<AllocationOwner> Allocations() const;
  PoolStats Stats() const;

  // Tells the pool that every operation enqueued on `stream` so far has
  // completed (Stream::Synchronize succeeded), so its frees are reusable by
  // every stream.
  void StreamCompleted(drivers::StreamHandle stream);
  // `stream` is about to be destroyed (Stream's destructor): its frees
  // still waiting become every stream's once its work so far has run (a
  // promotion callback enqueued now), and then the pool keeps nothing of it.
  void StreamClosing(drivers::StreamHandle stream);

  // After a device reset that freed every reservation
  // (drivers::MemoryAfterReset::kFreed): forgets the arenas without
  // releasing them, so the next allocation reserves afresh. Live
  // allocations stay live for their holders, in no arena: their Free only
  // settles the accounts, and OwnerOf and Allocations no longer list them.
  // Retired pages at stable addresses stay out of new arenas; the others
  // named the destroyed context's memory and are dropped. Returns how many
  // live allocations lost their memory.
  std::uint64_t ForgetArenas();

  // Walks the pool's structures and reports the first inconsistency (tests,
  // and `rasctl` diagnostics). O(blocks).
  Status CheckConsistency() const;

  // The size class an allocation of `bytes` is served from.
  static std::uint64_t SizeClass(std::uint64_t bytes);

 private:
  struct State;
  // Enqueues a callback on the stream that makes its frees up to `sequence`
  // reusable by every stream once it runs. Call without the pool's lock.
  void RequestPromotion(std::uint64_t stream_id, std::uint64_t sequence);

  drivers::Driver& driver_;
  Device& device_;
  std::uint64_t arena_bytes_ = 0;
  std::shared_ptr<State> state_;  // shared with stream callbacks, which may outlive the pool
};

}  // namespace rasd::runtime
