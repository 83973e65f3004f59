// A stand-in for CANN's operator library (libopapi.so, with libnnopbase's
// tensor entry points), for tests on machines without an NPU. It computes
// with the simulator's kernels (sim_kernels.cc) over the stand-in ACL's
// device memory (fake_ascendcl.cc, which owns memory and streams), so the
// backend's marshalling is checked against the simulator's results. It
// enforces what CANN's two-phase protocol demands of a caller:
// - an executor comes only from XxxGetWorkspaceSize and runs once, with the
//   operator that made it (a run without its first phase, a second run, or
//   another operator's executor is ACLNN_ERR_PARAM_INVALID);
// - the workspace is at least what the first phase asked for, and device
//   memory of the executor's device;
// - the stream exists and belongs to the current context's device;
// - tensors are fp32, ND, row-major contiguous views whose storage lies in
//   device memory at a 32-byte-aligned address, with shapes the operator
//   accepts.
// Tensors may be destroyed once the run is queued: the executor keeps what
// it needs, as in CANN.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "aclnn_types.h"
#include "sim_kernels.h"
#include "testing/fake_control.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

struct aclTensor {
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
  aclDataType type = 0;
  aclFormat format = 0;
  std::int64_t storage_elements = 0;
  std::byte* data = nullptr;
};

struct aclScalar {
  aclDataType type = 0;
  double value = 0;
};

struct aclIntArray {
  std::vector<std::int64_t> values;
};

struct aclOpExecutor {
  std::string op;
  std::uint64_t workspace = 0;
  int device = -1;
  // The computation, run on the stream's thread.
  std::function<rasd::Status(rasd::drivers::sim::DeviceMemoryAccess&)> work;
};

namespace {

using rasd::drivers::DeviceAddress;
using rasd::drivers::KernelArg;
using namespace rasd::drivers::ascend;  // NOLINT: the aclnn constants

std::mutex g_mutex;
std::set<const void*> g_live;  // every object handed out and not destroyed
std::atomic<long long> g_workspace_override{-1};
std::atomic<int> g_runs{0};
std::atomic<int> g_run_faults{0};

template <typename T>
T* Track(std::unique_ptr<T> object) {
  std::lock_guard lock(g_mutex);
  g_live.insert(object.get());
  return object.release();
}

template <typename T>
aclnnStatus Untrack(const T* object) {
  std::lock_guard lock(g_mutex);
  if (object == nullptr || g_live.erase(object) == 0) return kAclnnErrParamInvalid;
  delete object;
  return kAclnnSuccess;
}

bool Live(const void* object) {
  std::lock_guard lock(g_mutex);
  return object != nullptr && g_live.contains(object);
}

class DeviceMemory final : public rasd::drivers::sim::DeviceMemoryAccess {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  rasd::Result<std::byte*> Map(DeviceAddress address, std::uint64_t bytes, bool) override {
    auto* pointer = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(address));
    if (bytes > 0 && fake_acl_device_of(pointer, bytes) != device_) {
      return rasd::Fail(rasd::ErrorCode::kInvalidArgument, "not device memory");
    }
    return pointer;
  }

 private:
  int device_;
};

std::int64_t Elements(const aclTensor& tensor) {
  std::int64_t elements = 1;
  for (std::int64_t dim : tensor.dims) elements *= dim;
  return elements;
}

// The device address of an fp32, ND, contiguous tensor's first element, or
// 0 when it is not one the stand-in (and rasd's use of CANN) expects.
DeviceAddress Resolve(const aclTensor* tensor, int* device) {
  if (!Live(tensor) || tensor->type != kAclFloat || tensor->format != kAclFormatNd) return 0;
  std::int64_t expected = 1;
  for (std::size_t i = tensor->dims.size(); i-- > 0;) {
    if (tensor->strides[i] != expected) return 0;
    expected *= tensor->dims[i];
  }
  const std::int64_t elements = Elements(*tensor);
  if (tensor->offset + elements > tensor->storage_elements) return 0;
  const std::byte* first = tensor->data + tensor->offset * 4;
  const int owner = fake_acl_device_of(first, static_cast<std::size_t>(elements) * 4);
  if (owner < 0 || (*device >= 0 && owner != *device)) return 0;
  *device = owner;
  return static_cast<DeviceAddress>(reinterpret_cast<std::uintptr_t>(first));
}

bool Shape(const aclTensor* tensor, std::initializer_list<std::int64_t> dims) {
  return tensor->dims == std::vector<std::int64_t>(dims);
}

std::uint64_t Workspace(std::uint64_t fallback) {
  const long long forced = g_workspace_override.load();
  return forced >= 0 ? static_cast<std::uint64_t>(forced) : fallback;
}

// The first phase: a new executor for `op` that runs `work`.
aclnnStatus Prepare(const char* op, int device, std::uint64_t workspace,
                    std::function<rasd::Status(rasd::drivers::sim::DeviceMemoryAccess&)> work,
                    std::uint64_t* workspace_size, aclOpExecutor** executor) {
  if (workspace_size == nullptr || executor == nullptr) return kAclnnErrParamNullptr;
  if (device < 0 || device != fake_acl_current_device()) return kAclnnErrParamInvalid;
  auto made = std::make_unique<aclOpExecutor>();
  made->op = op;
  made->workspace = Workspace(workspace);
  made->device = device;
  made->work = std::move(work);
  *workspace_size = made->workspace;
  *executor = Track(std::move(made));
  return kAclnnSuccess;
}

struct Queued {
  std::unique_ptr<aclOpExecutor> executor;
  const std::byte* workspace = nullptr;
  std::uint64_t workspace_size = 0;
};

void RunQueued(void* argument) {
  std::unique_ptr<Queued> queued(static_cast<Queued*>(argument));
  if (queued->workspace_size > 0 &&
      fake_acl_device_of(queued->workspace, queued->workspace_size) != queued->executor->device) {
    ++g_run_faults;  // the workspace was freed before the operator ran
    return;
  }
  DeviceMemory memory(queued->executor->device);
  if (!queued->executor->work(memory)) ++g_run_faults;
  ++g_runs;
}

// The second phase: checks the protocol and queues the work on the stream.
aclnnStatus Run(const char* op, void* workspace, std::uint64_t workspace_size,
                aclOpExecutor* executor, aclrtStream stream) {
  {
    std::lock_guard lock(g_mutex);
    // Unknown: never made by a first phase, or already run.
    if (executor == nullptr || !g_live.contains(executor)) return kAclnnErrParamInvalid;
    g_live.erase(executor);  // consumed by this call, whatever it answers
  }
  std::unique_ptr<aclOpExecutor> owned(executor);
  if (owned->op != op) return kAclnnErrParamInvalid;
  if (workspace_size < owned->workspace) return kAclnnErrParamInvalid;
  if (owned->workspace > 0) {
    if (workspace == nullptr) return kAclnnErrParamNullptr;
    if (fake_acl_device_of(workspace, workspace_size) != owned->device) return kAclnnErrParamInvalid;
  }
  const int stream_device = fake_acl_stream_device(stream);
  if (stream_device < 0 || stream_device != owned->device ||
      fake_acl_current_device() != owned->device) {
    return kAclnnErrParamInvalid;
  }
  auto queued = std::make_unique<Queued>();
  queued->executor = std::move(owned);
  queued->workspace = static_cast<const std::byte*>(workspace);
  queued->workspace_size = queued->executor->workspace;
  if (fake_acl_stream_push(stream, &RunQueued, queued.get()) != 0) return kAclnnErrRuntimeError;
  queued.release();
  return kAclnnSuccess;
}

using SimArgs = std::vector<KernelArg>;

std::function<rasd::Status(rasd::drivers::sim::DeviceMemoryAccess&)> SimWork(const char* kernel,
                                                                            SimArgs args) {
  return [kernel, args = std::move(args)](rasd::drivers::sim::DeviceMemoryAccess& memory) {
    static const rasd::drivers::LaunchConfig kConfig{};
    return rasd::drivers::sim::FindSimKernel(kernel)->run(memory, kConfig, args);
  };
}

std::optional<float> FloatScalar(const aclScalar* scalar) {
  if (!Live(scalar) || scalar->type != kAclFloat) return std::nullopt;
  return static_cast<float>(scalar->value);
}

}  // namespace

// ---- libnnopbase ----

FAKE_API aclTensor* aclCreateTensor(const int64_t* view_dims, uint64_t view_dims_num,
                                    aclDataType data_type, const int64_t* stride, int64_t offset,
                                    aclFormat format, const int64_t* storage_dims,
                                    uint64_t storage_dims_num, void* tensor_data) {
  if (view_dims_num > 8 || (view_dims_num > 0 && (view_dims == nullptr || stride == nullptr)) ||
      storage_dims == nullptr || storage_dims_num == 0 || offset < 0 || tensor_data == nullptr ||
      reinterpret_cast<std::uintptr_t>(tensor_data) % kTensorDataAlignment != 0) {
    return nullptr;
  }
  auto tensor = std::make_unique<aclTensor>();
  tensor->dims.assign(view_dims, view_dims + view_dims_num);
  tensor->strides.assign(stride, stride + view_dims_num);
  for (std::size_t i = 0; i < view_dims_num; ++i) {
    if (tensor->dims[i] < 0 || tensor->strides[i] < 0) return nullptr;
  }
  tensor->offset = offset;
  tensor->type = data_type;
  tensor->format = format;
  tensor->storage_elements = 1;
  for (std::size_t i = 0; i < storage_dims_num; ++i) {
    if (storage_dims[i] < 0) return nullptr;
    tensor->storage_elements *= storage_dims[i];
  }
  tensor->data = static_cast<std::byte*>(tensor_data);
  return Track(std::move(tensor));
}
FAKE_API aclnnStatus aclDestroyTensor(const aclTensor* tensor) { return Untrack(tensor); }

FAKE_API aclScalar* aclCreateScalar(void* value, aclDataType data_type) {
  if (value == nullptr) return nullptr;
  auto scalar = std::make_unique<aclScalar>();
  scalar->type = data_type;
  if (data_type == kAclFloat) {
    float read = 0;
    std::memcpy(&read, value, sizeof(read));
    scalar->value = read;
  } else if (data_type == kAclInt64) {
    std::int64_t read = 0;
    std::memcpy(&read, value, sizeof(read));
    scalar->value = static_cast<double>(read);
  } else {
    return nullptr;
  }
  return Track(std::move(scalar));
}
FAKE_API aclnnStatus aclDestroyScalar(const aclScalar* scalar) { return Untrack(scalar); }

FAKE_API aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  if (value == nullptr && size > 0) return nullptr;
  auto array = std::make_unique<aclIntArray>();
  array->values.assign(value, value + size);
  return Track(std::move(array));
}
FAKE_API aclnnStatus aclDestroyIntArray(const aclIntArray* array) { return Untrack(array); }

FAKE_API aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) { return Untrack(executor); }

// ---- libopapi ----

FAKE_API aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor* self_ref,
                                                            const aclScalar* value,
                                                            uint64_t* workspace_size,
                                                            aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress out = Resolve(self_ref, &device);
  const auto fill = FloatScalar(value);
  if (out == 0 || !fill) return kAclnnErrParamInvalid;
  return Prepare("aclnnInplaceFillScalar", device, 0,
                 SimWork("fill", {KernelArg::Address(out), KernelArg::Int(Elements(*self_ref)),
                                  KernelArg::Float(*fill)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnInplaceFillScalar(void* workspace, uint64_t workspace_size,
                                            aclOpExecutor* executor, aclrtStream stream) {
  return Run("aclnnInplaceFillScalar", workspace, workspace_size, executor, stream);
}

FAKE_API aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor* self_ref, uint64_t* workspace_size,
                                                      aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress out = Resolve(self_ref, &device);
  if (out == 0) return kAclnnErrParamInvalid;
  return Prepare("aclnnInplaceZero", device, 0,
                 SimWork("fill", {KernelArg::Address(out), KernelArg::Int(Elements(*self_ref)),
                                  KernelArg::Float(0.0f)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnInplaceZero(void* workspace, uint64_t workspace_size,
                                      aclOpExecutor* executor, aclrtStream stream) {
  return Run("aclnnInplaceZero", workspace, workspace_size, executor, stream);
}

FAKE_API aclnnStatus aclnnInplaceAddGetWorkspaceSize(aclTensor* self_ref, const aclTensor* other,
                                                     const aclScalar* alpha,
                                                     uint64_t* workspace_size,
                                                     aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress y = Resolve(self_ref, &device);
  const DeviceAddress x = Resolve(other, &device);
  const auto a = FloatScalar(alpha);
  if (y == 0 || x == 0 || !a || self_ref->dims != other->dims) return kAclnnErrParamInvalid;
  return Prepare("aclnnInplaceAdd", device, 0,
                 SimWork("axpy", {KernelArg::Int(Elements(*self_ref)), KernelArg::Float(*a),
                                  KernelArg::Address(x), KernelArg::Address(y)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnInplaceAdd(void* workspace, uint64_t workspace_size,
                                     aclOpExecutor* executor, aclrtStream stream) {
  return Run("aclnnInplaceAdd", workspace, workspace_size, executor, stream);
}

FAKE_API aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor* self, const aclTensor* other,
                                              const aclScalar* alpha, aclTensor* out,
                                              uint64_t* workspace_size,
                                              aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress a = Resolve(self, &device);
  const DeviceAddress b = Resolve(other, &device);
  const DeviceAddress c = Resolve(out, &device);
  const auto scale = FloatScalar(alpha);
  // The stand-in computes only alpha == 1 (what the simulator's add is).
  if (a == 0 || b == 0 || c == 0 || !scale || *scale != 1.0f || self->dims != other->dims ||
      self->dims != out->dims) {
    return kAclnnErrParamInvalid;
  }
  return Prepare("aclnnAdd", device, 0,
                 SimWork("add", {KernelArg::Int(Elements(*self)), KernelArg::Address(a),
                                 KernelArg::Address(b), KernelArg::Address(c)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnAdd(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                              aclrtStream stream) {
  return Run("aclnnAdd", workspace, workspace_size, executor, stream);
}

FAKE_API aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor* self, const aclTensor* other,
                                              aclTensor* out, uint64_t* workspace_size,
                                              aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress a = Resolve(self, &device);
  const DeviceAddress b = Resolve(other, &device);
  const DeviceAddress c = Resolve(out, &device);
  if (a == 0 || b == 0 || c == 0 || self->dims != other->dims || self->dims != out->dims) {
    return kAclnnErrParamInvalid;
  }
  return Prepare("aclnnMul", device, 0,
                 SimWork("mul", {KernelArg::Int(Elements(*self)), KernelArg::Address(a),
                                 KernelArg::Address(b), KernelArg::Address(c)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnMul(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                              aclrtStream stream) {
  return Run("aclnnMul", workspace, workspace_size, executor, stream);
}

FAKE_API aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor* self, aclTensor* out,
                                               uint64_t* workspace_size,
                                               aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress in = Resolve(self, &device);
  const DeviceAddress result = Resolve(out, &device);
  if (in == 0 || result == 0 || self->dims != out->dims) return kAclnnErrParamInvalid;
  return Prepare("aclnnRelu", device, 0,
                 SimWork("relu", {KernelArg::Int(Elements(*self)), KernelArg::Address(in),
                                  KernelArg::Address(result)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnRelu(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                               aclrtStream stream) {
  return Run("aclnnRelu", workspace, workspace_size, executor, stream);
}

#ifndef RASD_FAKE_OPAPI_WITHOUT_MATMUL
FAKE_API aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor* self, const aclTensor* mat2,
                                                 aclTensor* out, int8_t cube_math_type,
                                                 uint64_t* workspace_size,
                                                 aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress a = Resolve(self, &device);
  const DeviceAddress b = Resolve(mat2, &device);
  const DeviceAddress c = Resolve(out, &device);
  if (a == 0 || b == 0 || c == 0 || self->dims.size() != 2 || mat2->dims.size() != 2) {
    return kAclnnErrParamInvalid;
  }
  const std::int64_t m = self->dims[0], k = self->dims[1], n = mat2->dims[1];
  // fp32 kept: the stand-in has no HF32 or fp16 cube.
  if (mat2->dims[0] != k || !Shape(out, {m, n}) || cube_math_type != kCubeKeepDtype) {
    return kAclnnErrParamInvalid;
  }
  return Prepare("aclnnMatmul", device, 16 << 10,
                 SimWork("gemm", {KernelArg::Int(m), KernelArg::Int(n), KernelArg::Int(k),
                                  KernelArg::Address(a), KernelArg::Address(b),
                                  KernelArg::Address(c)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnMatmul(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                                 aclrtStream stream) {
  return Run("aclnnMatmul", workspace, workspace_size, executor, stream);
}
#endif

FAKE_API aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor* self, int64_t dim,
                                                  aclTensor* out, uint64_t* workspace_size,
                                                  aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress in = Resolve(self, &device);
  const DeviceAddress result = Resolve(out, &device);
  if (in == 0 || result == 0 || self->dims.size() != 2 || self->dims != out->dims ||
      (dim != 1 && dim != -1)) {
    return kAclnnErrParamInvalid;
  }
  const std::int64_t rows = self->dims[0], cols = self->dims[1];
  return Prepare("aclnnSoftmax", device, static_cast<std::uint64_t>(rows) * 4,
                 SimWork("softmax", {KernelArg::Int(rows), KernelArg::Int(cols),
                                     KernelArg::Address(in), KernelArg::Address(result)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnSoftmax(void* workspace, uint64_t workspace_size, aclOpExecutor* executor,
                                  aclrtStream stream) {
  return Run("aclnnSoftmax", workspace, workspace_size, executor, stream);
}

FAKE_API aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor* self, const aclIntArray* dims,
                                                    bool keep_dims, aclDataType dtype,
                                                    aclTensor* out, uint64_t* workspace_size,
                                                    aclOpExecutor** executor) {
  int device = -1;
  const DeviceAddress in = Resolve(self, &device);
  const DeviceAddress result = Resolve(out, &device);
  if (in == 0 || result == 0 || !Live(dims) || self->dims.size() != 1 || dtype != kAclFloat) {
    return kAclnnErrParamInvalid;
  }
  const bool over_all = dims->values == std::vector<std::int64_t>{0} ||
                        dims->values == std::vector<std::int64_t>{-1};
  const bool out_shape = keep_dims ? Shape(out, {1}) : out->dims.empty();
  if (!over_all || !out_shape) return kAclnnErrParamInvalid;
  return Prepare("aclnnReduceSum", device, 1024,
                 SimWork("reduce_sum", {KernelArg::Int(self->dims[0]), KernelArg::Address(in),
                                        KernelArg::Address(result)}),
                 workspace_size, executor);
}
FAKE_API aclnnStatus aclnnReduceSum(void* workspace, uint64_t workspace_size,
                                    aclOpExecutor* executor, aclrtStream stream) {
  return Run("aclnnReduceSum", workspace, workspace_size, executor, stream);
}

// ---- test controls ----

FAKE_API void fake_opapi_reset(void) {
  g_workspace_override = -1;
  g_runs = 0;
  g_run_faults = 0;
}
FAKE_API void fake_opapi_set_workspace(long long bytes) { g_workspace_override = bytes; }
FAKE_API int fake_opapi_live_objects(void) {
  std::lock_guard lock(g_mutex);
  return static_cast<int>(g_live.size());
}
FAKE_API int fake_opapi_runs(void) { return g_runs.load(); }
FAKE_API int fake_opapi_run_faults(void) { return g_run_faults.load(); }
