#pragma once

// The test-control entry points of the fake libascendcl and libdcmi
// (fake_ascendcl.cc, fake_dcmi.cc). Tests dlopen the fakes by path, as the
// driver does, and resolve these by name; both handles name one loaded copy,
// so the controls act on the library the driver uses.

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
