// model_bench.cc — original vs Sentier-optimized, side by side, on the models of bench/models.h.
//
// For every model: build it, save it, and run it through the optimization pipeline sentierd runs
// (runtime/pipeline/pipeline.h: the gate, the shipped rules, save, the EquivalenceChecker once on outputs
// and gradients against a float64 reference, the timed verdict on CUDA); load back what would be
// published; then benchmark both models:
//   <model>/infer/{original,sentier}   forward under no_grad              -> rows/s
//   <model>/train/{original,sentier}   forward + backward + SGD step       -> rows/s
//                                      (p -= lr * p.grad under no_grad, grads set to None)
// Counters: fwd_aten_ops / step_aten_ops are top-level aten ops per forward / per training step
// (RecordFunction, forward and autograd threads): a CPU-side PROXY for kernel launches, not a
// CUDA kernel count (Kineto's C++ API differs between LibTorch 1.13 and 2.x; real CUDA kernel
// counts come from bench/compare_torch_compile.py, which profiles the exported artifacts).
// Also peak_MiB: peak allocated during one step, minus what was allocated before it
// (runtime/step_memory.h; the CUDA caching allocator's statistics on a GPU). A summary table is
// printed at the end.
//
//   bazel build -c opt //bench:model_bench
//   bazel-bin/bench/model_bench --smoke --benchmark_min_time=0.01         # CPU, small batch
//   build/cmake/model_bench --benchmark_min_time=0.2 [--export_dir=DIR]    # GPU, full batch
//
// Flags (besides Google Benchmark's --benchmark_*): --smoke (small batch 32, e.g. for a CPU
// machine), --batch=N (overrides every model's batch), --models=a,b (subset), --export_dir=DIR
// (writes DIR/<model>/{original.pt,optimized.pt,inputs.pt,forward.py,meta.txt} for the Python
// comparison), --jit_optimize (leave the TorchScript graph executor's optimizations on; off by
// default, as in sentier_check, because LibTorch 1.13's profiling executor asserts on graphs with
// aten::stack), and the pipeline options sentierd and sentier_opt take (tools/option_flags.h):
// --device, --gate=auto|on|off (sentierd's gate: keep only rules that make the training step +
// forward faster at the bench batch, and the original when nothing pays; auto = on with CUDA),
// --param_layout, --timing, ... Each model's decision is printed and goes in the summary's
// "gate" column.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <benchmark/benchmark.h>
#include <gflags/gflags.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/models.h"
#include "passes/optimizer.h"
#include "runtime/gate.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"
#include "runtime/model_io.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/progress_deadline.h"
#include "runtime/step_memory.h"
#include "runtime/torch_settings.h"
#include "tools/option_flags.h"

DEFINE_bool(smoke, false, "small batch (32), e.g. for a CPU machine");
DEFINE_int64(batch, 0, "overrides every model's batch (0: the model's)");
DEFINE_string(models, "", "comma-separated subset of the bench models (default: all)");
DEFINE_string(export_dir, "", "write each model's archives and inputs here");
DEFINE_bool(jit_optimize, false,
            "leave the TorchScript graph executor's optimizations on (off by default, as in the tools)");

namespace sentier {
namespace bench {
namespace {

constexpr double kLearningRate = 1e-3;
constexpr int64_t kSmokeBatch = 32;
constexpr int64_t kOptimizeSampleBatch = 16;  // sample inputs for shape facts (batch-free rules)

struct Flags {
  bool smoke = false;
  int64_t batch = 0;
  std::string models;
  std::string export_dir;
  bool jit_optimize = false;
  // The pipeline options (tools/option_flags.h: --device, --gate, --param_layout, --timing, ...).
  PipelineOptions options = DefaultOptions(Tool::kModelBench);
};

// One measured variant (last benchmark run of it).
struct Measured {
  double ms_per_step = -1;
  double rows_per_s = -1;
  int64_t aten_ops = -1;
  double peak_mib = -1;
};

struct Prepared {
  std::string name;
  std::string description;
  int64_t batch = 0;
  c10::Device device = c10::Device(c10::kCPU);
  torch::jit::Module original, optimized;  // on the device, parameters require grad
  std::vector<at::Tensor> original_params, optimized_params;
  std::vector<c10::IValue> inputs;  // on the device
  double optimize_ms = 0;            // OptimizeGraph
  double optimize_total_ms = 0;      // the pipeline without the gate (load, optimize, save,
                                     // validate) + load back
  int64_t nodes_before = 0, nodes_after = 0;
  int64_t rule_applications = 0;
  int64_t fwd_ops_original = -1, fwd_ops_optimized = -1;
  bool equivalent = false;
  std::string equivalence;  // "equivalent (N tensors)" or the failure
  std::string gate = "off";  // what the gate decided
  double gate_s = 0;         // its measuring time
  std::map<std::string, Measured> measured;  // "infer/original", ...
};

std::vector<std::unique_ptr<Prepared>>& AllPrepared() {
  static auto* all = new std::vector<std::unique_ptr<Prepared>>();
  return *all;
}

void Sync(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

at::Tensor Loss(const c10::IValue& out) {
  if (out.isTensor()) return out.toTensor().mean();
  at::Tensor loss;
  for (const c10::IValue& e : out.toTupleRef().elements()) {
    at::Tensor l = e.toTensor().mean();
    loss = loss.defined() ? loss + l : l;
  }
  return loss;
}

void InferStep(torch::jit::Module& m, const std::vector<c10::IValue>& in) {
  c10::NoGradGuard no_grad;
  c10::IValue out = m.forward(in);
  (void)out;
}

void TrainStep(torch::jit::Module& m, const std::vector<c10::IValue>& in,
               const std::vector<at::Tensor>& params) {
  Loss(m.forward(in)).backward();
  c10::NoGradGuard no_grad;
  for (at::Tensor p : params) {  // p -= lr * p.grad; p.grad = None
    if (!p.grad().defined()) continue;
    p.add_(p.grad(), -kLearningRate);
    p.mutable_grad().reset();
  }
}

// ---- top-level aten ops of one step, forward and backward threads ----
std::atomic<int64_t> g_step_ops{0};
thread_local int64_t t_depth = 0;

std::unique_ptr<at::ObserverContext> StepOpStart(const at::RecordFunction& fn) {
  if (t_depth == 0 && std::strncmp(fn.name(), "aten::", 6) == 0) ++g_step_ops;
  // Backward nodes (autograd::engine::evaluate_function: ...) are not aten ops: the aten ops
  // they run are counted as top-level ones.
  if (std::strncmp(fn.name(), "aten::", 6) == 0) ++t_depth;
  return nullptr;
}
void StepOpEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  if (std::strncmp(fn.name(), "aten::", 6) == 0) --t_depth;
}

template <typename Fn>
int64_t CountStepOps(const c10::Device& device, Fn&& step) {
  step();  // warm-up (one-time work not counted)
  Sync(device);
  g_step_ops = 0;
  at::CallbackHandle handle = at::addGlobalCallback(
      at::RecordFunctionCallback(StepOpStart, StepOpEnd)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  step();
  Sync(device);
  at::removeCallback(handle);
  return g_step_ops.load();
}

// Peak bytes allocated during one step beyond what was allocated before it, in MiB
// (runtime/step_memory.h: the CUDA caching allocator's statistics on a GPU, the allocations
// reported to the profiler interface on the CPU); -1 when it cannot be measured.
template <typename Fn>
double PeakStepMiB(const c10::Device& device, Fn&& step) {
  auto peak = PeakStepBytes(device, step);
  return peak.ok() ? static_cast<double>(*peak) / (1024.0 * 1024.0) : -1;
}

std::vector<at::Tensor> TrainableParams(torch::jit::Module& m) {
  std::vector<at::Tensor> params;
  for (at::Tensor p : m.parameters()) {
    p.detach_();
    p.requires_grad_(c10::isFloatingType(p.scalar_type()));
    if (p.requires_grad()) params.push_back(p);
  }
  return params;
}

void RunBench(benchmark::State& state, Prepared* p, bool train, bool optimized) {
  if (!p->equivalent) {
    state.SkipWithError(absl::StrCat("not equivalent: ", p->equivalence).c_str());
    for (auto _ : state) {
    }
    return;
  }
  torch::jit::Module& m = optimized ? p->optimized : p->original;
  const std::vector<at::Tensor>& params = optimized ? p->optimized_params : p->original_params;
  auto step = [&] {
    if (train) {
      TrainStep(m, p->inputs, params);
    } else {
      InferStep(m, p->inputs);
    }
  };
  Measured meas;
  try {
    step();  // warm-up
    Sync(p->device);
    int64_t iters = 0;
    auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
      step();
      Sync(p->device);  // each step completes on the device inside the timed region
      ++iters;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    meas.ms_per_step = iters > 0 ? 1e3 * s / iters : -1;
    meas.rows_per_s = s > 0 ? static_cast<double>(iters * p->batch) / s : -1;
    meas.aten_ops = train ? CountStepOps(p->device, step)
                          : (optimized ? p->fwd_ops_optimized : p->fwd_ops_original);
    meas.peak_mib = PeakStepMiB(p->device, step);
  } catch (const std::exception& e) {
    std::string what = e.what();
    state.SkipWithError(what.substr(0, what.find('\n')).c_str());
    return;
  }
  state.SetItemsProcessed(state.iterations() * p->batch);  // items_per_second = rows/s
  state.counters["batch"] = static_cast<double>(p->batch);
  state.counters[train ? "step_aten_ops" : "fwd_aten_ops"] = static_cast<double>(meas.aten_ops);
  if (meas.peak_mib >= 0) state.counters["peak_MiB"] = meas.peak_mib;
  if (optimized) {
    state.counters["opt_ms"] = p->optimize_ms;
    state.counters["nodes"] = static_cast<double>(p->nodes_after);
  } else {
    state.counters["nodes"] = static_cast<double>(p->nodes_before);
  }
  state.SetLabel(optimized ? "sentier" : "original");
  p->measured[absl::StrCat(train ? "train/" : "infer/", optimized ? "sentier" : "original")] = meas;
}

std::string MakeDir(const Flags& flags, const std::string& model) {
  std::string base = flags.export_dir;
  if (base.empty()) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/model_bench.XXXXXX");
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    base = buf.data();
  }
  std::string dir = absl::StrCat(base, "/", model);
  std::string cmd = absl::StrCat("mkdir -p '", dir, "'");
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("cannot create " + dir);
  return dir;
}

// BenchRequest: the pipeline request sentierd would make on this device, for a bench model:
// judged on the training step and the forward (mode both), the gate timed at the bench batch,
// the artifact validated once (one trial, and twice its batch) at a moderate batch.
PipelineRequest BenchRequest(const Flags& flags, const BenchModel& bm, const Prepared& p,
                             std::shared_ptr<const RuleSet> rules, bool gate) {
  PipelineRequest req;
  req.inputs = bm.inputs(std::min<int64_t>(p.batch, 512));
  if (gate) req.timing_inputs = bm.inputs(p.batch);
  req.rules = std::move(rules);
  req.options = flags.options;
  req.validate = true;
  req.advise_layout = false;  // the bench times both layouts itself (--param_layout)
  return req;
}

// RecordOutcome: what the pipeline decided, in the bench's columns.
void RecordOutcome(const Outcome& out, bool gate, Prepared* p) {
  if (out.failed_stage && *out.failed_stage != PipelineStage::kValidate) throw std::runtime_error(out.reason);
  p->optimize_ms = out.optimization->optimize_ms;
  p->nodes_before = out.optimization->nodes_before;
  p->nodes_after = out.optimization->nodes_after;
  p->rule_applications = out.rewrites;
  auto select_ms = out.timings_ms.find("select");
  p->gate_s = select_ms == out.timings_ms.end() ? 0.0 : select_ms->second / 1000.0;
  if (out.selection) {
    for (const std::string& line : out.selection->log) std::fprintf(stderr, "  gate %s: %s\n", p->name.c_str(), line.c_str());
    p->gate = out.selection->dropped.empty() ? std::string("all rules pay")
                                             : absl::StrCat("dropped ", absl::StrJoin(out.selection->dropped, ","));
  }
  if (out.status == ReportStatus::kUnchanged && (gate || out.placement.timed)) {
    p->gate = absl::StrCat("original kept (", DecisionClauseName(out.clause), ": ", out.reason, ")");
  }
  p->equivalent = out.status != ReportStatus::kRejected;
  p->equivalence = out.validation ? absl::StrCat("equivalent (", out.validation->check.findings.size(), " tensors)")
                   : p->equivalent ? std::string("the original")
                                   : out.reason;
}

void ExportFiles(const std::string& dir, const BenchModel& bm, const Prepared& p,
                 const std::vector<c10::IValue>& cpu_inputs) {
  std::vector<char> bytes = torch::jit::pickle_save(c10::ivalue::Tuple::create(cpu_inputs));
  std::ofstream(dir + "/inputs.pt", std::ios::binary).write(bytes.data(), bytes.size());
  std::ofstream(dir + "/forward.py") << bm.source;
  std::ofstream(dir + "/meta.txt") << "batch=" << p.batch << "\ndescription=" << bm.description
                                   << "\noptimize_ms=" << p.optimize_ms << "\nequivalence=" << p.equivalence
                                   << "\ngate=" << p.gate << "\n";
}

// PlaceOnDevice: both models and the bench inputs on the device, and their aten ops per forward.
void PlaceOnDevice(const std::vector<c10::IValue>& cpu_inputs, Prepared* p) {
  p->original.to(p->device);
  p->optimized.to(p->device);
  p->original_params = TrainableParams(p->original);
  p->optimized_params = TrainableParams(p->optimized);
  for (const c10::IValue& v : cpu_inputs) p->inputs.push_back(v.toTensor().to(p->device));
  std::vector<c10::IValue> a = {p->original._ivalue()}, b = {p->optimized._ivalue()};
  a.insert(a.end(), p->inputs.begin(), p->inputs.end());
  b.insert(b.end(), p->inputs.begin(), p->inputs.end());
  auto ca = CountAtenOps(p->original.get_method("forward").graph(), a);
  auto cb = CountAtenOps(p->optimized.get_method("forward").graph(), b);
  if (ca.ok()) p->fwd_ops_original = *ca;
  if (cb.ok()) p->fwd_ops_optimized = *cb;
  Sync(p->device);
}

// Prepare: the bench model saved, run through the optimization pipeline (runtime/pipeline/pipeline.h) as
// sentierd would on this device, both archives loaded back and placed on the device.
std::unique_ptr<Prepared> Prepare(const std::string& name, const Flags& flags,
                                  std::shared_ptr<const RuleSet> rules, const c10::Device& device, bool gate) {
  auto p = std::make_unique<Prepared>();
  BenchModel bm = MakeBenchModel(name);
  p->name = name;
  p->description = bm.description;
  p->device = device;
  p->batch = flags.batch > 0 ? flags.batch : (flags.smoke ? kSmokeBatch : bm.gpu_batch);
  std::string dir = MakeDir(flags, name);
  std::string orig_path = dir + "/original.pt", opt_path = dir + "/optimized.pt";
  bm.module.save(orig_path);
  PipelineRequest req = BenchRequest(flags, bm, *p, std::move(rules), gate);
  req.model_path = orig_path;
  req.artifact_path = opt_path;
  auto t0 = std::chrono::steady_clock::now();
  const Outcome out = OptimizeModel(req);
  RecordOutcome(out, gate, p.get());
  p->original = torch::jit::load(orig_path, c10::Device(c10::kCPU));
  p->optimized = torch::jit::load(opt_path, c10::Device(c10::kCPU));
  p->optimize_total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() -
                         1000.0 * p->gate_s;
  std::vector<c10::IValue> cpu_inputs = bm.inputs(p->batch);
  if (!flags.export_dir.empty()) {
    ExportFiles(dir, bm, *p, cpu_inputs);
  } else {
    std::remove(orig_path.c_str());
    std::remove(opt_path.c_str());
  }
  PlaceOnDevice(cpu_inputs, p.get());
  return p;
}

std::string Ratio(double a, double b) {
  if (a <= 0 || b <= 0) return "-";
  return absl::StrFormat("%.2fx", b / a);
}

void PrintSummary(const Flags& flags, const c10::Device& device) {
  std::printf("\n## model_bench summary (%s, fp32, graph executor optimize %s, gate timing %s%s)\n\n",
              device.is_cuda() ? "CUDA" : "CPU", flags.jit_optimize ? "on" : "off",
              std::string(sentier::StepTimingName(flags.options.timing)).c_str(), flags.smoke ? ", --smoke" : "");
  std::printf("aten ops = top-level aten ops (CPU-side proxy for kernel launches, not CUDA kernels)\n\n");
  std::printf("| model | batch | Sentier opt ms | nodes | fwd aten ops | infer rows/s orig -> opt | "
              "train rows/s orig -> opt | train-step aten ops | peak MiB/step (train) | check | gate |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& p : AllPrepared()) {
    auto get = [&](const std::string& k) {
      auto it = p->measured.find(k);
      return it == p->measured.end() ? Measured() : it->second;
    };
    Measured io = get("infer/original"), is = get("infer/sentier");
    Measured to = get("train/original"), ts = get("train/sentier");
    std::string peak = to.peak_mib >= 0 ? absl::StrFormat("%.0f -> %.0f", to.peak_mib, ts.peak_mib) : "n/a (CPU)";
    std::printf("| %s | %lld | %.1f | %lld -> %lld | %lld -> %lld | %.3g -> %.3g (%s) | %.3g -> %.3g (%s) | "
                "%lld -> %lld | %s | %s | %s |\n",
                p->name.c_str(), static_cast<long long>(p->batch), p->optimize_ms,
                static_cast<long long>(p->nodes_before), static_cast<long long>(p->nodes_after),
                static_cast<long long>(p->fwd_ops_original), static_cast<long long>(p->fwd_ops_optimized),
                io.rows_per_s, is.rows_per_s, Ratio(io.rows_per_s, is.rows_per_s).c_str(),
                to.rows_per_s, ts.rows_per_s, Ratio(to.rows_per_s, ts.rows_per_s).c_str(),
                static_cast<long long>(to.aten_ops), static_cast<long long>(ts.aten_ops),
                peak.c_str(), p->equivalence.c_str(), p->gate.c_str());
  }
  std::printf("\n");
  for (const auto& p : AllPrepared()) std::printf("- %s: %s\n", p->name.c_str(), p->description.c_str());
  std::fflush(stdout);
}

// ParseFlags: Google Benchmark's own flags (--benchmark_*) stay in argv for it; the rest are
// gflags: the bench's own and the pipeline options' (tools/option_flags.h). Exit 2 on a bad one.
absl::StatusOr<Flags> ParseFlags(int* argc, char** argv) {
  std::vector<char*> ours = {argv[0]};
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (absl::StartsWith(argv[i], "--benchmark_")) {
      argv[kept++] = argv[i];
    } else {
      ours.push_back(argv[i]);
    }
  }
  *argc = kept;
  int n = static_cast<int>(ours.size());
  char** ours_argv = ours.data();
  gflags::ParseCommandLineFlags(&n, &ours_argv, /*remove_flags=*/true);
  if (n > 1) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", ours_argv[1], "'"));
  auto options = PipelineOptionsFromFlags(Tool::kModelBench, torch::cuda::is_available());
  if (!options.ok()) return options.status();
  Flags f;
  f.smoke = FLAGS_smoke;
  f.batch = FLAGS_batch;
  f.models = FLAGS_models;
  f.export_dir = FLAGS_export_dir;
  f.jit_optimize = FLAGS_jit_optimize;
  f.options = options->options;
  return f;
}

}  // namespace
}  // namespace bench
}  // namespace sentier

int main(int argc, char** argv) {
  using namespace sentier::bench;
  absl::StatusOr<Flags> parsed = ParseFlags(&argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "model_bench: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  Flags flags = *parsed;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  const bool cuda = flags.options.device == sentier::Device::kCuda;
  c10::Device device(cuda ? c10::kCUDA : c10::kCPU);
  sentier::ApplyTorchSettings();
  // --jit_optimize: the bench's explicit exception to runtime/torch_settings.h.
  if (flags.jit_optimize) torch::jit::setGraphExecutorOptimize(true);
  const bool gate = sentier::GateOn(flags.options);

  auto rules = sentier::LoadRules({sentier::DefaultRulesDir()});
  if (!rules.ok()) {
    std::fprintf(stderr, "cannot load rules: %s\n", std::string(rules.status().message()).c_str());
    return 2;
  }
  std::vector<std::string> names = BenchModelNames();
  if (!flags.models.empty()) names = absl::StrSplit(flags.models, ',', absl::SkipEmpty());
  std::fprintf(stderr, "model_bench: device %s, rules from %s\n", device.str().c_str(),
               sentier::DefaultRulesDir().c_str());
  for (const std::string& name : names) {
    try {
      auto start = std::chrono::steady_clock::now();
      AllPrepared().push_back(Prepare(name, flags, *rules, device, gate));
      const Prepared& p = *AllPrepared().back();
      std::fprintf(stderr, "  %s: batch %lld, gate: %s (%.1f s), optimized in %.1f ms (%lld -> %lld nodes, %lld rule applications), %s; set-up %.1f s\n",
                   name.c_str(), static_cast<long long>(p.batch), p.gate.c_str(), p.gate_s, p.optimize_ms,
                   static_cast<long long>(p.nodes_before), static_cast<long long>(p.nodes_after),
                   static_cast<long long>(p.rule_applications), p.equivalence.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "model %s: %s\n", name.c_str(), e.what());
      return sentier::FinishProcess(1);
    }
  }
  // Torch's own threads: leave the defaults (all cores), as a serving process would.
  for (const auto& up : AllPrepared()) {
    Prepared* p = up.get();
    for (bool train : {false, true}) {
      for (bool opt : {false, true}) {
        std::string bench_name = absl::StrCat(p->name, train ? "/train/" : "/infer/", opt ? "sentier" : "original");
        benchmark::RegisterBenchmark(bench_name.c_str(), [p, train, opt](benchmark::State& st) {
          RunBench(st, p, train, opt);
        })->UseRealTime()->Unit(benchmark::kMillisecond);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  PrintSummary(flags, device);
  return sentier::FinishProcess(0);  // a gate timing thread left behind: _exit (progress_deadline.h)
}
