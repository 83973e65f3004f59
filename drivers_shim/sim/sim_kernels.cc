#include "sim_kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

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

// The paged KV cache's layout, as jobs::KvBlockPool hands out blocks: a
// block of tokens_per_block tokens holds their keys, one row of `width`
// floats per token, then their values likewise.
constexpr std::int64_t kMaxWidth = 1 << 16;
constexpr std::int64_t kMaxTokensPerBlock = 1 << 12;

// kv_store(count, width, k, v, k_slots, v_slots): token i's key row k[i]
// goes to the address k_slots[i] and its value row v[i] to v_slots[i]
// (int64 device addresses, into the cache's blocks).
Status KvStore(DeviceMemoryAccess& memory, const LaunchConfig&, std::span<const KernelArg> args) {
  const std::int64_t count = args[0].integer, width = args[1].integer;
  if (count < 0 || count > (1 << 24) || width <= 0 || width > kMaxWidth) {
    return Fail(ErrorCode::kInvalidArgument, "count or width out of range");
  }
  auto k = memory.MapArray<float>(args[2].address, count * width, false);
  if (!k) return Fail(k.error());
  auto v = memory.MapArray<float>(args[3].address, count * width, false);
  if (!v) return Fail(v.error());
  auto k_slots = memory.MapArray<std::int64_t>(args[4].address, count, false);
  if (!k_slots) return Fail(k_slots.error());
  auto v_slots = memory.MapArray<std::int64_t>(args[5].address, count, false);
  if (!v_slots) return Fail(v_slots.error());
  for (std::int64_t i = 0; i < count; ++i) {
    for (auto [rows, slots] : {std::pair{*k, *k_slots}, {*v, *v_slots}}) {
      auto row = memory.MapArray<float>(static_cast<DeviceAddress>(slots[i]), width, true);
      if (!row) return Fail(row.error());
      std::copy_n(rows + i * width, width, *row);
    }
  }
  return {};
}

// paged_attention(seqs, heads, head_dim, tokens_per_block, max_blocks, q,
// block_tables, context_lens, out): for each sequence s, one query row
// q[s] (heads x head_dim) attends over the first context_lens[s] tokens of
// its cache, whose blocks are block_tables[s * max_blocks ...] (int64
// device addresses); out[s] is, per head, the softmax-weighted sum of the
// values, scores scaled by 1/sqrt(head_dim). Only the filled part of a
// block is read: a poisoned page past a sequence's last token is not
// consumed. Per head: scores in token order, the softmax as the softmax
// kernel computes it (max first, sum in double), then the weighted sum in
// token order.
Status PagedAttention(DeviceMemoryAccess& memory, const LaunchConfig&,
                      std::span<const KernelArg> args) {
  const std::int64_t seqs = args[0].integer, heads = args[1].integer, head_dim = args[2].integer,
                     tokens_per_block = args[3].integer, max_blocks = args[4].integer;
  if (seqs < 0 || seqs > (1 << 20) || heads <= 0 || head_dim <= 0 || heads * head_dim > kMaxWidth ||
      tokens_per_block <= 0 || tokens_per_block > kMaxTokensPerBlock || max_blocks <= 0 ||
      max_blocks > (1 << 20)) {
    return Fail(ErrorCode::kInvalidArgument,
                "seqs, heads, head_dim, tokens_per_block or max_blocks out of range");
  }
  const std::int64_t width = heads * head_dim;
  auto q = memory.MapArray<float>(args[5].address, seqs * width, false);
  if (!q) return Fail(q.error());
  auto tables = memory.MapArray<std::int64_t>(args[6].address, seqs * max_blocks, false);
  if (!tables) return Fail(tables.error());
  auto lens = memory.MapArray<std::int64_t>(args[7].address, seqs, false);
  if (!lens) return Fail(lens.error());
  auto out = memory.MapArray<float>(args[8].address, seqs * width, true);
  if (!out) return Fail(out.error());
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<const float*> keys, values;
  std::vector<float> scores;
  for (std::int64_t s = 0; s < seqs; ++s) {
    const std::int64_t len = (*lens)[s];
    if (len <= 0 || len > max_blocks * tokens_per_block) {
      return Fail(ErrorCode::kInvalidArgument, "a context length is out of range");
    }
    // Each token's key and value rows, mapped block by block.
    keys.assign(static_cast<std::size_t>(len), nullptr);
    values.assign(static_cast<std::size_t>(len), nullptr);
    for (std::int64_t first = 0; first < len; first += tokens_per_block) {
      const std::int64_t filled = std::min(tokens_per_block, len - first);
      const auto block =
          static_cast<DeviceAddress>((*tables)[s * max_blocks + first / tokens_per_block]);
      auto k = memory.MapArray<float>(block, filled * width, false);
      if (!k) return Fail(k.error());
      auto v = memory.MapArray<float>(
          block + static_cast<DeviceAddress>(tokens_per_block * width) * sizeof(float),
          filled * width, false);
      if (!v) return Fail(v.error());
      for (std::int64_t t = 0; t < filled; ++t) {
        keys[first + t] = *k + t * width;
        values[first + t] = *v + t * width;
      }
    }
    scores.resize(static_cast<std::size_t>(len));
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* query = *q + s * width + h * head_dim;
      float max = -std::numeric_limits<float>::infinity();
      for (std::int64_t t = 0; t < len; ++t) {
        float dot = 0.0f;
        for (std::int64_t d = 0; d < head_dim; ++d) dot += query[d] * keys[t][h * head_dim + d];
        scores[t] = dot * scale;
        max = std::max(max, scores[t]);
      }
      double sum = 0;
      for (std::int64_t t = 0; t < len; ++t) {
        scores[t] = std::exp(scores[t] - max);
        sum += scores[t];
      }
      const float norm = static_cast<float>(1.0 / sum);
      float* result = *out + s * width + h * head_dim;
      std::fill_n(result, head_dim, 0.0f);
      for (std::int64_t t = 0; t < len; ++t) {
        const float weight = scores[t] * norm;
        for (std::int64_t d = 0; d < head_dim; ++d)
          result[d] += weight * values[t][h * head_dim + d];
      }
    }
  }
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
      {{"kv_store",
        {kInt, kInt, kAddress, kAddress, kAddress, kAddress},
        "count, width, k, v, k_slots, v_slots: rows of k and v into the KV cache's slots"},
       &KvStore},
      {{"paged_attention",
        {kInt, kInt, kInt, kInt, kInt, kAddress, kAddress, kAddress, kAddress},
        "seqs, heads, head_dim, tokens_per_block, max_blocks, q, block_tables, context_lens, "
        "out: one query per sequence over its paged KV cache"},
       &PagedAttention},
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
