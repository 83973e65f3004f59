// Every simulator kernel against a plain reference.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "sim_test_util.h"

namespace rasd::drivers::testing {
namespace {

class SimKernelsTest : public SimDriverTest {
 protected:
  void SetUp() override {
    SimDriverTest::SetUp();
    stream_ = NewStream();
  }
  void Launch(std::string_view kernel, std::vector<KernelArg> args) {
    ASSERT_TRUE(driver_->LaunchKernel(stream_, kernel, {}, args).has_value());
    const auto status = driver_->SynchronizeStream(stream_, 10s);
    ASSERT_TRUE(status.has_value()) << status.error().ToString();
  }
  DeviceAddress Up(const std::vector<float>& values) { return Upload(stream_, values); }
  std::vector<float> Down(DeviceAddress address, std::size_t n) {
    return Download(stream_, address, n);
  }

  StreamHandle stream_;
};

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                float tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * std::max(1.0f, std::fabs(expected[i])))
        << "at " << i;
  }
}

TEST_F(SimKernelsTest, DriverListsEveryKernelWithItsSignature) {
  std::set<std::string> names;
  for (const auto& kernel : driver_->Kernels()) names.insert(kernel.name);
  for (const char* name : {"empty", "fill", "axpy", "add", "mul", "relu", "gemm", "softmax",
                           "reduce_sum", "kv_store", "paged_attention"}) {
    EXPECT_TRUE(names.contains(name)) << name;
  }
}

TEST_F(SimKernelsTest, Fill) {
  const DeviceAddress out = Reserve(333 * 4);
  Launch("fill", {KernelArg::Address(out), KernelArg::Int(333), KernelArg::Float(-2.25f)});
  EXPECT_EQ(Down(out, 333), std::vector<float>(333, -2.25f));
}

TEST_F(SimKernelsTest, Axpy) {
  for (std::size_t n : {1u, 7u, 1000u, 65537u}) {
    const auto x = Pattern(n), y = Pattern(n, 0.5f, 1.0f);
    const DeviceAddress dx = Up(x), dy = Up(y);
    Launch("axpy", {KernelArg::Int(static_cast<std::int64_t>(n)), KernelArg::Float(3.0f),
                    KernelArg::Address(dx), KernelArg::Address(dy)});
    std::vector<float> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = 3.0f * x[i] + y[i];
    ExpectNear(Down(dy, n), expected, 1e-6f);
  }
}

TEST_F(SimKernelsTest, ElementwiseAddMulRelu) {
  const std::size_t n = 4099;
  const auto a = Pattern(n), b = Pattern(n, -0.75f, 0.25f);
  const DeviceAddress da = Up(a), db = Up(b), out = Reserve(n * 4);
  const auto count = KernelArg::Int(static_cast<std::int64_t>(n));
  std::vector<float> expected(n);

  Launch("add", {count, KernelArg::Address(da), KernelArg::Address(db), KernelArg::Address(out)});
  for (std::size_t i = 0; i < n; ++i) expected[i] = a[i] + b[i];
  EXPECT_EQ(Down(out, n), expected);

  Launch("mul", {count, KernelArg::Address(da), KernelArg::Address(db), KernelArg::Address(out)});
  for (std::size_t i = 0; i < n; ++i) expected[i] = a[i] * b[i];
  EXPECT_EQ(Down(out, n), expected);

  Launch("relu", {count, KernelArg::Address(da), KernelArg::Address(out)});
  for (std::size_t i = 0; i < n; ++i) expected[i] = a[i] > 0 ? a[i] : 0.0f;
  EXPECT_EQ(Down(out, n), expected);
}

TEST_F(SimKernelsTest, GemmMatchesTheNaiveProductForAwkwardShapes) {
  struct Shape {
    std::int64_t m, n, k;
  };
  for (const Shape shape : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{17, 33, 65}, Shape{128, 96, 80},
                            Shape{70, 300, 130}}) {
    const auto a = Pattern(static_cast<std::size_t>(shape.m * shape.k), 0.1f);
    const auto b = Pattern(static_cast<std::size_t>(shape.k * shape.n), -0.2f, 0.05f);
    const DeviceAddress da = Up(a), db = Up(b),
                        dc = Reserve(static_cast<std::uint64_t>(shape.m * shape.n * 4));
    // C starts as garbage: gemm must overwrite, not accumulate.
    Launch("fill",
           {KernelArg::Address(dc), KernelArg::Int(shape.m * shape.n), KernelArg::Float(99.0f)});
    Launch("gemm", {KernelArg::Int(shape.m), KernelArg::Int(shape.n), KernelArg::Int(shape.k),
                    KernelArg::Address(da), KernelArg::Address(db), KernelArg::Address(dc)});
    std::vector<float> expected(static_cast<std::size_t>(shape.m * shape.n));
    for (std::int64_t i = 0; i < shape.m; ++i) {
      for (std::int64_t j = 0; j < shape.n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < shape.k; ++p) {
          sum += static_cast<double>(a[static_cast<std::size_t>(i * shape.k + p)]) *
                 b[static_cast<std::size_t>(p * shape.n + j)];
        }
        expected[static_cast<std::size_t>(i * shape.n + j)] = static_cast<float>(sum);
      }
    }
    SCOPED_TRACE(::testing::Message() << shape.m << "x" << shape.n << "x" << shape.k);
    ExpectNear(Down(dc, expected.size()), expected, 1e-4f);
  }
}

TEST_F(SimKernelsTest, SoftmaxRowsSumToOneAndMatchTheReference) {
  const std::int64_t rows = 9, cols = 257;
  auto in =
      Pattern(static_cast<std::size_t>(rows * cols), 20.0f);  // large values: needs the max shift
  const DeviceAddress din = Up(in), dout = Reserve(static_cast<std::uint64_t>(rows * cols * 4));
  Launch("softmax", {KernelArg::Int(rows), KernelArg::Int(cols), KernelArg::Address(din),
                     KernelArg::Address(dout)});
  const auto out = Down(dout, static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    double max = -1e30, sum = 0;
    for (std::int64_t c = 0; c < cols; ++c)
      max = std::max<double>(max, in[static_cast<std::size_t>(r * cols + c)]);
    for (std::int64_t c = 0; c < cols; ++c)
      sum += std::exp(in[static_cast<std::size_t>(r * cols + c)] - max);
    double row_total = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto index = static_cast<std::size_t>(r * cols + c);
      const double expected = std::exp(in[index] - max) / sum;
      ASSERT_NEAR(out[index], expected, 1e-6) << "row " << r << " col " << c;
      ASSERT_FALSE(std::isnan(out[index]));
      row_total += out[index];
    }
    EXPECT_NEAR(row_total, 1.0, 1e-5);
  }
}

TEST_F(SimKernelsTest, ReduceSum) {
  for (std::size_t n : {1u, 1000u, 100003u}) {
    const auto in = Pattern(n);
    const DeviceAddress din = Up(in), dout = Reserve(4);
    Launch("reduce_sum", {KernelArg::Int(static_cast<std::int64_t>(n)), KernelArg::Address(din),
                          KernelArg::Address(dout)});
    const double expected = std::accumulate(in.begin(), in.end(), 0.0);
    EXPECT_NEAR(Down(dout, 1)[0], expected, 1e-3 * std::max(1.0, std::fabs(expected))) << n;
  }
}

// Two sequences' keys and values stored a token at a time into blocks
// that are not in order, then one query each over its cache: the result is
// plain attention over the tokens, computed here in double.
TEST_F(SimKernelsTest, PagedAttentionOverStoredBlocksIsPlainAttention) {
  constexpr std::int64_t kHeads = 2, kHeadDim = 4, kWidth = kHeads * kHeadDim, kTokensPerBlock = 4,
                         kMaxBlocks = 3;
  constexpr std::int64_t kBlockBytes = 2 * kTokensPerBlock * kWidth * 4;
  const DeviceAddress cache = Reserve(6 * kBlockBytes);
  auto block = [&](int i) { return static_cast<std::int64_t>(cache + i * kBlockBytes); };
  // Sequence 0: 5 tokens on blocks 4, 1; sequence 1: 9 tokens on 0, 5, 2.
  const std::vector<std::vector<std::int64_t>> tables = {{block(4), block(1), 0},
                                                         {block(0), block(5), block(2)}};
  const std::vector<std::int64_t> lens = {5, 9};
  std::vector<std::vector<float>> keys(2), values(2);
  std::vector<float> k_rows, v_rows;
  std::vector<std::int64_t> k_slots, v_slots;
  for (int s = 0; s < 2; ++s) {
    keys[s] = Pattern(static_cast<std::size_t>(lens[s] * kWidth), 0.3f, 0.1f * s);
    values[s] = Pattern(static_cast<std::size_t>(lens[s] * kWidth), 0.7f, -0.2f);
    std::reverse(values[s].begin(), values[s].end());
    for (std::int64_t t = 0; t < lens[s]; ++t) {
      const std::int64_t base = tables[s][t / kTokensPerBlock];
      const std::int64_t row = (t % kTokensPerBlock) * kWidth * 4;
      k_slots.push_back(base + row);
      v_slots.push_back(base + kTokensPerBlock * kWidth * 4 + row);
      k_rows.insert(k_rows.end(), keys[s].begin() + t * kWidth, keys[s].begin() + (t + 1) * kWidth);
      v_rows.insert(v_rows.end(), values[s].begin() + t * kWidth,
                    values[s].begin() + (t + 1) * kWidth);
    }
  }
  auto up_ints = [&](const std::vector<std::int64_t>& ints) {
    const DeviceAddress address = Reserve(ints.size() * 8);
    EXPECT_TRUE(
        driver_->CopyHostToDevice(stream_, address, ints.data(), ints.size() * 8).has_value());
    return address;
  };
  const auto count = static_cast<std::int64_t>(k_slots.size());
  Launch("kv_store", {KernelArg::Int(count), KernelArg::Int(kWidth), KernelArg::Address(Up(k_rows)),
                      KernelArg::Address(Up(v_rows)), KernelArg::Address(up_ints(k_slots)),
                      KernelArg::Address(up_ints(v_slots))});
  const auto q = Pattern(2 * kWidth, 0.9f, 0.05f);
  const DeviceAddress out = Reserve(2 * kWidth * 4);
  Launch("paged_attention",
         {KernelArg::Int(2), KernelArg::Int(kHeads), KernelArg::Int(kHeadDim),
          KernelArg::Int(kTokensPerBlock), KernelArg::Int(kMaxBlocks), KernelArg::Address(Up(q)),
          KernelArg::Address(up_ints({tables[0][0], tables[0][1], tables[0][2], tables[1][0],
                                      tables[1][1], tables[1][2]})),
          KernelArg::Address(up_ints(lens)), KernelArg::Address(out)});
  std::vector<float> expected;
  for (int s = 0; s < 2; ++s) {
    for (int h = 0; h < kHeads; ++h) {
      std::vector<double> weights;
      double total = 0;
      for (std::int64_t t = 0; t < lens[s]; ++t) {
        double dot = 0;
        for (int d = 0; d < kHeadDim; ++d)
          dot += double{q[s * kWidth + h * kHeadDim + d]} * keys[s][t * kWidth + h * kHeadDim + d];
        weights.push_back(std::exp(dot / std::sqrt(double{kHeadDim})));
        total += weights.back();
      }
      for (int d = 0; d < kHeadDim; ++d) {
        double sum = 0;
        for (std::int64_t t = 0; t < lens[s]; ++t)
          sum += weights[t] / total * values[s][t * kWidth + h * kHeadDim + d];
        expected.push_back(static_cast<float>(sum));
      }
    }
  }
  ExpectNear(Down(out, 2 * kWidth), expected, 1e-5f);
}

// A poisoned page under a block's filled rows fails the attention that
// reads it; poison past the last token of every sequence is not consumed.
TEST_F(SimKernelsTest, PagedAttentionConsumesPoisonOnlyWhereItReads) {
  constexpr std::int64_t kWidth = 256, kTokensPerBlock = 8;  // keys: 2 pages, values: 2 pages
  const DeviceAddress cache = Reserve(2 * kTokensPerBlock * kWidth * 4);
  const auto q = Up(Pattern(kWidth));
  const DeviceAddress out = Reserve(kWidth * 4);
  const DeviceAddress table = Reserve(8);
  const auto base = static_cast<std::int64_t>(cache);
  ASSERT_TRUE(driver_->CopyHostToDevice(stream_, table, &base, 8).has_value());
  const DeviceAddress len = Reserve(8);
  const std::int64_t tokens = 3;  // the keys' first page only, the values' first page only
  ASSERT_TRUE(driver_->CopyHostToDevice(stream_, len, &tokens, 8).has_value());
  auto attend = [&] {
    EXPECT_TRUE(
        driver_
            ->LaunchKernel(stream_, "paged_attention", {},
                           std::vector{KernelArg::Int(1), KernelArg::Int(1), KernelArg::Int(kWidth),
                                       KernelArg::Int(kTokensPerBlock), KernelArg::Int(1),
                                       KernelArg::Address(q), KernelArg::Address(table),
                                       KernelArg::Address(len), KernelArg::Address(out)})
            .has_value());
    return driver_->SynchronizeStream(stream_, 5s);
  };
  ASSERT_TRUE(driver_->InjectUncorrectedEcc(0, cache + 4096 + 64).has_value());  // keys' 2nd page
  EXPECT_TRUE(attend().has_value()) << "the poisoned rows were never filled";
  ASSERT_TRUE(driver_->InjectUncorrectedEcc(0, cache + 8192 + 8).has_value());  // values' 1st page
  const auto consumed = attend();
  ASSERT_FALSE(consumed.has_value());
  EXPECT_EQ(consumed.error().code, ErrorCode::kDeviceFault) << consumed.error().ToString();
}

TEST_F(SimKernelsTest, NegativeSizesAreRejectedAtRunTime) {
  const DeviceAddress out = Reserve(4096);
  ASSERT_TRUE(driver_
                  ->LaunchKernel(
                      stream_, "fill", {},
                      std::vector{KernelArg::Address(out), KernelArg::Int(-5), KernelArg::Float(1)})
                  .has_value());
  const auto status = driver_->SynchronizeStream(stream_, 5s);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace rasd::drivers::testing
