#pragma once

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::runtime {

// The kernels a runtime can launch, by name, as its driver reports them.
// Launches are checked here, so every backend rejects a bad launch with the
// same error before any vendor call. Immutable after construction, so
// thread-safe.
class KernelRegistry {
 public:
  explicit KernelRegistry(std::vector<drivers::KernelSignature> kernels);

  // kNotSupported for an unknown kernel; kInvalidArgument for the wrong
  // number or kinds of arguments, naming the kernel and the argument.
  Status Check(std::string_view name, std::span<const drivers::KernelArg> args) const;

  const drivers::KernelSignature* Find(std::string_view name) const;
  std::vector<std::string> Names() const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const {
      return std::hash<std::string_view>{}(text);
    }
  };
  std::unordered_map<std::string, drivers::KernelSignature, Hash, std::equal_to<>> kernels_;
};

}  // namespace rasd::runtime
