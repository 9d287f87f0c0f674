// advise.cc — the advise stage of the pipeline (stages.h): where the original parameter layout
// was asked for (the default: a drop-in by name), what the stacked layout would give the model's
// owner. The original is loaded afresh, rewritten with the same rules in the stacked layout
// (passes/stacked_parameters.h) and counted: kernel launches per training step (CPU proxy,
// graph_runner.h); on a timed device the stacked module and the original are also timed, with the
// validation's timing, alternated. Nothing is published from it: the report, the job's log line
// and sentierd's /metrics say what it would give and the one-line sentier.json setting that
// publishes it (checkpoints convert with sentier_state). A model without parameters the batching
// rules can store stacked gets no advice.
#include "runtime/pipeline/internal.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sentier {
namespace {

// TimeStacked: the training step (forward in inference mode) of the original and the stacked
// module, timed alternated on the placement's device.
absl::Status TimeStacked(const PipelineRequest& req, const LoadedModel& original, const torch::jit::Module& stacked,
                         const Placement& placement, StackedLayoutAdvice* advice) {
  auto reference = original.format->Load(req.model_path);
  if (!reference.ok()) return reference.status();
  auto reference_module = original.format->Runnable(*reference);
  if (!reference_module.ok()) return reference_module.status();
  CheckOptions check;
  check.device = placement.device;
  check.trials = 1;
  check.time = true;
  check.timing_only = true;
  check.count_ops = false;
  check.training = IsTrainingStep(req.options.mode);
  check.inference = !check.training;
  check.timing = req.options.timing;
  check.executor_stall_s = req.options.executor_stall_s;
  auto timed = EquivalenceChecker(check).Check(*reference_module, stacked, original.inputs);
  if (!timed.ok()) return timed.status();
  const bool training = check.training;
  advice->original_step_ms = training ? timed->reference_train_ms : timed->reference_ms;
  advice->step_ms = training ? timed->candidate_train_ms : timed->candidate_ms;
  advice->original_peak_bytes = training ? timed->reference_train_peak_bytes : timed->reference_peak_bytes;
  advice->peak_bytes = training ? timed->candidate_train_peak_bytes : timed->candidate_peak_bytes;
  advice->timing = timed->timing;
  return absl::OkStatus();
}

}  // namespace

bool AdviceApplies(const PipelineRequest& req, const LoadedModel& loaded) {
  return req.advise_layout && req.options.param_layout == ParameterLayout::kOriginal && loaded.model.is_module &&
         loaded.has_inputs && loaded.ops.launches_forward >= 0;
}

std::optional<StackedLayoutAdvice> AdviseStackedLayout(const PipelineRequest& req, const LoadedModel& original,
                                                       const std::shared_ptr<const RuleSet>& rules,
                                                       const Placement& placement) {
  auto model = original.format->Load(req.model_path);
  if (!model.ok()) return std::nullopt;
  LoadedModel stacked = original;
  stacked.model = *std::move(model);
  stacked.samples = {stacked.model.module._ivalue()};
  stacked.samples.insert(stacked.samples.end(), stacked.inputs.begin(), stacked.inputs.end());
  PipelineRequest as_stacked = req;
  as_stacked.options.param_layout = ParameterLayout::kStacked;
  as_stacked.after_pass = nullptr;
  auto report = Rewrite(as_stacked, *rules, &stacked);
  if (!report.ok() || report->param_layout.empty()) return std::nullopt;
  auto ops = CountRewrittenOps(stacked);
  if (!ops.ok()) return std::nullopt;
  StackedLayoutAdvice advice;
  advice.stacked_parameters = static_cast<int64_t>(report->param_layout.stacked.size());
  advice.ops = *ops;
  if (placement.timed) {
    absl::Status timed = TimeStacked(req, original, stacked.model.module, placement, &advice);
    if (!timed.ok()) advice.timing_error = std::string(timed.message());
  }
  return advice;
}

std::string StackedLayoutAdviceText(const StackedLayoutAdvice& a, const OpCounts& original) {
  const bool training = a.ops.launches_training_step >= 0 && original.launches_training_step >= 0;
  std::string gain = absl::StrCat(
      "the stacked parameter layout (", a.stacked_parameters, " stored stacks) would make ",
      training ? a.ops.launches_training_step : a.ops.launches_forward, " kernel launches per ",
      training ? "training step" : "forward", " against the original's ",
      training ? original.launches_training_step : original.launches_forward);
  if (a.step_ms > 0 && a.original_step_ms > 0) {
    absl::StrAppend(&gain, absl::StrFormat(" and take %.3f ms per step against %.3f ms (%.2fx; peak %.1f vs %.1f MiB)",
                                           a.step_ms, a.original_step_ms, a.original_step_ms / a.step_ms,
                                           a.peak_bytes / 1048576.0, a.original_peak_bytes / 1048576.0));
  }
  return absl::StrCat(gain, ": ", kStackedLayoutSetting,
                      " in the model's sentier.json publishes it (parameters renamed; checkpoints "
                      "convert with sentier_state --to_original / --from_original)");
}

}  // namespace sentier
