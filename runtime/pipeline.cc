// pipeline.cc — the stages of OptimizeModel (see pipeline.h), each a function with its own
// result. A stage that fails returns a StageError: the stage, whether the output (not the
// model) was at fault, and the message. OptimizeModel runs them in order and turns the first
// failure into a rejection or an output failure; the decision and its wording live in
// pipeline_decision.cc.
#include "runtime/pipeline.h"

#include <chrono>
#include <filesystem>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/digest.h"
#include "passes/torch_error.h"
#include "re2/re2.h"
#include "runtime/file_util.h"
#include "runtime/graph_runner.h"
#include "runtime/pipeline_decision.h"
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

bool IsTrainingStep(ValidationMode mode) { return mode != ValidationMode::kInference; }

// ---- load -----------------------------------------------------------------------------------

// LoadInputs: the sample inputs from the request's file (rebuilt with forward's declared types
// for a module) or from memory.
absl::Status LoadInputs(const PipelineRequest& req, LoadedModel* loaded) {
  if (req.inputs_path.empty()) {
    loaded->has_inputs = !req.inputs.empty();
    loaded->inputs = req.inputs;
    return absl::OkStatus();
  }
  if (!std::filesystem::exists(req.inputs_path)) {
    return absl::InvalidArgumentError(absl::StrCat("sample inputs '", req.inputs_path, "' are missing"));
  }
  auto in = loaded->model.is_module ? LoadSampleInputsFor(req.inputs_path, loaded->model.module)
                                    : LoadSampleInputs(req.inputs_path);
  if (!in.ok()) return in.status();
  loaded->has_inputs = true;
  loaded->inputs = *std::move(in);
  auto sha = Sha256OfFile(req.inputs_path);
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
  auto counts = CountOps(loaded->original_graph, loaded->samples, IsTrainingStep(req.mode));
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
  auto sha = Sha256OfFile(req.model_path);
  if (sha.ok()) loaded.source_sha256 = *sha;
  auto model = LoadModel(req.model_path);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  if (!loaded.model.is_module && absl::EndsWith(req.artifact_path, ".pt")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", req.model_path, "' is not a TorchScript module, so no .pt artifact can be made"));
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

// MemoryPolicyKey: the memory policy and its figures, as a reused decision is compared.
std::string MemoryPolicyKey(const VerdictMargins& m) {
  return absl::StrCat(MemoryPolicyName(m), ";", MemoryMarginName(m.memory), ";", std::max<int64_t>(m.max_step_bytes, 0));
}

// WhyNotReusable: what differs between the earlier version's decision and this one ("" when it
// holds: same architecture fingerprint, rule set, parameter layout, mode and memory policy).
std::string WhyNotReusable(const PipelineRequest& req, const LoadedModel& loaded, const ReusableDecision& d) {
  if (d.architecture_fingerprint != loaded.architecture_fingerprint) return "the architecture changed";
  if (d.rules_fingerprint != req.rules->Fingerprint()) return "the rules changed";
  if (d.param_layout != ParameterLayoutName(req.param_layout)) return "the parameter layout changed";
  if (d.mode != ValidationModeName(req.mode)) return "the mode changed";
  if (d.memory_policy != MemoryPolicyKey(req.margins)) return "the memory policy changed";
  if (d.status == ReportStatus::kRejected) return "it was rejected";
  return "";
}

// Reuse: the rules an earlier version's decision applied (none when it kept the original), where
// that decision holds for this version; null otherwise, with the reason in `out->reuse_note`.
std::shared_ptr<const RuleSet> Reuse(const PipelineRequest& req, Outcome* out) {
  if (!req.reuse || !out->loaded->model.is_module) return nullptr;
  const ReusableDecision& d = *req.reuse;
  const std::string why_not = WhyNotReusable(req, *out->loaded, d);
  if (!why_not.empty()) {
    out->reuse_note = absl::StrCat("not reused from version ", d.version, ": ", why_not);
    return nullptr;
  }
  out->reused_from = d.version;
  out->reuse_note = absl::StrCat("reused from version ", d.version,
                                 ": same architecture fingerprint, rule set, parameter layout, mode and "
                                 "memory policy");
  return req.rules->Only(d.status == ReportStatus::kOptimized ? d.rules_applied : std::vector<std::string>{});
}

// ---- place ----------------------------------------------------------------------------------

// Place: a model that does not run on the GPU (it creates CPU tensors in forward, say) is
// validated on the CPU, without the gate, and the report says why.
absl::StatusOr<Placement> Place(const PipelineRequest& req, const LoadedModel& loaded) {
  Placement placement;
  placement.device = req.device;
  placement.select = req.select && loaded.model.is_module && loaded.has_inputs;
  if (req.device == Device::kCuda && loaded.model.is_module && loaded.has_inputs && (req.validate || req.select)) {
    absl::Status runs = RunsOnDevice(loaded.model.module, loaded.inputs, Device::kCuda, IsTrainingStep(req.mode));
    if (absl::IsFailedPrecondition(runs)) {
      placement.device_note = absl::StrCat(runs.message(), "; validated on the CPU instead");
      placement.device = Device::kCpu;
      placement.select = false;
    } else if (!runs.ok()) {
      return runs;
    }
  }
  placement.timed = placement.device == Device::kCuda && req.validate;
  placement.margins = req.margins;
  const int64_t device_bytes = DeviceMemoryBytes(
      c10::Device(placement.device == Device::kCuda ? c10::kCUDA : c10::kCPU));
  if (device_bytes > 0 && req.device_share > 0) {
    placement.margins.device_limit_bytes = static_cast<int64_t>(req.device_share * device_bytes);
  }
  if (device_bytes > 0) {
    placement.margins.small_growth_bytes = static_cast<int64_t>(kSmallGrowthShare * static_cast<double>(device_bytes));
  }
  return placement;
}

// ---- select ---------------------------------------------------------------------------------

CostOptions GateOptions(const PipelineRequest& req, const Placement& placement) {
  CostOptions cost;
  cost.device = placement.device;
  cost.training = IsTrainingStep(req.mode);
  cost.inference_too = req.mode == ValidationMode::kBoth;
  cost.verify_each = !req.validate;  // a validated artifact is checked once, at the end
  cost.margins = placement.margins;
  cost.timing = req.timing;
  cost.executor_stall_s = req.executor_stall_s;
  cost.optimize.stacked_parameters = req.param_layout == ParameterLayout::kStacked;
  cost.optimize.max_rounds = req.max_rounds;
  return cost;
}

absl::StatusOr<CostSelection> Select(const PipelineRequest& req, const LoadedModel& loaded,
                                     const Placement& placement) {
  const std::vector<c10::IValue>& timed_inputs = req.timing_inputs ? *req.timing_inputs : loaded.inputs;
  return SelectRulesByMeasurement(req.model_path, timed_inputs, *req.rules, GateOptions(req, placement));
}

// ---- rewrite and count ----------------------------------------------------------------------

absl::StatusOr<OptimizeReport> Rewrite(const PipelineRequest& req, const RuleSet& rules,
                                       LoadedModel* loaded) {
  OptimizeOptions opts;
  opts.max_rounds = req.max_rounds;
  if (loaded->has_inputs) opts.sample_inputs = &loaded->samples;
  if (loaded->model.is_module) opts.self = loaded->model.module._ivalue();
  opts.stacked_parameters = req.param_layout == ParameterLayout::kStacked;
  opts.after_pass = req.after_pass;
  return OptimizeGraph(loaded->model.graph, rules, opts);
}

// CountRewrittenOps: the same counts as CountOriginalOps, of the rewritten graph. A rewritten
// graph that no longer runs is a validation failure.
absl::StatusOr<OpCounts> CountRewrittenOps(const LoadedModel& loaded) {
  if (loaded.ops.forward < 0) return OpCounts();
  auto counts = CountOps(loaded.model.graph, loaded.samples, loaded.ops.training_step >= 0);
  if (!counts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the optimized graph does not run: ", counts.status().message()));
  }
  return *counts;
}

// ---- untimed ablation -------------------------------------------------------------------------

// With nothing timed, kernel launches decide (verdict.h's UntimedGrowth). One rule that adds
// launches (split pieces made slices: fewer aten ops, but each slice's backward is a fill and a
// copy where the split's was one concatenation) would otherwise cost the model every rule that
// saves them. So a rewrite that makes no fewer launches than the original is made again from the
// original without each rule that fired, in turn; the rewrite with the fewest launches is kept
// when it makes fewer than the one it came from, and the search goes on from it until a rewrite
// pays, no dropped rule helps, or kMaxUntimedRewrites more rewrites were made. A rewrite that
// took longer than kMaxUntimedRewriteMs is not repeated (large models: their gate times them).
constexpr int kMaxUntimedRewrites = 12;
constexpr double kMaxUntimedRewriteMs = 2000;

bool UntimedAblationApplies(const PipelineRequest& req, const Outcome& out) {
  std::string growth;
  return !out.selection && !out.placement.timed && !req.allow_growth && out.loaded->model.is_module &&
         out.loaded->ops.launches_forward >= 0 && out.optimization->stats.applications.size() > 1 &&
         out.optimization->optimize_ms <= kMaxUntimedRewriteMs &&
         UntimedGrowth(out.loaded->ops, out.ops_after, &growth);
}

struct UntimedAttempt {
  std::shared_ptr<const RuleSet> rules;
  std::vector<std::string> dropped;  // what RewriteWithout left out
  LoadedModel loaded;
  OptimizeReport report;
  OpCounts ops;
};

// RewriteWith: the original, loaded afresh (a stacked layout rewrites the module's parameters
// too), rewritten with `rules` and counted.
absl::StatusOr<UntimedAttempt> RewriteWith(const PipelineRequest& req, std::shared_ptr<const RuleSet> rules,
                                           const LoadedModel& original) {
  UntimedAttempt a;
  a.rules = std::move(rules);
  auto model = LoadModel(req.model_path);
  if (!model.ok()) return model.status();
  a.loaded = original;
  a.loaded.model = *std::move(model);
  a.loaded.samples = {a.loaded.model.module._ivalue()};
  a.loaded.samples.insert(a.loaded.samples.end(), a.loaded.inputs.begin(), a.loaded.inputs.end());
  auto report = Rewrite(req, *a.rules, &a.loaded);
  if (!report.ok()) return report.status();
  a.report = *std::move(report);
  auto ops = CountRewrittenOps(a.loaded);
  if (!ops.ok()) return ops.status();
  a.ops = *ops;
  return a;
}

// RewriteWithout: the rewrite without `drop`. Where leaving a rule out lets a rule fire that did
// not fire before (it matches what the left-out rule would have rewritten), that rule is left
// out too, once (one more rewrite from `budget`): the attempt measures the model without the
// rule, not with a stand-in for it.
absl::StatusOr<UntimedAttempt> RewriteWithout(const PipelineRequest& req, const RuleSet& rules,
                                              std::vector<std::string> drop, const RewriteStats& fired,
                                              const LoadedModel& original, int* budget) {
  auto attempt = RewriteWith(req, rules.Without(drop), original);
  if (attempt.ok()) attempt->dropped = drop;
  if (!attempt.ok() || *budget <= 0) return attempt;
  const size_t dropped = drop.size();
  for (const auto& [name, n] : attempt->report.stats.applications) {
    if (n > 0 && fired.applications.count(name) == 0) drop.push_back(name);
  }
  if (drop.size() == dropped) return attempt;
  --*budget;
  auto without_stand_ins = RewriteWith(req, rules.Without(drop), original);
  if (!without_stand_ins.ok() || UntimedLaunches(without_stand_ins->ops) >= UntimedLaunches(attempt->ops)) {
    return attempt;
  }
  without_stand_ins->dropped = drop;
  return without_stand_ins;
}

// DropRulesThatAddLaunches: the search above; `out` takes the best rewrite found, and
// `out->untimed_dropped` the rules it leaves out, with the launches the rewrite with them made.
void DropRulesThatAddLaunches(const PipelineRequest& req, std::shared_ptr<const RuleSet> rules, Outcome* out) {
  const OpCounts first = out->ops_after;
  std::vector<std::string> dropped;
  std::optional<UntimedAttempt> best;
  int budget = kMaxUntimedRewrites;
  std::string growth;
  int64_t current = UntimedLaunches(out->ops_after);
  const RewriteStats* fired = &out->optimization->stats;
  while (budget > 0) {
    std::optional<UntimedAttempt> round_best;
    for (const auto& [name, n] : fired->applications) {
      if (budget-- <= 0) break;
      auto attempt = RewriteWithout(req, *rules, {name}, *fired, *out->loaded, &budget);
      if (!attempt.ok() || attempt->report.stats.applications.empty()) continue;
      if (UntimedLaunches(attempt->ops) >= current) continue;
      if (round_best && UntimedLaunches(attempt->ops) >= UntimedLaunches(round_best->ops)) continue;
      round_best = *std::move(attempt);
    }
    if (!round_best) break;
    current = UntimedLaunches(round_best->ops);
    rules = round_best->rules;
    dropped.insert(dropped.end(), round_best->dropped.begin(), round_best->dropped.end());
    best = std::move(round_best);
    fired = &best->report.stats;
    if (!UntimedGrowth(out->loaded->ops, best->ops, &growth)) break;
  }
  if (!best) return;
  out->loaded->model = best->loaded.model;
  out->loaded->samples = best->loaded.samples;
  out->optimization = std::move(best->report);
  out->ops_after = best->ops;
  out->rewrites = 0;
  for (const auto& [name, n] : out->optimization->stats.applications) out->rewrites += n;
  out->untimed_dropped = dropped;
  out->untimed_dropped_launches = UntimedLaunches(first);
}

// ---- save and validate ----------------------------------------------------------------------

absl::Status Save(const PipelineRequest& req, const LoadedModel& loaded) {
  if (req.artifact_path.empty()) return absl::OkStatus();
  return SaveModel(loaded.model, req.artifact_path);
}

// CarriedReference: the original's judged step (training step; forward in inference mode) as
// timed already, so that validation times the artifact alone against it: by the gate in this
// job (its last timing of the original: the same samples, device and timing), or by a
// reused decision's version (the same architecture runs the same kernels at the same sizes).
struct CarriedReference {
  double step_ms = -1.0;
  int64_t peak_bytes = -1;
  std::optional<int64_t> version;  // the reused decision's version; none: this job's gate
};

std::optional<CarriedReference> ReferenceToCarry(const PipelineRequest& req, const Outcome& out,
                                                 const CheckOptions& check) {
  if (!check.time || check.device != Device::kCuda) return std::nullopt;
  if (out.selection && out.selection->faster && out.selection->last_original_step_ms > 0 &&
      out.selection->last_original_step_peak_bytes >= 0 && out.selection->timing == check.timing) {
    return CarriedReference{out.selection->last_original_step_ms, out.selection->last_original_step_peak_bytes,
                            std::nullopt};
  }
  if (out.reused_from && req.reuse && req.reuse->reference_step_ms > 0 &&
      req.reuse->reference_step_peak_bytes >= 0 && req.reuse->reference_timing == StepTimingName(check.timing)) {
    return CarriedReference{req.reuse->reference_step_ms, req.reuse->reference_step_peak_bytes, req.reuse->version};
  }
  return std::nullopt;
}

CheckOptions ValidationOptions(const PipelineRequest& req, const Outcome& out) {
  CheckOptions check;
  check.device = out.placement.device;
  check.inference = req.mode != ValidationMode::kTraining;
  check.training = IsTrainingStep(req.mode);
  // A reused decision is validated on the samples and at twice their batch (one trial); a fresh
  // one on a random draw as well.
  check.trials = out.reused_from ? 1 : req.validation_trials;
  check.time = out.placement.timed;
  check.timing = out.selection ? out.selection->timing : req.timing;
  check.executor_stall_s = req.executor_stall_s;
  return check;
}

// CarryReferenceStep: the carried figures of the original's judged step, as if timed here.
void CarryReferenceStep(const PipelineRequest& req, const CarriedReference& carried, CheckReport* c) {
  if (IsTrainingStep(req.mode)) {
    c->reference_train_ms = carried.step_ms;
    c->reference_train_peak_bytes = carried.peak_bytes;
  } else {
    c->reference_ms = carried.step_ms;
    c->reference_peak_bytes = carried.peak_bytes;
  }
}

// TakeTimedFigures: the step times, peaks and timing of `from` (a timing-only check) into `to`.
void TakeTimedFigures(const CheckReport& from, CheckReport* to) {
  to->reference_ms = from.reference_ms;
  to->candidate_ms = from.candidate_ms;
  to->reference_train_ms = from.reference_train_ms;
  to->candidate_train_ms = from.candidate_train_ms;
  to->reference_peak_bytes = from.reference_peak_bytes;
  to->candidate_peak_bytes = from.candidate_peak_bytes;
  to->reference_train_peak_bytes = from.reference_train_peak_bytes;
  to->candidate_train_peak_bytes = from.candidate_train_peak_bytes;
  to->timing = from.timing;
  to->timing_fallback = from.timing_fallback;
}

// Validate: the saved artifact, loaded back as users load it, against the original: outputs and
// the gradients of every input, parameter and buffer, on the placement's device.
absl::StatusOr<Validation> Validate(const PipelineRequest& req, const Outcome& out) {
  auto reference = LoadModel(req.model_path);
  auto candidate = LoadModel(req.artifact_path);
  if (!reference.ok() || !candidate.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the artifact does not load: ", (candidate.ok() ? reference : candidate).status().message()));
  }
  CheckOptions options = ValidationOptions(req, out);
  std::optional<CarriedReference> carried = ReferenceToCarry(req, out, options);
  options.time_reference = !carried.has_value();
  auto checked = EquivalenceChecker(options).Check(reference->module, candidate->module, out.loaded->inputs);
  if (!checked.ok()) return checked.status();
  if (!checked->equivalent) return absl::InvalidArgumentError(checked->first_failure);
  // Time both here, alternated, where the carried timing cannot stand in: the artifact was timed
  // another way than the original was then, or its timing contradicts the verdict the original's
  // carried timing came with (two timings of one graph taken apart can differ by 1.3x and more;
  // a contradiction costs this one more timing, an agreement none).
  std::string retimed;
  if (carried) {
    if (checked->timing_fallback.empty()) CarryReferenceStep(req, *carried, &*checked);
    retimed = WhyTimeTheOriginalAgain(req, *checked, out.placement.margins);
  }
  if (!retimed.empty()) {
    options.timing_only = true;
    options.time_reference = true;
    auto timed = EquivalenceChecker(options).Check(reference->module, candidate->module, out.loaded->inputs);
    if (!timed.ok()) return timed.status();
    TakeTimedFigures(*timed, &*checked);
    carried.reset();
  }
  StepTiming timing = checked->timing;
  Validation v{*std::move(checked), timing};
  v.reference_retimed = retimed;
  if (carried) {
    v.reference_from_version = carried->version;
    v.reference_from_gate = !carried->version.has_value();
  }
  return v;
}

// KeepOriginal: the artifact becomes the original archive, byte for byte (text IR: the graph as
// loaded).
absl::Status KeepOriginal(const PipelineRequest& req, const LoadedModel& loaded) {
  if (req.artifact_path.empty()) return absl::OkStatus();
  if (absl::EndsWith(req.artifact_path, ".ir")) {
    Model original = loaded.model;
    original.graph = loaded.original_graph;
    return SaveModel(original, req.artifact_path);
  }
  auto bytes = ReadFile(req.model_path);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(req.artifact_path, *bytes);
}

// ---- the stages in order --------------------------------------------------------------------

// RunStages: load -> place -> select -> rewrite -> count -> save -> validate; the first failure
// is returned, `out` holds what the stages before it found.
std::optional<StageError> RunStages(const PipelineRequest& req, Outcome* out) {
  auto t0 = Clock::now();
  auto loaded = Load(req);
  if (!loaded.ok()) return ModelError(PipelineStage::kLoad, "load failure", loaded.status());
  out->loaded = *std::move(loaded);
  out->timings_ms["load"] = MsSince(t0);
  std::shared_ptr<const RuleSet> reused = Reuse(req, out);
  auto placement = Place(req, *out->loaded);
  if (!placement.ok()) return ModelError(PipelineStage::kPlace, "load failure", placement.status());
  out->placement = *placement;
  if (reused) out->placement.select = false;  // the earlier version's gate decided
  std::shared_ptr<const RuleSet> rules = reused ? reused : req.rules;
  if (out->placement.select) {
    auto ts = Clock::now();
    auto sel = Select(req, *out->loaded, out->placement);
    out->timings_ms["select"] = MsSince(ts);
    if (!sel.ok()) return ModelError(PipelineStage::kSelect, "rule selection failed", sel.status());
    out->selection = *std::move(sel);
    rules = out->selection->rules;  // empty when no set pays
  }
  auto report = Rewrite(req, *rules, &*out->loaded);
  if (!report.ok()) return ModelError(PipelineStage::kRewrite, "optimizer error", report.status());
  out->optimization = *std::move(report);
  out->timings_ms["optimize"] = out->optimization->optimize_ms;
  // Where the optimization's time went: "optimize.rules", "optimize.shape_facts", ...
  for (const auto& [stage, ms] : out->optimization->stage_ms) out->timings_ms["optimize." + stage] = ms;
  for (const auto& [name, n] : out->optimization->stats.applications) out->rewrites += n;
  if (out->rewrites == 0) return std::nullopt;
  auto after = CountRewrittenOps(*out->loaded);
  if (!after.ok()) return ModelError(PipelineStage::kCount, "validation failure", after.status());
  out->ops_after = *after;
  if (UntimedAblationApplies(req, *out)) {
    auto ta = Clock::now();
    DropRulesThatAddLaunches(req, rules, out);
    out->timings_ms["untimed_ablation"] = MsSince(ta);
  }
  auto t3 = Clock::now();
  if (absl::Status saved = Save(req, *out->loaded); !saved.ok()) return OutputError(PipelineStage::kSave, saved);
  out->timings_ms["save"] = MsSince(t3);
  if (!req.validate) return std::nullopt;
  auto t2 = Clock::now();
  auto validation = Validate(req, *out);
  out->timings_ms["validate"] = MsSince(t2);
  if (absl::IsUnavailable(validation.status())) {  // decided on: unchanged (gate_executor_stall)
    out->executor_stall = std::string(validation.status().message());
    return std::nullopt;
  }
  if (!validation.ok()) {
    // "validation failure on cuda: <first failure>"; "validation failure: the artifact does not load".
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

// Finish: the decision; an unchanged artifact is the original; the artifact's hash.
void Finish(const PipelineRequest& req, Outcome* out) {
  Decide(req, out);
  if (out->status == ReportStatus::kUnchanged) {
    out->ops_after = out->loaded->ops;  // the artifact is the original
    if (absl::Status kept = KeepOriginal(req, *out->loaded); !kept.ok()) {
      return Fail(PipelineStage::kDecide, "cannot write the output", kept, /*output=*/true, out);
    }
  }
  if (req.artifact_path.empty()) return;
  auto sha = Sha256OfFile(req.artifact_path);
  if (!sha.ok()) return Fail(PipelineStage::kDecide, "cannot write the output", sha.status(), /*output=*/true, out);
  out->artifact_sha256 = *sha;
}

// ReadReferenceStep: the original's judged step from a report's CUDA validation, where it has one.
void ReadReferenceStep(const nlohmann::json& report, ReusableDecision* d) {
  if (!report.contains("validation")) return;
  const nlohmann::json& val = report["validation"];
  const std::string step = d->mode == "inference" ? "forward" : "training_step";
  if (val.value("device", "") != "cuda" || !val.contains(step + "_ms") || !val.contains(step + "_peak_bytes") ||
      !val.contains("timing")) {
    return;
  }
  d->reference_step_ms = val[step + "_ms"].value("reference", -1.0);
  d->reference_step_peak_bytes = val[step + "_peak_bytes"].value("reference", int64_t{-1});
  d->reference_timing = val["timing"].get<std::string>();
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

absl::StatusOr<ReusableDecision> ReusableDecisionFromReport(const nlohmann::json& report, int64_t version) {
  ReusableDecision d;
  d.version = version;
  try {
    d.architecture_fingerprint = report.at("architecture_fingerprint").get<std::string>();
    d.rules_fingerprint = report.at("rules_fingerprint").get<std::string>();
    d.param_layout = report.at("param_layout").get<std::string>();
    d.mode = report.at("mode").get<std::string>();
    auto status = ParseReportStatus(report.at("status").get<std::string>());
    if (!status.ok()) return status.status();
    d.status = *status;
    d.reason = report.value("reason", "");
    ReadReferenceStep(report, &d);
    for (const auto& [name, n] : report.at("rule_counts").items()) d.rules_applied.push_back(name);
    const nlohmann::json& policy = report.at("memory_policy");
    VerdictMargins m;
    m.memory = report.contains("memory_margin") ? report["memory_margin"].get<double>() : kMemoryPolicyDefault;
    m.max_step_bytes = policy.value("max_step_bytes", int64_t{-1});
    d.memory_policy = MemoryPolicyKey(m);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the report of version ", version, " lacks what a reuse needs: ", e.what()));
  }
  return d;
}

}  // namespace sentier
