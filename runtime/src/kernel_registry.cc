#include "rasd/runtime/kernel_registry.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::runtime {

KernelRegistry::KernelRegistry(std::vector<drivers::KernelSignature> kernels) {
  for (auto& kernel : kernels) {
    std::string name = kernel.name;
    kernels_.emplace(std::move(name), std::move(kernel));
  }
}

const drivers::KernelSignature* KernelRegistry::Find(std::string_view name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

Status KernelRegistry::Check(std::string_view name,
                             std::span<const drivers::KernelArg> args) const {
  const drivers::KernelSignature* kernel = Find(name);
  if (kernel == nullptr) return Fail(ErrorCode::kNotSupported, fmt::format("no kernel '{}'", name));
  if (args.size() != kernel->args.size()) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("kernel '{}' takes {} arguments ({}), not {}", name,
                            kernel->args.size(), kernel->description, args.size()));
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind != kernel->args[i]) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("kernel '{}': argument {} has the wrong kind ({})", name, i,
                              kernel->description));
    }
  }
  return {};
}

std::vector<std::string> KernelRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, kernel] : kernels_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace rasd::runtime
