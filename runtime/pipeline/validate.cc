// validate.cc — the validate stage of the pipeline (stages.h): the saved
// artifact, loaded back through its format as users load it, against the original (outputs and
// every gradient, EquivalenceChecker), timed on CUDA. Where the gate in this job, or a reused
// decision's version, timed the original already, that timing is carried and the artifact is
// timed alone, unless the artifact's timing contradicts the verdict the carried one came with.
#include "runtime/pipeline/decision.h"
#include "runtime/pipeline/internal.h"

#include "absl/strings/str_cat.h"

namespace sentier {
namespace {

// CarriedReference: the original's judged step (training step; forward in inference mode) as
// timed already, so that validation times the artifact alone against it: by the gate in this
// job (its last timing of the original: the same samples, device and timing), or by a
// reused decision's version (the same architecture runs the same kernels at the same sizes).
struct CarriedReference {
  double step_ms = -1.0;
  int64_t peak_bytes = -1;
  std::optional<int64_t> version;  // the reused decision's version; none: this job's gate
};

std::optional<CarriedReference> ReferenceToCarry(const PipelineRequest& req, const std::optional<GateSelection>& gate,
                                                 std::optional<int64_t> reused_from, const CheckOptions& check) {
  if (!check.time || check.device != Device::kCuda) return std::nullopt;
  if (gate && gate->faster && gate->last_original_step_ms > 0 && gate->last_original_step_peak_bytes >= 0 &&
      gate->timing == check.timing) {
    return CarriedReference{gate->last_original_step_ms, gate->last_original_step_peak_bytes, std::nullopt};
  }
  if (reused_from && req.reuse && req.reuse->reference_step_ms > 0 &&
      req.reuse->reference_step_peak_bytes >= 0 && req.reuse->reference_timing == StepTimingName(check.timing)) {
    return CarriedReference{req.reuse->reference_step_ms, req.reuse->reference_step_peak_bytes, req.reuse->version};
  }
  return std::nullopt;
}

CheckOptions ValidationOptions(const PipelineRequest& req, const Placement& placement,
                               const std::optional<GateSelection>& gate, bool reused) {
  CheckOptions check;
  check.device = placement.device;
  check.inference = req.options.mode != ValidationMode::kTraining;
  check.training = IsTrainingStep(req.options.mode);
  // A reused decision is validated on the samples and at twice their batch (one trial); a fresh
  // one on a random draw as well.
  check.trials = reused ? 1 : req.options.validation_trials;
  check.time = placement.timed;
  check.timing = gate ? gate->timing : req.options.timing;
  check.executor_stall_s = req.options.executor_stall_s;
  return check;
}

// CarryReferenceStep: the carried figures of the original's judged step, as if timed here.
void CarryReferenceStep(const PipelineRequest& req, const CarriedReference& carried, CheckReport* c) {
  if (IsTrainingStep(req.options.mode)) {
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

// ModulePair: the original and the artifact as the checker runs them.
struct ModulePair {
  torch::jit::Module reference, candidate;
};

// LoadPair: both loaded afresh through their formats (the artifact as users load it);
// FailedPrecondition "the artifact does not load: ..." otherwise.
absl::StatusOr<ModulePair> LoadPair(const PipelineRequest& req, const LoadedModel& loaded) {
  auto reference = loaded.format->Load(req.model_path);
  auto candidate = loaded.artifact_format->Load(req.artifact_path);
  if (!reference.ok() || !candidate.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the artifact does not load: ", (candidate.ok() ? reference : candidate).status().message()));
  }
  auto reference_module = loaded.format->Runnable(*reference);
  auto candidate_module = loaded.artifact_format->Runnable(*candidate);
  if (!reference_module.ok() || !candidate_module.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the artifact does not run: ",
        (candidate_module.ok() ? reference_module : candidate_module).status().message()));
  }
  return ModulePair{*reference_module, *candidate_module};
}

}  // namespace

// Validate: the saved artifact, loaded back as users load it, against the original: outputs and
// the gradients of every input, parameter and buffer, on the placement's device.
absl::StatusOr<Validation> Validate(const PipelineRequest& req, const LoadedModel& loaded,
                                    const Placement& placement, const std::optional<GateSelection>& gate,
                                    std::optional<int64_t> reused_from) {
  auto pair = LoadPair(req, loaded);
  if (!pair.ok()) return pair.status();
  CheckOptions options = ValidationOptions(req, placement, gate, reused_from.has_value());
  options.batch_x2 = !loaded.format->StaticShapes();
  std::optional<CarriedReference> carried = ReferenceToCarry(req, gate, reused_from, options);
  options.time_reference = !carried.has_value();
  auto checked = EquivalenceChecker(options).Check(pair->reference, pair->candidate, loaded.inputs);
  if (!checked.ok()) return checked.status();
  if (!checked->equivalent) return absl::InvalidArgumentError(checked->first_failure);
  // Time both here, alternated, where the carried timing cannot stand in: the artifact was timed
  // another way than the original was then, or its timing contradicts the verdict the original's
  // carried timing came with (two timings of one graph taken apart can differ by 1.3x and more;
  // a contradiction costs this one more timing, an agreement none).
  std::string retimed;
  if (carried) {
    if (checked->timing_fallback.empty()) CarryReferenceStep(req, *carried, &*checked);
    retimed = WhyTimeTheOriginalAgain(req, *checked, placement.margins);
  }
  if (!retimed.empty()) {
    options.timing_only = true;
    options.time_reference = true;
    auto timed = EquivalenceChecker(options).Check(pair->reference, pair->candidate, loaded.inputs);
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

}  // namespace sentier
