// registry_benchmark.cc — what one poll of sentierd costs on a large registry: the watcher's scan
// (RegistryWatcher::PollOnce, every version settled) and the planner's decision
// (JobPlanner::Plan with every version already recorded, so nothing is planned), for registries
// of N models x 3 versions (model.pt of 64 KiB and inputs.pt of 4 KiB each, on the local disk).
//
//   bazel run -c opt //bench:registry_benchmark
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include <benchmark/benchmark.h>

#include "runtime/daemon/daemon_state.h"
#include "runtime/file_util.h"
#include "runtime/daemon/job_planner.h"
#include "runtime/daemon/registry_watcher.h"

namespace sentier {
namespace {

namespace fs = std::filesystem;

// A registry of `models` x 3 versions under a fresh temp dir (kept for the process's life).
std::string MakeRegistry(int models) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  fs::path root = fs::path(tmp != nullptr ? tmp : "/tmp") / ("sentier_registry_bench_" + std::to_string(models));
  if (!RemoveTree(root.string()).ok()) std::abort();  // not fs::remove_all: see file_util.cc
  std::string model_bytes(64 << 10, 'm'), input_bytes(4 << 10, 'i');
  for (int m = 0; m < models; ++m) {
    for (int v = 1; v <= 3; ++v) {
      fs::path dir = root / ("model" + std::to_string(m)) / std::to_string(v);
      fs::create_directories(dir);
      std::ofstream(dir / "model.pt", std::ios::binary) << model_bytes;
      std::ofstream(dir / "inputs.pt", std::ios::binary) << input_bytes;
    }
  }
  return root.string();
}

std::unique_ptr<RegistryWatcher> SettledWatcher(const std::string& root) {
  WatcherOptions o;
  o.root = root;
  auto w = RegistryWatcher::Create(o);
  if (!w.ok()) std::abort();
  (*w)->PollOnce();
  (*w)->PollOnce();
  return std::move(*w);
}

void BM_PollSettledRegistry(benchmark::State& state) {
  const int models = static_cast<int>(state.range(0));
  auto w = SettledWatcher(MakeRegistry(models));
  int64_t versions = 0;
  for (auto _ : state) {
    auto snap = w->PollOnce();
    if (!snap.ok()) state.SkipWithError("poll failed");
    versions = 0;
    for (const auto& [name, vs] : snap->models) versions += static_cast<int64_t>(vs.size());
    benchmark::DoNotOptimize(versions);
  }
  state.counters["versions"] = static_cast<double>(versions);
}
BENCHMARK(BM_PollSettledRegistry)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_PlanNothingNew(benchmark::State& state) {
  const int models = static_cast<int>(state.range(0));
  auto w = SettledWatcher(MakeRegistry(models));
  auto snap = w->PollOnce();
  DaemonState ds;
  for (const auto& [name, vs] : snap->models) {
    for (const VersionInfo& v : vs) {
      VersionRecord r;
      r.status = ReportStatus::kOptimized;
      r.signature = v.signature;
      r.rules_fp = "fp";
      ds.Set(name, v.version, r);
    }
  }
  size_t planned = 0;
  for (auto _ : state) {
    std::vector<Job> jobs = JobPlanner::Plan(*snap, ds, "fp", {});
    planned = jobs.size();
    benchmark::DoNotOptimize(planned);
  }
  if (planned != 0) state.SkipWithError("planned work on an unchanged registry");
}
BENCHMARK(BM_PlanNothingNew)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sentier
