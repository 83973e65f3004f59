#pragma once

// The CUDA driver API entry points rasd uses, declared here so that rasd
// builds without the CUDA toolkit and loads libcuda.so.1 at run time.
// Types and values as cuda.h (CUDA 12/13) defines them; the versioned
// symbol names (_v2) are those cuda.h maps the plain names to.

#include <cstddef>
#include <string>

#include "rasd/common/dynamic_library.h"

namespace rasd::drivers::cu {

using Code = int;    // CUresult
using Device = int;  // CUdevice
struct ContextOpaque;
using Context = ContextOpaque*;
struct StreamOpaque;
using Stream = StreamOpaque*;
struct EventOpaque;
using Event = EventOpaque*;
struct ModuleOpaque;
using Module = ModuleOpaque*;
struct FunctionOpaque;
using Function = FunctionOpaque*;
using DevicePointer = unsigned long long;  // CUdeviceptr
struct Uuid {
  unsigned char bytes[16];
};
using StreamCallback = void (*)(Stream, Code, void*);

inline constexpr Code kSuccess = 0;
inline constexpr Code kErrorInvalidValue = 1;
inline constexpr Code kErrorOutOfMemory = 2;
inline constexpr Code kErrorStubLibrary = 34;
inline constexpr Code kErrorInsufficientDriver = 35;
inline constexpr Code kErrorDeviceUnavailable = 46;
inline constexpr Code kErrorNoDevice = 100;
inline constexpr Code kErrorEccUncorrectable = 214;
inline constexpr Code kErrorInvalidHandle = 400;
inline constexpr Code kErrorNotFound = 500;
inline constexpr Code kErrorNotReady = 600;
inline constexpr Code kErrorInvalidDevice = 101;
inline constexpr Code kErrorNoBinaryForGpu = 209;
inline constexpr Code kErrorInvalidPtx = 218;
inline constexpr Code kErrorLaunchOutOfResources = 701;
inline constexpr Code kErrorNotPermitted = 800;
inline constexpr Code kErrorNotSupported = 801;

inline constexpr unsigned kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDefault = 0x0;       // timing enabled
inline constexpr unsigned kMemHostAllocPortable = 0x1;  // CU_MEMHOSTALLOC_PORTABLE: every context

struct Api {
  common::DynamicLibrary library;

  Code (*Init)(unsigned) = nullptr;
  Code (*DriverGetVersion)(int*) = nullptr;
  Code (*GetErrorName)(Code, const char**) = nullptr;
  Code (*DeviceGetCount)(int*) = nullptr;
  Code (*DeviceGet)(Device*, int) = nullptr;
  Code (*DeviceGetName)(char*, int, Device) = nullptr;
  Code (*DeviceTotalMem)(std::size_t*, Device) = nullptr;  // _v2
  Code (*DeviceGetPciBusId)(char*, int, Device) = nullptr;
  Code (*DeviceGetUuid)(Uuid*, Device) = nullptr;  // _v2 where present
  Code (*PrimaryCtxRetain)(Context*, Device) = nullptr;
  Code (*PrimaryCtxRelease)(Device) = nullptr;  // _v2
  // Optional (null where the library lacks it): destroys every allocation,
  // stream, event and module of the primary context, and a sticky error with them.
  Code (*PrimaryCtxReset)(Device) = nullptr;  // _v2 where present
  Code (*CtxSetCurrent)(Context) = nullptr;
  Code (*CtxSynchronize)() = nullptr;
  Code (*StreamCreate)(Stream*, unsigned) = nullptr;
  Code (*StreamDestroy)(Stream) = nullptr;  // _v2
  Code (*StreamQuery)(Stream) = nullptr;
  Code (*StreamWaitEvent)(Stream, Event, unsigned) = nullptr;
  Code (*StreamAddCallback)(Stream, StreamCallback, void*, unsigned) = nullptr;
  Code (*EventCreate)(Event*, unsigned) = nullptr;
  Code (*EventDestroy)(Event) = nullptr;  // _v2
  Code (*EventRecord)(Event, Stream) = nullptr;
  Code (*EventQuery)(Event) = nullptr;
  Code (*EventElapsedTime)(float*, Event, Event) = nullptr;  // _v2 where present
  Code (*MemAlloc)(DevicePointer*, std::size_t) = nullptr;   // _v2
  Code (*MemFree)(DevicePointer) = nullptr;                  // _v2
  Code (*MemHostAlloc)(void**, std::size_t, unsigned) = nullptr;  // pinned host memory
  Code (*MemFreeHost)(void*) = nullptr;
  Code (*MemcpyHtoDAsync)(DevicePointer, const void*, std::size_t, Stream) = nullptr;    // _v2
  Code (*MemcpyDtoHAsync)(void*, DevicePointer, std::size_t, Stream) = nullptr;          // _v2
  Code (*MemcpyDtoDAsync)(DevicePointer, DevicePointer, std::size_t, Stream) = nullptr;  // _v2
  Code (*MemcpyPeerAsync)(DevicePointer, Context, DevicePointer, Context, std::size_t,
                          Stream) = nullptr;
  Code (*ModuleLoadData)(Module*, const void*) = nullptr;
  Code (*ModuleUnload)(Module) = nullptr;
  Code (*ModuleGetFunction)(Function*, Module, const char*) = nullptr;
  Code (*LaunchKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, Stream, void**, void**) = nullptr;

  // Loads `library_name` and resolves every entry point: kUnavailable
  // naming what is missing.
  static Result<Api> Load(const std::string& library_name);

  // "cuFoo: CUDA_ERROR_BAR (code)".
  std::string Describe(const char* call, Code code) const;
};

}  // namespace rasd::drivers::cu
