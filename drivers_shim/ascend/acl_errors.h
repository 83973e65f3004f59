#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "rasd/common/result.h"

namespace rasd::drivers::ascend {

// What an aclError means to a caller of the Driver interface: parameter
// errors (1xxxxx) are kInvalidArgument, allocation failures kOutOfMemory,
// an unsupported feature kNotSupported, timeouts kTimeout, stream or task
// aborts kAborted, and every other runtime or driver failure kDeviceFault.
ErrorCode AclErrorCode(int code);

// The short name of a code ("device memory error"), or "" for one rasd
// has no name for.
std::string_view AclErrorName(int code);

// True for the runtime's 5070xx device error codes that are reported
// through the error listener as well as returned (507053 memory UCE, 507054
// HBM multi-bit ECC, 507010 lost heartbeat and the rest of 5070xx), so that
// the daemon's code tables can classify them. The "not complete" and
// "synchronize timed out" codes are answers, not faults, and are excluded.
bool IsReportedRuntimeCode(int code);

// "aclrtMalloc on device 1 failed: ACL error 207001 (memory allocation
// error): <detail>". `detail` is aclGetRecentErrMsg's text, when there is
// one.
Error AclError(std::string_view call, int code, std::optional<int> device,
               std::string_view detail = {});

}  // namespace rasd::drivers::ascend
