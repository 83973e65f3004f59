// The kernel registry's kernels for the CUDA backend: the simulator's ten
// kernels (drivers_shim/sim/sim_kernels.cc) with the same names, the same
// arguments in the same order and the same results. fatbin.cmake builds this
// file with `nvcc --fatbin` and embeds the image in rasd_drivers
// (cuda_fatbin.h: KernelFatbin(), for cuModuleLoadData).
//
// PARAMETERS (each kernelParams[i] of cuLaunchKernel points at a value of
// this C type, in the registry signature's order):
//   ArgKind::kInt     -> long long   (8 bytes: point at the std::int64_t)
//   ArgKind::kFloat   -> float       (4 bytes: point at a float, not a double)
//   ArgKind::kAddress -> float* / const float*  (8 bytes: a CUdeviceptr)
// Names are extern "C": cuModuleGetFunction(&f, module, "gemm") etc.
//
// LAUNCH GEOMETRY: the best configuration per kernel, one line each, in the
// form `rasd-launch: NAME block=X,Y,Z grid=X,Y,Z shared=BYTES`, where
// cdiv(a, b) = (a + b - 1) / b, min/max as usual, and any grid dimension is
// at least 1 (a kernel with nothing to do still needs a valid launch).
// clang-format off
//   rasd-launch: empty      block=1,1,1   grid=1,1,1 shared=0
//   rasd-launch: sleep_us   block=1,1,1   grid=1,1,1 shared=0
//   rasd-launch: fill       block=256,1,1 grid=max(1,min(cdiv(n,256),65535)),1,1 shared=0
//   rasd-launch: axpy       block=256,1,1 grid=max(1,min(cdiv(n,256),65535)),1,1 shared=0
//   rasd-launch: add        block=256,1,1 grid=max(1,min(cdiv(n,256),65535)),1,1 shared=0
//   rasd-launch: mul        block=256,1,1 grid=max(1,min(cdiv(n,256),65535)),1,1 shared=0
//   rasd-launch: relu       block=256,1,1 grid=max(1,min(cdiv(n,256),65535)),1,1 shared=0
//   rasd-launch: gemm       block=16,16,1 grid=max(1,min(cdiv(n,16),65535)),max(1,min(cdiv(m,16),65535)),1 shared=0
//   rasd-launch: softmax    block=256,1,1 grid=max(1,min(rows,65535)),1,1 shared=0
//   rasd-launch: reduce_sum block=1024,1,1 grid=1,1,1 shared=0
// clang-format on
// Every kernel is nevertheless correct under ANY grid and block (1-, 2- or
// 3-dimensional, 1 to 1024 threads, any dynamic shared size): threads and
// blocks are numbered linearly and every loop strides over the whole grid.
// gemm takes its shared-memory tiled path only with block=16,16,1 and an
// equivalent (bit-identical) direct path otherwise; softmax uses at most 256
// threads of a block and reduce_sum at most 1024; reduce_sum and sleep_us
// run on block 0 alone and any other block exits at once.
//
// ARGUMENT RANGES: out-of-range arguments make a kernel do nothing (a kernel
// cannot return an error). The simulator returns kInvalidArgument for the
// same ranges, so a driver that wants the same errors checks them before it
// launches: n (fill, axpy, add, mul, relu, reduce_sum) in [0, 2^40]; gemm's
// m, n, k in [0, 2^20]; softmax's rows, cols in [0, 2^24]; sleep_us's micros
// in [0, 60'000'000].
//
// RESULTS against the simulator (built with fp contraction off, as GCC does
// under -std=c++20, and no fast math; nvcc here builds without
// --use_fast_math, so denormals, division and sqrt are IEEE):
// - fill, add, mul, relu, axpy: bit-identical. axpy rounds a*x and then the
//   sum (__fmul_rn/__fadd_rn) so that nvcc cannot fuse them into an FMA.
// - gemm: bit-identical. Each C element is summed from 0.0f over p = 0..k-1
//   in ascending order, unfused, as the simulator's blocked loops do.
// - softmax: the row maximum is exact; exp is evaluated in double and
//   rounded to float (glibc's expf is within 0.502 ulp, so the two agree but
//   for rare last-bit cases); the row sum is accumulated in double in a fixed
//   order that differs from the simulator's sequential one, so 1/sum can
//   differ in the last float bit. Compare with a relative tolerance (1e-6).
// - reduce_sum: accumulated in double, in a fixed order (below) that differs
//   from the simulator's sequential sum; compare with a tolerance.
//
// DETERMINISM: softmax splits a row over L = 256 logical lanes and
// reduce_sum its input over L = 1024, lane l summing elements l, l+L, l+2L,
// ... in ascending order; then the L lane sums are added in a fixed pairwise
// tree. Which thread runs which lane does not change a bit of the result,
// so the same input gives the same bits on every run, with any grid and
// block.

namespace {

constexpr long long kMaxElements = 1LL << 40;
constexpr long long kMaxGemmDim = 1LL << 20;
constexpr long long kMaxSoftmaxDim = 1LL << 24;
constexpr long long kMaxSleepMicros = 60'000'000;

// The number of logical lanes of a reduction, fixed so that the summation
// order does not depend on the block size: softmax's (one row per block, so
// fewer lanes and more blocks) and reduce_sum's (one block for everything,
// so as many lanes as a block has threads, to keep many loads in flight).
constexpr int kSoftmaxLanes = 256;
constexpr int kReduceSumLanes = 1024;
// gemm: the side of a square C tile computed by one 16x16 block.
constexpr int kTile = 16;

__device__ __forceinline__ long long LinearBlock() {
  return (static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}

__device__ __forceinline__ long long BlockCount() {
  return static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z;
}

__device__ __forceinline__ int LinearThread() {
  return static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
}

__device__ __forceinline__ int ThreadCount() {
  return static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}

__device__ __forceinline__ long long GlobalThread() {
  return LinearBlock() * ThreadCount() + LinearThread();
}

__device__ __forceinline__ long long GlobalThreadCount() { return BlockCount() * ThreadCount(); }

__device__ __forceinline__ bool CountInRange(long long n) { return n >= 0 && n <= kMaxElements; }

// Nanoseconds of the GPU's global timer, which runs at wall-clock rate
// whatever the SM clock does.
__device__ __forceinline__ unsigned long long GlobalTimerNanos() {
  unsigned long long nanos;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(nanos));
  return nanos;
}

// Reduces lanes[0..kLanes) into lanes[0] in a fixed pairwise order, with
// whatever threads the block has. Every thread of the block must call it;
// it starts and ends with a barrier.
template <int kLanes, typename T, typename Combine>
__device__ void ReduceLanes(T* lanes, Combine combine) {
  static_assert((kLanes & (kLanes - 1)) == 0, "a power of two");
  const int thread = LinearThread();
  const int threads = ThreadCount();
  __syncthreads();
  for (int half = kLanes / 2; half > 0; half /= 2) {
    for (int lane = thread; lane < half; lane += threads) {
      lanes[lane] = combine(lanes[lane], lanes[lane + half]);
    }
    __syncthreads();
  }
}

// gemm with 16x16 blocks: each block computes whole 16x16 tiles of C,
// staging 16x16 tiles of A and B in shared memory. The loop bounds are the
// same for every thread of a block, so all of them reach every barrier.
__device__ void GemmTiled(long long m, long long n, long long k, const float* a, const float* b,
                          float* c) {
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile];
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const long long tile_rows = (m + kTile - 1) / kTile;
  const long long tile_cols = (n + kTile - 1) / kTile;
  const long long tiles = tile_rows * tile_cols;
  for (long long tile = LinearBlock(); tile < tiles; tile += BlockCount()) {
    const long long row = (tile / tile_cols) * kTile + ty;
    const long long col = (tile % tile_cols) * kTile + tx;
    float sum = 0.0f;
    for (long long p0 = 0; p0 < k; p0 += kTile) {
      a_tile[ty][tx] = (row < m && p0 + tx < k) ? a[row * k + p0 + tx] : 0.0f;
      b_tile[ty][tx] = (p0 + ty < k && col < n) ? b[(p0 + ty) * n + col] : 0.0f;
      __syncthreads();
      // Only the real terms: a padded 0 * inf would turn the sum into NaN.
      const int depth = static_cast<int>(k - p0 < kTile ? k - p0 : kTile);
      for (int q = 0; q < depth; ++q) {
        sum = __fadd_rn(sum, __fmul_rn(a_tile[ty][q], b_tile[q][tx]));
      }
      __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = sum;
  }
}

// gemm with any other block: one C element per thread, same summation.
__device__ void GemmDirect(long long m, long long n, long long k, const float* a, const float* b,
                           float* c) {
  const long long elements = m * n;
  for (long long i = GlobalThread(); i < elements; i += GlobalThreadCount()) {
    const long long row = i / n;
    const long long col = i % n;
    float sum = 0.0f;
    for (long long p = 0; p < k; ++p)
      sum = __fadd_rn(sum, __fmul_rn(a[row * k + p], b[p * n + col]));
    c[i] = sum;
  }
}

}  // namespace

// empty(): does nothing (launch-overhead measurements).
extern "C" __global__ void empty() {}

// sleep_us(micros): keeps the stream busy for `micros` microseconds. One
// thread waits; the kernel ends when it does.
extern "C" __global__ void sleep_us(long long micros) {
  if (micros <= 0 || micros > kMaxSleepMicros) return;
  if (LinearBlock() != 0 || LinearThread() != 0) return;
  const unsigned long long start = GlobalTimerNanos();
  const unsigned long long duration = static_cast<unsigned long long>(micros) * 1000ULL;
  while (GlobalTimerNanos() - start < duration) __nanosleep(1000);
}

// fill(out, n, value): out[i] = value.
extern "C" __global__ void fill(float* out, long long n, float value) {
  if (!CountInRange(n)) return;
  for (long long i = GlobalThread(); i < n; i += GlobalThreadCount()) out[i] = value;
}

// axpy(n, a, x, y): y[i] = a * x[i] + y[i], rounded twice like the simulator.
extern "C" __global__ void axpy(long long n, float a, const float* x, float* y) {
  if (!CountInRange(n)) return;
  for (long long i = GlobalThread(); i < n; i += GlobalThreadCount()) {
    y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
  }
}

// add(n, a, b, out): out[i] = a[i] + b[i].
extern "C" __global__ void add(long long n, const float* a, const float* b, float* out) {
  if (!CountInRange(n)) return;
  for (long long i = GlobalThread(); i < n; i += GlobalThreadCount()) {
    out[i] = __fadd_rn(a[i], b[i]);
  }
}

// mul(n, a, b, out): out[i] = a[i] * b[i].
extern "C" __global__ void mul(long long n, const float* a, const float* b, float* out) {
  if (!CountInRange(n)) return;
  for (long long i = GlobalThread(); i < n; i += GlobalThreadCount()) {
    out[i] = __fmul_rn(a[i], b[i]);
  }
}

// relu(n, in, out): out[i] = max(in[i], 0), as std::max(in[i], 0.0f): NaN
// and -0.0f pass through unchanged.
extern "C" __global__ void relu(long long n, const float* in, float* out) {
  if (!CountInRange(n)) return;
  for (long long i = GlobalThread(); i < n; i += GlobalThreadCount()) {
    const float value = in[i];
    out[i] = value < 0.0f ? 0.0f : value;
  }
}

// gemm(m, n, k, a, b, c): C[m x n] = A[m x k] * B[k x n], row-major fp32;
// C is overwritten, not accumulated into.
extern "C" __global__ void gemm(long long m, long long n, long long k, const float* a,
                                const float* b, float* c) {
  if (m < 0 || n < 0 || k < 0 || m > kMaxGemmDim || n > kMaxGemmDim || k > kMaxGemmDim) return;
  // The same for every thread of the launch, so the tiled path's barriers
  // are reached by whole blocks.
  if (blockDim.x == kTile && blockDim.y == kTile && blockDim.z == 1) {
    GemmTiled(m, n, k, a, b, c);
  } else {
    GemmDirect(m, n, k, a, b, c);
  }
}

// softmax(rows, cols, in, out): each row of out is the softmax of that row
// of in: exp(x - max(row)) / sum, the sum accumulated in double. One block
// per row at a time; blocks stride over the rows.
extern "C" __global__ void softmax(long long rows, long long cols, const float* in, float* out) {
  if (rows < 0 || cols < 0 || rows > kMaxSoftmaxDim || cols > kMaxSoftmaxDim) return;
  __shared__ float lane_max[kSoftmaxLanes];
  __shared__ double lane_sum[kSoftmaxLanes];
  const int thread = LinearThread();
  const int threads = ThreadCount();
  for (long long r = LinearBlock(); r < rows; r += BlockCount()) {
    const float* row = in + r * cols;
    float* result = out + r * cols;

    for (int lane = thread; lane < kSoftmaxLanes; lane += threads) {
      float highest = -__int_as_float(0x7f800000);  // -infinity
      for (long long c = lane; c < cols; c += kSoftmaxLanes) highest = fmaxf(highest, row[c]);
      lane_max[lane] = highest;
    }
    ReduceLanes<kSoftmaxLanes>(lane_max, [](float x, float y) { return fmaxf(x, y); });
    const float row_max = lane_max[0];

    for (int lane = thread; lane < kSoftmaxLanes; lane += threads) {
      double sum = 0.0;
      for (long long c = lane; c < cols; c += kSoftmaxLanes) {
        const float e = static_cast<float>(exp(static_cast<double>(row[c] - row_max)));
        result[c] = e;
        sum += e;
      }
      lane_sum[lane] = sum;
    }
    ReduceLanes<kSoftmaxLanes>(lane_sum, [](double x, double y) { return x + y; });
    const float scale = static_cast<float>(1.0 / lane_sum[0]);

    // The same thread runs the same lane as above, so it rescales the
    // values it wrote itself.
    for (int lane = thread; lane < kSoftmaxLanes; lane += threads) {
      for (long long c = lane; c < cols; c += kSoftmaxLanes)
        result[c] = __fmul_rn(result[c], scale);
    }
    // Nobody may refill lane_max/lane_sum for the next row before every
    // thread has read this row's max and scale.
    __syncthreads();
  }
}

// reduce_sum(n, in, out): out[0] = sum of in[0..n), accumulated in double
// and stored as float. Block 0 alone does the work.
// Launched with 1024 threads: the bound keeps nvcc within the registers that allows.
extern "C" __global__ void __launch_bounds__(1024)
    reduce_sum(long long n, const float* in, float* out) {
  if (!CountInRange(n)) return;
  if (LinearBlock() != 0) return;
  __shared__ double lane_sum[kReduceSumLanes];
  const int thread = LinearThread();
  const int threads = ThreadCount();
  for (int lane = thread; lane < kReduceSumLanes; lane += threads) {
    double sum = 0.0;
#pragma unroll 8
    for (long long i = lane; i < n; i += kReduceSumLanes) sum += in[i];
    lane_sum[lane] = sum;
  }
  ReduceLanes<kReduceSumLanes>(lane_sum, [](double x, double y) { return x + y; });
  if (thread == 0) out[0] = static_cast<float>(lane_sum[0]);
}
