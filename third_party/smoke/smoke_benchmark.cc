// Links //third_party:benchmark_main; proves Google Benchmark works.
#include <string>

#include "benchmark/benchmark.h"

static void BM_StringCopy(benchmark::State& state) {
  std::string x = "hello";
  for (auto _ : state) {
    std::string copy(x);
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_StringCopy);
