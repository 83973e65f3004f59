#pragma once

// The test-control entry points of the fake libascendcl and libdcmi
// (fake_ascendcl.cc, fake_dcmi.cc). Tests dlopen the fakes by path, as the
// driver does, and resolve these by name; both handles name one loaded copy,
// so the controls act on the library the driver uses.

#include <cstddef>
#include <cstdint>

namespace rasd::drivers::ascend::testing {

// What the fake reports for every device.
inline constexpr std::uint64_t kFakeHbmBytes = std::uint64_t{32} << 30;
inline constexpr const char* kFakeSocName = "FakeAscend910B";

}  // namespace rasd::drivers::ascend::testing

extern "C" {

// Back to two devices, no injected failures. Objects the last test leaked
// stay (and count in fake_acl_live_objects).
void fake_acl_reset(void);
void fake_acl_set_device_count(int count);
// aclInit returns `code` (0: succeeds).
void fake_acl_set_init_result(int code);
// The next aclrtSynchronizeStreamWithTimeout that finds its stream done
// returns `code` instead of success, once.
void fake_acl_fail_next_sync(int code);
// on != 0: the device's streams stop running their tasks (a hung NPU) until
// called again with 0; aborting a stream still empties it.
void fake_acl_hold(int device, int on);
// Streams, events, contexts, device and pinned host allocations alive.
int fake_acl_live_objects(void);
// 1 between aclInit and aclFinalize.
int fake_acl_initialized(void);

// What the stand-in operator library (fake_opapi.cc) asks of the stand-in
// ACL, as the real libopapi asks the runtime underneath it:
// the device whose memory holds [address, address + bytes), or -1;
int fake_acl_device_of(const void* address, size_t bytes);
// the device of the calling thread's current context, or -1;
int fake_acl_current_device(void);
// the device of an ACL stream, or -1 for a stream that does not exist;
int fake_acl_stream_device(void* stream);
// queues task(argument) on the stream, in order with its copies and events
// (0, or an ACL error for an unknown stream).
int fake_acl_stream_push(void* stream, void (*task)(void*), void* argument);

// The stand-in operator library's controls (fake_opapi.cc).
// Back to the default workspaces, counters zeroed.
void fake_opapi_reset(void);
// Every operator asks for `bytes` of workspace; -1: each its default
// (aclnnMatmul 16 KiB, aclnnSoftmax 4 bytes a row, aclnnReduceSum 1 KiB,
// the rest none).
void fake_opapi_set_workspace(long long bytes);
// Tensors, scalars, int arrays and executors alive.
int fake_opapi_live_objects(void);
// Operators run on a stream so far.
int fake_opapi_runs(void);
// Faults the stand-in saw while an operator ran (its workspace or a tensor
// no longer device memory, the kernel's own error): tests expect none.
int fake_opapi_run_faults(void);

// Two cards (ids 1 and 2), one chip each, logic ids 0 and 1, healthy.
void fake_dcmi_reset(void);
void fake_dcmi_set_health(int logic_id, unsigned int health);
void fake_dcmi_set_error_codes(int logic_id, const unsigned int* codes, int count);
// How many times dcmi_get_device_errorcode_v2 has answered: a test waits for
// it to grow to know a poll has seen what it set.
int fake_dcmi_error_code_reads(void);
// What dcmi_get_device_network_health answers for the chip (0: OK; -1: the
// query fails).
void fake_dcmi_set_network_health(int logic_id, int result);

}  // extern "C"
