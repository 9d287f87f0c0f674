// equivalence_checker.cc — runs reference and candidate on the same inputs and compares outputs
// and gradients against a float64 run of the reference (see the header).
#include "runtime/equivalence_checker.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "passes/sample_inputs.h"
#include "passes/stacked_parameters.h"
#include "passes/status_macros.h"
#include "passes/torch_error.h"
#include "runtime/cuda_kernels.h"
#include "runtime/graph_runner.h"
#include "runtime/progress_deadline.h"
#include "runtime/torch_settings.h"
#include "runtime/step_memory.h"

namespace sentier {
namespace {

struct RunResult {
  NamedTensors outputs;
  NamedTensors grads;
  std::vector<bool> grad_defined;  // per grads entry: autograd produced one (else zeros stand in)
  // Gradients autograd produced as sparse tensors (`nn.EmbeddingBag(sparse=True)`): compared
  // densified; a rewrite that changes the layout changes what an optimizer such as SparseAdam
  // accepts, and is reported.
  std::set<std::string> sparse_grads;
};

// A fresh copy on `device`, floating tensors in `dtype`: every run gets its own inputs, so a
// model that writes to an input (an in-place op on a view of it) cannot change what the next
// run sees.
at::Tensor Cast(const at::Tensor& t, c10::ScalarType dtype, const c10::Device& device) {
  c10::ScalarType to = c10::isFloatingType(t.scalar_type()) ? dtype : t.scalar_type();
  return t.detach().to(device, to, /*non_blocking=*/false, /*copy=*/true);
}

// A private copy of `m` on `device`: parameters, buffers and tensor constants baked into its
// graphs all moved (on CUDA the archive is serialized and loaded back with that map location,
// which moves all three), floating parameters and buffers cast to `dtype` (integer buffers such
// as BatchNorm's num_batches_tracked keep theirs), every parameter a fresh leaf that requires
// grad exactly when `training`; a buffer keeps requires_grad as the original has it.
torch::jit::Module ModelOnDevice(const torch::jit::Module& m, c10::ScalarType dtype,
                                 const c10::Device& device, bool training) {
  c10::NoGradGuard no_grad;
  torch::jit::Module copy;
  if (device.is_cpu()) {
    copy = m.clone();
  } else {
    std::ostringstream out;
    m.save(out);
    std::istringstream in(out.str());
    copy = torch::jit::load(in, device);
  }
  std::map<std::string, bool> buffer_grads;
  for (const auto& nb : m.named_buffers()) buffer_grads[nb.name] = nb.value.requires_grad();
  for (const auto& np : copy.named_parameters()) {
    at::Tensor p = np.value;
    if (c10::isFloatingType(p.scalar_type()) && p.scalar_type() != dtype) p.set_data(p.to(dtype));
    p.detach_();
    p.requires_grad_(training && c10::isFloatingType(p.scalar_type()));
  }
  for (const auto& nb : copy.named_buffers()) {
    at::Tensor b = nb.value;
    if (c10::isFloatingType(b.scalar_type()) && b.scalar_type() != dtype) b.set_data(b.to(dtype));
    b.detach_();
    if (buffer_grads[nb.name] && c10::isFloatingType(b.scalar_type())) b.requires_grad_(true);
  }
  return copy;
}

std::vector<c10::IValue> InputsOnDevice(const std::vector<c10::IValue>& inputs, c10::ScalarType dtype,
                                        const c10::Device& device) {
  return MapTensors(inputs, [&](const at::Tensor& t) { return Cast(t, dtype, device); });
}

// A model whose parameters are stored stacked (passes/stacked_parameters.h): the gradient of each
// stored parameter is split back into its members' gradients, under their original names, so
// that they compare with the original model's one by one.
void ByOriginalNames(const ParamLayout& layout, RunResult* result) {
  for (const StackedParameter& p : layout.stacked) {
    std::string key = absl::StrCat("grad of param ", p.name);
    auto it = std::find_if(result->grads.begin(), result->grads.end(),
                           [&](const auto& g) { return g.first == key; });
    if (it == result->grads.end()) continue;
    size_t at = static_cast<size_t>(it - result->grads.begin());
    at::Tensor g = it->second;
    bool defined = result->grad_defined[at];
    const bool sparse = result->sparse_grads.erase(key) != 0;
    result->grads.erase(it);
    result->grad_defined.erase(result->grad_defined.begin() + at);
    int64_t offset = 0;
    for (size_t k = 0; k < p.members.size(); ++k) {
      at::Tensor part = p.op == "stack" ? g.select(p.dim, static_cast<int64_t>(k)) : g.narrow(p.dim, offset, p.sizes[k]);
      offset += p.sizes[k];
      result->grads.emplace_back(absl::StrCat("grad of param ", p.members[k]), part.contiguous());
      result->grad_defined.push_back(defined);
      if (sparse) result->sparse_grads.insert(absl::StrCat("grad of param ", p.members[k]));
    }
  }
}

// The gradients of `leaves` (named `leaf_names`) of a fixed random projection of the floating
// outputs in `result`, drawn from `seed`, under their original names (ByOriginalNames). Throws
// what LibTorch throws.
absl::Status GradientsOfProjection(const torch::jit::Module& m, const std::vector<at::Tensor>& leaves,
                                   const std::vector<std::string>& leaf_names, uint64_t seed,
                                   RunResult* result) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor loss;
  for (const auto& [name, t] : result->outputs) {
    if (!c10::isFloatingType(t.scalar_type())) continue;
    // One projection per floating output, drawn whether or not it requires grad, so that
    // both models draw the same projections even when a rewrite changes which outputs do.
    at::Tensor proj = at::randn(t.sizes(), gen, at::TensorOptions().dtype(at::kDouble));
    if (!t.requires_grad()) continue;
    at::Tensor term = (t * proj.to(t.scalar_type()).to(t.device())).sum();
    loss = loss.defined() ? loss + term : term;
  }
  if (!loss.defined()) return absl::OkStatus();
  std::vector<at::Tensor> grads =
      torch::autograd::grad({loss}, leaves, {}, c10::nullopt, false, /*allow_unused=*/true);
  for (size_t k = 0; k < grads.size(); ++k) {
    at::Tensor g = grads[k].defined() ? grads[k] : at::zeros_like(leaves[k]);
    if (g.is_sparse()) {
      result->sparse_grads.insert(leaf_names[k]);
      g = g.coalesce().to_dense();
    }
    result->grads.emplace_back(leaf_names[k], g.detach());
    result->grad_defined.push_back(grads[k].defined());
  }
  auto layout = ReadParamLayout(m);
  if (!layout.ok()) return layout.status();
  ByOriginalNames(*layout, result);
  return absl::OkStatus();
}

absl::StatusOr<RunResult> Run(const torch::jit::Module& original,
                              const std::vector<c10::IValue>& inputs, c10::ScalarType dtype,
                              const c10::Device& device, bool training, uint64_t seed) {
  RunResult result;
  try {
    torch::jit::Module m = ModelOnDevice(original, dtype, device, training);
    std::vector<at::Tensor> leaves;
    std::vector<std::string> leaf_names;
    for (const auto& np : m.named_parameters()) {
      if (!np.value.requires_grad()) continue;
      leaves.push_back(np.value);
      leaf_names.push_back(absl::StrCat("grad of param ", np.name));
    }
    for (const auto& nb : m.named_buffers()) {
      if (!nb.value.requires_grad()) continue;
      leaves.push_back(nb.value);
      leaf_names.push_back(absl::StrCat("grad of buffer ", nb.name));
    }
    std::vector<c10::IValue> in = MapTensors(inputs, [&](const at::Tensor& t) {
      at::Tensor c = Cast(t, dtype, device);
      if (training && c10::isFloatingType(c.scalar_type())) c.requires_grad_(true);
      return c;
    });
    for (const auto& [path, t] : FlattenTensors(in, "input")) {
      if (!t.requires_grad()) continue;
      leaves.push_back(t);
      leaf_names.push_back(absl::StrCat("grad of ", path));
    }
    c10::IValue out = m.forward(in);
    FlattenTensors(out, "output", &result.outputs);
    if (training && !leaves.empty()) {
      absl::Status grads = GradientsOfProjection(m, leaves, leaf_names, seed, &result);
      if (!grads.ok()) return grads;
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(TorchErrorMessage(e.what()));
  }
  return result;
}

// ||a - ref|| / ||ref||, both scaled by max |ref| first so that large (finite) values cannot
// overflow the norms.
double RelNorm(const at::Tensor& a, const at::Tensor& ref64) {
  double scale = ref64.numel() ? ref64.abs().max().item<double>() : 0.0;
  if (!(scale > 0) || !std::isfinite(scale)) scale = 1.0;
  double denom = (ref64 / scale).norm().item<double>();
  double num = ((a.to(at::kDouble).cpu() - ref64) / scale).norm().item<double>();
  return denom > 0 ? num / denom : num;
}

// Median time of one step: a forward (no grad), or with `training` a forward and a backward of
// the sum of the outputs. On CUDA the device is synchronized around each step. After the timed
// steps, one more step runs under PeakStepBytes (its gradients accumulate into the ones the
// timed steps left, as every step's do).
struct StepMeasure {
  double median_ms = -1.0;
  int64_t peak_bytes = -1;
};

// One model's copy on the device, its inputs, and its step times.
struct TimedModel {
  torch::jit::Module copy;
  std::vector<c10::IValue> in;
  std::vector<double> ms;
  StepMeasure result;
};

// What the timed steps use: owned here, so that a thread left behind (executor timing that
// stopped making progress) never touches the caller's objects.
struct TimedSteps {
  std::vector<TimedModel> models;  // the reference and the candidate, or one of them
  c10::Device device;
  bool training;
  int warm_up;
  int failed_model = -1;  // the index of the model whose step threw, if one did
  // The index of the model whose step runs now (read by the timing thread's caller when the
  // step makes no progress).
  std::shared_ptr<std::atomic<int>> running = std::make_shared<std::atomic<int>>(-1);
};

// A step of models[model] threw: which model, and LibTorch's message.
struct StepFailure : std::runtime_error {
  StepFailure(int m, const std::string& what) : std::runtime_error(what), model(m) {}
  int model;
};

constexpr int kTimedRounds = 20;

// Runs the steps on the calling thread, with that thread's executor switch and grad mode;
// `progress` after each step. Every model is warmed up, then the timed steps alternate between
// the models, the order flipped each round (A B, B A, ...), so that a drift of the machine falls
// on both alike.
void RunTimedSteps(TimedSteps& t, const std::function<void()>& progress) {
  auto sync = [&] {
    if (t.device.is_cuda()) torch::cuda::synchronize();
  };
  // One step of models[k]; what it throws becomes a StepFailure naming k.
  auto step = [&](size_t k) {
    TimedModel& m = t.models[k];
    t.running->store(static_cast<int>(k));
    try {
      c10::IValue out = m.copy.forward(m.in);
      if (t.training) {
        NamedTensors outs;
        FlattenTensors(out, "output", &outs);
        at::Tensor loss;
        for (const auto& [name, tensor] : outs) {
          if (tensor.requires_grad()) loss = loss.defined() ? loss + tensor.sum() : tensor.sum();
        }
        if (loss.defined()) loss.backward();
      }
    } catch (const std::exception& e) {
      throw StepFailure(static_cast<int>(k), e.what());
    }
  };
  const size_t n = t.models.size();
  for (size_t k = 0; k < n; ++k) {
    for (int i = 0; i < t.warm_up; ++i) {
      step(k);
      sync();
      progress();
    }
  }
  for (int round = 0; round < kTimedRounds; ++round) {
    for (size_t j = 0; j < n; ++j) {
      const size_t k = round % 2 == 0 ? j : n - 1 - j;
      sync();
      auto start = std::chrono::steady_clock::now();
      step(k);
      sync();
      t.models[k].ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      progress();
    }
  }
  for (size_t k = 0; k < n; ++k) {
    TimedModel& m = t.models[k];
    std::sort(m.ms.begin(), m.ms.end());
    m.result.median_ms = m.ms[m.ms.size() / 2];
    auto peak = PeakStepBytes(t.device, [&] { step(k); });
    if (!peak.ok()) throw StepFailure(static_cast<int>(k), std::string(peak.status().message()));
    m.result.peak_bytes = *peak;
  }
}

// The models' steps (alternated, see RunTimedSteps), timed as `timing` says; one StepMeasure per
// model, in order. interpreter: on this thread, with its executor switch off.
// executor: on a thread of its own with the switch on (it is thread-local), so that a step that
// does not return (torch 2.11's fuser, bench/RESULTS.md) ends in DeadlineExceeded after
// `stall_limit` without a finished step; that thread is left behind. A step that throws:
// InvalidArgument with LibTorch's message, and `*failed_model` the index of its model.
absl::StatusOr<std::vector<StepMeasure>> MeasureSteps(const std::vector<const torch::jit::Module*>& models,
                                                      const std::vector<c10::IValue>& inputs,
                                                      c10::ScalarType dtype, const c10::Device& device,
                                                      bool training, StepTiming timing,
                                                      absl::Duration stall_limit, int* failed_model) {
  *failed_model = -1;
  const bool executor = timing == StepTiming::kExecutor;
  try {
    c10::AutoGradMode grad_mode(training);
    // executor: the profiling executor profiles, then compiles its fusion groups: more warm-up.
    auto steps = std::make_shared<TimedSteps>(TimedSteps{{}, device, training, executor ? 6 : 3});
    for (const torch::jit::Module* m : models) {
      steps->models.push_back(TimedModel{ModelOnDevice(*m, dtype, device, training),
                                         InputsOnDevice(inputs, dtype, device), {}, StepMeasure()});
    }
    auto results = [&] {
      std::vector<StepMeasure> r;
      for (const TimedModel& m : steps->models) r.push_back(m.result);
      return r;
    };
    if (!executor) {
      torch::jit::GraphOptimizerEnabledGuard optimize(false);  // whatever this thread had
      RunTimedSteps(*steps, [] {});
      return results();
    }
    absl::Status ran = RunWithProgressDeadline(
        [steps](const std::function<void()>& progress) {
          torch::jit::GraphOptimizerEnabledGuard optimize(true);
          c10::AutoGradMode grad(steps->training);
          try {
            RunTimedSteps(*steps, progress);
          } catch (const StepFailure& f) {
            steps->failed_model = f.model;
            return absl::InvalidArgumentError(f.what());
          }
          return absl::OkStatus();
        },
        stall_limit);
    if (absl::IsDeadlineExceeded(ran)) {
      *failed_model = steps->running->load();  // the model whose step made no progress
      return ran;
    }
    if (!ran.ok()) {
      *failed_model = steps->failed_model;
      return absl::InvalidArgumentError(TorchErrorMessage(std::string(ran.message())));
    }
    return results();
  } catch (const StepFailure& f) {
    *failed_model = f.model;
    return absl::InvalidArgumentError(TorchErrorMessage(f.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(TorchErrorMessage(e.what()));
  }
}

// The reference failed on the first trial: bad input, or (on CUDA) a model that only runs on the
// CPU — it creates CPU tensors in forward, say. The two are told apart by a CPU run.
absl::Status ReferenceFailure(const torch::jit::Module& reference, const std::vector<c10::IValue>& inputs,
                              const c10::Device& device, const absl::Status& failure) {
  if (device.is_cuda()) {
    auto cpu = Run(reference, inputs, c10::kFloat, c10::Device(c10::kCPU), false, 0);
    if (cpu.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the original model fails on cuda: ", failure.message()));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the reference model does not run on the sample inputs: ", failure.message()));
}

}  // namespace

absl::Status CheckStepTiming(StepTiming timing) {
  if (timing == StepTiming::kExecutor && TORCH_VERSION_MAJOR < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timing 'executor' needs LibTorch 2.x; this is ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
        " (its profiling executor asserts on graphs with aten::stack, which batched forms contain)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepTiming> StepTimingFromFlag(absl::string_view text) {
  if (text == "auto") return TORCH_VERSION_MAJOR >= 2 ? StepTiming::kExecutor : StepTiming::kInterpreter;
  absl::StatusOr<StepTiming> timing = ParseStepTiming(text);
  if (!timing.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timing must be auto, interpreter or executor, not '", text, "'"));
  }
  absl::Status can = CheckStepTiming(*timing);
  if (!can.ok()) return absl::InvalidArgumentError(absl::StrCat("--timing: ", can.message()));
  return timing;
}

absl::Status RunsOnDevice(const torch::jit::Module& module, const std::vector<c10::IValue>& samples,
                          Device device_name, bool training) {
  auto conformed = ConformToSchema(module.get_method("forward").function().getSchema(), samples);
  if (!conformed.ok()) return absl::InvalidArgumentError(conformed.status().message());
  c10::Device device(device_name == Device::kCuda ? c10::kCUDA : c10::kCPU);
  auto run = Run(module, *conformed, c10::kFloat, device, training, 0);
  if (run.ok()) return absl::OkStatus();
  return ReferenceFailure(module, *conformed, device, run.status());
}

namespace {

// A module without parameters whose forward is `graph` (its outputs packed into a tuple when
// there are several).
torch::jit::Module GraphModule(const std::shared_ptr<torch::jit::Graph>& graph) {
  torch::jit::Module m("SentierGraph");
  auto g = graph->copy();
  if (g->outputs().size() != 1) {
    std::vector<torch::jit::Value*> outs(g->outputs().begin(), g->outputs().end());
    torch::jit::Node* tuple = g->createTuple(outs);
    g->appendNode(tuple);
    while (!g->outputs().empty()) g->eraseOutput(0);
    g->registerOutput(tuple->output());
  }
  g->insertInput(0, "self")->setType(m.type());
  torch::jit::Function* fn = m._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m.type()->name(), "forward"), g);
  m.type()->addMethod(fn);
  return m;
}

}  // namespace

absl::StatusOr<CheckReport> EquivalenceChecker::CheckGraphs(
    const std::shared_ptr<torch::jit::Graph>& reference,
    const std::shared_ptr<torch::jit::Graph>& candidate, const std::vector<c10::IValue>& inputs) const {
  torch::jit::Module ref, cand;
  try {
    ref = GraphModule(reference);
    cand = GraphModule(candidate);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the graphs cannot be run: ", TorchErrorMessage(e.what())));
  }
  return Check(ref, cand, inputs);
}

double RelativeToleranceFloor(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble:
      return 1e-12;
    case c10::kHalf:
      return 2e-3;
    case c10::kBFloat16:
      return 1.6e-2;
    default:
      return 1e-5;
  }
}

namespace {

// What every step of a check reads: both models, the samples (conformed), the options and the
// device.
struct CheckSubject {
  const torch::jit::Module& reference;
  const torch::jit::Module& candidate;
  const std::vector<c10::IValue>& samples;
  const CheckOptions& options;
  c10::Device device;
};

// Prepare: the samples conformed to the reference's forward.
absl::StatusOr<std::vector<c10::IValue>> ConformSamples(const torch::jit::Module& reference,
                                                        const std::vector<c10::IValue>& raw_samples) {
  auto conformed = ConformToSchema(reference.get_method("forward").function().getSchema(), raw_samples);
  if (!conformed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sample inputs do not fit forward: ", conformed.status().message()));
  }
  return conformed;
}

// Each trial's name and inputs: the samples, (trials - 1) random sets like them, and one set at
// twice the batch.
std::vector<std::pair<std::string, std::vector<c10::IValue>>> MakeTrials(
    const std::vector<c10::IValue>& samples, const CheckOptions& options) {
  at::Generator gen = at::detail::createCPUGenerator(options.seed + 1);
  std::vector<std::pair<std::string, std::vector<c10::IValue>>> trials = {{"samples", samples}};
  for (int k = 1; k < std::max(1, options.trials); ++k) {
    trials.emplace_back(absl::StrCat("random ", k), RandomInputsLike(samples, gen, 1, options.fixed_inputs));
  }
  trials.emplace_back("batch x2", RandomInputsLike(samples, gen, 2, options.fixed_inputs));
  return trials;
}

// The finding of a trial where the candidate (or the float64 reference) does not run.
CheckFinding CandidateRunFailure(const std::string& trial, const absl::Status& failure) {
  CheckFinding f;
  f.what = "candidate run";
  f.trial = trial;
  f.ok = false;
  f.note = std::string(failure.message());
  return f;
}

// How the candidate's gradients differ in kind from the reference's, by name.
struct GradKinds {
  // Gradients autograd did not produce (a parameter detached or dropped from the graph).
  std::set<std::string> cand_missing;
  // Gradients whose layout (sparse or dense) the candidate changed; true: sparse in the reference.
  std::map<std::string, bool> layout_changed;
};

GradKinds CompareGradKinds(const RunResult& ref, const RunResult& cand) {
  GradKinds kinds;
  for (size_t k = 0; k < cand.grads.size(); ++k) {
    bool ref_has = false;
    for (size_t j = 0; j < ref.grads.size(); ++j) {
      if (ref.grads[j].first == cand.grads[k].first) ref_has = ref.grad_defined[j];
    }
    if (ref_has && !cand.grad_defined[k]) kinds.cand_missing.insert(cand.grads[k].first);
  }
  for (const auto& [name, t] : ref.grads) {
    const bool r = ref.sparse_grads.count(name) != 0, c = cand.sparse_grads.count(name) != 0;
    if (r != c) kinds.layout_changed[name] = r;
  }
  return kinds;
}

// A floating tensor of the candidate (c) against the reference in the checked dtype (r) and in
// float64 (d): false, with a note in `f`, where their non-finite values differ; else true, with
// the errors in `f` (its tolerance is set by SetTolerances).
bool MeasureErrors(const at::Tensor& c, const at::Tensor& d, const at::Tensor& r, CheckFinding* f) {
  at::Tensor c64 = c.cpu().to(at::kDouble);
  at::Tensor d64 = d.cpu().to(at::kDouble);
  at::Tensor rr = r.cpu().to(at::kDouble);
  // Non-finite values (NaN, overflow to inf in the checked dtype) must be where the reference run
  // in the same dtype has them, and the same; the rest is compared on the positions finite in
  // both references.
  at::Tensor ref_special = ~at::isfinite(rr);
  at::Tensor cand_special = ~at::isfinite(c64);
  bool same_special = at::equal(ref_special, cand_special) &&
                      at::equal(at::isnan(rr), at::isnan(c64)) &&
                      at::equal(at::where(ref_special & ~at::isnan(rr), rr, at::zeros_like(rr)),
                                at::where(cand_special & ~at::isnan(c64), c64, at::zeros_like(c64)));
  if (!same_special) {
    f->ok = false;
    f->note = "NaN or inf where the reference has a finite value (or the reverse)";
    return false;
  }
  at::Tensor finite = at::isfinite(d64) & ~ref_special;
  at::Tensor cz = at::where(finite, c64, at::zeros_like(c64));
  at::Tensor dz = at::where(finite, d64, at::zeros_like(d64));
  at::Tensor rz = at::where(finite, rr, at::zeros_like(rr));
  f->rel_error = RelNorm(cz, dz);
  f->ref_rel_error = RelNorm(rz, dz);
  f->max_abs_error = c64.numel() ? (cz - rz).abs().max().item<double>() : 0.0;
  return true;
}

// One tensor `name` of a trial: the reference's `rt`, the candidate's `ct` and the float64
// reference's `dt` (null where missing). The finding fails with a note, or has its errors
// measured (`*judged`).
CheckFinding CompareTensor(const std::string& name, const std::string& trial, const at::Tensor& rt,
                           const at::Tensor* ct, const at::Tensor* dt, const GradKinds& kinds,
                           bool* judged) {
  CheckFinding f;
  f.what = name;
  f.trial = trial;
  *judged = false;
  if (ct == nullptr || dt == nullptr) {
    f.ok = false;
    f.note = absl::StrContains(name, "grad of param ")
                 ? "missing in the candidate (the parameter is not in its autograd graph)"
                 : "missing in the candidate";
  } else if (kinds.cand_missing.count(name) != 0) {
    f.ok = false;
    f.note = "no gradient in the candidate (None: detached or dropped from the autograd "
             "graph) where the reference has one";
  } else if (kinds.layout_changed.count(name) != 0) {
    f.ok = false;
    f.note = kinds.layout_changed.at(name) ? "sparse in the reference, dense in the candidate (an optimizer for "
                                             "sparse gradients, such as SparseAdam, would refuse it)"
                                           : "dense in the reference, sparse in the candidate";
  } else if (ct->sizes() != rt.sizes()) {
    f.ok = false;
    f.note = absl::StrCat("shape ", c10::str(ct->sizes()), " vs reference ", c10::str(rt.sizes()));
  } else if (!c10::isFloatingType(rt.scalar_type())) {
    f.ok = at::equal(ct->cpu(), rt.cpu());
    if (!f.ok) f.note = "integer values differ";
  } else {
    *judged = MeasureErrors(*ct, *dt, rt, &f);
  }
  return f;
}

// The tolerances of the findings at `judged`, of one kind (outputs, or gradients) in one trial.
// The reference's own error on one tensor is a single sample of the dtype's rounding noise, and
// an unlucky small one in bf16 (a gradient whose error happened to be 0.8% while its neighbours'
// were 3%). So the candidate may also be a factor off the typical reference error of its kind
// in this trial: the median.
void SetTolerances(const std::vector<size_t>& judged, const CheckOptions& options, CheckReport* report) {
  const double floor = RelativeToleranceFloor(options.dtype);
  std::vector<double> own;
  for (size_t k : judged) own.push_back(report->findings[k].ref_rel_error);
  double level = 0.0;
  if (!own.empty()) {
    std::nth_element(own.begin(), own.begin() + own.size() / 2, own.end());
    level = own[own.size() / 2];
  }
  for (size_t k : judged) {
    CheckFinding& f = report->findings[k];
    f.ref_level = level;
    f.tolerance = std::max(options.factor * std::max(f.ref_rel_error, level), floor);
    f.ok = f.rel_error <= f.tolerance;
  }
}

// Compares the outputs (or the gradients) of one trial: the reference's `r` and float64 `r64`
// against the candidate's `c`, one finding each.
void CompareTensors(const NamedTensors& r, const NamedTensors& r64, const NamedTensors& c,
                    const std::string& trial, const GradKinds& kinds, const CheckOptions& options,
                    CheckReport* report) {
  std::map<std::string, at::Tensor> cm(c.begin(), c.end()), r64m(r64.begin(), r64.end());
  std::vector<size_t> judged;  // findings whose tolerance is set below
  for (const auto& [name, rt] : r) {
    auto ci = cm.find(name);
    auto di = r64m.find(name);
    bool measured = false;
    CheckFinding f = CompareTensor(name, trial, rt, ci == cm.end() ? nullptr : &ci->second,
                                   di == r64m.end() ? nullptr : &di->second, kinds, &measured);
    if (measured) judged.push_back(report->findings.size());
    report->findings.push_back(f);
  }
  SetTolerances(judged, options, report);
}

// Runs the reference, the reference in float64 on the CPU and the candidate on every trial's
// inputs, and compares outputs and gradients. The reference failing on the samples is the
// check's error (ReferenceFailure); on another trial, that trial is skipped.
absl::Status CompareOnTrials(const CheckSubject& s, CheckReport* report) {
  const bool training = s.options.training;
  const auto trials = MakeTrials(s.samples, s.options);
  for (size_t t = 0; t < trials.size(); ++t) {
    const auto& [trial, inputs] = trials[t];
    uint64_t seed = s.options.seed + 17 * t;
    auto ref = Run(s.reference, inputs, s.options.dtype, s.device, training, seed);
    if (!ref.ok()) {
      if (t == 0) return ReferenceFailure(s.reference, inputs, s.device, ref.status());
      // E.g. a model with a fixed batch size: that trial does not apply. Said in the report.
      report->skipped_trials.push_back(absl::StrCat(trial, ": the reference does not run: ", ref.status().message()));
      continue;
    }
    auto ref64 = Run(s.reference, inputs, c10::kDouble, c10::Device(c10::kCPU), training, seed);
    auto cand = Run(s.candidate, inputs, s.options.dtype, s.device, training, seed);
    if (!cand.ok() || !ref64.ok()) {
      report->findings.push_back(CandidateRunFailure(trial, cand.ok() ? ref64.status() : cand.status()));
      continue;
    }
    const GradKinds kinds = CompareGradKinds(*ref, *cand);
    if (s.options.inference) CompareTensors(ref->outputs, ref64->outputs, cand->outputs, trial, kinds, s.options, report);
    if (training) CompareTensors(ref->grads, ref64->grads, cand->grads, trial, kinds, s.options, report);
  }
  return absl::OkStatus();
}

// Verdict: the first failing finding, in one sentence.
void SetVerdict(CheckReport* report) {
  for (const CheckFinding& f : report->findings) {
    if (f.ok) continue;
    report->equivalent = false;
    report->first_failure =
        f.note.empty()
            ? absl::StrFormat("%s differs on %s inputs: relative error %.3g > tolerance %.3g "
                              "(reference's own error %.3g, median %.3g, max abs error %.3g)",
                              f.what, f.trial, f.rel_error, f.tolerance, f.ref_rel_error,
                              f.ref_level, f.max_abs_error)
            : absl::StrCat(f.what, " on ", f.trial, " inputs: ", f.note);
    break;
  }
}

// Top-level aten ops per forward of both models (or why not, in count_error).
void CountAtenOpsOfBoth(const CheckSubject& s, CheckReport* report) {
  std::vector<c10::IValue> ref_in = {s.reference._ivalue()}, cand_in = {s.candidate._ivalue()};
  for (const c10::IValue& v : s.samples) {
    ref_in.push_back(v);
    cand_in.push_back(v);
  }
  auto a = CountAtenOps(s.reference.get_method("forward").graph(), ref_in);
  auto b = CountAtenOps(s.candidate.get_method("forward").graph(), cand_in);
  if (a.ok() && b.ok()) {
    report->aten_ops_reference = *a;
    report->aten_ops_candidate = *b;
  } else {
    report->count_error = std::string(a.ok() ? b.status().message() : a.status().message());
  }
}

// CUDA kernels per forward of both models, and per training step in training mode.
void CountCudaKernelsOfBoth(const CheckSubject& s, CheckReport* report) {
  auto count = [&](const torch::jit::Module& m, bool train) -> int64_t {
    try {
      torch::jit::Module copy = ModelOnDevice(m, s.options.dtype, s.device, train);
      c10::AutoGradMode grad_mode(train);
      std::vector<c10::IValue> in = InputsOnDevice(s.samples, s.options.dtype, s.device);
      auto n = CountCudaKernels(copy, in, train);
      if (n.ok()) return *n;
      report->count_error = std::string(n.status().message());
    } catch (const std::exception& e) {
      report->count_error = TorchErrorMessage(e.what());
    }
    return -1;
  };
  report->cuda_kernels_forward_reference = count(s.reference, false);
  report->cuda_kernels_forward_candidate = count(s.candidate, false);
  if (s.options.training) {
    report->cuda_kernels_step_reference = count(s.reference, true);
    report->cuda_kernels_step_candidate = count(s.candidate, true);
  }
}

// One kind of step (a forward, or with `train` a training step) of `models`, alternated:
// figures[0] the reference's where it is timed. Errors as TimeBoth says.
absl::StatusOr<std::vector<StepMeasure>> MeasureBoth(const CheckSubject& s,
                                                     const std::vector<const torch::jit::Module*>& models,
                                                     StepTiming timing, bool train) {
  const absl::Duration stall = absl::Seconds(s.options.executor_stall_s);
  const bool executor = timing == StepTiming::kExecutor;
  int failed = -1;
  auto m = MeasureSteps(models, s.samples, s.options.dtype, s.device, train, timing, stall, &failed);
  if (m.ok()) return m;
  const bool reference_failed = failed >= 0 && models[failed] == &s.reference;
  const bool candidate_failed = failed >= 0 && models[failed] == &s.candidate;
  if (absl::IsDeadlineExceeded(m.status())) {
    // The original's steps all ran and the optimized model's did not: users running the
    // artifact with the executor's defaults would wait as long (torch 2.11's CUDA fuser
    // compiling a stored-table lookup's index arithmetic, bench/RESULTS.md).
    if (candidate_failed && s.options.time_reference) {
      return absl::UnavailableError(absl::StrCat(
          "the optimized model's ", train ? "training step" : "forward",
          " made no progress within ", s.options.executor_stall_s,
          " s with the graph executor's optimizations on, as users run it (the original's steps "
          "finished)"));
    }
    return m;
  }
  if (executor && reference_failed) {
    return absl::AbortedError(absl::StrCat(
        "the original model's ", train ? "training step" : "forward",
        " fails with the graph executor's optimizations on: ", m.status().message()));
  }
  if (executor && candidate_failed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timing failed: the optimized model's ", train ? "training step" : "forward",
        " fails with the graph executor's optimizations on, as users run it: ", m.status().message()));
  }
  return absl::InvalidArgumentError(absl::StrCat("timing failed: ", m.status().message()));
}

// Median step times of both models (forward; training step too in training mode), timed as
// `timing` says, their steps alternated. With the executor: a step that stops making progress
// is DeadlineExceeded, a step of the reference that throws is Aborted (both: time in the
// interpreter instead); a step of the candidate that throws fails the timing, naming the
// candidate (users running it with the executor would meet the same error).
absl::Status TimeBoth(const CheckSubject& s, StepTiming timing, CheckReport* report) {
  std::vector<const torch::jit::Module*> models = {&s.candidate};
  if (s.options.time_reference) models.insert(models.begin(), &s.reference);
  report->timing = timing;
  SENTIER_ASSIGN_OR_RETURN(forward, MeasureBoth(s, models, timing, false));
  if (s.options.time_reference) {
    report->reference_ms = forward.front().median_ms;
    report->reference_peak_bytes = forward.front().peak_bytes;
  }
  report->candidate_ms = forward.back().median_ms;
  report->candidate_peak_bytes = forward.back().peak_bytes;
  if (s.options.training) {
    SENTIER_ASSIGN_OR_RETURN(train, MeasureBoth(s, models, timing, true));
    if (s.options.time_reference) {
      report->reference_train_ms = train.front().median_ms;
      report->reference_train_peak_bytes = train.front().peak_bytes;
    }
    report->candidate_train_ms = train.back().median_ms;
    report->candidate_train_peak_bytes = train.back().peak_bytes;
  }
  return absl::OkStatus();
}

// Timing: executor timing that stops making progress, or that the reference itself fails, is
// done again in the interpreter for both models, and the report says so (timing, timing_fallback).
absl::Status TimeBothOrFallBack(const CheckSubject& s, CheckReport* report) {
  absl::Status timed = TimeBoth(s, s.options.timing, report);
  if (absl::IsDeadlineExceeded(timed)) {
    report->timing_fallback = absl::StrCat(
        "a step timed with the graph executor's optimizations on made no progress within ",
        s.options.executor_stall_s, " s (its thread was left behind); both models were timed in the interpreter");
  } else if (absl::IsAborted(timed)) {
    report->timing_fallback =
        absl::StrCat(timed.message(), "; both models were timed in the interpreter");
  } else {
    return timed;
  }
  report->reference_ms = report->candidate_ms = report->reference_train_ms = report->candidate_train_ms = -1.0;
  report->reference_peak_bytes = report->candidate_peak_bytes = -1;
  report->reference_train_peak_bytes = report->candidate_train_peak_bytes = -1;
  return TimeBoth(s, StepTiming::kInterpreter, report);
}

}  // namespace

absl::StatusOr<CheckReport> EquivalenceChecker::Check(const torch::jit::Module& reference,
                                                      const torch::jit::Module& candidate,
                                                      const std::vector<c10::IValue>& raw_samples) const {
  SENTIER_ASSIGN_OR_RETURN(samples, ConformSamples(reference, raw_samples));
  const CheckSubject subject{reference, candidate, samples, options_,
                             c10::Device(options_.device == Device::kCuda ? c10::kCUDA : c10::kCPU)};
  CheckReport report;
  if (options_.timing_only) {
    SENTIER_RETURN_IF_ERROR(TimeBothOrFallBack(subject, &report));
    return report;
  }
  auto phase_start = std::chrono::steady_clock::now();
  auto phase_done = [&](const char* phase) {
    auto now = std::chrono::steady_clock::now();
    report.phase_ms[phase] = std::chrono::duration<double, std::milli>(now - phase_start).count();
    phase_start = now;
  };
  SENTIER_RETURN_IF_ERROR(CompareOnTrials(subject, &report));
  SetVerdict(&report);
  phase_done("compare");
  if (options_.count_ops) {
    CountAtenOpsOfBoth(subject, &report);
    phase_done("count_ops");
  }
  // A candidate that does not run (or is not equivalent) is not timed or profiled: the verdict
  // stands, and the failure must not turn into an error of the check itself.
  if (!report.equivalent) return report;
  if (subject.device.is_cuda()) {
    CountCudaKernelsOfBoth(subject, &report);
    phase_done("cuda_kernels");
  }
  if (options_.time) {
    SENTIER_RETURN_IF_ERROR(TimeBothOrFallBack(subject, &report));
    phase_done("time");
  }
  return report;
}

}  // namespace sentier
