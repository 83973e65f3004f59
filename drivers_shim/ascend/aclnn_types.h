#pragma once

// The pieces of CANN's operator library API (aclnn) rasd calls, declared
// here because no CANN header is available to the build. Written from the
// CANN 8.0 "Operator Acceleration Library API Reference" (aolapi: aclnn
// two-phase interfaces, aclCreateTensor and its siblings, aclnn return
// codes) and checked against the 8.5 and 9.0 pages, where these signatures
// are unchanged. rasd never links against libopapi/libnnopbase: these
// declarations give the types of the pointers AclnnApi resolves at run time
// and the signatures the test stand-in defines. Nothing here depends on rasd.
//
// Every operator has two entry points: XxxGetWorkspaceSize validates the
// tensors, computes the device workspace the operator needs and returns an
// executor; Xxx then runs that executor once on a stream with a workspace
// of at least that size. The executor is consumed by the run.

#include <cstdint>

#include "acl_types.h"

extern "C" {

typedef int32_t aclnnStatus;

// Opaque objects owned by the operator library.
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;

// aclDataType and aclFormat as AscendCL numbers them (acl_base.h); only the
// values rasd uses.
typedef int32_t aclDataType;
typedef int32_t aclFormat;

// Tensors and their siblings (libnnopbase; also reachable through libopapi,
// which depends on it).
aclTensor* aclCreateTensor(const int64_t* view_dims, uint64_t view_dims_num, aclDataType data_type,
                           const int64_t* stride, int64_t offset, aclFormat format,
                           const int64_t* storage_dims, uint64_t storage_dims_num,
                           void* tensor_data);
aclnnStatus aclDestroyTensor(const aclTensor* tensor);
aclScalar* aclCreateScalar(void* value, aclDataType data_type);
aclnnStatus aclDestroyScalar(const aclScalar* scalar);
aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size);
aclnnStatus aclDestroyIntArray(const aclIntArray* array);
// Newer CANN only: frees an executor that will not be run.
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor);

// The run phase shares one signature across operators.
typedef aclnnStatus (*aclnnRunFunction)(void* workspace, uint64_t workspace_size,
                                        aclOpExecutor* executor, aclrtStream stream);

// selfRef[i] = value
aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor* self_ref, const aclScalar* value,
                                                   uint64_t* workspace_size,
                                                   aclOpExecutor** executor);
aclnnStatus aclnnInplaceFillScalar(void* workspace, uint64_t workspace_size,
                                   aclOpExecutor* executor, aclrtStream stream);
// selfRef[i] = 0
aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor* self_ref, uint64_t* workspace_size,
                                             aclOpExecutor** executor);
aclnnStatus aclnnInplaceZero(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                             aclrtStream stream);
// selfRef[i] = selfRef[i] + alpha * other[i]
aclnnStatus aclnnInplaceAddGetWorkspaceSize(aclTensor* self_ref, const aclTensor* other,
                                            const aclScalar* alpha, uint64_t* workspace_size,
                                            aclOpExecutor** executor);
aclnnStatus aclnnInplaceAdd(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                            aclrtStream stream);
// out[i] = self[i] + alpha * other[i]
aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor* self, const aclTensor* other,
                                     const aclScalar* alpha, aclTensor* out,
                                     uint64_t* workspace_size, aclOpExecutor** executor);
aclnnStatus aclnnAdd(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                     aclrtStream stream);
// out[i] = self[i] * other[i]
aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor* self, const aclTensor* other, aclTensor* out,
                                     uint64_t* workspace_size, aclOpExecutor** executor);
aclnnStatus aclnnMul(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                     aclrtStream stream);
// out[i] = max(self[i], 0)
aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor* self, aclTensor* out,
                                      uint64_t* workspace_size, aclOpExecutor** executor);
aclnnStatus aclnnRelu(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                      aclrtStream stream);
// out = self @ mat2; cubeMathType picks the cube unit's precision.
aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor* self, const aclTensor* mat2,
                                        aclTensor* out, int8_t cube_math_type,
                                        uint64_t* workspace_size, aclOpExecutor** executor);
aclnnStatus aclnnMatmul(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                        aclrtStream stream);
// out = softmax(self) along `dim`
aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor* self, int64_t dim, aclTensor* out,
                                         uint64_t* workspace_size, aclOpExecutor** executor);
aclnnStatus aclnnSoftmax(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                         aclrtStream stream);
// out = sum of self over `dims`, as `dtype`
aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor* self, const aclIntArray* dims,
                                           bool keep_dims, aclDataType dtype, aclTensor* out,
                                           uint64_t* workspace_size, aclOpExecutor** executor);
aclnnStatus aclnnReduceSum(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                           aclrtStream stream);

}  // extern "C"

namespace rasd::drivers::ascend {

inline constexpr aclDataType kAclFloat = 0;    // ACL_FLOAT (fp32)
inline constexpr aclDataType kAclInt64 = 9;    // ACL_INT64
inline constexpr aclFormat kAclFormatNd = 2;   // ACL_FORMAT_ND
// aclnnMatmul's cubeMathType: compute in the tensors' own type (fp32 stays
// fp32), not HF32 or fp16, so results match the simulator's fp32 GEMM.
inline constexpr std::int8_t kCubeKeepDtype = 0;
// aclCreateTensor's tensorData must be 32-byte aligned; a tensor that
// starts elsewhere is a view at an element offset into aligned storage.
inline constexpr std::uint64_t kTensorDataAlignment = 32;

// aclnnStatus values (the "aclnn return codes" page).
inline constexpr aclnnStatus kAclnnSuccess = 0;
inline constexpr aclnnStatus kAclnnErrParamNullptr = 161001;
inline constexpr aclnnStatus kAclnnErrParamInvalid = 161002;
inline constexpr aclnnStatus kAclnnErrRuntimeError = 361001;
inline constexpr aclnnStatus kAclnnErrInner = 561000;
inline constexpr aclnnStatus kAclnnErrInnerFindKernel = 561003;

}  // namespace rasd::drivers::ascend
