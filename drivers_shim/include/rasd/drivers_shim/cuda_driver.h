#pragma once

#include <memory>
#include <string>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers {

struct CudaDriverOptions {
  // dlopen()ed at run time: rasd does not link against the CUDA driver, so
  // one binary runs on hosts with and without NVIDIA's driver.
  std::string library = "libcuda.so.1";
};

// The Driver interface over the CUDA driver API, one primary context per
// GPU:
//  - memory: cuMemAlloc per reservation (rounded to, and aligned at, the
//    retire granularity); copies cuMemcpy*Async, cross-device copies
//    cuMemcpyPeerAsync;
//  - streams: non-blocking CUDA streams; SynchronizeStream/Event poll
//    cuStreamQuery/cuEventQuery (a CUDA wait has no timeout) with a short
//    back-off, so a timeout or an AbortStream is noticed within a
//    millisecond; AbortStream fails later work and wakes waiters at once,
//    but work already handed to the GPU still runs (nothing cancels it);
//  - callbacks: cuStreamAddCallback hands each callback to a driver
//    thread, because CUDA forbids CUDA calls inside its callbacks and the
//    runtime's callbacks make them; a callback therefore runs after, not
//    before, later work on its stream starts;
//  - kernels: the registry's kernels from the fatbin built at build time
//    (cuModuleLoadData per GPU); without nvcc at build time, Kernels() is
//    empty and LaunchKernel returns kNotSupported. A launch whose config
//    is the default (1x1 grid and block, as the simulator's callers pass)
//    gets the kernel's own geometry;
//  - errors: CUDA_ERROR_ECC_UNCORRECTABLE from a stream is also reported
//    through the listener as an uncorrected ECC error consumed by that
//    stream (SRAR: the runtime stops exactly that stream's owner). Other
//    failures (illegal address, launch failure) are returned, not reported:
//    they are usually the application's, and NVML's Xid reports carry the
//    hardware's verdict;
//  - ResetDevice aborts the device's streams. A context with a sticky error
//    cannot be repaired without destroying it, which frees every allocation
//    rasd holds there: that returns kNotSupported, and the device stays
//    out of service until rasd restarts or the GPU is reset.
//
// Thread-safety: every method may be called from any thread.
class CudaDriver {
 public:
  // kUnavailable when the library cannot be loaded or lacks a symbol, when
  // it is the toolkit's stub (CUDA_ERROR_STUB_LIBRARY: no driver), when
  // cuInit fails, or when there is no GPU; the message says which.
  static Result<std::unique_ptr<Driver>> Create(const CudaDriverOptions& options = {});
};

}  // namespace rasd::drivers
