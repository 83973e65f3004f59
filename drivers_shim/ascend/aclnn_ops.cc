#include "aclnn_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "acl_errors.h"
#include "kernel_geometry.h"
#include "sim_kernels.h"

namespace rasd::drivers::ascend {
namespace {

constexpr std::uint64_t kFloatBytes = 4;

void* ToPointer(DeviceAddress address) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
}

// The operators (by their run entry point's name) each kernel needs.
std::vector<const char*> OperatorsOf(std::string_view kernel, const AclnnApi& api) {
  const bool zeroing = api.zero != nullptr || api.fill_scalar != nullptr;
  if (kernel == "fill") return {api.fill_scalar ? nullptr : "aclnnInplaceFillScalar"};
  if (kernel == "axpy") return {api.inplace_add ? nullptr : "aclnnInplaceAdd"};
  if (kernel == "add") return {api.add ? nullptr : "aclnnAdd"};
  if (kernel == "mul") return {api.mul ? nullptr : "aclnnMul"};
  if (kernel == "relu") return {api.relu ? nullptr : "aclnnRelu"};
  if (kernel == "gemm") {
    return {api.matmul ? nullptr : "aclnnMatmul", zeroing ? nullptr : "aclnnInplaceZero"};
  }
  if (kernel == "softmax") return {api.softmax ? nullptr : "aclnnSoftmax"};
  if (kernel == "reduce_sum") {
    return {api.reduce_sum ? nullptr : "aclnnReduceSum", zeroing ? nullptr : "aclnnInplaceZero"};
  }
  if (kernel == "empty") return {zeroing ? nullptr : "aclnnInplaceZero"};
  return {"none: no aclnn operator waits for a time"};
}

Error Failed(std::string_view call, aclnnStatus status, std::string_view kernel) {
  const ErrorCode code = AclnnErrorCode(status);
  return Error{code, fmt::format("kernel '{}': {} failed with aclnn status {}", kernel, call,
                                 status)};
}

}  // namespace

ErrorCode AclnnErrorCode(aclnnStatus status) {
  if (status >= 161000 && status < 162000) return ErrorCode::kInvalidArgument;
  if (status == kAclnnErrRuntimeError) return ErrorCode::kDeviceFault;
  if (status == kAclnnErrInnerFindKernel) return ErrorCode::kNotSupported;
  if (status >= 561000 && status < 562000) return ErrorCode::kInternal;
  return AclErrorCode(status);
}

AclnnLaunch::AclnnLaunch(AclnnLaunch&& other) noexcept
    : api_(other.api_),
      operator_(other.operator_),
      run_(other.run_),
      executor_(std::exchange(other.executor_, nullptr)),
      workspace_bytes_(other.workspace_bytes_),
      tensors_(std::move(other.tensors_)),
      scalars_(std::move(other.scalars_)),
      arrays_(std::move(other.arrays_)) {
  other.tensors_.clear();
  other.scalars_.clear();
  other.arrays_.clear();
}

AclnnLaunch::~AclnnLaunch() {
  // An executor that never ran belongs to the library still.
  if (executor_ != nullptr && api_->destroy_executor != nullptr) {
    (void)api_->destroy_executor(executor_);
  }
  for (aclTensor* tensor : tensors_) (void)api_->destroy_tensor(tensor);
  for (aclScalar* scalar : scalars_) (void)api_->destroy_scalar(scalar);
  for (aclIntArray* array : arrays_) (void)api_->destroy_int_array(array);
}

aclnnStatus AclnnLaunch::Run(void* workspace, std::uint64_t workspace_bytes, aclrtStream stream) {
  aclOpExecutor* executor = std::exchange(executor_, nullptr);  // consumed, even on failure
  return run_(workspace, workspace_bytes, executor, stream);
}

Result<std::unique_ptr<AclnnOps>> AclnnOps::Load(const std::string& op_library,
                                                 const std::string& base_library) {
  auto library = common::DynamicLibrary::Open(op_library);
  if (!library) return Fail(library.error());
  std::unique_ptr<common::DynamicLibrary> base;
  if (!base_library.empty()) {
    if (auto opened = common::DynamicLibrary::Open(base_library)) {
      base = std::make_unique<common::DynamicLibrary>(std::move(*opened));
    }
  }
  std::unique_ptr<AclnnOps> ops(new AclnnOps(std::move(*library), std::move(base)));
  AclnnApi& api = ops->api_;
  const common::DynamicLibrary& meta = ops->base_ ? *ops->base_ : ops->library_;
  Status bound;
  auto require = [&](auto*& target, const char* symbol) {
    if (!bound) return;
    // Either library may carry the meta entry points: libopapi links
    // libnnopbase, but packagings differ.
    if (meta.Bind(target, symbol) || ops->library_.Bind(target, symbol)) return;
    bound = Fail(ErrorCode::kUnavailable,
                 fmt::format("{} has no {}: not CANN's operator library, or one too old for rasd",
                             ops->library_.name(), symbol));
  };
  require(api.create_tensor, "aclCreateTensor");
  require(api.destroy_tensor, "aclDestroyTensor");
  require(api.create_scalar, "aclCreateScalar");
  require(api.destroy_scalar, "aclDestroyScalar");
  require(api.create_int_array, "aclCreateIntArray");
  require(api.destroy_int_array, "aclDestroyIntArray");
  if (!bound) return Fail(bound.error());
  if (!meta.Bind(api.destroy_executor, "aclDestroyAclOpExecutor") &&
      !ops->library_.Bind(api.destroy_executor, "aclDestroyAclOpExecutor")) {
    api.destroy_executor = nullptr;
  }
  // An operator is usable when both its phases resolve.
  auto pair = [&](auto*& prepare, aclnnRunFunction& run, const char* name) {
    const std::string first = std::string(name) + "GetWorkspaceSize";
    if (!ops->library_.Bind(prepare, first.c_str()) || !ops->library_.Bind(run, name)) {
      prepare = nullptr;
      run = nullptr;
    }
  };
  pair(api.fill_scalar_prepare, api.fill_scalar, "aclnnInplaceFillScalar");
  pair(api.zero_prepare, api.zero, "aclnnInplaceZero");
  pair(api.inplace_add_prepare, api.inplace_add, "aclnnInplaceAdd");
  pair(api.add_prepare, api.add, "aclnnAdd");
  pair(api.mul_prepare, api.mul, "aclnnMul");
  pair(api.relu_prepare, api.relu, "aclnnRelu");
  pair(api.matmul_prepare, api.matmul, "aclnnMatmul");
  pair(api.softmax_prepare, api.softmax, "aclnnSoftmax");
  pair(api.reduce_sum_prepare, api.reduce_sum, "aclnnReduceSum");

  for (const auto& kernel : sim::SimKernels()) {
    std::vector<std::string> lacking;
    for (const char* missing : OperatorsOf(kernel.signature.name, api)) {
      if (missing != nullptr) lacking.emplace_back(missing);
    }
    if (lacking.empty()) {
      ops->kernels_.push_back(kernel.signature);
    } else {
      ops->missing_.push_back(
          fmt::format("{} ({})", kernel.signature.name, fmt::join(lacking, ", ")));
    }
  }
  return ops;
}

Status AclnnOps::Check(std::string_view kernel, std::span<const KernelArg> args) const {
  const sim::SimKernel* known = sim::FindSimKernel(kernel);
  if (known == nullptr) {
    return Fail(ErrorCode::kNotFound, fmt::format("no kernel named '{}'", kernel));
  }
  const bool available = std::any_of(kernels_.begin(), kernels_.end(),
                                     [&](const KernelSignature& k) { return k.name == kernel; });
  if (!available) {
    std::string lacking = "(no aclnn operator)";
    for (const auto& entry : missing_) {
      if (entry.starts_with(std::string(kernel) + " (")) lacking = entry.substr(kernel.size() + 1);
    }
    return Fail(ErrorCode::kNotSupported,
                fmt::format("kernel '{}' is not available on Ascend: {} {}", kernel,
                            kernel == "sleep_us" ? "CANN has no operator that waits for a time"
                                                 : library_.name() + " lacks",
                            kernel == "sleep_us" ? "" : lacking));
  }
  if (auto matches = cuda::CheckKernelArgs(known->signature, args); !matches) return matches;
  return cuda::CheckKernelSizes(kernel, args);
}

Result<AclnnLaunch> AclnnOps::Prepare(std::string_view kernel, std::span<const KernelArg> args,
                                      DeviceAddress scratch) const {
  AclnnLaunch launch(api_);
  Status made;
  // An fp32 ND tensor of `shape`, row-major contiguous, at `address`.
  auto tensor = [&](DeviceAddress address, std::initializer_list<std::int64_t> shape) -> aclTensor* {
    if (!made) return nullptr;
    std::vector<std::int64_t> dims(shape);
    std::vector<std::int64_t> strides(dims.size(), 1);
    std::int64_t elements = 1;
    for (std::size_t i = dims.size(); i-- > 0;) {
      strides[i] = elements;
      elements *= dims[i];
    }
    const DeviceAddress storage = address / kTensorDataAlignment * kTensorDataAlignment;
    const auto offset = static_cast<std::int64_t>((address - storage) / kFloatBytes);
    const std::int64_t storage_dims[] = {offset + elements};
    aclTensor* created =
        api_.create_tensor(dims.data(), dims.size(), kAclFloat, strides.data(), offset,
                           kAclFormatNd, storage_dims, 1, ToPointer(storage));
    if (created == nullptr) {
      made = Fail(ErrorCode::kInternal,
                  fmt::format("kernel '{}': aclCreateTensor failed for 0x{:x}", kernel, address));
      return nullptr;
    }
    launch.tensors_.push_back(created);
    return created;
  };
  auto scalar = [&](float value) -> aclScalar* {
    if (!made) return nullptr;
    aclScalar* created = api_.create_scalar(&value, kAclFloat);
    if (created == nullptr) {
      made = Fail(ErrorCode::kInternal, fmt::format("kernel '{}': aclCreateScalar failed", kernel));
      return nullptr;
    }
    launch.scalars_.push_back(created);
    return created;
  };
  // Runs the first phase; `prepare` fills workspace and executor.
  auto phase_one = [&](const char* name, aclnnRunFunction run, auto&& prepare) -> Status {
    if (!made) return made;
    launch.operator_ = name;
    launch.run_ = run;
    const aclnnStatus status = prepare(&launch.workspace_bytes_, &launch.executor_);
    if (status != kAclnnSuccess) {
      launch.executor_ = nullptr;
      return Fail(Failed(std::string(name) + "GetWorkspaceSize", status, kernel));
    }
    if (launch.executor_ == nullptr) {
      return Fail(ErrorCode::kInternal,
                  fmt::format("kernel '{}': {}GetWorkspaceSize returned no executor", kernel, name));
    }
    return {};
  };
  // selfRef = 0 over `shape` at `address`.
  auto zero = [&](DeviceAddress address, std::initializer_list<std::int64_t> shape) -> Status {
    aclTensor* self = tensor(address, shape);
    if (api_.zero != nullptr) {
      return phase_one("aclnnInplaceZero", api_.zero, [&](std::uint64_t* bytes, aclOpExecutor** e) {
        return api_.zero_prepare(self, bytes, e);
      });
    }
    const aclScalar* value = scalar(0.0f);
    return phase_one("aclnnInplaceFillScalar", api_.fill_scalar,
                     [&](std::uint64_t* bytes, aclOpExecutor** e) {
                       return api_.fill_scalar_prepare(self, value, bytes, e);
                     });
  };
  auto integer = [&](std::size_t i) { return args[i].integer; };
  auto address = [&](std::size_t i) { return args[i].address; };

  Status result;
  if (kernel == "empty") {
    result = zero(scratch, {1});
  } else if (kernel == "fill") {
    const std::int64_t n = integer(1);
    if (n == 0) return launch;
    aclTensor* out = tensor(address(0), {n});
    const aclScalar* value = scalar(args[2].real);
    result = phase_one("aclnnInplaceFillScalar", api_.fill_scalar,
                       [&](std::uint64_t* bytes, aclOpExecutor** e) {
                         return api_.fill_scalar_prepare(out, value, bytes, e);
                       });
  } else if (kernel == "axpy") {
    const std::int64_t n = integer(0);
    if (n == 0) return launch;
    const aclScalar* alpha = scalar(args[1].real);
    const aclTensor* x = tensor(address(2), {n});
    aclTensor* y = tensor(address(3), {n});
    result = phase_one("aclnnInplaceAdd", api_.inplace_add,
                       [&](std::uint64_t* bytes, aclOpExecutor** e) {
                         return api_.inplace_add_prepare(y, x, alpha, bytes, e);
                       });
  } else if (kernel == "add" || kernel == "mul") {
    const std::int64_t n = integer(0);
    if (n == 0) return launch;
    const aclTensor* a = tensor(address(1), {n});
    const aclTensor* b = tensor(address(2), {n});
    aclTensor* out = tensor(address(3), {n});
    if (kernel == "add") {
      const aclScalar* one = scalar(1.0f);
      result = phase_one("aclnnAdd", api_.add, [&](std::uint64_t* bytes, aclOpExecutor** e) {
        return api_.add_prepare(a, b, one, out, bytes, e);
      });
    } else {
      result = phase_one("aclnnMul", api_.mul, [&](std::uint64_t* bytes, aclOpExecutor** e) {
        return api_.mul_prepare(a, b, out, bytes, e);
      });
    }
  } else if (kernel == "relu") {
    const std::int64_t n = integer(0);
    if (n == 0) return launch;
    const aclTensor* in = tensor(address(1), {n});
    aclTensor* out = tensor(address(2), {n});
    result = phase_one("aclnnRelu", api_.relu, [&](std::uint64_t* bytes, aclOpExecutor** e) {
      return api_.relu_prepare(in, out, bytes, e);
    });
  } else if (kernel == "gemm") {
    const std::int64_t m = integer(0), n = integer(1), k = integer(2);
    if (m == 0 || n == 0) return launch;
    if (k == 0) {
      result = zero(address(5), {m, n});  // an empty sum: C = 0, as the simulator
    } else {
      const aclTensor* a = tensor(address(3), {m, k});
      const aclTensor* b = tensor(address(4), {k, n});
      aclTensor* c = tensor(address(5), {m, n});
      result = phase_one("aclnnMatmul", api_.matmul, [&](std::uint64_t* bytes, aclOpExecutor** e) {
        return api_.matmul_prepare(a, b, c, kCubeKeepDtype, bytes, e);
      });
    }
  } else if (kernel == "softmax") {
    const std::int64_t rows = integer(0), cols = integer(1);
    if (rows == 0 || cols == 0) return launch;
    const aclTensor* in = tensor(address(2), {rows, cols});
    aclTensor* out = tensor(address(3), {rows, cols});
    result = phase_one("aclnnSoftmax", api_.softmax, [&](std::uint64_t* bytes, aclOpExecutor** e) {
      return api_.softmax_prepare(in, 1, out, bytes, e);
    });
  } else if (kernel == "reduce_sum") {
    const std::int64_t n = integer(0);
    if (n == 0) {
      result = zero(address(2), {1});
    } else {
      const aclTensor* in = tensor(address(1), {n});
      aclTensor* out = tensor(address(2), {1});
      const std::int64_t dim = 0;
      aclIntArray* dims = made ? api_.create_int_array(&dim, 1) : nullptr;
      if (made && dims == nullptr) {
        made = Fail(ErrorCode::kInternal,
                    fmt::format("kernel '{}': aclCreateIntArray failed", kernel));
      }
      if (dims != nullptr) launch.arrays_.push_back(dims);
      result = phase_one("aclnnReduceSum", api_.reduce_sum,
                         [&](std::uint64_t* bytes, aclOpExecutor** e) {
                           return api_.reduce_sum_prepare(in, dims, true, kAclFloat, out, bytes, e);
                         });
    }
  } else {
    return Fail(ErrorCode::kNotSupported,
                fmt::format("kernel '{}' has no aclnn operator in rasd", kernel));
  }
  if (!made) return Fail(made.error());
  if (!result) return Fail(result.error());
  return launch;
}

}  // namespace rasd::drivers::ascend
