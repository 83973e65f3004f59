#include "rasd/common/dynamic_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <utility>

namespace rasd::common {

Result<DynamicLibrary> DynamicLibrary::Open(const std::string& name) {
  ::dlerror();  // clear a stale message
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Fail(ErrorCode::kUnavailable,
                fmt::format("cannot load {}: {}", name, why != nullptr ? why : "unknown error"));
  }
  return DynamicLibrary(handle, name);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) ::dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

Result<void*> DynamicLibrary::Symbol(const char* symbol) const {
  if (handle_ == nullptr) return Fail(ErrorCode::kInternal, "library moved from");
  ::dlerror();
  void* address = ::dlsym(handle_, symbol);
  if (const char* why = ::dlerror(); why != nullptr || address == nullptr) {
    return Fail(ErrorCode::kNotFound, fmt::format("{} has no symbol {}", name_, symbol));
  }
  return address;
}

}  // namespace rasd::common
