#include "rasd/runtime/stream.h"

#include <fmt/format.h>

#include "rasd/runtime/runtime.h"

namespace rasd::runtime {

Stream::Stream(Runtime& runtime, Device& device, drivers::StreamHandle handle,
               StreamOptions options)
    : runtime_(runtime), device_(device), handle_(handle), options_(std::move(options)) {
  runtime_.RegisterStream(this);
}

Stream::~Stream() {
  runtime_.UnregisterStream(this);
  // Before the destroy, while the stream can still take a callback.
  if (auto pool = runtime_.Pool(device_.Index())) (*pool)->StreamClosing(handle_);
  (void)runtime_.Driver().DestroyStream(handle_);
}

Status Stream::Launch(std::string_view kernel, std::span<const drivers::KernelArg> args,
                      const drivers::LaunchConfig& config) {
  if (auto admitted = Admit(); !admitted) return admitted;
  if (auto checked = runtime_.Kernels().Check(kernel, args); !checked) return checked;
  return runtime_.Driver().LaunchKernel(handle_, kernel, config, args);
}

Status Stream::CopyToDevice(drivers::DeviceAddress dst, const void* src, std::uint64_t bytes) {
  if (auto admitted = Admit(); !admitted) return admitted;
  return runtime_.Driver().CopyHostToDevice(handle_, dst, src, bytes);
}

Status Stream::CopyToHost(void* dst, drivers::DeviceAddress src, std::uint64_t bytes) {
  if (auto admitted = Admit(); !admitted) return admitted;
  return runtime_.Driver().CopyDeviceToHost(handle_, dst, src, bytes);
}

Status Stream::CopyDeviceToDevice(drivers::DeviceAddress dst, int dst_device,
                                  drivers::DeviceAddress src, std::uint64_t bytes) {
  if (auto admitted = Admit(); !admitted) return admitted;
  if (dst_device != device_.Index()) {
    auto peer = runtime_.GetDevice(dst_device);
    if (!peer) return Fail(peer.error());
    if (auto admitted = (*peer)->CheckGate(options_.admission); !admitted) return admitted;
  }
  return runtime_.Driver().CopyDeviceToDevice(handle_, dst, dst_device, src, bytes);
}

Status Stream::Record(Event& event) {
  if (auto admitted = Admit(); !admitted) return admitted;
  return runtime_.Driver().RecordEvent(event.Handle(), handle_);
}

Status Stream::Wait(const Event& event) {
  if (auto admitted = Admit(); !admitted) return admitted;
  return runtime_.Driver().StreamWaitEvent(handle_, event.Handle());
}

Status Stream::AddCallback(drivers::StreamCallback callback) {
  // Callbacks carry no device work: a draining or isolated device still
  // runs them, so that cleanup enqueued by a stopping job always happens.
  return runtime_.Driver().EnqueueCallback(handle_, std::move(callback));
}

Status Stream::Synchronize(std::chrono::nanoseconds timeout) {
  auto status = runtime_.Driver().SynchronizeStream(handle_, timeout);
  if (status) {
    // Everything enqueued before now has run: memory this stream freed is
    // reusable by every stream.
    if (auto pool = runtime_.Pool(device_.Index())) (*pool)->StreamCompleted(handle_);
  }
  return status;
}

Status Stream::Abort(std::string_view reason) {
  if (aborted_.exchange(true, std::memory_order_acq_rel)) return {};
  return runtime_.Driver().AbortStream(handle_, Error{ErrorCode::kAborted, std::string(reason)});
}

Event::~Event() { (void)runtime_.Driver().DestroyEvent(handle_); }

Status Event::Synchronize(std::chrono::nanoseconds timeout) {
  return runtime_.Driver().SynchronizeEvent(handle_, timeout);
}

Result<std::chrono::nanoseconds> Event::ElapsedSince(const Event& start) const {
  return runtime_.Driver().ElapsedTime(start.Handle(), handle_);
}

}  // namespace rasd::runtime
