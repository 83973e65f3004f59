#include "rasd/ras/code_table.h"

namespace rasd::ras {

const CodeTable& CodeTable::Default() {
  static const CodeTable table = [] {
    CodeTable defaults;
    for (int code : {13, 31, 32, 43, 45, 68, 69, 109}) defaults.nvidia_xid[code] = Severity::kInfo;
    for (int code : {63, 92}) defaults.nvidia_xid[code] = Severity::kCe;
    defaults.nvidia_xid[94] = Severity::kSrar;
    for (int code : {48, 64, 95}) defaults.nvidia_xid[code] = Severity::kUce;
    for (int code : {62, 79, 119, 120}) defaults.nvidia_xid[code] = Severity::kFatal;
    // CANN's runtime codes (acl/error_codes/rt_error_codes.h): a task the
    // device failed to run (timeouts and exceptions of the AI core, vector
    // core, AI CPU and FFTS+, a model that failed, a DMA, internal, driver
    // or link error) lost its work: UCE, unless the error message beside it
    // names the application's own error (the scanner's CANN cause). Memory
    // errors as before; the device lost or unable to start (heartbeat,
    // setup, the host-device channel closed): FATAL. A stream or event
    // synchronize past its timeout (507046, 507047) is the caller's bound
    // expiring, not a device's report, as the Ascend backend treats it.
    for (int code :
         {507000, 507001, 507011, 507012, 507013, 507014, 507015, 507016, 507017, 507018, 507034,
          507035, 507036, 507048, 507049, 507050, 507051, 507055, 507056, 507057, 507899, 507900})
      defaults.ascend[code] = Severity::kUce;
    defaults.ascend[507053] = Severity::kSrar;
    defaults.ascend[507054] = Severity::kUce;
    for (int code : {507010, 507033, 507901}) defaults.ascend[code] = Severity::kFatal;
    return defaults;
  }();
  return table;
}

std::optional<Severity> CodeTable::Xid(int code) const {
  auto it = nvidia_xid.find(code);
  if (it == nvidia_xid.end()) return std::nullopt;
  return it->second;
}

std::optional<Severity> CodeTable::Ascend(int code) const {
  auto it = ascend.find(code);
  if (it == ascend.end()) return std::nullopt;
  return it->second;
}

}  // namespace rasd::ras
