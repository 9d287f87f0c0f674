// gate.cc — greedy rule ablation driven by measured step times (see the header).
#include "runtime/gate.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "passes/optimizer.h"
#include "runtime/equivalence_checker.h"
#include "runtime/model_format.h"

namespace sentier {
namespace {

using Trial = TrialFigures;

// Optimizes a fresh copy with `rules` and times it; the original is timed too when
// `original_trial` is given (once per selection: its figures do not depend on the rules).
absl::StatusOr<Trial> Measure(const ModelFormat& format, const std::string& model_path,
                              const torch::jit::Module& original, const std::vector<c10::IValue>& samples,
                              const RuleSet& rules, const GateRunOptions& options, Trial* original_trial) {
  auto model = format.Load(model_path);
  if (!model.ok()) return model.status();
  std::vector<c10::IValue> with_self = {model->module._ivalue()};
  with_self.insert(with_self.end(), samples.begin(), samples.end());
  OptimizeOptions opts = options.optimize;
  opts.self = c10::IValue();  // this trial's module, from with_self[0]
  opts.sample_inputs = &with_self;
  opts.after_pass = nullptr;
  auto report = OptimizeGraph(model->graph, rules, opts);
  if (!report.ok()) return report.status();
  CheckOptions check;
  check.device = options.device;
  check.trials = 1;
  check.time = true;
  check.time_reference = original_trial != nullptr;
  check.timing_only = !options.verify_each;
  check.inference = !options.training;
  check.training = options.training;
  check.timing = options.timing;
  check.executor_stall_s = options.executor_stall_s;
  auto candidate = format.Runnable(*model);
  if (!candidate.ok()) return candidate.status();
  auto r = EquivalenceChecker(check).Check(original, *candidate, samples);
  if (!r.ok()) return r.status();
  // Executor timing made no progress and the checker timed in the interpreter: this selection's
  // figures would mix the two; the caller starts over in the interpreter.
  if (!r->timing_fallback.empty()) return absl::AbortedError(r->timing_fallback);
  if (!r->equivalent) {
    return absl::InternalError(absl::StrCat("the optimized model is not equivalent: ", r->first_failure));
  }
  auto score = [&](double train_ms, double forward_ms) {
    if (!options.training) return forward_ms;
    return options.inference_too ? train_ms + forward_ms : train_ms;
  };
  Trial t;
  t.ms = score(r->candidate_train_ms, r->candidate_ms);
  t.forward_ms = r->candidate_ms;
  t.peak = options.training ? r->candidate_train_peak_bytes : r->candidate_peak_bytes;
  t.forward_peak = r->candidate_peak_bytes;
  if (original_trial != nullptr) {
    original_trial->ms = score(r->reference_train_ms, r->reference_ms);
    original_trial->forward_ms = r->reference_ms;
    original_trial->peak = options.training ? r->reference_train_peak_bytes : r->reference_peak_bytes;
    original_trial->forward_peak = r->reference_peak_bytes;
  }
  for (const auto& [name, n] : report->stats.applications) {
    if (n > 0) t.fired.push_back(name);
  }
  return t;
}

}  // namespace

absl::StatusOr<GateSelection> RunGate(const std::string& model_path,
                                                       const std::vector<c10::IValue>& samples,
                                                       const RuleSet& rules,
                                                       const GateRunOptions& options) {
  auto format = FormatFor(model_path);
  if (!format.ok()) return format.status();
  return RunGate(**format, model_path, samples, rules, options);
}

absl::StatusOr<GateSelection> RunGate(const ModelFormat& format, const std::string& model_path,
                                                       const std::vector<c10::IValue>& samples,
                                                       const RuleSet& rules, const GateRunOptions& options) {
  auto loaded = format.Load(model_path);
  if (!loaded.ok()) return loaded.status();
  auto original = format.Runnable(*loaded);
  if (!original.ok()) return original.status();
  auto select = [&](const GateRunOptions& opts) {
    return SelectRules(rules, opts, [&](const RuleSet& set, Trial* original_trial) {
      return Measure(format, model_path, *original, samples, set, opts, original_trial);
    });
  };
  GateRunOptions used = options;
  auto sel = select(used);
  std::string fallback;
  if (used.timing == StepTiming::kExecutor && absl::IsAborted(sel.status())) {
    fallback = std::string(sel.status().message());
    used.timing = StepTiming::kInterpreter;
    sel = select(used);
  }
  if (absl::IsUnavailable(sel.status())) {
    // The optimized model's step made no progress under the executor while the original's
    // finished: users running the artifact would wait as long. Nothing is published.
    GateSelection stalled;
    stalled.rules = rules.Only({});
    stalled.executor_stall = std::string(sel.status().message());
    stalled.log.push_back(stalled.executor_stall);
    sel = std::move(stalled);
  }
  if (sel.ok()) {
    sel->stacked_parameters = options.optimize.stacked_parameters;
    sel->timing = used.timing;
    sel->timing_fallback = fallback;
    if (!fallback.empty()) sel->log.insert(sel->log.begin(), absl::StrCat("timing: ", fallback));
  }
  return sel;
}

namespace {

std::string SizeText(int64_t bytes) {
  return bytes < (1 << 20) ? absl::StrFormat("%.1f KiB", bytes / 1024.0)
                           : absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

// One selection, in steps: the baseline (every rule, and the original), the memory bound (group
// rules left out and added back), the ablation for speed, the confirmation, the result.
class RuleSelector {
 public:
  RuleSelector(const RuleSet& rules, const GateRunOptions& options, const TrialMeasurer& measure)
      : rules_(rules), options_(options), measure_(measure) {}

  absl::StatusOr<GateSelection> Select();

 private:
  absl::Status MeasureBaseline();
  absl::Status KeepWithinMemory();
  absl::Status DropSlowerRules();
  void NoteMarginForAllRules();
  void SetResultFigures();
  absl::Status Confirm(const RuleSet& chosen);
  absl::StatusOr<bool> ForwardNotSlower(const RuleSet& chosen, std::vector<std::pair<Trial, Trial>> timings);
  bool DecisiveGain() const;

  // The original's judged step from a timing of it (GateSelection::last_original_step_ms).
  void NoteOriginalStep(const Trial& original) {
    sel_.last_original_step_ms = StepMs(original);
    sel_.last_original_step_peak_bytes = original.peak;
  }

  // The set without `names`, measured; the rules that fire in it are noted in ever_fired_.
  absl::StatusOr<Trial> MeasureWithout(const std::vector<std::string>& names) {
    auto t = measure_(*rules_.Without(names), nullptr);
    if (t.ok()) ever_fired_.insert(t->fired.begin(), t->fired.end());
    return t;
  }
  // Bytes by which a trial's peaks exceed what the memory policy allows (0: within bounds;
  // runtime/verdict.h): the scored step's peak by its time, the forward's by the forward's.
  int64_t Excess(const Trial& t) const {
    int64_t e = JudgeMemory({StepMs(orig_), orig_.peak}, {StepMs(t), t.peak}, options_.margins).excess_bytes;
    if (JudgesForwardMemory(t)) {
      e += JudgeMemory({orig_.forward_ms, orig_.forward_peak}, {t.forward_ms, t.forward_peak}, options_.margins)
               .excess_bytes;
    }
    return e;
  }
  // Whether the forward's peak is judged on its own (training with inference_too). Under the
  // default policy a forward that peaks within the original's training-step peak is not: training
  // this model already holds that much on the device. (8 towers on the H200: the forward's peak
  // 8.0 -> 16.2 MiB, 4% over its time x memory product, under a training step of 26.3 MiB.) A
  // margin or a budget the owner set judges it as before.
  bool JudgesForwardMemory(const Trial& t) const {
    if (!options_.training || !options_.inference_too) return false;
    const VerdictMargins& m = options_.margins;
    const bool default_policy = std::isnan(m.memory) && m.max_step_bytes <= 0;
    return !(default_policy && t.forward_peak >= 0 && t.forward_peak <= orig_.peak);
  }
  // The judged step's time: the training step alone where the forward is in the score.
  double StepMs(const Trial& t) const { return JudgedStepMs(t.ms, t.forward_ms, ForwardInScore()); }
  bool ForwardInScore() const { return options_.training && options_.inference_too; }
  bool Faster(double ms, double than) const { return FasterThan(ms, than, options_.margins); }
  std::string Describe(const Trial& t) const {
    if (options_.training && options_.inference_too) {
      return absl::StrFormat("%.3f ms, peak %s (forward %s)", t.ms, SizeText(t.peak), SizeText(t.forward_peak));
    }
    return absl::StrFormat("%.3f ms, peak %s", t.ms, SizeText(t.peak));
  }

  const RuleSet& rules_;
  const GateRunOptions& options_;
  const TrialMeasurer& measure_;
  GateSelection sel_;
  Trial orig_;       // the original model
  Trial all_rules_;  // every rule
  Trial best_;       // the best set so far: every rule but dropped_
  bool over_memory_ = false;  // every rule together is over the peak-memory bound
  std::vector<std::string> dropped_;
  // Every rule that fired in some measured set: the report names only those among the rules
  // left out (the memory phase leaves out every group rule, most of which match nothing here).
  absl::flat_hash_set<std::string> ever_fired_;
};

// Baseline: every rule, and the original, timed in one call.
absl::Status RuleSelector::MeasureBaseline() {
  auto best = measure_(rules_, &orig_);
  if (!best.ok()) return best.status();
  best_ = *best;
  sel_.original_ms = orig_.ms;
  sel_.original_forward_ms = orig_.forward_ms;
  sel_.original_peak_bytes = orig_.peak;
  sel_.original_forward_peak_bytes = orig_.forward_peak;
  sel_.forward_in_score = ForwardInScore();
  NoteOriginalStep(orig_);
  sel_.log.push_back(absl::StrFormat("all rules: %s (original %s)", Describe(best_), Describe(orig_)));
  sel_.none_fired = best_.fired.empty();
  ever_fired_.insert(best_.fired.begin(), best_.fired.end());
  over_memory_ = Excess(best_) > 0;
  all_rules_ = best_;
  return absl::OkStatus();
}

// Memory first. Over bounds, the batched forms (group rules: they stack inputs and parameters)
// are all left out, then those that fired are added back one at a time, in load order, where
// the set stays within bounds and gets faster. (Peaks do not add up: when two rules each stack
// a large tensor, leaving out either alone does not lower the peak, so removing rules one by
// one can stall. All group rules go, not only those that fired: without one, another can batch
// the same members in a form that needs more memory.)
absl::Status RuleSelector::KeepWithinMemory() {
  std::vector<std::string> batching, fired_batching;
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (!rules_.rule(i).is_group) continue;
    batching.push_back(rules_.rule(i).name);
    if (std::find(best_.fired.begin(), best_.fired.end(), rules_.rule(i).name) != best_.fired.end()) {
      fired_batching.push_back(rules_.rule(i).name);
    }
  }
  auto base = MeasureWithout(batching);
  if (!base.ok()) return base.status();
  sel_.log.push_back(absl::StrFormat("memory: without the batching rules (%s fired; %zu group rules left out): %s",
                                     absl::StrJoin(fired_batching, ", "), batching.size(), Describe(*base)));
  dropped_ = batching;
  best_ = *base;
  for (const std::string& name : fired_batching) {
    if (Excess(best_) > 0) break;  // over even without any batching: nothing to add back
    std::vector<std::string> trial_drop;
    for (const std::string& d : dropped_) {
      if (d != name) trial_drop.push_back(d);
    }
    auto t = MeasureWithout(trial_drop);
    if (!t.ok()) return t.status();
    sel_.log.push_back(absl::StrFormat("memory: with %s back: %s", name, Describe(*t)));
    // Taken back only where it fires (without the others it may have nothing to match; then
    // a faster time is noise) and the set stays within bounds and gets faster.
    const bool fires = std::find(t->fired.begin(), t->fired.end(), name) != t->fired.end();
    if (fires && Excess(*t) == 0 && Faster(t->ms, best_.ms)) {
      dropped_ = trial_drop;
      best_ = *t;
    }
  }
  return absl::OkStatus();
}

// Then speed (ablation): leave out each remaining rule that fired, keeping what is faster and in
// bounds.
absl::Status RuleSelector::DropSlowerRules() {
  for (const std::string& name : std::vector<std::string>(best_.fired)) {
    std::vector<std::string> trial_drop = dropped_;
    trial_drop.push_back(name);
    auto t = MeasureWithout(trial_drop);
    if (!t.ok()) return t.status();
    sel_.log.push_back(absl::StrFormat("without %s: %s (best so far %s)", name, Describe(*t), Describe(best_)));
    if (Faster(t->ms, best_.ms) && Excess(*t) <= Excess(best_)) {
      dropped_ = trial_drop;
      best_ = *t;
    }
  }
  return absl::OkStatus();
}

// Over the memory bound, every rule together was faster than what is kept: the memory margin
// under which all of them would be.
void RuleSelector::NoteMarginForAllRules() {
  double needed = MemoryMarginNeeded(orig_.peak, all_rules_.peak);
  if (JudgesForwardMemory(all_rules_)) {
    needed = std::max(needed, MemoryMarginNeeded(orig_.forward_peak, all_rules_.forward_peak));
  }
  sel_.all_rules_ms = all_rules_.ms;
  sel_.all_rules_peak_bytes = all_rules_.peak;
  sel_.all_rules_forward_peak_bytes = all_rules_.forward_peak;
  sel_.margin_for_all_rules = needed;
  sel_.log.push_back(absl::StrFormat(
      "every rule would be kept with memory_margin %.2f: %s, against %.3f ms kept", needed,
      Describe(all_rules_), best_.ms));
}

// The best set's figures, the rules it leaves out, and whether it is faster within bounds.
void RuleSelector::SetResultFigures() {
  for (const std::string& name : dropped_) {
    if (ever_fired_.contains(name)) sel_.dropped.push_back(name);
  }
  sel_.optimized_ms = best_.ms;
  sel_.optimized_forward_ms = best_.forward_ms;
  sel_.optimized_peak_bytes = best_.peak;
  sel_.optimized_forward_peak_bytes = best_.forward_peak;
  sel_.within_memory = Excess(best_) == 0;
  sel_.faster = Faster(best_.ms, orig_.ms) && !best_.fired.empty();
  if (!sel_.within_memory) {
    sel_.faster = false;  // faster, but needs more memory: not published
    sel_.log.push_back(absl::StrFormat("peak memory higher with the selection: %s vs %s (forward %s vs %s)",
                                       SizeText(best_.peak), SizeText(orig_.peak), SizeText(best_.forward_peak),
                                       SizeText(orig_.forward_peak)));
  }
}

// Confirmation: the selection and the original once more, timed back to back in one call, so
// that a gain that was drift between earlier measurements (another process, clocks) is not
// published. The step must be faster in this timing too, and the forward not slower
// (ForwardNotSlower).
absl::Status RuleSelector::Confirm(const RuleSet& chosen) {
  Trial again_orig;
  auto again = measure_(chosen, &again_orig);
  if (!again.ok()) return again.status();
  sel_.log.push_back(absl::StrFormat("confirmation: selection %.3f ms, original %.3f ms", again->ms,
                                     again_orig.ms));
  sel_.confirm_ms = again->ms;
  sel_.confirm_original_ms = again_orig.ms;
  NoteOriginalStep(again_orig);
  if (!Faster(again->ms, again_orig.ms)) {
    sel_.faster = false;
    sel_.confirmed = false;
    sel_.log.push_back(absl::StrFormat(
        "not confirmed: %.3f vs %.3f ms when timed again, so the original is kept", again->ms, again_orig.ms));
    return absl::OkStatus();
  }
  auto forward_ok = ForwardNotSlower(chosen, {{best_, orig_}, {*again, again_orig}});
  if (!forward_ok.ok()) return forward_ok.status();
  if (!*forward_ok) sel_.faster = false;  // faster to train, slower to serve: not published
  return absl::OkStatus();
}

// ForwardNotSlower (inference_too, where a rule fires: with none the "selection" is the original
// graph, and a slower forward would be noise): the forward's ratio to the original's over the
// timings so far (the one that chose the set, the confirmation), their geometric mean against
// the speed margin. A refusal needs most timings to read slower: where one of the two reads
// slower and the other does not and together they refuse, one more timing of both is taken and
// the median of the three ratios decides (two_tower on the H200: 0.400 vs 0.354 ms, then 0.345
// vs 0.347 ms, 1.061 over both, with its training step 1.41x faster).
absl::StatusOr<bool> RuleSelector::ForwardNotSlower(const RuleSet& chosen,
                                                    std::vector<std::pair<Trial, Trial>> timings) {
  if (!options_.training || !options_.inference_too || best_.fired.empty()) return true;
  const double limit = 1.0 + options_.margins.speed;
  auto ratio = [](const std::pair<Trial, Trial>& t) {
    return t.second.forward_ms > 0 ? t.first.forward_ms / t.second.forward_ms : 1.0;
  };
  const double first = ratio(timings[0]), second = ratio(timings[1]);
  double judged = std::sqrt(first * second);
  std::string over = "over both";
  if (judged > limit && (first > limit) != (second > limit)) {
    Trial third_orig;
    auto third = measure_(chosen, &third_orig);
    if (!third.ok()) return third.status();
    timings.emplace_back(*third, third_orig);
    std::vector<double> ratios = {first, second, ratio(timings[2])};
    std::sort(ratios.begin(), ratios.end());
    judged = ratios[1];
    over = "as the median of three";
  }
  const bool not_slower = judged <= limit;
  std::vector<std::string> pairs;
  for (const auto& [set, original] : timings) {
    pairs.push_back(absl::StrFormat("%.3f vs %.3f ms", set.forward_ms, original.forward_ms));
  }
  if (first > limit || timings.size() > 2 || !not_slower) {
    sel_.log.push_back(absl::StrFormat("forward with the selection: %s (ratio %.3f %s): %s",
                                       absl::StrJoin(pairs, ", then "), judged, over,
                                       not_slower ? "not slower" : "slower"));
  }
  if (!not_slower) {
    // Each timing: the first alone can favour the selection while the two together do not.
    sel_.log.push_back(absl::StrFormat("forward slower with the selection: %s (%.3f of the original's %s)",
                                       absl::StrJoin(pairs, ", then "), judged, over));
  }
  return not_slower;
}

// DecisiveGain: the best set's step, and the forward where it is judged, at most 1/kDecisiveGain
// of the original's in the timing that chose it: no drift seen between two timings accounts for
// that, so it is not timed again (the header says why).
bool RuleSelector::DecisiveGain() const {
  const bool step = best_.ms > 0 && orig_.ms >= best_.ms * kDecisiveGain;
  const bool forward =
      !ForwardInScore() || (best_.forward_ms > 0 && orig_.forward_ms >= best_.forward_ms * kDecisiveGain);
  return step && forward;
}

absl::StatusOr<GateSelection> RuleSelector::Select() {
  absl::Status step = MeasureBaseline();
  if (step.ok() && over_memory_) step = KeepWithinMemory();
  if (!step.ok()) return step;
  sel_.nothing_fires_within_memory = over_memory_ && !sel_.none_fired && best_.fired.empty();
  if (sel_.nothing_fires_within_memory) {
    sel_.log.push_back("no rule fires within the peak-memory bound: the original is kept");
  }
  step = DropSlowerRules();
  if (!step.ok()) return step;
  if (over_memory_ && Faster(all_rules_.ms, best_.ms)) NoteMarginForAllRules();
  std::shared_ptr<const RuleSet> chosen = rules_.Without(dropped_);
  SetResultFigures();
  if (sel_.faster && DecisiveGain()) {
    sel_.log.push_back(absl::StrFormat("not timed again: %.3f vs %.3f ms is a gain of %.1fx (%.1fx or more is decisive)",
                                       best_.ms, orig_.ms, orig_.ms / best_.ms, kDecisiveGain));
  } else if (sel_.faster) {
    step = Confirm(*chosen);
    if (!step.ok()) return step;
  }
  if (sel_.faster) {
    sel_.rules = chosen;
  } else {
    sel_.rules = rules_.Only({});
  }
  return sel_;
}

}  // namespace

absl::StatusOr<GateSelection> SelectRules(const RuleSet& rules, const GateRunOptions& options,
                                          const TrialMeasurer& measure) {
  return RuleSelector(rules, options, measure).Select();
}

}  // namespace sentier
