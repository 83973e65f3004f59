#include "kernel_geometry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace rasd::drivers::cuda {
namespace {

constexpr std::uint32_t kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65535;

std::uint32_t BlocksFor(std::int64_t items, std::int64_t per_block) {
  if (items <= 0) return 1;
  return static_cast<std::uint32_t>(std::min(kMaxBlocks, (items + per_block - 1) / per_block));
}

LaunchConfig Linear(std::int64_t n) {
  return {.grid = {BlocksFor(n, kThreads), 1, 1}, .block = {kThreads, 1, 1}};
}

}  // namespace

bool IsDefaultLaunch(const LaunchConfig& config) {
  return config.grid.x == 1 && config.grid.y == 1 && config.grid.z == 1 && config.block.x == 1 &&
         config.block.y == 1 && config.block.z == 1;
}

LaunchConfig KernelGeometry(std::string_view kernel, std::span<const KernelArg> args) {
  auto integer = [&](std::size_t index) -> std::int64_t {
    return index < args.size() && args[index].kind == ArgKind::kInt ? args[index].integer : 0;
  };
  if (kernel == "fill") return Linear(integer(1));
  if (kernel == "axpy" || kernel == "add" || kernel == "mul" || kernel == "relu") {
    return Linear(integer(0));
  }
  if (kernel == "gemm") {
    // 16x16 threads, one per element of C: x over columns (n), y over rows (m).
    constexpr std::int64_t kTile = 16;
    return {.grid = {BlocksFor(integer(1), kTile), BlocksFor(integer(0), kTile), 1},
            .block = {kTile, kTile, 1}};
  }
  if (kernel == "softmax") {
    // One block per row.
    return {.grid = {BlocksFor(integer(0), 1), 1, 1}, .block = {kThreads, 1, 1}};
  }
  // One block of 1024 threads: the most loads in flight for one block.
  if (kernel == "reduce_sum") return {.grid = {1, 1, 1}, .block = {1024, 1, 1}};
  return {};  // empty, sleep_us: one thread
}

namespace {

std::int64_t IntegerAt(std::span<const KernelArg> args, std::size_t index) {
  return index < args.size() && args[index].kind == ArgKind::kInt ? args[index].integer : 0;
}
DeviceAddress AddressAt(std::span<const KernelArg> args, std::size_t index) {
  return index < args.size() && args[index].kind == ArgKind::kAddress ? args[index].address : 0;
}

}  // namespace

Status CheckKernelArgs(const KernelSignature& signature, std::span<const KernelArg> args) {
  const auto& expected = signature.args;
  if (args.size() != expected.size()) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("kernel '{}' takes {} arguments, not {}", signature.name,
                            expected.size(), args.size()));
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind != expected[i]) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("kernel '{}': argument {} has the wrong kind", signature.name, i));
    }
  }
  return {};
}

Status CheckKernelSizes(std::string_view kernel, std::span<const KernelArg> args) {
  auto within = [](std::int64_t value, std::int64_t limit) { return value >= 0 && value <= limit; };
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;
  bool ok = true;
  if (kernel == "sleep_us") {
    ok = within(IntegerAt(args, 0), 60'000'000);
  } else if (kernel == "fill") {
    ok = within(IntegerAt(args, 1), kMaxElements);
  } else if (kernel == "axpy" || kernel == "add" || kernel == "mul" || kernel == "relu" ||
             kernel == "reduce_sum") {
    ok = within(IntegerAt(args, 0), kMaxElements);
  } else if (kernel == "gemm") {
    ok = within(IntegerAt(args, 0), 1 << 20) && within(IntegerAt(args, 1), 1 << 20) &&
         within(IntegerAt(args, 2), 1 << 20);
  } else if (kernel == "softmax") {
    ok = within(IntegerAt(args, 0), 1 << 24) && within(IntegerAt(args, 1), 1 << 24);
  }
  if (!ok) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("kernel '{}': a size is out of range", kernel));
  }
  return {};
}

std::vector<std::pair<DeviceAddress, std::uint64_t>> KernelBuffers(
    std::string_view kernel, std::span<const KernelArg> args) {
  auto floats = [](std::int64_t count) { return static_cast<std::uint64_t>(count) * 4; };
  if (kernel == "fill") return {{AddressAt(args, 0), floats(IntegerAt(args, 1))}};
  const std::int64_t n = IntegerAt(args, 0);
  if (kernel == "axpy") return {{AddressAt(args, 2), floats(n)}, {AddressAt(args, 3), floats(n)}};
  if (kernel == "add" || kernel == "mul") {
    return {{AddressAt(args, 1), floats(n)},
            {AddressAt(args, 2), floats(n)},
            {AddressAt(args, 3), floats(n)}};
  }
  if (kernel == "relu") return {{AddressAt(args, 1), floats(n)}, {AddressAt(args, 2), floats(n)}};
  if (kernel == "reduce_sum") return {{AddressAt(args, 1), floats(n)}, {AddressAt(args, 2), 4}};
  if (kernel == "gemm") {
    const std::int64_t m = IntegerAt(args, 0), cols = IntegerAt(args, 1), k = IntegerAt(args, 2);
    return {{AddressAt(args, 3), floats(m * k)},
            {AddressAt(args, 4), floats(k * cols)},
            {AddressAt(args, 5), floats(m * cols)}};
  }
  if (kernel == "softmax") {
    const std::int64_t cells = IntegerAt(args, 0) * IntegerAt(args, 1);
    return {{AddressAt(args, 2), floats(cells)}, {AddressAt(args, 3), floats(cells)}};
  }
  return {};
}

}  // namespace rasd::drivers::cuda
