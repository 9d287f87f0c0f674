// decision.cc — the decide stage and the wording of every reason (see the header).
#include "runtime/pipeline/decision.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace sentier {
namespace {

constexpr char kKeptOriginal[] = ", so the artifact is a copy of the original model.";

double MiB(int64_t bytes) { return bytes / 1048576.0; }

// The step whose figures decide: the training step unless only the forward is judged.
bool JudgesTrainingStep(ValidationMode mode) { return mode != ValidationMode::kInference; }
const char* StepName(ValidationMode mode) { return JudgesTrainingStep(mode) ? "training step" : "forward"; }

// Settle: the decision's status, clause and reason (the memory hint appended).
Decision Settle(ReportStatus status, DecisionClause clause, std::string reason, Decision d) {
  d.status = status;
  d.clause = clause;
  d.reason = std::move(reason) + d.memory_hint;
  return d;
}

// GateReason: why the gate kept no rule (`sel.faster` is false).
std::pair<DecisionClause, std::string> GateReason(const PipelineRequest& req, const VerdictMargins& margins,
                                                  const GateSelection& sel, absl::string_view device) {
  const std::string figures = absl::StrFormat(
      "best %.3f ms vs %.3f ms original, peak %.1f vs %.1f MiB per %s on %s", sel.optimized_ms,
      sel.original_ms, MiB(sel.optimized_peak_bytes), MiB(sel.original_peak_bytes), StepName(req.options.mode), device);
  if (!sel.executor_stall.empty()) {
    return {DecisionClause::kGateExecutorStall,
            absl::StrCat("The optimized model does not run as users run it: ", sel.executor_stall,
                         kKeptOriginal)};
  }
  if (!sel.confirmed) {
    return {DecisionClause::kGateNotConfirmed,
            absl::StrFormat("The selection's gain was not confirmed when timed again (%.3f ms vs %.3f ms "
                            "original; first %s)%s",
                            sel.confirm_ms, sel.confirm_original_ms, figures, kKeptOriginal)};
  }
  if (sel.nothing_fires_within_memory) {
    return {DecisionClause::kGateOverMemory,
            absl::StrFormat("Every set of rules that changes the model needed more peak memory on %s than "
                            "the memory policy (%s) allows (%s)%s",
                            device, MemoryPolicyName(margins), sel.log.empty() ? figures : sel.log.front(),
                            kKeptOriginal)};
  }
  return {DecisionClause::kGateNothingPays,
          absl::StrCat("No set of rules made the model faster on ", device,
                       sel.within_memory ? "" : " within the peak-memory bound", " (", figures,
                       sel.log.empty() ? "" : absl::StrCat("; ", sel.log.back()), ")", kKeptOriginal)};
}

std::string NoRuleReason(const Outcome& out) {
  const bool no_sizes = out.loaded && !out.loaded->has_inputs && out.loaded->model.is_module;
  return absl::StrCat("The rules found nothing to rewrite: no rule applied (0 rewrites",
                      no_sizes ? "; without --inputs no sizes are known, and most rules need them: "
                                 "splits by size, batching"
                               : "",
                      ")", kKeptOriginal);
}

// JudgeTimed: the never-slower verdict and the memory policy on the validated artifact's timed
// step.
Decision JudgeTimed(const PipelineRequest& req, const Outcome& out, const std::string& optimized_reason,
                    Decision d) {
  const CheckReport& c = out.validation->check;
  const VerdictMargins& margins = out.placement.margins;
  const StepFigures ref = JudgedStep(req.options.mode, c, /*original=*/true);
  const StepFigures cand = JudgedStep(req.options.mode, c, /*original=*/false);
  d.memory = JudgeMemory(ref, cand, margins);
  switch (Judge(ref, cand, margins)) {
    case Verdict::kFaster:
      return Settle(ReportStatus::kOptimized, DecisionClause::kOptimized, optimized_reason, d);
    case Verdict::kNotFaster:
      return Settle(ReportStatus::kUnchanged, DecisionClause::kTimedNotFaster,
                    absl::StrFormat("The optimized model was not faster on the GPU (%.3f ms vs %.3f ms "
                                    "per %s, %.0f%% needed), so the artifact is the original.",
                                    cand.ms, ref.ms, StepName(req.options.mode), margins.speed * 100),
                    d);
    case Verdict::kMoreMemory:
      return Settle(ReportStatus::kUnchanged, DecisionClause::kTimedMoreMemory,
                    absl::StrFormat("The optimized model needed more peak GPU memory than the memory "
                                    "policy allows (%.1f MiB vs %.1f MiB per %s at %.3f vs %.3f ms; "
                                    "at most %.1f MiB by its %s clause), so the artifact is the original.",
                                    MiB(cand.peak_bytes), MiB(ref.peak_bytes), StepName(req.options.mode), cand.ms,
                                    ref.ms, MiB(d.memory->allowed_bytes),
                                    MemoryClauseName(d.memory->clause)),
                    d);
  }
  return d;
}

// GateMemory: the memory policy's judgement of the gate's selection (its judged step).
MemoryJudgement GateMemory(const GateSelection& sel, const VerdictMargins& margins) {
  return JudgeMemory({sel.OriginalStepMs(), sel.original_peak_bytes},
                     {sel.OptimizedStepMs(), sel.optimized_peak_bytes}, margins);
}

}  // namespace

StepFigures JudgedStep(ValidationMode mode, const CheckReport& c, bool original) {
  if (JudgesTrainingStep(mode)) {
    return original ? StepFigures{c.reference_train_ms, c.reference_train_peak_bytes}
                    : StepFigures{c.candidate_train_ms, c.candidate_train_peak_bytes};
  }
  return original ? StepFigures{c.reference_ms, c.reference_peak_bytes} : StepFigures{c.candidate_ms, c.candidate_peak_bytes};
}

std::string WhyTimeTheOriginalAgain(const PipelineRequest& req, const CheckReport& carried,
                                    const VerdictMargins& margins) {
  if (!carried.timing_fallback.empty()) return "the artifact was timed another way than the original then";
  const double artifact_ms = JudgedStep(req.options.mode, carried, false).ms;
  const double original_ms = JudgedStep(req.options.mode, carried, true).ms;
  if (FasterThan(artifact_ms, original_ms, margins)) return "";
  return absl::StrFormat("the artifact's %s timed %.3f ms against the carried %.3f ms of the original",
                         StepName(req.options.mode), artifact_ms, original_ms);
}

std::string MemoryHint(const PipelineRequest& req, const Outcome& out) {
  if (!out.selection || out.selection->margin_for_all_rules < 0) return "";
  const GateSelection& sel = *out.selection;
  std::string forward;
  if (req.options.mode == ValidationMode::kBoth && sel.all_rules_forward_peak_bytes >= 0) {
    forward = absl::StrFormat("; forward peak %.1f vs %.1f MiB", MiB(sel.all_rules_forward_peak_bytes),
                              MiB(sel.original_forward_peak_bytes));
  }
  return absl::StrFormat(
      " With every rule, a step took %.3f ms at a peak of %.1f MiB (original %.3f ms, %.1f MiB%s): "
      "%s would allow it.",
      sel.all_rules_ms, MiB(sel.all_rules_peak_bytes), sel.original_ms, MiB(sel.original_peak_bytes),
      forward, MemoryMarginSetting(sel.margin_for_all_rules));
}

// ReusedReason: an earlier decision's reason, without its own "Decision reused ..." prefix.
std::string ReusedReason(const std::string& reason) {
  constexpr absl::string_view kPrefix = "Decision reused from version ";
  if (!absl::StartsWith(reason, kPrefix)) return reason;
  const size_t colon = reason.find(": ");
  return colon == std::string::npos ? reason : reason.substr(colon + 2);
}

Decision MakeDecision(const PipelineRequest& req, const Outcome& out) {
  Decision d = MakeFreshDecision(req, out);
  if (!out.reused_from) return d;
  const std::string prefix = absl::StrCat("Decision reused from version ", *out.reused_from, ": ");
  if (out.rewrites == 0 && req.reuse->status != ReportStatus::kOptimized) {
    d.clause = DecisionClause::kReusedUnchanged;
    d.reason = prefix + ReusedReason(req.reuse->reason);
  } else {
    d.reason = prefix + d.reason;
  }
  return d;
}

void ApplyDecision(const Decision& d, Outcome* out) {
  out->status = d.status;
  out->clause = d.clause;
  out->reason = d.reason;
  out->memory_hint = d.memory_hint;
  out->memory = d.memory;
}

void Decide(const PipelineRequest& req, Outcome* out) { ApplyDecision(MakeDecision(req, *out), out); }

void DecideFresh(const PipelineRequest& req, Outcome* out) { ApplyDecision(MakeFreshDecision(req, *out), out); }

// LeftOutUntimed: " Left out: a, b (with every rule that fired the graph made N kernel launches
// per training step, the original M, this graph K)." where the untimed ablation left rules out.
std::string LeftOutUntimed(const Outcome& out) {
  if (out.untimed_dropped.empty()) return "";
  return absl::StrCat(" Left out: ", absl::StrJoin(out.untimed_dropped, ", "),
                      " (with every rule that fired the graph made ", out.untimed_dropped_launches,
                      " kernel launches per ", out.ops_after.launches_training_step >= 0 ? "training step" : "forward",
                      ", the original ", UntimedLaunches(out.loaded->ops), ", this graph ",
                      UntimedLaunches(out.ops_after), ").");
}

Decision MakeFreshDecision(const PipelineRequest& req, const Outcome& out) {
  Decision d;
  d.memory_hint = MemoryHint(req, out);
  if (out.selection) d.memory = GateMemory(*out.selection, out.placement.margins);
  const std::string device(DeviceName(out.placement.device));
  if (out.rewrites == 0) {
    if (out.selection && !out.selection->faster && !out.selection->none_fired) {
      auto [clause, reason] = GateReason(req, out.placement.margins, *out.selection, device);
      return Settle(ReportStatus::kUnchanged, clause, reason, d);
    }
    return Settle(ReportStatus::kUnchanged, DecisionClause::kNoRuleApplied, NoRuleReason(out), d);
  }
  if (!out.executor_stall.empty()) {
    return Settle(ReportStatus::kUnchanged, DecisionClause::kGateExecutorStall,
                  absl::StrCat("The optimized model does not run as users run it: ", out.executor_stall,
                               kKeptOriginal),
                  d);
  }
  const std::string optimized =
      out.validation
          ? absl::StrCat(out.rewrites, " rewrites applied and validated on ", device, " (",
                         ValidationModeName(req.options.mode), ").")
          : absl::StrCat(out.rewrites, " rewrites applied", out.selection ? " (faster when timed)" : "", ".");
  if (out.validation && out.placement.timed) return JudgeTimed(req, out, optimized, d);
  std::string growth;
  if (!out.selection && !out.placement.timed && !req.options.allow_growth &&
      UntimedGrowth(out.loaded->ops, out.ops_after, &growth)) {
    return Settle(ReportStatus::kUnchanged, DecisionClause::kUntimedGrowth,
                  absl::StrCat("The optimized graph makes ", growth,
                               " and nothing was timed on ", device,
                               " to show that it is faster (the gate would: sentier_opt --gate=on, "
                               "sentierd on CUDA; sentier_opt --allow_growth writes it anyway)",
                               kKeptOriginal),
                  d);
  }
  return Settle(ReportStatus::kOptimized, DecisionClause::kOptimized, optimized + LeftOutUntimed(out), d);
}

void Fail(PipelineStage stage, absl::string_view what, const absl::Status& status, bool output,
          Outcome* out) {
  out->failed_stage = stage;
  out->output_failed = output;
  out->error = status;
  out->status = ReportStatus::kRejected;
  out->clause = DecisionClause::kFailed;
  out->reason = absl::StrCat(what, ": ", status.message());
}

}  // namespace sentier
