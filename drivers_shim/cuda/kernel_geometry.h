#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers::cuda {

// The simulator ignores grid and block, so the runtime's callers pass the
// default (1x1x1 for both). On a GPU that would run a kernel on one
// thread: such a launch gets the kernel's own geometry instead.
bool IsDefaultLaunch(const LaunchConfig& config);

// The grid and block rasd_kernels.cu is written for, from the kernel's
// arguments (element counts, matrix shapes). Every kernel there is correct
// for any geometry; this one keeps the GPU busy.
LaunchConfig KernelGeometry(std::string_view kernel, std::span<const KernelArg> args);

// The arguments match the kernel's signature in number and kind; else
// kInvalidArgument naming the first that does not. Shared by every backend
// that marshals the registry's kernels (CUDA, Ascend's aclnn).
Status CheckKernelArgs(const KernelSignature& signature, std::span<const KernelArg> args);

// A GPU kernel cannot return an error, and one that reads outside its
// buffers fails the whole context (CUDA_ERROR_ILLEGAL_ADDRESS, sticky):
// the simulator's range checks happen here, before the launch. kInvalidArgument
// for sizes the simulator refuses.
Status CheckKernelSizes(std::string_view kernel, std::span<const KernelArg> args);

// Each device buffer the kernel touches: (address, bytes), from its sizes.
std::vector<std::pair<DeviceAddress, std::uint64_t>> KernelBuffers(std::string_view kernel,
                                                                   std::span<const KernelArg> args);

}  // namespace rasd::drivers::cuda
