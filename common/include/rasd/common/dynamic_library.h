#pragma once

#include <string>

#include "rasd/common/result.h"

namespace rasd::common {

// A shared library loaded at run time (dlopen), so that a vendor library
// (libcuda, NVML, ACL, DCMI) is used where it is installed and its absence
// is an error value, not a binary that will not start.
//
// Ownership: the object owns the handle and closes it when destroyed;
// pointers obtained from Symbol() must not outlive it. Move-only.
// Thread-safety: Symbol() may be called from any thread.
class DynamicLibrary {
 public:
  // Loads `name` (a soname such as "libcuda.so.1", searched as dlopen
  // does, or a path) with RTLD_NOW | RTLD_LOCAL. kUnavailable, with
  // dlerror()'s text, when it cannot be loaded.
  static Result<DynamicLibrary> Open(const std::string& name);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  // The address of `symbol`; kNotFound naming the symbol and the library.
  Result<void*> Symbol(const char* symbol) const;

  // Resolves `symbol` into a typed function pointer. The caller states the
  // prototype: a wrong one is undefined behaviour, as with any dlsym.
  template <typename Function>
  Status Bind(Function*& target, const char* symbol) const {
    auto address = Symbol(symbol);
    if (!address) return Fail(address.error());
    target = reinterpret_cast<Function*>(*address);
    return {};
  }

  const std::string& name() const { return name_; }

  // The library stays loaded for the rest of the process: a thread left
  // inside one of its calls (a wedged driver) may return into it at any
  // time. Functions already bound stay valid; Symbol() fails from here on.
  void KeepLoadedForever() { handle_ = nullptr; }

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace rasd::common
