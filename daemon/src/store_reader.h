#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "rasd/common/event_loop.h"
#include "rasd/common/result.h"
#include "rasd/ras/state_store.h"

namespace rasd::daemon {

// Runs the control API's reads of stored history (events, actions, retired
// pages) on a thread of its own, on a read-only connection to the state
// database (StateStore::OpenReader): a large or slow read never holds the
// loop that ingests errors and answers ping, and in WAL mode it reads the
// last commit while the loop writes the next.
//
// Bounded: at most kMaxWaiting reads wait behind the one running; one more
// is refused at once (kUnavailable), so a client flooding reads delays only
// reads. A query builds its whole answer on the reader thread; the answer
// is posted to the loop and handed to `done` there.
//
// Loop thread only (Read and the destructor). The destructor waits for the
// running query and drops those waiting; answers already posted still
// reach their `done`. The loop must outlive the reader.
class StoreReader {
 public:
  static constexpr std::size_t kMaxWaiting = 16;
  // Runs on the reader thread: touches nothing but `store` and what it owns.
  using Query = std::function<Result<nlohmann::json>(ras::StateStore& store)>;
  // Runs on the loop thread.
  using Done = std::function<void(Result<nlohmann::json>)>;

  StoreReader(common::EventLoop& loop, std::unique_ptr<ras::StateStore> connection);
  ~StoreReader();
  StoreReader(const StoreReader&) = delete;
  StoreReader& operator=(const StoreReader&) = delete;

  void Read(Query query, Done done);

 private:
  struct Job {
    Query query;
    Done done;
  };
  void Run();

  common::EventLoop& loop_;
  std::unique_ptr<ras::StateStore> connection_;  // the reader thread's only
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> waiting_;  // guarded by mutex_
  bool stopping_ = false;    // guarded by mutex_
  std::thread thread_;
};

}  // namespace rasd::daemon
