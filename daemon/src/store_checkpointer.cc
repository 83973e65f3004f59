#include "store_checkpointer.h"

#include "rasd/common/logging.h"

namespace rasd::daemon {

StoreCheckpointer::StoreCheckpointer(std::unique_ptr<ras::StateStore> connection)
    : connection_(std::move(connection)), thread_([this] { Run(); }) {}

StoreCheckpointer::~StoreCheckpointer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StoreCheckpointer::Request() {
  {
    std::lock_guard lock(mutex_);
    requested_ = true;
  }
  wake_.notify_one();
}

std::uint64_t StoreCheckpointer::Finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

std::optional<std::size_t> StoreCheckpointer::LastCopied() const {
  std::lock_guard lock(mutex_);
  return last_copied_;
}

void StoreCheckpointer::Run() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || requested_; });
      if (stopping_) return;
      requested_ = false;
    }
    auto done = connection_->Checkpoint();
    if (!done) RASD_LOG_WARN("state store: {}", done.error().message);
    std::lock_guard lock(mutex_);
    ++finished_;
    last_copied_ = done ? std::optional(*done) : std::nullopt;
  }
}

}  // namespace rasd::daemon
