// registry_benchmark.cc — what one poll of sentierd costs on a large registry: the watcher's scan
// (RegistryWatcher::PollOnce, every version settled) and the planner's decision
// (JobPlanner::Plan with every version already recorded, so nothing is planned), for registries
// of N models x 3 versions (model.pt of 64 KiB and inputs.pt of 4 KiB each, on the local disk),
// up to 3,334 models (10,002 versions). BM_PollOneReplica / BM_PlanOneReplica: the same for one
// replica of --shard=0/n, which lists and hashes every model name but scans and plans only the
// models of its shard (about 1/n of the versions).
//
//   bazel run -c opt //bench:registry_benchmark
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

// A registry of `models` x 3 versions under a fresh temp dir (kept for the process's life; made
// once per size).
std::string MakeRegistry(int models) {
  static std::map<int, std::string>* made = new std::map<int, std::string>();
  if (made->count(models)) return made->at(models);
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
  (*made)[models] = root.string();
  return root.string();
}

std::unique_ptr<RegistryWatcher> SettledWatcher(const std::string& root, int shard_count = 1) {
  WatcherOptions o;
  o.root = root;
  o.shard_count = shard_count;
  auto w = RegistryWatcher::Create(o);
  if (!w.ok()) std::abort();
  (*w)->PollOnce();
  (*w)->PollOnce();
  return std::move(*w);
}

// TimePolls: the benchmark loop of one watcher's polls; counts the versions the last one saw.
void TimePolls(benchmark::State& state, RegistryWatcher& w) {
  int64_t versions = 0;
  for (auto _ : state) {
    auto snap = w.PollOnce();
    if (!snap.ok()) state.SkipWithError("poll failed");
    versions = 0;
    for (const auto& [name, vs] : snap->models) versions += static_cast<int64_t>(vs.size());
    benchmark::DoNotOptimize(versions);
  }
  state.counters["versions"] = static_cast<double>(versions);
}

void BM_PollSettledRegistry(benchmark::State& state) {
  const int models = static_cast<int>(state.range(0));
  TimePolls(state, *SettledWatcher(MakeRegistry(models)));
}
BENCHMARK(BM_PollSettledRegistry)->Arg(100)->Arg(1000)->Arg(3334)->Unit(benchmark::kMillisecond);

// One replica (--shard=0/n) of a registry of `models` x 3 versions: its poll.
void BM_PollOneReplica(benchmark::State& state) {
  const int models = static_cast<int>(state.range(0));
  const int shards = static_cast<int>(state.range(1));
  TimePolls(state, *SettledWatcher(MakeRegistry(models), shards));
}
BENCHMARK(BM_PollOneReplica)->Args({3334, 1})->Args({3334, 3})->Args({3334, 4})->Unit(benchmark::kMillisecond);

// Plans as one replica of --shard=0/shards (1: the daemon alone).
void PlanNothingNew(benchmark::State& state, int shards) {
  const int models = static_cast<int>(state.range(0));
  auto w = SettledWatcher(MakeRegistry(models), shards);
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
void BM_PlanNothingNew(benchmark::State& state) { PlanNothingNew(state, 1); }
BENCHMARK(BM_PlanNothingNew)->Arg(100)->Arg(1000)->Arg(3334)->Unit(benchmark::kMillisecond);
void BM_PlanOneReplica(benchmark::State& state) { PlanNothingNew(state, static_cast<int>(state.range(1))); }
BENCHMARK(BM_PlanOneReplica)->Args({3334, 4})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sentier
