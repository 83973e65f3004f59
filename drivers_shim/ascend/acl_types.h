#pragma once

// The few AscendCL (ACL) runtime types and entry points rasd uses, declared
// here because no CANN header is available to the build. Prototypes, enum
// values and error codes are those of CANN's public acl_base.h, acl_rt.h and
// rt_error_codes.h as the AscendCL application development API reference
// documents them. rasd never links against libascendcl: these declarations
// give the types of the pointers AclApi resolves at run time and the
// signatures the test fake defines. Nothing here depends on rasd.

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int aclError;
typedef void* aclrtStream;
typedef void* aclrtEvent;
typedef void* aclrtContext;

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST = 0,
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
  ACL_DDR_MEM = 0,
  ACL_HBM_MEM = 1,
} aclrtMemAttr;

typedef enum aclrtEventRecordedStatus {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
  ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

typedef enum aclrtStreamStatus {
  ACL_STREAM_STATUS_COMPLETE = 0,
  ACL_STREAM_STATUS_NOT_READY = 1,
  ACL_STREAM_STATUS_RESERVED = 0xFFFF,
} aclrtStreamStatus;

typedef enum aclrtCallbackBlockType {
  ACL_CALLBACK_NO_BLOCK = 0,
  ACL_CALLBACK_BLOCK = 1,
} aclrtCallbackBlockType;

typedef void (*aclrtCallback)(void* user_data);

aclError aclInit(const char* config_path);
aclError aclFinalize(void);
const char* aclGetRecentErrMsg(void);
const char* aclrtGetSocName(void);

aclError aclrtGetDeviceCount(uint32_t* count);
aclError aclrtSetDevice(int32_t device_id);
aclError aclrtResetDevice(int32_t device_id);
aclError aclrtCreateContext(aclrtContext* context, int32_t device_id);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free_bytes, size_t* total_bytes);

aclError aclrtMalloc(void** dev_ptr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void* dev_ptr);
aclError aclrtMallocHost(void** host_ptr, size_t size);
aclError aclrtFreeHost(void* host_ptr);

aclError aclrtCreateStream(aclrtStream* stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout_ms);
aclError aclrtStreamAbort(aclrtStream stream);
aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus* status);
aclError aclrtMemcpyAsync(void* dst, size_t dest_max, const void* src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream);

aclError aclrtCreateEvent(aclrtEvent* event);
aclError aclrtDestroyEvent(aclrtEvent event);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* status);
aclError aclrtEventElapsedTime(float* ms, aclrtEvent start, aclrtEvent end);

aclError aclrtSubscribeReport(uint64_t thread_id, aclrtStream stream);
aclError aclrtUnSubscribeReport(uint64_t thread_id, aclrtStream stream);
aclError aclrtLaunchCallback(aclrtCallback fn, void* user_data, aclrtCallbackBlockType block,
                             aclrtStream stream);
aclError aclrtProcessReport(int32_t timeout_ms);

aclError aclrtDeviceCanAccessPeer(int32_t* can_access, int32_t device_id, int32_t peer_device_id);
aclError aclrtDeviceEnablePeerAccess(int32_t peer_device_id, uint32_t flags);

}  // extern "C"

namespace rasd::drivers::ascend {

// aclError values rasd branches on (acl_base.h, rt_error_codes.h).
inline constexpr aclError kAclSuccess = 0;
inline constexpr aclError kAclErrorInvalidParam = 100000;
inline constexpr aclError kAclErrorRepeatInitialize = 100002;
inline constexpr aclError kAclErrorStreamNotSubscribe = 100034;
inline constexpr aclError kAclErrorThreadNotSubscribe = 100035;
inline constexpr aclError kAclErrorWaitCallbackTimeout = 100036;  // older CANN
// What current CANN returns from aclrtProcessReport instead of the two
// above (the 1000xx values are deprecated).
inline constexpr aclError kAclErrorRtReportTimeout = 507012;
inline constexpr aclError kAclErrorRtThreadSubscribe = 107012;
inline constexpr aclError kAclErrorRepeatFinalize = 100037;
inline constexpr aclError kAclErrorBadAlloc = 200000;
inline constexpr aclError kAclErrorApiNotSupport = 200001;
inline constexpr aclError kAclErrorFeatureUnsupported = 200006;
inline constexpr aclError kAclErrorRtParamInvalid = 107000;
inline constexpr aclError kAclErrorRtInvalidDeviceId = 107001;
inline constexpr aclError kAclErrorRtContextNull = 107002;
inline constexpr aclError kAclErrorRtWaitTimeout = 107019;
inline constexpr aclError kAclErrorRtTaskTimeout = 107020;
inline constexpr aclError kAclErrorRtDeviceTaskAbort = 107022;
inline constexpr aclError kAclErrorRtStreamAbort = 107023;
inline constexpr aclError kAclErrorRtFeatureNotSupport = 207000;
inline constexpr aclError kAclErrorRtMemoryAllocation = 207001;
inline constexpr aclError kAclErrorRtNoDevice = 207004;
inline constexpr aclError kAclErrorRtDeviceOom = 207018;
inline constexpr aclError kAclErrorRtStreamNotComplete = 507004;
inline constexpr aclError kAclErrorRtEventNotComplete = 507006;
inline constexpr aclError kAclErrorRtLostHeartbeat = 507010;
inline constexpr aclError kAclErrorRtStreamSyncTimeout = 507046;
inline constexpr aclError kAclErrorRtEventSyncTimeout = 507047;
inline constexpr aclError kAclErrorRtDeviceMemError = 507053;
inline constexpr aclError kAclErrorRtHbmMultiBitEcc = 507054;

}  // namespace rasd::drivers::ascend
