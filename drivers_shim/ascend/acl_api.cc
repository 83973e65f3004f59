#include "acl_api.h"

#include <fmt/format.h>

namespace rasd::drivers::ascend {

Result<AclApi> AclApi::Load(const common::DynamicLibrary& library) {
  AclApi api;
  Status bound;
  auto require = [&](auto*& target, const char* symbol) {
    if (!bound) return;
    if (auto found = library.Bind(target, symbol); !found) {
      bound = Fail(ErrorCode::kUnavailable,
                   fmt::format("{} has no {}: a CANN release too old for rasd, or not ACL",
                               library.name(), symbol));
    }
  };
  auto optional = [&](auto*& target, const char* symbol) {
    if (!library.Bind(target, symbol)) target = nullptr;
  };
  require(api.init, "aclInit");
  require(api.finalize, "aclFinalize");
  require(api.get_device_count, "aclrtGetDeviceCount");
  require(api.set_device, "aclrtSetDevice");
  require(api.reset_device, "aclrtResetDevice");
  require(api.create_context, "aclrtCreateContext");
  require(api.destroy_context, "aclrtDestroyContext");
  require(api.set_current_context, "aclrtSetCurrentContext");
  require(api.get_mem_info, "aclrtGetMemInfo");
  require(api.malloc_device, "aclrtMalloc");
  require(api.free_device, "aclrtFree");
  require(api.malloc_host, "aclrtMallocHost");
  require(api.free_host, "aclrtFreeHost");
  require(api.create_stream, "aclrtCreateStream");
  require(api.destroy_stream, "aclrtDestroyStream");
  require(api.synchronize_stream, "aclrtSynchronizeStreamWithTimeout");
  require(api.memcpy_async, "aclrtMemcpyAsync");
  require(api.create_event, "aclrtCreateEvent");
  require(api.destroy_event, "aclrtDestroyEvent");
  require(api.record_event, "aclrtRecordEvent");
  require(api.stream_wait_event, "aclrtStreamWaitEvent");
  require(api.query_event_status, "aclrtQueryEventStatus");
  require(api.event_elapsed_time, "aclrtEventElapsedTime");
  require(api.subscribe_report, "aclrtSubscribeReport");
  require(api.unsubscribe_report, "aclrtUnSubscribeReport");
  require(api.launch_callback, "aclrtLaunchCallback");
  require(api.process_report, "aclrtProcessReport");
  if (!bound) return Fail(bound.error());
  optional(api.recent_error_message, "aclGetRecentErrMsg");
  optional(api.soc_name, "aclrtGetSocName");
  optional(api.stream_abort, "aclrtStreamAbort");
  optional(api.stream_query, "aclrtStreamQuery");
  optional(api.can_access_peer, "aclrtDeviceCanAccessPeer");
  optional(api.enable_peer_access, "aclrtDeviceEnablePeerAccess");
  return api;
}

}  // namespace rasd::drivers::ascend
