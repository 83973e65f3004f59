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
    defaults.ascend[507053] = Severity::kSrar;
    defaults.ascend[507054] = Severity::kUce;
    defaults.ascend[507010] = Severity::kFatal;
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
