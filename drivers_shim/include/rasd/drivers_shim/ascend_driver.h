#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers {

struct AscendDriverOptions {
  // The AscendCL runtime and the device management library, as sonames
  // (searched as dlopen does) or paths. Neither is linked: a machine without
  // CANN gets kUnavailable from CreateAscendDriver, not a binary that fails
  // to start.
  std::string acl_library = "libascendcl.so";
  std::string dcmi_library = "libdcmi.so";
  // CANN's operator library (aclnn) and its tensor library, through which
  // kernels run. "" (the default): libopapi.so / libnnopbase.so in the
  // directory of `acl_library` when that is a path (CANN installs all three
  // in one lib64), else those sonames as dlopen searches them.
  std::string op_library;
  std::string nnopbase_library;
  // How often DCMI health and error codes are read.
  std::chrono::milliseconds health_poll{1000};
  // The value of ASCEND_RT_VISIBLE_DEVICES (comma-separated DCMI logic ids,
  // ACL device i being the i-th of them); nullopt reads the environment,
  // "" means every device is visible and ACL device i is logic id i. Only
  // used to find each ACL device in DCMI.
  std::optional<std::string> visible_devices;
};

// The Huawei Ascend backend: ACL (libascendcl) for devices, memory, streams,
// events and host callbacks; DCMI (libdcmi) for PCI addresses, die ids and
// health polling. Both are loaded at run time; no CANN header or library is
// needed to build rasd.
//
// UNTESTED ON ASCEND HARDWARE. It is written against the public CANN API
// reference and tested only against a fake libascendcl/libdcmi that runs
// streams on host threads (drivers_shim/ascend/testing). Expect surprises
// on a real NPU: call timings, which errors come back from which call, and
// what aclrtResetDevice leaves behind.
//
// Mapping of the Driver interface:
// - Device index = ACL device id, in aclrtGetDeviceCount's order; vendor
//   "huawei"; name from aclrtGetSocName; memory from aclrtGetMemInfo (HBM,
//   or DDR on chips without HBM); pci_bdf and uuid (the die id) from DCMI,
//   empty without it; retire_granularity 4096 (the small page the Ascend
//   driver maps and isolates; a UCE is reported per address range).
// - Each device gets one explicit ACL context; every call first makes it
//   current on the calling thread, so any thread may call.
// - ReserveMemory is aclrtMalloc (huge pages first), aligned to 4096 by
//   over-allocating when ACL's pointer is not.
// - Copies: aclrtMemcpyAsync needs host memory from aclrtMallocHost and
//   64-byte-aligned addresses. Host buffers are staged through pinned
//   buffers (reused per device): host-to-device copies the source at
//   enqueue; device-to-host copies out in a stream callback, in stream
//   order. Device addresses must be 64-byte aligned (kInvalidArgument
//   otherwise) and inside a reservation of the right device. A copy to
//   another device enables peer access on first use (kNotSupported when
//   aclrtDeviceCanAccessPeer says no).
// - EnqueueCallback is aclrtLaunchCallback (blocking the stream until it
//   returns), run by one report thread per device that loops on
//   aclrtProcessReport.
// - SynchronizeStream waits in short aclrtSynchronizeStreamWithTimeout
//   slices, so AbortStream and ResetDevice wake a waiter within a slice
//   (5 ms). SynchronizeEvent polls aclrtQueryEventStatus.
// - AbortStream fails pending callbacks and copies at once, calls
//   aclrtStreamAbort where the library has it (otherwise queued device work
//   may still run; its results are not delivered), and keeps the stream
//   failed with the reason.
// - ResetDevice fails pending work with kAborted, destroys the device's
//   streams and events in ACL, calls aclrtResetDevice and aclrtSetDevice,
//   and recreates the context, streams and events behind the same handles.
//   aclrtResetDevice frees the device's memory: its reservations are gone
//   (ReleaseMemory on them succeeds, copies into them fail).
// - Kernels run through CANN's prebuilt operator library, as the framework
//   adapters (torch_npu, MindSpore) call it: the two-phase aclnn API
//   (aclnnXxxGetWorkspaceSize, then aclnnXxx on the ACL stream) over
//   aclCreateTensor descriptors of the kernel's device addresses (mapping
//   in drivers_shim/ascend/aclnn_ops.h; CANN 8.0 signatures). Kernels() is
//   every registry kernel whose operators the library has, with the
//   simulator's signatures; sleep_us is never offered (no operator waits for
//   a time) and LaunchKernel answers it kNotSupported. Grid and block are
//   ignored. Tensors must lie in a live reservation of the stream's device
//   and start on a 4-byte boundary (kInvalidArgument). Each stream keeps its
//   operators' workspace as driver-owned device memory (aclrtMalloc),
//   grown on demand; a workspace it outgrew is freed once a synchronize of
//   the stream shows the launches that used it done, the rest when the
//   stream is destroyed or its device reset. Without the operator library
//   (or without its tensor entry points) the driver logs one line, offers
//   no kernels and LaunchKernel answers kNotSupported saying why; the rest
//   of the backend serves. A library lacking one operator loses only the
//   kernels that need it (logged once, named in the error).
// - Errors: aclError values map to kInvalidArgument (parameters),
//   kOutOfMemory, kNotSupported, kTimeout, kAborted or kDeviceFault; the
//   message names the call, the device and the code, with
//   aclGetRecentErrMsg's text. The runtime's device error codes (5070xx:
//   507053 memory UCE, 507054 HBM multi-bit ECC, 507010 lost heartbeat, ...)
//   returned by a synchronize are also reported to the error listener as
//   kVendorCode events in VendorCodeSpace::kAscend, for the daemon's code
//   tables to classify. A stream that returned one keeps failing with it
//   until ResetDevice.
// - DCMI (optional): a thread reads dcmi_get_device_health and
//   dcmi_get_device_errorcode_v2 every `health_poll` and reports a health
//   level that becomes non-zero, and each error code once per device until
//   it clears, as kVendorCode/kAscend events. Without DCMI the driver works
//   and logs that it has no health polling.
//
// Ownership: the returned driver owns both libraries, the ACL contexts and
// its threads. Destroying it fails pending work with kAborted, frees what it
// allocated, resets its devices and calls aclFinalize (unless ACL was
// initialized before it was created). aclInit/aclFinalize are per process:
// create one Ascend driver at a time.
//
// Thread-safety: every method may be called from any thread, as the Driver
// contract says. The error listener and stream callbacks run on the
// driver's threads.
//
// Errors from CreateAscendDriver: kUnavailable, naming the library and the
// reason, when libascendcl cannot be loaded (dlerror's text) or lacks an
// entry point rasd needs, when aclInit fails, when there is no device, or
// when a device cannot be set up.
Result<std::unique_ptr<Driver>> CreateAscendDriver(const AscendDriverOptions& options);

}  // namespace rasd::drivers
