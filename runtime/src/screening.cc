#include "rasd/runtime/screening.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <span>

#include "mapped_words.h"

namespace rasd::runtime {
namespace {

using drivers::DeviceAddress;
using drivers::KernelArg;

constexpr const char* kOwner = "rasd-screen";
// Below this the gemm and softmax shapes stop being meaningful; above it
// reduce_sum's partial sums (up to 8 x elements) pass 2^24, where float
// sums stop being exact.
constexpr std::uint64_t kMinElements = 4096;
constexpr std::uint64_t kMaxElements = 1ULL << 21;
constexpr float kSoftmaxTolerance = 1e-6f;

// What one kernel test reads: the screen's two input vectors (on the
// device as `a` and `b`, on the host as `a_host` and `b_host`), its output
// buffer.
struct Buffers {
  DeviceAddress a = 0, b = 0, out = 0;
};

struct KernelTest {
  std::string kernel;
  std::string shape;
  std::uint64_t outputs = 0;
  bool exact = true;
  // Copies `out`'s starting contents (where the kernel reads them) and
  // launches the kernel on `stream`.
  std::function<Status(Stream& stream, const Buffers& buffers)> launch;
  // Writes the known answer (`outputs` floats) on the host: for the digest
  // once, and again only to say where a result went wrong.
  std::function<void(float* out)> expected;
  std::uint64_t digest = 0;
  std::shared_ptr<MappedWords> tolerance_reference;  // kept for inexact kernels only
};

Status LaunchWith(Stream& stream, std::string_view kernel, const std::vector<KernelArg>& args) {
  return stream.Launch(kernel, args);
}

std::string ElementCount(std::uint64_t elements) {
  if (elements >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(elements) / 1e6);
  if (elements >= 1000) return fmt::format("{:.1f}k", static_cast<double>(elements) / 1e3);
  return std::to_string(elements);
}

}  // namespace

std::uint64_t WordDigest(const float* values, std::size_t count) {
  std::uint64_t digest = 0x9e3779b97f4a7c15ULL;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t word;
    std::memcpy(&word, values + i, sizeof(word));
    // xor, then multiply by an odd constant: both are bijections of the
    // running value, so a change of any single word reaches the result.
    digest = (digest ^ word) * 0x100000001b3ULL;
    digest ^= digest >> 29;
  }
  return digest;
}

// The inputs and known answers (megabytes) live in mapped memory, not
// malloc's: built on a self-test's or the screening's worker thread, they
// would stay resident in that thread's arena after the screen is gone (see
// MappedWords), one arena after another.
struct KnownAnswerScreen::Data {
  ScreeningOptions options;
  std::uint64_t n = 0;
  // The inputs: small integers, -8 to 8 and -7 to 7; null when the host
  // memory could not be mapped (Run then reports no verdict).
  std::unique_ptr<MappedWords> a_words, b_words;
  const float* a() const { return a_words->Floats(); }
  const float* b() const { return b_words->Floats(); }
  bool Mapped() const { return a_words && a_words->Valid() && b_words && b_words->Valid(); }
  std::vector<KernelTest> tests;
  std::vector<std::string> screened, unscreened;
};

KnownAnswerScreen::KnownAnswerScreen(std::unique_ptr<Data> data) : data_(std::move(data)) {}
KnownAnswerScreen::~KnownAnswerScreen() = default;

const std::vector<std::string>& KnownAnswerScreen::Screened() const { return data_->screened; }
const std::vector<std::string>& KnownAnswerScreen::Unscreened() const { return data_->unscreened; }
const ScreeningOptions& KnownAnswerScreen::Options() const { return data_->options; }

std::shared_ptr<const KnownAnswerScreen> KnownAnswerScreen::Build(
    const std::vector<std::string>& kernels, const ScreeningOptions& options) {
  auto data = std::make_unique<Data>();
  data->options = options;
  const std::uint64_t n = std::clamp(options.elements, kMinElements, kMaxElements);
  data->options.elements = n;
  data->n = n;
  data->a_words = std::make_unique<MappedWords>(n);
  data->b_words = std::make_unique<MappedWords>(n);
  if (!data->Mapped())
    return std::shared_ptr<const KnownAnswerScreen>(new KnownAnswerScreen(std::move(data)));
  for (std::uint64_t i = 0; i < n; ++i) {
    // Different strides, so that a kernel reading the wrong input, or the
    // right one at the wrong index, gives another answer.
    data->a_words->Floats()[i] = static_cast<float>(static_cast<int>((i * 7 + 3) % 17) - 8);
    data->b_words->Floats()[i] = static_cast<float>(static_cast<int>((i * 13 + 5) % 15) - 7);
  }
  const Data* inputs = data.get();
  const auto count = static_cast<std::int64_t>(n);

  std::vector<KernelTest> known;
  known.push_back({"fill", fmt::format("n={}", n), n, true,
                   [count](Stream& stream, const Buffers& buffers) {
                     return LaunchWith(stream, "fill",
                                       {KernelArg::Address(buffers.out), KernelArg::Int(count),
                                        KernelArg::Float(3.0f)});
                   },
                   [n](float* out) { std::fill(out, out + n, 3.0f); }});
  known.push_back({"axpy", fmt::format("n={}", n), n, true,
                   [count, inputs](Stream& stream, const Buffers& buffers) -> Status {
                     // y starts as b; the kernel adds 2a to it in place.
                     if (auto copied = stream.CopyToDevice(buffers.out, inputs->b(),
                                                           inputs->n * sizeof(float));
                         !copied)
                       return copied;
                     return LaunchWith(
                         stream, "axpy",
                         {KernelArg::Int(count), KernelArg::Float(2.0f),
                          KernelArg::Address(buffers.a), KernelArg::Address(buffers.out)});
                   },
                   [inputs](float* out) {
                     for (std::size_t i = 0; i < inputs->n; ++i)
                       out[i] = 2.0f * inputs->a()[i] + inputs->b()[i];
                   }});
  for (const char* binary : {"add", "mul"}) {
    const bool is_add = std::string_view(binary) == "add";
    known.push_back(
        {binary, fmt::format("n={}", n), n, true,
         [count, binary](Stream& stream, const Buffers& buffers) {
           return LaunchWith(stream, binary,
                             {KernelArg::Int(count), KernelArg::Address(buffers.a),
                              KernelArg::Address(buffers.b), KernelArg::Address(buffers.out)});
         },
         [inputs, is_add](float* out) {
           const float* a = inputs->a();
           const float* b = inputs->b();
           for (std::size_t i = 0; i < inputs->n; ++i) out[i] = is_add ? a[i] + b[i] : a[i] * b[i];
         }});
  }
  known.push_back({"relu", fmt::format("n={}", n), n, true,
                   [count](Stream& stream, const Buffers& buffers) {
                     return LaunchWith(stream, "relu",
                                       {KernelArg::Int(count), KernelArg::Address(buffers.a),
                                        KernelArg::Address(buffers.out)});
                   },
                   [inputs](float* out) {
                     for (std::size_t i = 0; i < inputs->n; ++i)
                       out[i] = std::max(inputs->a()[i], 0.0f);
                   }});
  // C = A B with A m x k and B k x n from the inputs' first elements; every
  // partial sum is an integer of at most 32 x 8 x 7: exact in any order.
  std::int64_t side = 1;
  while ((side * 2) * (side * 2) * 4 <= count) side *= 2;
  const std::int64_t depth = 32;
  known.push_back({"gemm", fmt::format("m={} n={} k={}", side, side, depth),
                   static_cast<std::uint64_t>(side * side), true,
                   [side, depth](Stream& stream, const Buffers& buffers) {
                     return LaunchWith(
                         stream, "gemm",
                         {KernelArg::Int(side), KernelArg::Int(side), KernelArg::Int(depth),
                          KernelArg::Address(buffers.a), KernelArg::Address(buffers.b),
                          KernelArg::Address(buffers.out)});
                   },
                   [inputs, side, depth](float* out) {
                     for (std::int64_t i = 0; i < side; ++i)
                       for (std::int64_t j = 0; j < side; ++j) {
                         float sum = 0;
                         for (std::int64_t p = 0; p < depth; ++p)
                           sum += inputs->a()[static_cast<std::size_t>(i * depth + p)] *
                                  inputs->b()[static_cast<std::size_t>(p * side + j)];
                         out[static_cast<std::size_t>(i * side + j)] = sum;
                       }
                   }});
  const std::int64_t columns = 256;
  const std::int64_t rows = std::min<std::int64_t>(count, 1 << 16) / columns;
  known.push_back({"softmax", fmt::format("rows={} cols={}", rows, columns),
                   static_cast<std::uint64_t>(rows * columns), false,
                   [rows, columns](Stream& stream, const Buffers& buffers) {
                     return LaunchWith(
                         stream, "softmax",
                         {KernelArg::Int(rows), KernelArg::Int(columns),
                          KernelArg::Address(buffers.a), KernelArg::Address(buffers.out)});
                   },
                   [inputs, rows, columns](float* out) {
                     for (std::int64_t r = 0; r < rows; ++r) {
                       const float* row = inputs->a() + r * columns;
                       const float top = *std::max_element(row, row + columns);
                       double total = 0;
                       for (std::int64_t c = 0; c < columns; ++c) total += std::exp(row[c] - top);
                       for (std::int64_t c = 0; c < columns; ++c)
                         out[static_cast<std::size_t>(r * columns + c)] =
                             static_cast<float>(std::exp(row[c] - top) / total);
                     }
                   }});
  known.push_back({"reduce_sum", fmt::format("n={}", n), 1, true,
                   [count](Stream& stream, const Buffers& buffers) {
                     return LaunchWith(stream, "reduce_sum",
                                       {KernelArg::Int(count), KernelArg::Address(buffers.a),
                                        KernelArg::Address(buffers.out)});
                   },
                   [inputs](float* out) {
                     double sum = 0;
                     for (std::size_t i = 0; i < inputs->n; ++i) sum += inputs->a()[i];
                     out[0] = static_cast<float>(sum);
                   }});

  for (auto& test : known) {
    if (std::find(kernels.begin(), kernels.end(), test.kernel) == kernels.end()) continue;
    auto expected = std::make_shared<MappedWords>(test.outputs);
    if (!expected->Valid()) {
      data->a_words.reset();  // no verdict from this screen (Run says why)
      break;
    }
    test.expected(expected->Floats());
    test.digest = WordDigest(expected->Floats(), test.outputs);
    if (!test.exact) test.tolerance_reference = std::move(expected);
    data->screened.push_back(test.kernel);
    data->tests.push_back(std::move(test));
  }
  for (const auto& kernel : kernels) {
    // Launch overhead and a timer: nothing they compute to check.
    if (kernel == "empty" || kernel == "sleep_us") continue;
    if (std::find(data->screened.begin(), data->screened.end(), kernel) == data->screened.end())
      data->unscreened.push_back(kernel);
  }
  return std::shared_ptr<const KnownAnswerScreen>(new KnownAnswerScreen(std::move(data)));
}

namespace {

// Where `got` is not `want` (beyond `tolerance` relative; 0: not the
// same bits): the first such element in words, and how many; none when
// they agree.
struct Difference {
  std::string first;
  std::uint64_t count = 0;
};
std::optional<Difference> Compare(std::span<const float> got, std::span<const float> want,
                                  float tolerance) {
  std::optional<Difference> difference;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const bool same = tolerance > 0 ? std::fabs(got[i] - want[i]) <=
                                          tolerance * std::max(1.0f, std::fabs(want[i]))
                                    : std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    if (same) continue;
    if (!difference)
      difference = Difference{fmt::format("element {}: {} instead of {}", i, got[i], want[i]), 0};
    ++difference->count;
  }
  return difference;
}

}  // namespace

ScreeningReport KnownAnswerScreen::Run(Runtime& runtime, int device,
                                       const common::Clock& clock) const {
  ScreeningReport report;
  const auto started = clock.Monotonic();
  const Data& data = *data_;
  const std::uint64_t bytes = data.n * sizeof(float);
  auto fail = [&](const Error& error) {
    report.completed = false;
    report.error = error.message;
    report.device_time = clock.Monotonic() - started;
    return report;
  };
  if (!data.Mapped())
    return fail(Error{ErrorCode::kOutOfMemory,
                      "cannot map host memory for the screen's inputs and answers"});
  auto pool = runtime.Pool(device);
  if (!pool) return fail(pool.error());
  auto stream =
      runtime.CreateStream(device, {.owner = kOwner, .admission = Admission::kAdmittedJob});
  if (!stream) return fail(stream.error());
  std::vector<Allocation> allocations;
  auto release = [&] {
    for (auto& allocation : allocations) (void)(*pool)->Free(allocation);
  };
  auto wait = [&]() -> Status {
    auto done = (*stream)->Synchronize(data.options.step_timeout);
    // Nothing queued may run into buffers freed after a timeout.
    if (!done && done.error().code == ErrorCode::kTimeout)
      (void)(*stream)->Abort("screening: a step did not finish in time");
    return done;
  };
  Buffers buffers;
  for (DeviceAddress* address : {&buffers.a, &buffers.b, &buffers.out}) {
    auto allocation = (*pool)->Allocate(bytes, **stream);
    if (!allocation) {
      release();
      return fail(allocation.error());
    }
    allocations.push_back(*allocation);
    *address = allocation->address;
  }
  Status uploaded = (*stream)->CopyToDevice(buffers.a, data.a(), bytes);
  if (uploaded) uploaded = (*stream)->CopyToDevice(buffers.b, data.b(), bytes);
  if (uploaded) uploaded = wait();
  if (!uploaded) {
    (void)wait();
    release();
    return fail(uploaded.error());
  }
  // Mapped, not from malloc: megabytes a worker thread's arena would keep.
  MappedWords got_words(data.n);
  if (!got_words.Valid()) {
    release();
    return fail(Error{ErrorCode::kOutOfMemory, "no host memory for the screening's results"});
  }
  float* const got = got_words.Floats();
  for (const auto& test : data.tests) {
    Status ran = test.launch(**stream, buffers);
    if (ran) ran = (*stream)->CopyToHost(got, buffers.out, test.outputs * sizeof(float));
    if (ran) ran = wait();
    if (!ran) {
      (void)wait();
      release();
      return fail(Error{ran.error().code,
                        fmt::format("{} {}: {}", test.kernel, test.shape, ran.error().message)});
    }
    report.kernels.push_back(test.kernel);
    report.elements_checked += test.outputs;
    const std::span<const float> result(got, test.outputs);
    std::optional<ScreeningMismatch> mismatch;
    if (test.exact) {
      const std::uint64_t digest = WordDigest(result.data(), result.size());
      if (digest != test.digest) {
        MappedWords want(test.outputs);
        std::optional<Difference> difference;
        if (want.Valid()) {
          test.expected(want.Floats());
          difference = Compare(result, {want.Floats(), test.outputs}, 0);
        }
        mismatch = ScreeningMismatch{
            test.kernel, test.shape,
            fmt::format("{} (digest {:016x} instead of {:016x})",
                        difference ? difference->first : "the same elements, another digest",
                        digest, test.digest),
            difference ? difference->count : 1};
      }
    } else if (auto difference = Compare(result, {test.tolerance_reference->Floats(), test.outputs},
                                         kSoftmaxTolerance)) {
      mismatch = ScreeningMismatch{
          test.kernel, test.shape,
          fmt::format("{} (beyond {} relative)", difference->first, kSoftmaxTolerance),
          difference->count};
    }
    if (mismatch) {
      report.wrong_elements += mismatch->wrong_elements;
      report.mismatches.push_back(std::move(*mismatch));
    }
  }
  release();
  report.completed = true;
  report.device_time = clock.Monotonic() - started;
  return report;
}

std::string ScreeningReport::Summary() const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(device_time).count();
  if (!completed) return fmt::format("not completed: {}", error);
  if (!mismatches.empty()) {
    const auto& first = mismatches.front();
    std::string summary = fmt::format("{} {}: {}", first.kernel, first.shape, first.detail);
    if (mismatches.size() > 1)
      summary += fmt::format("; {} more kernel(s) wrong", mismatches.size() - 1);
    return summary;
  }
  return fmt::format("passed: {} kernels, {} elements, {} ms", kernels.size(),
                     ElementCount(elements_checked), ms);
}

}  // namespace rasd::runtime
