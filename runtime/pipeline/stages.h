// stages.h — the stages of the optimization pipeline (runtime/pipeline/pipeline.h), the request
// they serve and the result each returns; the outcome is assembled from those results in one
// place (pipeline.cc's RunStages; the decision by decision.h). The stages, in order:
//
//   stage     function (file)                        result           fails as
//   load      Load (pipeline.cc)                     LoadedModel      "load failure"
//   reuse     Reuse (pipeline.cc)                    Reuse            (never: the full search)
//   place     Place (pipeline.cc)                    Placement        "placement failure"
//   gate      Gate (pipeline.cc; gate.h)   GateSelection    "rule selection failed"
//   rewrite   Rewrite (pipeline.cc; OptimizeGraph)   OptimizeReport   "optimizer error"
//   count     CountRewrittenOps (pipeline.cc)        OpCounts         "count failure"
//   untimed   DropRulesThatAddLaunches               UntimedAblation  (never: the rewrite stays)
//             (untimed.cc)
//   save      Save (pipeline.cc)                     -                "cannot write the output"
//   validate  Validate (validate.cc)        Validation       "validation failure"
//   advise    AdviseStackedLayout            StackedLayoutAdvice  (never: no advice)
//             (advise.cc)
//   decide    MakeDecision (decision.cc)    Decision         "cannot write the output"
//
// load: the archive through its format (runtime/model_format.h), its sample inputs, hashes,
//   architecture fingerprint, aten ops before;
// reuse: an earlier version's decision, where architecture, rules and options are the same;
// place: the device the job validates and times on (CPU when the model fails on CUDA);
// gate: the rules that make the judged step faster on the device (GateSelection);
// rewrite: canonicalize, rules to a fixpoint, stored stacked parameters (OptimizeGraph);
// count: aten ops and kernel launches per forward and per training step of the result;
// untimed: with nothing timed, the rewrite again without the rules that add kernel launches;
// save: the artifact, written atomically through its format;
// validate: the saved artifact, loaded back as users load it, against the original
//   (EquivalenceChecker; timed on CUDA);
// advise: where the original parameter layout was asked for, what the stacked layout would give
//   (counted; timed on CUDA): the report and the log say so, with the setting that publishes it;
// decide: optimized, unchanged (and why: the clause that decided) or rejected. When the decision
//   is "unchanged" the artifact is the original, byte for byte (ModelFormat::KeepOriginal).
#ifndef SENTIER_RUNTIME_PIPELINE_STAGES_H_
#define SENTIER_RUNTIME_PIPELINE_STAGES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "passes/optimizer.h"
#include "passes/rule_set.h"
#include "runtime/gate.h"
#include "runtime/decision_clause.h"
#include "runtime/equivalence_checker.h"
#include "runtime/model_format.h"
#include "runtime/model_io.h"
#include "runtime/options_enums.h"
#include "runtime/pipeline/options.h"
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

// MemoryPolicyKey: the memory policy and its figures, as a reused decision compares them.
std::string MemoryPolicyKey(const VerdictMargins& margins);

// PipelineRequest: everything one optimization needs: the model, its inputs, the rules, the options.
struct PipelineRequest {
  // The model: a TorchScript archive (.pt), or text IR (.ir, sentier_opt only: no module, so no
  // gate, validation or stacked layout).
  std::string model_path;
  // The format the model and the artifact are read and written in (runtime/model_format.h);
  // null: each path's built-in format (FormatFor).
  const ModelFormat* format = nullptr;
  // Sample inputs: a file (forward's arguments as torch.save writes them), or, when the path is
  // empty, `inputs` in memory, or else those the archive holds (ModelFormat::SampleInputs). None:
  // no shape facts, no counts, no gate or validation.
  std::string inputs_path;
  std::vector<c10::IValue> inputs;
  // Inputs the gate times with, when they differ from `inputs` (model_bench: the bench batch).
  std::optional<std::vector<c10::IValue>> timing_inputs;
  // A model that does not run on its sample inputs is rejected; false: it is optimized without
  // shape facts or aten-op counts (sentier_opt warns "no shape facts: ...").
  bool inputs_must_run = true;
  std::shared_ptr<const RuleSet> rules;

  // The options (runtime/pipeline/options.h): the judged step, layout, device, gate, memory
  // policy, timing, rounds, trials. A request's defaults are sentier_opt's.
  PipelineOptions options = DefaultOptions(Tool::kSentierOpt);
  std::optional<ReusableDecision> reuse;  // an earlier version's decision, reused where it holds
  // Called after each canonicalization pass and round of rules (sentier_opt --print_ir_after).
  std::function<void(const std::string& pass, const torch::jit::Graph& graph)> after_pass;

  // Where the artifact goes (.pt, or .ir for a text-IR model); empty: not written.
  std::string artifact_path;
  bool validate = false;  // the saved artifact against the original (EquivalenceChecker)
  // The advise stage: with the original layout, also measure what the stacked layout would give.
  bool advise_layout = true;
};

// PipelineStage: where a pipeline stopped without a decision (the table above).
enum class PipelineStage {
  kLoad, kReuse, kPlace, kGate, kRewrite, kCount, kUntimed, kSave, kValidate, kDecide
};

// PipelineStageName: the stage's word ("load", "gate", ...), in messages and the report.
absl::string_view PipelineStageName(PipelineStage stage);

// LoadedModel (load stage): the model as loaded, its sample inputs, and what is known before any
// rewrite.
struct LoadedModel {
  Model model;
  const ModelFormat* format = nullptr;           // the model's
  const ModelFormat* artifact_format = nullptr;  // the artifact's (null: no artifact)
  std::shared_ptr<torch::jit::Graph> original_graph;  // a copy, before any pass
  bool has_inputs = false;
  std::vector<c10::IValue> inputs;   // forward's arguments
  std::vector<c10::IValue> samples;  // self (for a module) followed by `inputs`
  std::string source_sha256, inputs_sha256;
  std::string architecture_fingerprint;
  OpCounts ops;  // aten ops of the original (-1: not counted)
};

// Reuse (reuse stage): an earlier version's decision, where it holds.
struct Reuse {
  std::optional<int64_t> reused_from;     // the version whose decision is reused
  std::string note;                       // why it was or was not (report.json "decision_reuse")
  std::shared_ptr<const RuleSet> rules;   // the rules it applied; null: not reused
};

// Placement (place stage): where the model is validated and timed.
struct Placement {
  Device device = Device::kCpu;
  bool gate = false;        // the gate runs
  bool timed = false;       // a timed verdict on the validated artifact (CUDA)
  std::string device_note;  // why the model is validated on the CPU instead
  VerdictMargins margins;   // the request's, with the device share in bytes of this device
};

// UntimedAblation (untimed stage): the rewrite kept instead of the one with every rule that
// fired, and what it left out.
struct UntimedAblation {
  Model model;
  std::vector<c10::IValue> samples;
  OptimizeReport report;
  OpCounts ops;
  std::vector<std::string> dropped;
  int64_t first_launches = -1;  // the launches of the rewrite with every rule that fired
};

// Validation (validate stage): the checker's report and how its steps were timed.
struct Validation {
  CheckReport check;
  StepTiming timing = StepTiming::kInterpreter;
  // Where the original's step figures came from a reused decision's version instead of a
  // timing here (ReusableDecision::reference_step_ms).
  std::optional<int64_t> reference_from_version;
  // Where they came from the gate's last timing of the original in this job (GateSelection::
  // last_original_step_ms): the original is not timed again here.
  bool reference_from_gate = false;
  // Why the original was timed here after all, alternated with the artifact (empty: it was not,
  // or it always was): the carried timing could not stand in.
  std::string reference_retimed;
};

// kStackedLayoutSetting: the sentier.json line that publishes a model in the stacked layout.
inline constexpr char kStackedLayoutSetting[] = R"({"param_layout": "stacked"})";

// StackedLayoutAdvice (advise stage): what the stacked parameter layout would give a model
// published in the original layout (the same rules, every one; nothing of it is published).
struct StackedLayoutAdvice {
  int64_t stacked_parameters = 0;  // the stacks it would store
  OpCounts ops;                    // aten ops and kernel launches of its rewrite
  // On a timed device (CUDA): its judged step (training step; forward in inference mode) and the
  // original's, timed alternated, and the peaks; -1 where not timed.
  double step_ms = -1.0, original_step_ms = -1.0;
  int64_t peak_bytes = -1, original_peak_bytes = -1;
  StepTiming timing = StepTiming::kInterpreter;
  std::string timing_error;  // why it could not be timed, where it was to be
};

// StackedLayoutAdviceText: one sentence for the log and the tools: what it would give against the
// original's counts, and the setting that publishes it.
std::string StackedLayoutAdviceText(const StackedLayoutAdvice& advice, const OpCounts& original);

// param_layout auto publishes the stacked layout where its gain over the model is at least this
// many times the original layout's (advise.cc): renamed parameters for a few percent are not
// worth it.
inline constexpr double kAutoLayoutMinGain = 1.1;

// LayoutChoice (param_layout auto, advise.cc): the layout chosen and why, with what each layout
// decided in the job gave.
struct LayoutChoice {
  struct Side {
    bool decided = false;     // this layout was decided in this job
    std::string status;       // its outcome's status (optimized, unchanged, rejected)
    double gain = -1.0;       // over the original model (-1: none: rejected)
    std::string measure;      // what the gain measures (timed judged step, or kernel launches)
  };
  ParameterLayout chosen = ParameterLayout::kOriginal;
  std::string why;
  Side original, stacked;
};

// Decision (decide stage): the status, the clause that decided and the reason.
struct Decision {
  ReportStatus status = ReportStatus::kRejected;
  DecisionClause clause = DecisionClause::kFailed;
  std::string reason;
  std::string memory_hint;                // appended to the reason (MemoryHint)
  std::optional<MemoryJudgement> memory;  // the memory policy's judgement of the deciding figures
};

// Outcome: what every stage found, and the decision; assembled from the stages' results in one
// place (pipeline.cc's RunStages, and ApplyDecision / ApplyFailure of decision.h).
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
  std::optional<GateSelection> selection;
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
  std::optional<StackedLayoutAdvice> stacked_layout;  // the advise stage's, where it applied
  // Asked for param_layout auto (advise.cc): the layout this outcome's artifact has and why
  // (report.json layout_choice); unset where a layout was asked for.
  std::optional<LayoutChoice> layout_choice;
  int64_t rewrites = 0;
  std::string artifact_sha256;
  std::map<std::string, double> timings_ms;  // load, select (the gate), optimize, save, validate
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PIPELINE_STAGES_H_
