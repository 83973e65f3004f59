#include "acl_errors.h"

#include <fmt/format.h>

#include "acl_types.h"

namespace rasd::drivers::ascend {

ErrorCode AclErrorCode(int code) {
  switch (code) {
    case kAclErrorBadAlloc:
    case kAclErrorRtMemoryAllocation:
    case kAclErrorRtDeviceOom:
      return ErrorCode::kOutOfMemory;
    case kAclErrorApiNotSupport:
    case kAclErrorFeatureUnsupported:
    case kAclErrorRtFeatureNotSupport:
      return ErrorCode::kNotSupported;
    case kAclErrorWaitCallbackTimeout:
    case kAclErrorRtWaitTimeout:
    case kAclErrorRtTaskTimeout:
    case kAclErrorRtStreamSyncTimeout:
    case kAclErrorRtEventSyncTimeout:
      return ErrorCode::kTimeout;
    case kAclErrorRtDeviceTaskAbort:
    case kAclErrorRtStreamAbort:
      return ErrorCode::kAborted;
    default:
      break;
  }
  // 1xxxxx: the caller passed something the library rejects (a parameter,
  // a handle, a device id, a call in the wrong state).
  if (code >= 100000 && code < 200000) return ErrorCode::kInvalidArgument;
  return ErrorCode::kDeviceFault;
}

std::string_view AclErrorName(int code) {
  switch (code) {
    case kAclErrorInvalidParam:
      return "invalid parameter";
    case kAclErrorRepeatInitialize:
      return "repeated initialization";
    case kAclErrorThreadNotSubscribe:
      return "thread not subscribed";
    case kAclErrorWaitCallbackTimeout:
      return "wait for callback timed out";
    case kAclErrorBadAlloc:
      return "memory allocation failed";
    case kAclErrorApiNotSupport:
      return "API not supported";
    case kAclErrorRtParamInvalid:
      return "runtime parameter invalid";
    case kAclErrorRtStreamAbort:
      return "stream aborting";
    case kAclErrorRtFeatureNotSupport:
      return "feature not supported";
    case kAclErrorRtMemoryAllocation:
      return "memory allocation error";
    case kAclErrorRtNoDevice:
      return "no device";
    case kAclErrorRtDeviceOom:
      return "device out of memory";
    case kAclErrorRtLostHeartbeat:
      return "task scheduler lost heartbeat";
    case kAclErrorRtStreamSyncTimeout:
      return "stream synchronize timed out";
    case kAclErrorRtEventSyncTimeout:
      return "event synchronize timed out";
    case kAclErrorRtDeviceMemError:
      return "device memory error (UCE)";
    case kAclErrorRtHbmMultiBitEcc:
      return "HBM multi-bit ECC error";
    default:
      return {};
  }
}

bool IsReportedRuntimeCode(int code) {
  // 5070xx device and runtime faults, 507899 (driver internal error) and
  // 5079xx (the host-device link: 507901 socket closed, ...).
  if (code < 507000 || code > 507999) return false;
  switch (code) {
    case kAclErrorRtStreamNotComplete:
    case kAclErrorRtEventNotComplete:
    case kAclErrorRtStreamSyncTimeout:
    case kAclErrorRtEventSyncTimeout:
      return false;
    default:
      return true;
  }
}

Error AclError(std::string_view call, int code, std::optional<int> device,
               std::string_view detail) {
  std::string message =
      device ? fmt::format("{} on device {} failed: ACL error {}", call, *device, code)
             : fmt::format("{} failed: ACL error {}", call, code);
  if (const auto name = AclErrorName(code); !name.empty()) message += fmt::format(" ({})", name);
  if (!detail.empty()) message += fmt::format(": {}", detail);
  return Error{AclErrorCode(code), std::move(message)};
}

}  // namespace rasd::drivers::ascend
