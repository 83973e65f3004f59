#include "store_reader.h"

#include <fmt/format.h>

#include <utility>

namespace rasd::daemon {

StoreReader::StoreReader(common::EventLoop& loop, std::unique_ptr<ras::StateStore> connection)
    : loop_(loop), connection_(std::move(connection)), thread_([this] { Run(); }) {}

StoreReader::~StoreReader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    waiting_.clear();
  }
  wake_.notify_one();
  thread_.join();
}

void StoreReader::Read(Query query, Done done) {
  {
    std::lock_guard lock(mutex_);
    if (waiting_.size() < kMaxWaiting) {
      waiting_.push_back(Job{std::move(query), std::move(done)});
      wake_.notify_one();
      return;
    }
  }
  done(Fail(
      ErrorCode::kUnavailable,
      fmt::format("{} reads of the state database are waiting already; try again", kMaxWaiting)));
}

void StoreReader::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
      if (stopping_) return;
      job = std::move(waiting_.front());
      waiting_.pop_front();
    }
    Result<nlohmann::json> answer = job.query(*connection_);
    loop_.Post([done = std::move(job.done), answer = std::move(answer)]() mutable {
      done(std::move(answer));
    });
  }
}

}  // namespace rasd::daemon
