// pipeline.h — what happens to a model: the one optimization pipeline that `sentier_opt`,
// sentierd's job and `model_bench` run. They differ only in where the request comes from (flags,
// the registry and sentier.json, a bench model) and where the outcome goes (a file and stdout,
// the staging directory and job.json, a benchmark table).
//
//   PipelineRequest req;
//   req.model_path = "ranker/3/model.pt";  req.inputs_path = "ranker/3/inputs.pt";
//   req.rules = *LoadRules({DefaultRulesDir()});
//   req.artifact_path = "stage/model.pt";  req.device = Device::kCuda;  req.select = true;
//   req.validate = true;
//   Outcome out = OptimizeModel(req);        // never throws
//   nlohmann::json report = BuildReport(out, "sentierd");
//
// The stages, in order, each a function of its own (pipeline.cc) with a small result type:
//   load      the archive, its sample inputs, hashes, architecture fingerprint, aten ops before
//   reuse     an earlier version's decision, where architecture, rules and options are the same
//   place     the device the job validates and times on (CPU when the model fails on CUDA)
//   select    the never-slower gate: the rules that pay, timed on the device (CostSelection)
//   rewrite   canonicalize, rules to a fixpoint, stored stacked parameters (OptimizeGraph)
//   count     aten ops per forward and per training step of the result
//   save      the artifact, written atomically
//   validate  the saved artifact, loaded back, against the original (EquivalenceChecker; timed
//             on CUDA)
//   decide    optimized, unchanged (and why: the clause that decided) or rejected
// When the decision is "unchanged" the artifact is the original archive, byte for byte.
#ifndef SENTIER_RUNTIME_PIPELINE_H_
#define SENTIER_RUNTIME_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "passes/optimizer.h"
#include "passes/rule_set.h"
#include "runtime/decision_clause.h"
#include "runtime/cost_selection.h"
#include "runtime/equivalence_checker.h"
#include "runtime/model_io.h"
#include "runtime/options_enums.h"
#include "runtime/verdict.h"

namespace sentier {

// ReusableDecision: what an earlier version of the same model was decided with (sentierd: its
// published report.json). A new version whose architecture fingerprint, rule set and options are
// the same (weights retrained, the common weekly case) reuses it: no gate, the rules that fired
// then, validated (and timed on CUDA) once. Anything different: the full search.
struct ReusableDecision {
  int64_t version = 0;
  std::string architecture_fingerprint;
  std::string rules_fingerprint;
  std::string param_layout, mode, memory_policy;  // in the report's words
  ReportStatus status = ReportStatus::kUnchanged;
  std::vector<std::string> rules_applied;  // the rules that fired (report.json rule_counts)
  std::string reason;
  // The original's judged step (training step; forward in inference mode) as that version's
  // validation timed it on CUDA, and how (executor|interpreter). The same architecture runs the
  // same kernels at the same sizes, so a reuse times the artifact alone against these figures
  // (the confirming timing); -1 where that version was not timed on CUDA: both are timed.
  double reference_step_ms = -1.0;
  int64_t reference_step_peak_bytes = -1;
  std::string reference_timing;
};

// ReusableDecisionFromReport: the decision a report.json records; an error where the report
// lacks what a reuse needs (then the version gets the full search).
absl::StatusOr<ReusableDecision> ReusableDecisionFromReport(const nlohmann::json& report, int64_t version);

// PipelineRequest: everything one optimization needs; the options that were flags in each tool.
struct PipelineRequest {
  // The model: a TorchScript archive (.pt), or text IR (.ir, sentier_opt only: no module, so no
  // selection, validation or stacked layout).
  std::string model_path;
  // Sample inputs: a file (forward's arguments as torch.save writes them), or, when the path is
  // empty, `inputs` in memory. Neither: no shape facts, no counts, no selection or validation.
  std::string inputs_path;
  std::vector<c10::IValue> inputs;
  // Inputs the gate times with, when they differ from `inputs` (model_bench: the bench batch).
  std::optional<std::vector<c10::IValue>> timing_inputs;
  // A model that does not run on its sample inputs is rejected; false: it is optimized without
  // shape facts or aten-op counts (sentier_opt warns "no shape facts: ...").
  bool inputs_must_run = true;
  std::shared_ptr<const RuleSet> rules;

  ValidationMode mode = ValidationMode::kTraining;  // the step that is judged
  ParameterLayout param_layout = ParameterLayout::kOriginal;
  Device device = Device::kCpu;  // where to select, validate and time (CUDA: timed verdict)
  bool select = false;           // the never-slower gate (cost_selection.h)
  // The memory policy (runtime/verdict.h): the default (time x peak memory may not grow, peak
  // within `device_share` of the device's memory), a margin, an owner's absolute budget, or off.
  VerdictMargins margins;
  double device_share = kDefaultDeviceShare;
  StepTiming timing = StepTiming::kInterpreter;
  double executor_stall_s = 60.0;
  int max_rounds = 16;
  std::optional<ReusableDecision> reuse;  // an earlier version's decision, reused where it holds
  // Called after each canonicalization pass and round of rules (sentier_opt --print_ir_after).
  std::function<void(const std::string& pass, const torch::jit::Graph& graph)> after_pass;

  // Where the artifact goes (.pt, or .ir for a text-IR model); empty: not written.
  std::string artifact_path;
  bool validate = false;      // the saved artifact against the original (EquivalenceChecker)
  int validation_trials = 2;  // CheckOptions::trials
  bool allow_growth = false;  // untimed: write a graph with more aten ops anyway
};

// Where a pipeline stopped without a decision.
enum class PipelineStage { kLoad, kPlace, kSelect, kRewrite, kCount, kSave, kValidate, kDecide };


// LoadedModel (load stage): the model as loaded, its sample inputs, and what is known before any
// rewrite.
struct LoadedModel {
  Model model;
  std::shared_ptr<torch::jit::Graph> original_graph;  // a copy, before any pass
  bool has_inputs = false;
  std::vector<c10::IValue> inputs;   // forward's arguments
  std::vector<c10::IValue> samples;  // self (for a module) followed by `inputs`
  std::string source_sha256, inputs_sha256;
  std::string architecture_fingerprint;
  OpCounts ops;  // aten ops of the original (-1: not counted)
};

// Placement (place stage): where the model is validated and timed.
struct Placement {
  Device device = Device::kCpu;
  bool select = false;
  bool timed = false;       // a timed verdict on the validated artifact (CUDA)
  std::string device_note;  // why the model is validated on the CPU instead
  VerdictMargins margins;   // the request's, with the device share in bytes of this device
};

// Validation (validate stage): the checker's report and how its steps were timed.
struct Validation {
  CheckReport check;
  StepTiming timing = StepTiming::kInterpreter;
  // Where the original's step figures came from a reused decision's version instead of a
  // timing here (ReusableDecision::reference_step_ms).
  std::optional<int64_t> reference_from_version;
  // Where they came from the gate's last timing of the original in this job (CostSelection::
  // last_original_step_ms): the original is not timed again here.
  bool reference_from_gate = false;
  // Why the original was timed here after all, alternated with the artifact (empty: it was not,
  // or it always was): the carried timing could not stand in.
  std::string reference_retimed;
};

// Outcome: what every stage found, and the decision.
struct Outcome {
  ReportStatus status = ReportStatus::kRejected;
  DecisionClause clause = DecisionClause::kFailed;
  std::string reason;
  // The stage that failed: the model's fault (status rejected: the reason starts with what
  // failed, "load failure: ...") or, with `output_failed`, the output could not be written (not
  // the model's fault: a daemon retries). `error` is the bare message of the failing stage.
  std::optional<PipelineStage> failed_stage;
  bool output_failed = false;
  absl::Status error;

  std::optional<LoadedModel> loaded;
  Placement placement;
  // The validation's timing found the artifact's step making no progress under the executor
  // while the original's finished (EquivalenceChecker: Unavailable): why it is not published.
  std::string executor_stall;
  std::optional<CostSelection> selection;
  // The reuse stage: the version whose decision was reused, or why none was (report.json
  // "decision_reuse").
  std::optional<int64_t> reused_from;
  std::string reuse_note;
  std::string memory_hint;  // what the model's owner could allow for every rule (sentier.json)
  // The memory policy's judgement of the figures that decided (the timed artifact's, or the
  // gate's selection), when there were any.
  std::optional<MemoryJudgement> memory;
  std::optional<OptimizeReport> optimization;
  OpCounts ops_after;
  // Untimed, the rules left out because the rewrite with them made no fewer kernel launches than
  // the original (pipeline.cc's untimed ablation), and the launches that rewrite made.
  std::vector<std::string> untimed_dropped;
  int64_t untimed_dropped_launches = -1;
  std::optional<Validation> validation;
  int64_t rewrites = 0;
  std::string artifact_sha256;
  std::map<std::string, double> timings_ms;  // load, select, optimize, save, validate
};

// OptimizeModel: runs the stages in order; never throws (a LibTorch exception is a rejection
// "crash: ..."). The artifact at `artifact_path` exists when the status is not rejected and the
// output could be written.
Outcome OptimizeModel(const PipelineRequest& request);

// BuildReport: the report of an outcome (runtime/report_schema.json), for `tool`.
nlohmann::json BuildReport(const PipelineRequest& request, const Outcome& outcome,
                           absl::string_view tool);

// ArchitectureFingerprint: sha256 of the inlined forward graph's text, without TorchScript's
// class-name mangling: equal for the same architecture whatever its weights.
std::string ArchitectureFingerprint(const torch::jit::Graph& graph);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PIPELINE_H_
