#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "rasd/ras/state_store.h"

namespace rasd::daemon {

// Copies the state database's write-ahead log back into the main file on a
// thread of its own, over a connection of its own
// (StateStore::OpenCheckpointer). Under a storm the log passes 8 MiB every
// few seconds; its checkpoint (the copy and an fsync) took tens of
// milliseconds, and on the loop every reply (ping, summary) waited behind
// it. PASSIVE, as before: it neither waits for the loop's writes nor
// blocks them; the loop's next commit after a complete one starts the log
// over.
//
// Request() from any thread; requests while one runs make one more run.
// A failed checkpoint is logged (the log stays, and the next request tries
// again). The destructor waits for a running checkpoint and must run
// before the owning StateStore is closed.
class StoreCheckpointer {
 public:
  explicit StoreCheckpointer(std::unique_ptr<ras::StateStore> connection);
  ~StoreCheckpointer();
  StoreCheckpointer(const StoreCheckpointer&) = delete;
  StoreCheckpointer& operator=(const StoreCheckpointer&) = delete;

  void Request();
  // Checkpoints finished (tests wait for it).
  std::uint64_t Finished() const;
  // The log's pages the last finished checkpoint had copied (nullopt when
  // it failed): what the owner has left to copy is the log beyond it.
  std::optional<std::size_t> LastCopied() const;

 private:
  void Run();

  std::unique_ptr<ras::StateStore> connection_;  // the thread's only
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool requested_ = false;      // guarded by mutex_
  bool stopping_ = false;       // guarded by mutex_
  std::uint64_t finished_ = 0;  // guarded by mutex_
  std::optional<std::size_t> last_copied_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace rasd::daemon
