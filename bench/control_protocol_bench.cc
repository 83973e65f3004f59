// Control-protocol framing and parsing cost per request, against the
// baseline of parsing the same JSON with no framing, in the same process.

#include <benchmark/benchmark.h>

#include <string>

#include "rasd/common/control_protocol.h"

namespace {

using rasd::common::control::LineFramer;
using rasd::common::control::ParseRequest;

const std::string kRequest = R"({"command":"status","args":{"verbose":true},"id":12345})";

// Baseline: nlohmann parse of the request, nothing else.
void BM_JsonParseOnly(benchmark::State& state) {
  for (auto _ : state) {
    auto value = nlohmann::json::parse(kRequest, nullptr, false);
    benchmark::DoNotOptimize(value);
  }
}
BENCHMARK(BM_JsonParseOnly);

// Framing plus request validation, as the server does per request.
void BM_FrameAndParseRequest(benchmark::State& state) {
  LineFramer framer;
  const std::string wire = kRequest + "\n";
  std::string line;
  for (auto _ : state) {
    framer.Append(wire);
    framer.Next(line);
    auto request = ParseRequest(line);
    benchmark::DoNotOptimize(request);
  }
}
BENCHMARK(BM_FrameAndParseRequest);

// Framing alone over a 64-request burst delivered in one read.
void BM_FrameBurst(benchmark::State& state) {
  std::string burst;
  for (int i = 0; i < 64; ++i) burst += kRequest + "\n";
  std::string line;
  for (auto _ : state) {
    LineFramer framer;
    framer.Append(burst);
    int lines = 0;
    while (framer.Next(line) == LineFramer::Outcome::kLine) ++lines;
    benchmark::DoNotOptimize(lines);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_FrameBurst);

}  // namespace

BENCHMARK_MAIN();
