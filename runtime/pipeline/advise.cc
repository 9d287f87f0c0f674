// advise.cc — the advise stage of the pipeline (stages.h): where the original parameter layout
// was asked for (the default: a drop-in by name), what the stacked layout would give the model's
// owner. The original is loaded afresh, rewritten with the same rules in the stacked layout
// (passes/stacked_parameters.h) and counted: kernel launches per training step (CPU proxy,
// graph_runner.h); on a timed device the stacked module and the original are also timed, with the
// validation's timing, alternated. Nothing is published from it: the report, the job's log line
// and sentierd's /metrics say what it would give and the one-line sentier.json setting that
// publishes it (checkpoints convert with sentier_state). A model without parameters the batching
// rules can store stacked gets no advice.
//
// param_layout "auto" acts on it (OptimizeInAutoLayout): the version is decided in the original
// layout; where the advice says the stacked layout would give at least kAutoLayoutMinGain times
// the original layout's gain over the model, it is decided again in the stacked layout (the whole
// pipeline: gate, validation, decision) and the stacked artifact is published when it was
// published optimized with that margin. Gains compare like with like: on CUDA each validation's
// timed speed-up of the judged step, else kernel launches per judged step (original over
// artifact). A version whose earlier version's decision holds (same architecture, rules, ...) is
// published in that version's layout without a second decision. The report's param_layout is the
// chosen layout and layout_choice says why; the stacked layout renames parameters (checkpoints
// convert with sentier_state), which the owner accepts by asking for auto.
#include "runtime/pipeline/internal.h"

#include <chrono>
#include <filesystem>
#include <initializer_list>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/pipeline/decision.h"
#include "runtime/pipeline/pipeline.h"

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
  const StepFigures original_step = JudgedStep(req.options.mode, *timed, /*original=*/true);
  const StepFigures stacked_step = JudgedStep(req.options.mode, *timed, /*original=*/false);
  advice->original_step_ms = original_step.ms;
  advice->step_ms = stacked_step.ms;
  advice->original_peak_bytes = original_step.peak_bytes;
  advice->peak_bytes = stacked_step.peak_bytes;
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

namespace {

using Side = LayoutChoice::Side;

// A decided layout: its outcome, where its artifact was written, and the job's time on it.
struct Decided {
  Outcome out;
  std::string path;
  double ms = 0.0;
};

Decided DecideIn(const PipelineRequest& req, ParameterLayout layout, const std::string& path, bool advise) {
  PipelineRequest in = req;
  in.options.param_layout = layout;
  in.artifact_path = path;
  in.advise_layout = advise;
  auto t0 = std::chrono::steady_clock::now();
  Decided d{OptimizeModel(in), path};
  d.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

double Ratio(double before, double after) { return before > 0 && after > 0 ? before / after : -1.0; }

// TimedGain / LaunchGain: an outcome's artifact over the original model (1 where unchanged).
double TimedGain(const Outcome& out, ValidationMode mode) {
  if (out.status == ReportStatus::kUnchanged) return 1.0;
  if (out.status != ReportStatus::kOptimized || !out.validation) return -1.0;
  const CheckReport& c = out.validation->check;
  return Ratio(JudgedStep(mode, c, /*original=*/true).ms, JudgedStep(mode, c, /*original=*/false).ms);
}

// LaunchGain: by the launch count the untimed decision reads (verdict.h UntimedLaunches).
double LaunchGain(const Outcome& out) {
  if (out.status == ReportStatus::kUnchanged) return 1.0;
  if (out.status != ReportStatus::kOptimized || !out.loaded) return -1.0;
  return Ratio(static_cast<double>(UntimedLaunches(out.loaded->ops)), static_cast<double>(UntimedLaunches(out.ops_after)));
}

constexpr char kTimed[] = "timed judged step (the validation's speed-up)";
constexpr char kLaunches[] = "kernel launches per judged step, original over artifact";

// ByTime: whether the gains compare timed: every decided outcome published optimized was timed
// (an unchanged one gains 1 in either measure); else they compare by kernel launches.
bool ByTime(std::initializer_list<const Decided*> decided, ValidationMode mode) {
  bool timed = false;
  for (const Decided* d : decided) {
    if (d == nullptr || d->out.status != ReportStatus::kOptimized) continue;
    if (TimedGain(d->out, mode) <= 0) return false;
    timed = true;
  }
  return timed;
}

// Sides: both layouts' gains, in one measure.
std::pair<Side, Side> Sides(const Decided* original, const Decided* stacked, ValidationMode mode) {
  const bool by_time = ByTime({original, stacked}, mode);
  auto side = [&](const Decided* d) {
    Side s;
    if (d == nullptr) return s;
    s.decided = true;
    s.status = std::string(ReportStatusName(d->out.status));
    s.gain = by_time ? TimedGain(d->out, mode) : LaunchGain(d->out);
    s.measure = by_time ? kTimed : kLaunches;
    return s;
  };
  return {side(original), side(stacked)};
}

// AdvisedGain: what the advice says the stacked layout would give over the original model.
double AdvisedGain(const StackedLayoutAdvice& a, const LoadedModel& original) {
  if (a.step_ms > 0 && a.original_step_ms > 0) return a.original_step_ms / a.step_ms;
  return Ratio(static_cast<double>(UntimedLaunches(original.ops)), static_cast<double>(UntimedLaunches(a.ops)));
}

// Chosen: `winner` as the job's outcome, its artifact at the requested path, the other's gone.
Outcome Chosen(const PipelineRequest& req, Decided winner, const Decided* loser, LayoutChoice choice) {
  std::error_code ec;
  if (loser != nullptr && loser->path != req.artifact_path) std::filesystem::remove(loser->path, ec);
  if (winner.path != req.artifact_path) {
    std::filesystem::rename(winner.path, req.artifact_path, ec);
    if (ec) {
      std::filesystem::remove(winner.path, ec);
      winner.out.status = ReportStatus::kRejected;
      winner.out.output_failed = true;
      winner.out.failed_stage = PipelineStage::kDecide;
      winner.out.error = absl::InternalError(absl::StrCat("cannot move the artifact into place: ", ec.message()));
      winner.out.reason = absl::StrCat("cannot write the output: ", winner.out.error.message());
    }
  }
  winner.out.layout_choice = std::move(choice);
  return std::move(winner.out);
}

// Pick: the stacked layout where it was published optimized with kAutoLayoutMinGain times the
// original layout's gain (or where the original layout's artifact was rejected), else original.
Outcome Pick(const PipelineRequest& req, Decided original, Decided stacked) {
  auto [o, s] = Sides(&original, &stacked, req.options.mode);
  LayoutChoice choice{ParameterLayout::kOriginal, "", o, s};
  const bool stacked_ok = stacked.out.status == ReportStatus::kOptimized && s.gain > 0;
  if (stacked_ok && (original.out.status == ReportStatus::kRejected || s.gain >= kAutoLayoutMinGain * o.gain)) {
    choice.chosen = ParameterLayout::kStacked;
    choice.why = original.out.status == ReportStatus::kRejected
                     ? absl::StrFormat("stacked: %.2fx, where the original layout's artifact was rejected", s.gain)
                     : absl::StrFormat("stacked: %.2fx over the model against the original layout's %.2fx (%s)",
                                       s.gain, o.gain, s.measure);
    Outcome out = Chosen(req, std::move(stacked), &original, std::move(choice));
    out.timings_ms["auto_layout.original"] = original.ms;
    return out;
  }
  choice.why = !stacked_ok ? absl::StrCat("original: the stacked layout's artifact was not published optimized (",
                                          s.status, ": ", stacked.out.reason, ")")
                           : absl::StrFormat("original: the stacked layout's %.2fx over the model is not %.1fx the "
                                             "original layout's %.2fx (%s)",
                                             s.gain, kAutoLayoutMinGain, o.gain, s.measure);
  Outcome out = Chosen(req, std::move(original), &stacked, std::move(choice));
  out.timings_ms["auto_layout.stacked"] = stacked.ms;
  return out;
}

// Beside: a path next to the requested artifact (the same directory, the same extension, so the
// same format writes it and a rename moves it into place).
std::string Beside(const std::string& path, const char* prefix) {
  std::filesystem::path p(path);
  return (p.parent_path() / absl::StrCat(prefix, p.filename().string())).string();
}

}  // namespace

Outcome OptimizeInAutoLayout(const PipelineRequest& req) {
  const std::string other_path = Beside(req.artifact_path, ".auto-layout-");
  // An earlier version published stacked whose decision holds: the same layout, reused.
  std::optional<Decided> stacked;
  if (req.reuse && req.reuse->param_layout == ParameterLayoutName(ParameterLayout::kStacked)) {
    stacked = DecideIn(req, ParameterLayout::kStacked, req.artifact_path, /*advise=*/false);
    if (stacked->out.reused_from) {
      LayoutChoice choice{ParameterLayout::kStacked,
                          absl::StrCat("stacked: the layout of version ", *stacked->out.reused_from,
                                       ", whose decision this version reuses")};
      return Chosen(req, *std::move(stacked), nullptr, std::move(choice));
    }
    if (stacked->out.output_failed) return std::move(stacked->out);
    Decided original = DecideIn(req, ParameterLayout::kOriginal, other_path, /*advise=*/false);
    return Pick(req, std::move(original), *std::move(stacked));
  }
  Decided original = DecideIn(req, ParameterLayout::kOriginal, req.artifact_path, /*advise=*/true);
  const Outcome& o = original.out;
  LayoutChoice choice{ParameterLayout::kOriginal, ""};
  if (o.reused_from) {
    choice.why = absl::StrCat("original: the layout of version ", *o.reused_from, ", whose decision this version reuses");
    return Chosen(req, std::move(original), nullptr, std::move(choice));
  }
  if (o.output_failed) return std::move(original.out);
  choice.original = Sides(&original, nullptr, req.options.mode).first;
  if (!o.stacked_layout || !o.loaded) {
    choice.why = o.status == ReportStatus::kRejected
                     ? "original: rejected in the original layout, where the stacked layout is not advised"
                     : "original: the batching rules store nothing stacked in this model";
    return Chosen(req, std::move(original), nullptr, std::move(choice));
  }
  const double advised = AdvisedGain(*o.stacked_layout, *o.loaded);
  const double own = o.status == ReportStatus::kRejected ? -1.0 : std::max(choice.original.gain, 1.0);
  if (own > 0 && advised < kAutoLayoutMinGain * own) {
    choice.why = absl::StrFormat("original: the stacked layout would give %.2fx over the model (advice), not %.1fx "
                                 "the original layout's %.2fx",
                                 advised, kAutoLayoutMinGain, own);
    return Chosen(req, std::move(original), nullptr, std::move(choice));
  }
  Decided as_stacked = DecideIn(req, ParameterLayout::kStacked, other_path, /*advise=*/false);
  return Pick(req, std::move(original), std::move(as_stacked));
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
