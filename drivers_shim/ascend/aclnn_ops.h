#pragma once

// The registry's kernels as CANN operator-library (aclnn) calls: which
// operator computes each kernel, and the marshalling of the kernel's
// arguments into aclTensor descriptors over device addresses.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aclnn_types.h"
#include "rasd/common/dynamic_library.h"
#include "rasd/common/result.h"
#include "rasd/drivers_shim/driver.h"

namespace rasd::drivers::ascend {

// What an aclnnStatus means to a caller of the Driver interface: parameter
// checks (161xxx) kInvalidArgument, a runtime failure under the operator
// (361001) kDeviceFault, a missing operator binary (561003) kNotSupported,
// any other inner error (561xxx) kInternal. ACL runtime codes pass through
// AclErrorCode.
ErrorCode AclnnErrorCode(aclnnStatus status);

// The entry points of the operator library, resolved at load. Meta entry
// points (tensors, scalars, int arrays) are required; each operator is
// optional, and a kernel is available when every operator it needs is.
struct AclnnApi {
  decltype(&::aclCreateTensor) create_tensor = nullptr;
  decltype(&::aclDestroyTensor) destroy_tensor = nullptr;
  decltype(&::aclCreateScalar) create_scalar = nullptr;
  decltype(&::aclDestroyScalar) destroy_scalar = nullptr;
  decltype(&::aclCreateIntArray) create_int_array = nullptr;
  decltype(&::aclDestroyIntArray) destroy_int_array = nullptr;
  decltype(&::aclDestroyAclOpExecutor) destroy_executor = nullptr;  // optional

  decltype(&::aclnnInplaceFillScalarGetWorkspaceSize) fill_scalar_prepare = nullptr;
  aclnnRunFunction fill_scalar = nullptr;
  decltype(&::aclnnInplaceZeroGetWorkspaceSize) zero_prepare = nullptr;
  aclnnRunFunction zero = nullptr;
  decltype(&::aclnnInplaceAddGetWorkspaceSize) inplace_add_prepare = nullptr;
  aclnnRunFunction inplace_add = nullptr;
  decltype(&::aclnnAddGetWorkspaceSize) add_prepare = nullptr;
  aclnnRunFunction add = nullptr;
  decltype(&::aclnnMulGetWorkspaceSize) mul_prepare = nullptr;
  aclnnRunFunction mul = nullptr;
  decltype(&::aclnnReluGetWorkspaceSize) relu_prepare = nullptr;
  aclnnRunFunction relu = nullptr;
  decltype(&::aclnnMatmulGetWorkspaceSize) matmul_prepare = nullptr;
  aclnnRunFunction matmul = nullptr;
  decltype(&::aclnnSoftmaxGetWorkspaceSize) softmax_prepare = nullptr;
  aclnnRunFunction softmax = nullptr;
  decltype(&::aclnnReduceSumGetWorkspaceSize) reduce_sum_prepare = nullptr;
  aclnnRunFunction reduce_sum = nullptr;
};

// One kernel launch after the first phase (XxxGetWorkspaceSize): the
// executor, the workspace it needs, and the descriptors it was built from.
// Run it once with a workspace of at least `WorkspaceBytes()`; destroying it
// releases the descriptors (and an executor that never ran, where the
// library can). Move-only; not thread-safe.
class AclnnLaunch {
 public:
  AclnnLaunch(const AclnnApi& api) : api_(&api) {}  // NOLINT: built by AclnnOps only
  AclnnLaunch(AclnnLaunch&& other) noexcept;
  AclnnLaunch& operator=(AclnnLaunch&&) = delete;
  AclnnLaunch(const AclnnLaunch&) = delete;
  AclnnLaunch& operator=(const AclnnLaunch&) = delete;
  ~AclnnLaunch();

  // Nothing to run (every tensor has zero elements).
  bool Empty() const { return executor_ == nullptr; }
  std::uint64_t WorkspaceBytes() const { return workspace_bytes_; }
  // The operator, for messages: "aclnnMatmul".
  const char* Operator() const { return operator_; }

  // The second phase, on `stream` (the device's context current).
  aclnnStatus Run(void* workspace, std::uint64_t workspace_bytes, aclrtStream stream);

 private:
  friend class AclnnOps;
  const AclnnApi* api_;
  const char* operator_ = "";
  aclnnRunFunction run_ = nullptr;
  aclOpExecutor* executor_ = nullptr;
  std::uint64_t workspace_bytes_ = 0;
  std::vector<aclTensor*> tensors_;
  std::vector<aclScalar*> scalars_;
  std::vector<aclIntArray*> arrays_;
};

// The operator library and the kernels it can run.
//
// Mapping (fp32, ND, row-major contiguous tensors; results match the
// simulator's kernels, sim_kernels.cc):
//   fill        aclnnInplaceFillScalar(out[n], value)
//   axpy        aclnnInplaceAdd(y[n], x[n], alpha=a)
//   add         aclnnAdd(a[n], b[n], alpha=1, out[n])
//   mul         aclnnMul(a[n], b[n], out[n])
//   relu        aclnnRelu(in[n], out[n])
//   gemm        aclnnMatmul(A[m,k], B[k,n], C[m,n], cubeMathType KEEP_DTYPE);
//               k == 0: aclnnInplaceZero(C)
//   softmax     aclnnSoftmax(in[rows,cols], dim=1, out[rows,cols])
//   reduce_sum  aclnnReduceSum(in[n], dims={0}, keepDims, ACL_FLOAT, out[1]);
//               n == 0: aclnnInplaceZero(out)
//   empty       aclnnInplaceZero over a 4-byte scratch tensor of the stream
//               (real work on the device, so a hung NPU never finishes it)
//   sleep_us    none: no aclnn operator waits for a time; not offered.
// A launch whose tensors have no elements runs nothing. aclnnInplaceZero
// falls back to aclnnInplaceFillScalar(0) where the library lacks it.
//
// A tensor starting at an address that is not 32-byte aligned (the
// alignment aclCreateTensor asks of tensorData) is described as a view at
// an element offset into storage that starts at the aligned address below
// it, as framework adapters describe views.
//
// Thread-safety: const methods may be called from any thread.
class AclnnOps {
 public:
  // Loads `op_library` (libopapi) and resolves the tensor entry points from
  // `base_library` (libnnopbase) when that loads, else from the op library
  // (which depends on it). kUnavailable with dlerror's text, or naming the
  // first missing meta entry point.
  static Result<std::unique_ptr<AclnnOps>> Load(const std::string& op_library,
                                                const std::string& base_library);

  // The registry's kernels whose operators resolved, with the simulator's
  // signatures.
  const std::vector<KernelSignature>& Kernels() const { return kernels_; }
  // Kernels left out, and the symbols they lacked: "gemm (aclnnMatmul)".
  const std::vector<std::string>& Missing() const { return missing_; }
  const std::string& Name() const { return library_.name(); }

  // kNotFound for an unknown kernel; kNotSupported for sleep_us or a kernel
  // whose operator is missing (naming it); kInvalidArgument for wrong
  // argument kinds or sizes out of the simulator's range.
  Status Check(std::string_view kernel, std::span<const KernelArg> args) const;

  // The first phase for `kernel` (Check() passed). `scratch` is a 32-byte
  // aligned device address of at least 4 bytes that "empty" may write. The
  // caller has checked that every buffer lies in device memory and is
  // 4-byte aligned. Errors carry AclnnErrorCode of what the library said.
  Result<AclnnLaunch> Prepare(std::string_view kernel, std::span<const KernelArg> args,
                              DeviceAddress scratch) const;

 private:
  AclnnOps(common::DynamicLibrary library, std::unique_ptr<common::DynamicLibrary> base)
      : library_(std::move(library)), base_(std::move(base)) {}

  common::DynamicLibrary library_;
  std::unique_ptr<common::DynamicLibrary> base_;  // null: meta entry points from library_
  AclnnApi api_;
  std::vector<KernelSignature> kernels_;
  std::vector<std::string> missing_;
};

}  // namespace rasd::drivers::ascend
