#include "sim_kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

namespace rasd::drivers::sim {
namespace {

constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

Status CheckCount(std::int64_t count, const char* what) {
  if (count < 0 || count > kMaxElements) {
    return Fail(ErrorCode::kInvalidArgument, std::string(what) + " is out of range");
  }
  return {};
}

Status Empty(DeviceMemoryAccess&, const LaunchConfig&, std::span<const KernelArg>) { return {}; }

Status SleepMicros(DeviceMemoryAccess&, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t micros = args[0].integer;
  if (micros < 0 || micros > 60'000'000)
    return Fail(ErrorCode::kInvalidArgument, "sleep_us out of range");
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
  return {};
}

// fill(out, n, value): out[i] = value
Status Fill(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t n = args[1].integer;
  if (auto ok = CheckCount(n, "n"); !ok) return ok;
  auto out = memory.MapArray<float>(args[0].address, n, true);
  if (!out) return Fail(out.error());
  std::fill_n(*out, n, args[2].real);
  return {};
}

// axpy(n, a, x, y): y[i] = a * x[i] + y[i]
Status Axpy(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t n = args[0].integer;
  if (auto ok = CheckCount(n, "n"); !ok) return ok;
  const float a = args[1].real;
  auto x = memory.MapArray<float>(args[2].address, n, false);
  if (!x) return Fail(x.error());
  auto y = memory.MapArray<float>(args[3].address, n, true);
  if (!y) return Fail(y.error());
  float* __restrict yp = *y;
  const float* __restrict xp = *x;
  for (std::int64_t i = 0; i < n; ++i) yp[i] = a * xp[i] + yp[i];
  return {};
}

template <typename Op>
Status Binary(DeviceMemoryAccess& memory, std::span<const KernelArg> args, Op op) {
  const std::int64_t n = args[0].integer;
  if (auto ok = CheckCount(n, "n"); !ok) return ok;
  auto a = memory.MapArray<float>(args[1].address, n, false);
  if (!a) return Fail(a.error());
  auto b = memory.MapArray<float>(args[2].address, n, false);
  if (!b) return Fail(b.error());
  auto out = memory.MapArray<float>(args[3].address, n, true);
  if (!out) return Fail(out.error());
  for (std::int64_t i = 0; i < n; ++i) (*out)[i] = op((*a)[i], (*b)[i]);
  return {};
}

// add(n, a, b, out) / mul(n, a, b, out)
Status Add(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  return Binary(memory, args, [](float x, float y) { return x + y; });
}
Status Mul(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  return Binary(memory, args, [](float x, float y) { return x * y; });
}

// relu(n, in, out): out[i] = max(in[i], 0)
Status Relu(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t n = args[0].integer;
  if (auto ok = CheckCount(n, "n"); !ok) return ok;
  auto in = memory.MapArray<float>(args[1].address, n, false);
  if (!in) return Fail(in.error());
  auto out = memory.MapArray<float>(args[2].address, n, true);
  if (!out) return Fail(out.error());
  for (std::int64_t i = 0; i < n; ++i) (*out)[i] = std::max((*in)[i], 0.0f);
  return {};
}

// gemm(m, n, k, a, b, c): C[m x n] = A[m x k] * B[k x n], row-major fp32.
// Blocked so that a tile of B stays in cache while rows of A stream past,
// with the innermost loop over contiguous C and B rows (vectorizable).
Status Gemm(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t m = args[0].integer, n = args[1].integer, k = args[2].integer;
  for (auto [value, name] : {std::pair{m, "m"}, {n, "n"}, {k, "k"}}) {
    if (value < 0 || value > (1 << 20))
      return Fail(ErrorCode::kInvalidArgument, std::string(name) + " is out of range");
  }
  auto a = memory.MapArray<float>(args[3].address, m * k, false);
  if (!a) return Fail(a.error());
  auto b = memory.MapArray<float>(args[4].address, k * n, false);
  if (!b) return Fail(b.error());
  auto c = memory.MapArray<float>(args[5].address, m * n, true);
  if (!c) return Fail(c.error());
  const float* __restrict ap = *a;
  const float* __restrict bp = *b;
  float* __restrict cp = *c;
  std::fill_n(cp, m * n, 0.0f);
  constexpr std::int64_t kBlockM = 64, kBlockN = 256, kBlockK = 128;
  for (std::int64_t i0 = 0; i0 < m; i0 += kBlockM) {
    const std::int64_t i1 = std::min(i0 + kBlockM, m);
    for (std::int64_t p0 = 0; p0 < k; p0 += kBlockK) {
      const std::int64_t p1 = std::min(p0 + kBlockK, k);
      for (std::int64_t j0 = 0; j0 < n; j0 += kBlockN) {
        const std::int64_t j1 = std::min(j0 + kBlockN, n);
        for (std::int64_t i = i0; i < i1; ++i) {
          float* __restrict crow = cp + i * n;
          for (std::int64_t p = p0; p < p1; ++p) {
            const float aip = ap[i * k + p];
            const float* __restrict brow = bp + p * n;
            for (std::int64_t j = j0; j < j1; ++j) crow[j] += aip * brow[j];
          }
        }
      }
    }
  }
  return {};
}

// softmax(rows, cols, in, out): each row of out is the softmax of that row of in.
Status Softmax(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t rows = args[0].integer, cols = args[1].integer;
  if (rows < 0 || cols < 0 || rows > (1 << 24) || cols > (1 << 24)) {
    return Fail(ErrorCode::kInvalidArgument, "rows or cols out of range");
  }
  auto in = memory.MapArray<float>(args[2].address, rows * cols, false);
  if (!in) return Fail(in.error());
  auto out = memory.MapArray<float>(args[3].address, rows * cols, true);
  if (!out) return Fail(out.error());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = *in + r * cols;
    float* result = *out + r * cols;
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) max = std::max(max, row[c]);
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      result[c] = std::exp(row[c] - max);
      sum += result[c];
    }
    const float scale = static_cast<float>(1.0 / sum);
    for (std::int64_t c = 0; c < cols; ++c) result[c] *= scale;
  }
  return {};
}

// reduce_sum(n, in, out): out[0] = sum of in[0..n), accumulated in double.
Status ReduceSum(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t n = args[0].integer;
  if (auto ok = CheckCount(n, "n"); !ok) return ok;
  auto in = memory.MapArray<float>(args[1].address, n, false);
  if (!in) return Fail(in.error());
  auto out = memory.MapArray<float>(args[2].address, 1, true);
  if (!out) return Fail(out.error());
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += (*in)[i];
  **out = static_cast<float>(sum);
  return {};
}

using enum ArgKind;

}  // namespace

const std::vector<SimKernel>& SimKernels() {
  static const std::vector<SimKernel> kKernels = {
      {{"empty", {}, "does nothing (launch-overhead measurements)"}, &Empty},
      {{"sleep_us", {kInt}, "micros: busy the stream for this long"}, &SleepMicros},
      {{"fill", {kAddress, kInt, kFloat}, "out, n, value: out[i] = value"}, &Fill},
      {{"axpy", {kInt, kFloat, kAddress, kAddress}, "n, a, x, y: y[i] = a*x[i] + y[i]"}, &Axpy},
      {{"add", {kInt, kAddress, kAddress, kAddress}, "n, a, b, out: out[i] = a[i] + b[i]"}, &Add},
      {{"mul", {kInt, kAddress, kAddress, kAddress}, "n, a, b, out: out[i] = a[i] * b[i]"}, &Mul},
      {{"relu", {kInt, kAddress, kAddress}, "n, in, out: out[i] = max(in[i], 0)"}, &Relu},
      {{"gemm",
        {kInt, kInt, kInt, kAddress, kAddress, kAddress},
        "m, n, k, a, b, c: C[m x n] = A[m x k] B[k x n], row-major fp32"},
       &Gemm},
      {{"softmax", {kInt, kInt, kAddress, kAddress}, "rows, cols, in, out: row-wise softmax"},
       &Softmax},
      {{"reduce_sum", {kInt, kAddress, kAddress}, "n, in, out: out[0] = sum(in)"}, &ReduceSum},
  };
  return kKernels;
}

const SimKernel* FindSimKernel(std::string_view name) {
  for (const auto& kernel : SimKernels()) {
    if (kernel.signature.name == name) return &kernel;
  }
  return nullptr;
}

}  // namespace rasd::drivers::sim
