#pragma once

#include <cstddef>
#include <span>

namespace rasd::drivers::cuda {

// The registry's kernels (the simulator's names, arguments and results)
// compiled by nvcc into one fatbin at build time and embedded in the
// binary, for cuModuleLoadData. Empty when nvcc was not found at build
// time: the CUDA backend then runs memory, copies and streams but no
// kernels.
std::span<const unsigned char> KernelFatbin();

}  // namespace rasd::drivers::cuda
