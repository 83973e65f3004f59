// main() of the benchmarks that drive daemon code: rasd logs every action
// it takes, and the benchmarks measure the acting, not the logging.

#include <benchmark/benchmark.h>

#include "rasd/common/logging.h"

int main(int argc, char** argv) {
  rasd::common::SetLogLevel(spdlog::level::off);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
