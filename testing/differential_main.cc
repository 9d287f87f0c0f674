// differential_main.cc — long randomized differential runs of the optimizer.
//
//   bazel run -c opt //testing:differential_main -- --graphs=10000 --seed=1 [--steps=N]
//       [--max_failures=20]
//
// Generates graphs for seeds S..S+N-1 (testing/random_graph.h), optimizes each with the shipped
// rule library and compares original and optimized graphs. Prints every mismatch (minimized:
// the smallest number of generation steps that still fails), then per-rule fire counts.
// Exit status 1 when any mismatch was found.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "passes/rule_set.h"
#include "runtime/model_io.h"
#include "testing/random_graph.h"
#include "runtime/torch_settings.h"

namespace {

bool Flag(const char* arg, const char* name, long long* out) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *out = std::atoll(arg + n + 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  sentier::ApplyTorchSettings();
  long long graphs = 1000, seed = 1, steps = 0, max_failures = 20;
  for (int i = 1; i < argc; ++i) {
    if (!Flag(argv[i], "--graphs", &graphs) && !Flag(argv[i], "--seed", &seed) &&
        !Flag(argv[i], "--steps", &steps) && !Flag(argv[i], "--max_failures", &max_failures)) {
      std::cerr << "usage: differential_main [--graphs=N] [--seed=S] [--steps=N] [--max_failures=N]\n";
      return 2;
    }
  }
  auto rules = sentier::LoadRules({sentier::DefaultRulesDir()});
  if (!rules.ok()) {
    std::cerr << rules.status() << "\n";
    return 2;
  }
  using sentier::difftest::DiffResult;
  std::map<std::string, int64_t> fired_graphs, applications, errors;
  int64_t valid = 0, invalid = 0, failures = 0, grads = 0, batch2 = 0, changed = 0, rounding = 0;
  std::map<std::string, int64_t> invalid_reasons;
  auto start = std::chrono::steady_clock::now();
  for (long long i = 0; i < graphs; ++i) {
    uint64_t s = static_cast<uint64_t>(seed + i);
    int n = steps > 0 ? static_cast<int>(steps) : sentier::difftest::StepsForSeed(s);
    DiffResult r = sentier::difftest::RunDifferential(**rules, s, n);
    if (!r.valid) {
      ++invalid;
      invalid_reasons[r.invalid_reason.substr(0, 90)]++;
      continue;
    }
    ++valid;
    grads += r.grads_checked;
    batch2 += r.batch2_checked;
    rounding += r.gradient_rounding;
    bool any = false;
    for (const auto& [name, c] : r.applications) {
      if (c > 0) {
        fired_graphs[name]++;
        applications[name] += c;
        any = true;
      }
    }
    changed += any;
    for (const auto& [name, c] : r.errors) errors[name] += c;
    if (!r.ok()) {
      ++failures;
      if (failures <= max_failures) {
        DiffResult m = sentier::difftest::Minimize(**rules, r);
        std::cout << sentier::difftest::FormatFailure(m) << "\n";
      }
    }
    if ((i + 1) % 1000 == 0) {
      std::cerr << "... " << i + 1 << " graphs, " << failures << " mismatches\n";
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("graphs: %lld (seeds %lld..%lld), valid %lld, invalid %lld, optimized (some rule fired) %lld\n",
              graphs, seed, seed + graphs - 1, (long long)valid, (long long)invalid, (long long)changed);
  std::printf("checked: gradients on %lld, batch x2 on %lld; mismatches: %lld; %.1f s\n", (long long)grads,
              (long long)batch2, (long long)failures, secs);
  std::printf("gradients within 1e-3 of float64 only (cancellation rounding): %lld graphs\n",
              (long long)rounding);
  for (const auto& [reason, c] : invalid_reasons) std::printf("invalid %lld: %s\n", (long long)c, reason.c_str());
  std::printf("%-40s %10s %12s %8s\n", "rule", "graphs", "applications", "errors");
  for (size_t i = 0; i < (*rules)->size(); ++i) {
    const std::string& name = (*rules)->rule(i).name;
    std::printf("%-40s %10lld %12lld %8lld\n", name.c_str(), (long long)fired_graphs[name],
                (long long)applications[name], (long long)errors[name]);
  }
  return failures > 0 ? 1 : 0;
}
