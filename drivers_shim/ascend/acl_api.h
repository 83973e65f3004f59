#pragma once

// The AscendCL entry points rasd resolves from libascendcl at run time.

#include "acl_types.h"
#include "rasd/common/dynamic_library.h"
#include "rasd/common/result.h"

namespace rasd::drivers::ascend {

// The entry points, resolved from the loaded library. Required ones are
// non-null after Load; optional ones (newer CANN releases only) may be null.
struct AclApi {
  // Required.
  decltype(&::aclInit) init = nullptr;
  decltype(&::aclFinalize) finalize = nullptr;
  decltype(&::aclrtGetDeviceCount) get_device_count = nullptr;
  decltype(&::aclrtSetDevice) set_device = nullptr;
  decltype(&::aclrtResetDevice) reset_device = nullptr;
  decltype(&::aclrtCreateContext) create_context = nullptr;
  decltype(&::aclrtDestroyContext) destroy_context = nullptr;
  decltype(&::aclrtSetCurrentContext) set_current_context = nullptr;
  decltype(&::aclrtGetMemInfo) get_mem_info = nullptr;
  decltype(&::aclrtMalloc) malloc_device = nullptr;
  decltype(&::aclrtFree) free_device = nullptr;
  decltype(&::aclrtMallocHost) malloc_host = nullptr;
  decltype(&::aclrtFreeHost) free_host = nullptr;
  decltype(&::aclrtCreateStream) create_stream = nullptr;
  decltype(&::aclrtDestroyStream) destroy_stream = nullptr;
  decltype(&::aclrtSynchronizeStreamWithTimeout) synchronize_stream = nullptr;
  decltype(&::aclrtMemcpyAsync) memcpy_async = nullptr;
  decltype(&::aclrtCreateEvent) create_event = nullptr;
  decltype(&::aclrtDestroyEvent) destroy_event = nullptr;
  decltype(&::aclrtRecordEvent) record_event = nullptr;
  decltype(&::aclrtStreamWaitEvent) stream_wait_event = nullptr;
  decltype(&::aclrtQueryEventStatus) query_event_status = nullptr;
  decltype(&::aclrtEventElapsedTime) event_elapsed_time = nullptr;
  decltype(&::aclrtSubscribeReport) subscribe_report = nullptr;
  decltype(&::aclrtUnSubscribeReport) unsubscribe_report = nullptr;
  decltype(&::aclrtLaunchCallback) launch_callback = nullptr;
  decltype(&::aclrtProcessReport) process_report = nullptr;
  // Optional.
  decltype(&::aclGetRecentErrMsg) recent_error_message = nullptr;
  decltype(&::aclrtGetSocName) soc_name = nullptr;
  decltype(&::aclrtStreamAbort) stream_abort = nullptr;
  decltype(&::aclrtStreamQuery) stream_query = nullptr;
  decltype(&::aclrtDeviceCanAccessPeer) can_access_peer = nullptr;
  decltype(&::aclrtDeviceEnablePeerAccess) enable_peer_access = nullptr;

  // Resolves every entry point from `library`, which must outlive the
  // result. kUnavailable naming the first required symbol that is missing.
  static Result<AclApi> Load(const common::DynamicLibrary& library);
};

}  // namespace rasd::drivers::ascend
