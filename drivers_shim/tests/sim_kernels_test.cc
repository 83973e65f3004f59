// Every simulator kernel against a plain reference.

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
  for (const char* name :
       {"empty", "fill", "axpy", "add", "mul", "relu", "gemm", "softmax", "reduce_sum"}) {
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
