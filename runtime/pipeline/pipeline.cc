// pipeline.cc — the stages of OptimizeModel (stages.h lists them), each a function with
// its own result, and RunStages, the one place that assembles the outcome from those results. A
// stage that fails returns a StageError: the stage, whether the output (not the model) was at
// fault, and the message; OptimizeModel turns the first failure into a rejection or an output
// failure. The untimed ablation and the validation have files of their own; the decision and its
// wording live in decision.cc; the report in report.cc.
#include "runtime/pipeline/pipeline.h"

#include <chrono>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "absl/strings/str_cat.h"
#include "passes/digest.h"
#include "passes/torch_error.h"
#include "re2/re2.h"
#include "runtime/file_util.h"
#include "runtime/graph_runner.h"
#include "runtime/pipeline/decision.h"
#include "runtime/pipeline/internal.h"
#include "runtime/step_memory.h"

namespace sentier {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// StageError: why a stage stopped the pipeline; `what` starts the rejection's reason.
struct StageError {
  PipelineStage stage;
  absl::Status status;
  bool output = false;  // the output could not be written (not the model's fault)
  std::string what;
};

StageError ModelError(PipelineStage stage, absl::string_view what, const absl::Status& status) {
  return {stage, status, false, std::string(what)};
}
StageError OutputError(PipelineStage stage, const absl::Status& status) {
  return {stage, status, true, "cannot write the output"};
}

// ---- load -----------------------------------------------------------------------------------

// Formats: the model's format and the artifact's (the request's, else each path's own).
absl::Status ResolveFormats(const PipelineRequest& req, LoadedModel* loaded) {
  auto source = req.format ? req.format : FormatFor(req.model_path);
  if (!source.ok()) return source.status();
  loaded->format = *source;
  if (req.artifact_path.empty()) return absl::OkStatus();
  auto artifact = req.format ? req.format : FormatFor(req.artifact_path);
  if (!artifact.ok()) return artifact.status();
  loaded->artifact_format = *artifact;
  return absl::OkStatus();
}

// LoadInputs: the sample inputs from the request's file, from memory, or from the archive itself.
absl::Status LoadInputs(const PipelineRequest& req, LoadedModel* loaded) {
  if (req.inputs_path.empty() && !req.inputs.empty()) {
    loaded->has_inputs = true;
    loaded->inputs = req.inputs;
    return absl::OkStatus();
  }
  auto in = loaded->format->SampleInputs(loaded->model, req.inputs_path);
  if (req.inputs_path.empty() && absl::IsNotFound(in.status())) return absl::OkStatus();  // none
  if (!in.ok()) return in.status();
  loaded->has_inputs = true;
  loaded->inputs = *std::move(in);
  auto sha = req.inputs_path.empty() ? absl::StatusOr<std::string>("") : Sha256OfFile(req.inputs_path);
  if (sha.ok()) loaded->inputs_sha256 = *sha;
  return absl::OkStatus();
}

// CountOps: aten ops and kernel launches (graph_runner.h's OpTally) of one forward of a copy of
// `graph` and, with `training_step`, of one training step (left at -1 where the step fails); a
// forward that does not run is the error.
absl::StatusOr<OpCounts> CountOps(const std::shared_ptr<torch::jit::Graph>& graph,
                                  const std::vector<c10::IValue>& samples, bool training_step) {
  auto forward = TallyOps(graph->copy(), samples);
  if (!forward.ok()) return forward.status();
  OpCounts counts;
  counts.forward = forward->aten_ops;
  counts.launches_forward = forward->launches;
  if (!training_step) return counts;
  auto step = TallyOpsPerTrainingStep(graph->copy(), samples);
  if (step.ok()) {
    counts.training_step = step->aten_ops;
    counts.launches_training_step = step->launches;
  }
  return counts;
}

// CountOriginalOps: CountOps of the original, with the training step where that is the step
// judged; a model that does not run on its own sample inputs is refused.
absl::Status CountOriginalOps(const PipelineRequest& req, LoadedModel* loaded) {
  if (!loaded->has_inputs) return absl::OkStatus();
  auto counts = CountOps(loaded->original_graph, loaded->samples, IsTrainingStep(req.options.mode));
  if (!counts.ok() && !req.inputs_must_run) return absl::OkStatus();
  if (!counts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model does not run on its sample inputs: ", counts.status().message()));
  }
  loaded->ops = *counts;
  return absl::OkStatus();
}

absl::StatusOr<LoadedModel> Load(const PipelineRequest& req) {
  LoadedModel loaded;
  if (absl::Status st = ResolveFormats(req, &loaded); !st.ok()) return st;
  auto sha = Sha256OfFile(req.model_path);
  if (sha.ok()) loaded.source_sha256 = *sha;
  auto model = loaded.format->Load(req.model_path);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  if (loaded.artifact_format != nullptr) {
    if (absl::Status st = loaded.artifact_format->CanSave(loaded.model); !st.ok()) return st;
  }
  if (absl::Status st = LoadInputs(req, &loaded); !st.ok()) return st;
  if (loaded.model.is_module) loaded.samples.push_back(loaded.model.module._ivalue());
  loaded.samples.insert(loaded.samples.end(), loaded.inputs.begin(), loaded.inputs.end());
  loaded.original_graph = loaded.model.graph->copy();
  loaded.architecture_fingerprint = ArchitectureFingerprint(*loaded.model.graph);
  if (absl::Status st = CountOriginalOps(req, &loaded); !st.ok()) return st;
  return loaded;
}

// ---- reuse ----------------------------------------------------------------------------------

// WhyNotReusable: what differs between the earlier version's decision and this one ("" when it
// holds: same architecture fingerprint, rule set, parameter layout, mode and memory policy).
std::string WhyNotReusable(const PipelineRequest& req, const LoadedModel& loaded, const ReusableDecision& d) {
  if (d.architecture_fingerprint != loaded.architecture_fingerprint) return "the architecture changed";
  if (d.rules_fingerprint != req.rules->Fingerprint()) return "the rules changed";
  if (d.param_layout != ParameterLayoutName(req.options.param_layout)) return "the parameter layout changed";
  if (d.mode != ValidationModeName(req.options.mode)) return "the mode changed";
  if (d.memory_policy != MemoryPolicyKey(Margins(req.options))) return "the memory policy changed";
  if (d.status == ReportStatus::kRejected) return "it was rejected";
  return "";
}

// RunReuse: the rules an earlier version's decision applied (none when it kept the original),
// where that decision holds for this version; otherwise no rules, and the note says why.
Reuse RunReuse(const PipelineRequest& req, const LoadedModel& loaded) {
  Reuse reuse;
  if (!req.reuse || !loaded.model.is_module) return reuse;
  const ReusableDecision& d = *req.reuse;
  const std::string why_not = WhyNotReusable(req, loaded, d);
  if (!why_not.empty()) {
    reuse.note = absl::StrCat("not reused from version ", d.version, ": ", why_not);
    return reuse;
  }
  reuse.reused_from = d.version;
  reuse.note = absl::StrCat("reused from version ", d.version,
                            ": same architecture fingerprint, rule set, parameter layout, mode and "
                            "memory policy");
  reuse.rules = req.rules->Only(d.status == ReportStatus::kOptimized ? d.rules_applied : std::vector<std::string>{});
  return reuse;
}

// ---- place ----------------------------------------------------------------------------------

// Place: a model that does not run on the GPU (it creates CPU tensors in forward, say) is
// validated on the CPU, without the gate, and the report says why.
absl::StatusOr<Placement> Place(const PipelineRequest& req, const LoadedModel& loaded) {
  Placement placement;
  placement.device = req.options.device;
  placement.gate = GateOn(req.options) && loaded.model.is_module && loaded.has_inputs;
  if (req.options.device == Device::kCuda && loaded.model.is_module && loaded.has_inputs &&
      (req.validate || GateOn(req.options))) {
    auto module = loaded.format->Runnable(loaded.model);
    if (!module.ok()) return module.status();
    absl::Status runs = RunsOnDevice(*module, loaded.inputs, Device::kCuda, IsTrainingStep(req.options.mode));
    if (absl::IsFailedPrecondition(runs)) {
      placement.device_note = absl::StrCat(runs.message(), "; validated on the CPU instead");
      placement.device = Device::kCpu;
      placement.gate = false;
    } else if (!runs.ok()) {
      return runs;
    }
  }
  placement.timed = placement.device == Device::kCuda && req.validate;
  placement.margins = Margins(req.options);
  const int64_t device_bytes = DeviceMemoryBytes(
      c10::Device(placement.device == Device::kCuda ? c10::kCUDA : c10::kCPU));
  if (device_bytes > 0 && req.options.max_memory_share > 0) {
    placement.margins.device_limit_bytes = static_cast<int64_t>(req.options.max_memory_share * device_bytes);
  }
  if (device_bytes > 0) {
    placement.margins.small_growth_bytes = static_cast<int64_t>(kSmallGrowthShare * static_cast<double>(device_bytes));
  }
  return placement;
}

// ---- gate ----------------------------------------------------------------------------------

GateRunOptions GateOptions(const PipelineRequest& req, const Placement& placement) {
  GateRunOptions cost;
  cost.device = placement.device;
  cost.training = IsTrainingStep(req.options.mode);
  cost.inference_too = req.options.mode == ValidationMode::kBoth;
  cost.verify_each = !req.validate;  // a validated artifact is checked once, at the end
  cost.margins = placement.margins;
  cost.timing = req.options.timing;
  cost.executor_stall_s = req.options.executor_stall_s;
  cost.optimize.stacked_parameters = req.options.param_layout == ParameterLayout::kStacked;
  cost.optimize.max_rounds = req.options.max_rounds;
  return cost;
}

// Whether the artifact (else the model's own format) can hold in-place writes of buffers.
bool ArtifactWritesBuffers(const LoadedModel& loaded) {
  const ModelFormat* out = loaded.artifact_format != nullptr ? loaded.artifact_format : loaded.format;
  return out == nullptr || out->WritesModuleBuffers();
}

absl::StatusOr<GateSelection> Gate(const PipelineRequest& req, const LoadedModel& loaded,
                                   const Placement& placement) {
  const std::vector<c10::IValue>& timed_inputs = req.timing_inputs ? *req.timing_inputs : loaded.inputs;
  GateRunOptions options = GateOptions(req, placement);
  options.optimize.buffer_writes = ArtifactWritesBuffers(loaded);
  return RunGate(*loaded.format, req.model_path, timed_inputs, *req.rules, options);
}

// ---- rewrite and count ----------------------------------------------------------------------

}  // namespace

absl::StatusOr<OptimizeReport> Rewrite(const PipelineRequest& req, const RuleSet& rules,
                                       LoadedModel* loaded) {
  OptimizeOptions opts;
  opts.max_rounds = req.options.max_rounds;
  if (loaded->has_inputs) opts.sample_inputs = &loaded->samples;
  if (loaded->model.is_module) opts.self = loaded->model.module._ivalue();
  opts.stacked_parameters = req.options.param_layout == ParameterLayout::kStacked;
  opts.buffer_writes = ArtifactWritesBuffers(*loaded);
  opts.after_pass = req.after_pass;
  return OptimizeGraph(loaded->model.graph, rules, opts);
}

absl::StatusOr<OpCounts> CountRewrittenOps(const LoadedModel& loaded) {
  if (loaded.ops.forward < 0) return OpCounts();
  auto counts = CountOps(loaded.model.graph, loaded.samples, loaded.ops.training_step >= 0);
  if (!counts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the optimized graph does not run: ", counts.status().message()));
  }
  return *counts;
}

namespace {

// ---- save -----------------------------------------------------------------------------------

absl::Status Save(const PipelineRequest& req, const LoadedModel& loaded) {
  if (req.artifact_path.empty()) return absl::OkStatus();
  return loaded.artifact_format->Save(loaded.model, req.artifact_path);
}

// KeepOriginal: the artifact becomes the original, as its format keeps it (byte for byte).
absl::Status KeepOriginal(const PipelineRequest& req, const LoadedModel& loaded) {
  if (req.artifact_path.empty()) return absl::OkStatus();
  Model original = loaded.model;
  original.graph = loaded.original_graph;
  return loaded.artifact_format->KeepOriginal(original, req.artifact_path);
}

// ---- the stages in order --------------------------------------------------------------------

int64_t CountRewrites(const OptimizeReport& report) {
  int64_t n = 0;
  for (const auto& [name, count] : report.stats.applications) n += count;
  return n;
}

// TakeUntimedAblation: the untimed stage's rewrite replaces the one with every rule that fired.
void TakeUntimedAblation(std::optional<UntimedAblation> kept, Outcome* out) {
  if (!kept) return;
  out->loaded->model = kept->model;
  out->loaded->samples = kept->samples;
  out->optimization = std::move(kept->report);
  out->ops_after = kept->ops;
  out->rewrites = CountRewrites(*out->optimization);
  out->untimed_dropped = kept->dropped;
  out->untimed_dropped_launches = kept->first_launches;
}

// RunValidation: the validate stage; a stalled artifact is decided on (unchanged,
// gate_executor_stall), a failing one rejected: "validation failure on cuda: <first failure>",
// or "validation failure: the artifact does not load".
std::optional<StageError> RunValidation(const PipelineRequest& req, Outcome* out) {
  auto t0 = Clock::now();
  auto validation = Validate(req, *out->loaded, out->placement, out->selection, out->reused_from);
  out->timings_ms["validate"] = MsSince(t0);
  if (absl::IsUnavailable(validation.status())) {
    out->executor_stall = std::string(validation.status().message());
    return std::nullopt;
  }
  if (!validation.ok()) {
    const bool loads = !absl::IsFailedPrecondition(validation.status());
    return ModelError(PipelineStage::kValidate,
                      loads ? absl::StrCat("validation failure on ", DeviceName(out->placement.device))
                            : "validation failure",
                      validation.status());
  }
  for (const auto& [phase, ms] : validation->check.phase_ms) out->timings_ms["validate." + phase] = ms;
  if (validation->reference_from_version) {
    absl::StrAppend(&out->reuse_note, "; the artifact timed alone against the original's step as version ",
                    *validation->reference_from_version, " timed it (the same architecture runs the same kernels)");
  }
  out->validation = *std::move(validation);
  return std::nullopt;
}

// RunRewriteStages: rewrite -> count -> untimed -> save -> validate with `rules`.
std::optional<StageError> RunRewriteStages(const PipelineRequest& req, std::shared_ptr<const RuleSet> rules,
                                           Outcome* out) {
  auto report = Rewrite(req, *rules, &*out->loaded);
  if (!report.ok()) return ModelError(PipelineStage::kRewrite, "optimizer error", report.status());
  out->optimization = *std::move(report);
  out->timings_ms["optimize"] = out->optimization->optimize_ms;
  // Where the optimization's time went: "optimize.rules", "optimize.shape_facts", ...
  for (const auto& [stage, ms] : out->optimization->stage_ms) out->timings_ms["optimize." + stage] = ms;
  out->rewrites = CountRewrites(*out->optimization);
  if (out->rewrites == 0) return std::nullopt;
  auto after = CountRewrittenOps(*out->loaded);
  if (!after.ok()) return ModelError(PipelineStage::kCount, "count failure", after.status());
  out->ops_after = *after;
  if (UntimedAblationApplies(req, *out->loaded, out->placement, out->selection.has_value(), *out->optimization,
                             out->ops_after)) {
    auto t0 = Clock::now();
    TakeUntimedAblation(
        DropRulesThatAddLaunches(req, rules, *out->loaded, *out->optimization, out->ops_after), out);
    out->timings_ms["untimed_ablation"] = MsSince(t0);
  }
  auto t1 = Clock::now();
  if (absl::Status saved = Save(req, *out->loaded); !saved.ok()) return OutputError(PipelineStage::kSave, saved);
  out->timings_ms["save"] = MsSince(t1);
  if (!req.validate) return std::nullopt;
  return RunValidation(req, out);
}

// RunStages: load -> reuse -> place -> gate, then the rewrite stages; the first failure is
// returned, `out` holds what the stages before it found. The one place the outcome is assembled
// from the stages' results (with the decision: Finish).
std::optional<StageError> RunStages(const PipelineRequest& req, Outcome* out) {
  auto t0 = Clock::now();
  auto loaded = Load(req);
  if (!loaded.ok()) return ModelError(PipelineStage::kLoad, "load failure", loaded.status());
  out->loaded = *std::move(loaded);
  out->timings_ms["load"] = MsSince(t0);
  Reuse reuse = RunReuse(req, *out->loaded);
  out->reused_from = reuse.reused_from;
  out->reuse_note = reuse.note;
  auto placement = Place(req, *out->loaded);
  if (!placement.ok()) return ModelError(PipelineStage::kPlace, "placement failure", placement.status());
  out->placement = *placement;
  if (reuse.rules) out->placement.gate = false;  // the earlier version's gate decided
  std::shared_ptr<const RuleSet> rules = reuse.rules ? reuse.rules : req.rules;
  if (out->placement.gate) {
    auto t1 = Clock::now();
    auto gate = Gate(req, *out->loaded, out->placement);
    out->timings_ms["select"] = MsSince(t1);
    if (!gate.ok()) return ModelError(PipelineStage::kGate, "rule selection failed", gate.status());
    out->selection = *std::move(gate);
    rules = out->selection->rules;  // empty when no set pays
  }
  return RunRewriteStages(req, rules, out);
}

// RunAdvice: the advise stage, where it applies, on a model that was not rejected. A reused
// decision (a retrained version of the same architecture) is not advised again: its earlier
// version's report holds the advice, and a reuse stays a fraction of a full decision.
void RunAdvice(const PipelineRequest& req, Outcome* out) {
  if (out->status == ReportStatus::kRejected || out->reused_from || !AdviceApplies(req, *out->loaded)) return;
  auto t0 = Clock::now();
  out->stacked_layout = AdviseStackedLayout(req, *out->loaded, req.rules, out->placement);
  out->timings_ms["advise"] = MsSince(t0);
}

// Finish: the decision; an unchanged artifact is the original; the artifact's hash; the advice.
void Finish(const PipelineRequest& req, Outcome* out) {
  Decide(req, out);
  if (out->status == ReportStatus::kUnchanged) {
    out->ops_after = out->loaded->ops;  // the artifact is the original
    if (absl::Status kept = KeepOriginal(req, *out->loaded); !kept.ok()) {
      return Fail(PipelineStage::kDecide, "cannot write the output", kept, /*output=*/true, out);
    }
  }
  if (!req.artifact_path.empty()) {
    auto sha = Sha256OfFile(req.artifact_path);
    if (!sha.ok()) return Fail(PipelineStage::kDecide, "cannot write the output", sha.status(), /*output=*/true, out);
    out->artifact_sha256 = *sha;
  }
  RunAdvice(req, out);
}

}  // namespace

std::string ArchitectureFingerprint(const torch::jit::Graph& graph) {
  auto copy = const_cast<torch::jit::Graph&>(graph).copy();  // copy() is not const in LibTorch
  torch::jit::Inline(*copy);
  std::string text = copy->toString(/*print_source_locations=*/false);
  RE2::GlobalReplace(&text, R"(___torch_mangle_[0-9]+\.)", "");
  return Sha256Hex(text);
}

Outcome OptimizeModel(const PipelineRequest& req) {
  if (req.options.param_layout == ParameterLayout::kAuto) return OptimizeInAutoLayout(req);
  Outcome out;
  try {
    std::optional<StageError> failed = RunStages(req, &out);
    if (failed) {
      Fail(failed->stage, failed->what, failed->status, failed->output, &out);
      return out;
    }
    Finish(req, &out);
  } catch (const std::exception& e) {
    Fail(PipelineStage::kDecide, "crash", absl::InternalError(TorchErrorMessage(e.what())),
         /*output=*/false, &out);
  }
  return out;
}

absl::string_view PipelineStageName(PipelineStage stage) {
  switch (stage) {
    case PipelineStage::kLoad: return "load";
    case PipelineStage::kReuse: return "reuse";
    case PipelineStage::kPlace: return "place";
    case PipelineStage::kGate: return "gate";
    case PipelineStage::kRewrite: return "rewrite";
    case PipelineStage::kCount: return "count";
    case PipelineStage::kUntimed: return "untimed";
    case PipelineStage::kSave: return "save";
    case PipelineStage::kValidate: return "validate";
    case PipelineStage::kDecide: return "decide";
  }
  return "decide";
}
}  // namespace sentier
