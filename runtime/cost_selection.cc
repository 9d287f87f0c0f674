// cost_selection.cc — greedy rule ablation driven by measured step times (see the header).
#include "runtime/cost_selection.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "passes/optimizer.h"
#include "runtime/equivalence_checker.h"
#include "runtime/model_io.h"

namespace sentier {
namespace {

using Trial = TrialFigures;

// Optimizes a fresh copy with `rules` and times it; the original is timed too when
// `original_trial` is given (once per selection: its figures do not depend on the rules).
absl::StatusOr<Trial> Measure(const std::string& model_path, const Model& original,
                              const std::vector<c10::IValue>& samples, const RuleSet& rules,
                              const CostOptions& options, Trial* original_trial) {
  auto model = LoadModel(model_path);
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
  auto r = EquivalenceChecker(check).Check(original.module, model->module, samples);
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

absl::StatusOr<CostSelection> SelectRulesByMeasurement(const std::string& model_path,
                                                       const std::vector<c10::IValue>& samples,
                                                       const RuleSet& rules,
                                                       const CostOptions& options) {
  auto original = LoadModel(model_path);
  if (!original.ok()) return original.status();
  auto select = [&](const CostOptions& opts) {
    return SelectRules(rules, opts, [&](const RuleSet& set, Trial* original_trial) {
      return Measure(model_path, *original, samples, set, opts, original_trial);
    });
  };
  CostOptions used = options;
  auto sel = select(used);
  std::string fallback;
  if (used.timing == StepTiming::kExecutor && absl::IsAborted(sel.status())) {
    fallback = std::string(sel.status().message());
    used.timing = StepTiming::kInterpreter;
    sel = select(used);
  }
  if (sel.ok()) {
    sel->stacked_parameters = options.optimize.stacked_parameters;
    sel->timing = used.timing;
    sel->timing_fallback = fallback;
    if (!fallback.empty()) sel->log.insert(sel->log.begin(), absl::StrCat("timing: ", fallback));
  }
  return sel;
}

absl::StatusOr<CostSelection> SelectRules(const RuleSet& rules, const CostOptions& options,
                                          const TrialMeasurer& measure) {
  CostSelection sel;
  Trial orig;
  auto best = measure(rules, &orig);
  if (!best.ok()) return best.status();
  double orig_ms = orig.ms;
  sel.original_ms = orig_ms;
  sel.original_forward_ms = orig.forward_ms;
  sel.original_peak_bytes = orig.peak;
  sel.original_forward_peak_bytes = orig.forward_peak;
  auto size = [](int64_t bytes) {
    return bytes < (1 << 20) ? absl::StrFormat("%.1f KiB", bytes / 1024.0)
                             : absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
  };
  // Bytes by which a trial's peaks exceed what the margin allows (0: within bounds).
  auto excess = [&](const Trial& t) -> int64_t {
    int64_t e = ExcessPeakBytes(orig.peak, t.peak, options.margins);
    if (options.training && options.inference_too) {
      e += ExcessPeakBytes(orig.forward_peak, t.forward_peak, options.margins);
    }
    return e;
  };
  auto faster = [&](double ms, double than) { return FasterThan(ms, than, options.margins); };
  auto describe = [&](const Trial& t) {
    if (options.training && options.inference_too) {
      return absl::StrFormat("%.3f ms, peak %s (forward %s)", t.ms, size(t.peak), size(t.forward_peak));
    }
    return absl::StrFormat("%.3f ms, peak %s", t.ms, size(t.peak));
  };
  sel.log.push_back(absl::StrFormat("all rules: %s (original %s)", describe(*best), describe(orig)));
  sel.none_fired = best->fired.empty();
  std::vector<std::string> dropped;
  // Every rule that fired in some measured set: the report names only those among the rules
  // left out (the memory phase leaves out every group rule, most of which match nothing here).
  absl::flat_hash_set<std::string> ever_fired(best->fired.begin(), best->fired.end());
  auto measure_without = [&](const std::vector<std::string>& names) -> absl::StatusOr<Trial> {
    auto t = measure(*rules.Without(names), nullptr);
    if (t.ok()) ever_fired.insert(t->fired.begin(), t->fired.end());
    return t;
  };
  // Memory first. Over bounds, the batched forms (group rules: they stack inputs and parameters)
  // are all left out, then those that fired are added back one at a time, in load order, where
  // the set stays within bounds and gets faster. (Peaks do not add up: when two rules each stack
  // a large tensor, leaving out either alone does not lower the peak, so removing rules one by
  // one can stall. All group rules go, not only those that fired: without one, another can batch
  // the same members in a form that needs more memory.)
  const bool over_memory = excess(*best) > 0;
  const Trial all_rules = *best;
  if (over_memory) {
    std::vector<std::string> batching, fired_batching;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (!rules.rule(i).is_group) continue;
      batching.push_back(rules.rule(i).name);
      if (std::find(best->fired.begin(), best->fired.end(), rules.rule(i).name) != best->fired.end()) {
        fired_batching.push_back(rules.rule(i).name);
      }
    }
    auto base = measure_without(batching);
    if (!base.ok()) return base.status();
    sel.log.push_back(absl::StrFormat("memory: without the batching rules (%s fired; %zu group rules left out): %s",
                                      absl::StrJoin(fired_batching, ", "), batching.size(), describe(*base)));
    dropped = batching;
    best = base;
    for (const std::string& name : fired_batching) {
      if (excess(*best) > 0) break;  // over even without any batching: nothing to add back
      std::vector<std::string> trial_drop;
      for (const std::string& d : dropped) {
        if (d != name) trial_drop.push_back(d);
      }
      auto t = measure_without(trial_drop);
      if (!t.ok()) return t.status();
      sel.log.push_back(absl::StrFormat("memory: with %s back: %s", name, describe(*t)));
      // Taken back only where it fires (without the others it may have nothing to match; then
      // a faster time is noise) and the set stays within bounds and gets faster.
      const bool fires = std::find(t->fired.begin(), t->fired.end(), name) != t->fired.end();
      if (fires && excess(*t) == 0 && faster(t->ms, best->ms)) {
        dropped = trial_drop;
        best = t;
      }
    }
  }
  sel.nothing_fires_within_memory = over_memory && !sel.none_fired && best->fired.empty();
  if (sel.nothing_fires_within_memory) {
    sel.log.push_back("no rule fires within the peak-memory bound: the original is kept");
  }
  // Then speed: leave out each remaining rule that fired, keeping what is faster and in bounds.
  for (const std::string& name : std::vector<std::string>(best->fired)) {
    std::vector<std::string> trial_drop = dropped;
    trial_drop.push_back(name);
    auto t = measure_without(trial_drop);
    if (!t.ok()) return t.status();
    sel.log.push_back(absl::StrFormat("without %s: %s (best so far %s)", name, describe(*t), describe(*best)));
    if (faster(t->ms, best->ms) && excess(*t) <= excess(*best)) {
      dropped = trial_drop;
      best = t;
    }
  }
  if (over_memory && faster(all_rules.ms, best->ms)) {
    double needed = MemoryMarginNeeded(orig.peak, all_rules.peak);
    if (options.training && options.inference_too) {
      needed = std::max(needed, MemoryMarginNeeded(orig.forward_peak, all_rules.forward_peak));
    }
    sel.all_rules_ms = all_rules.ms;
    sel.all_rules_peak_bytes = all_rules.peak;
    sel.all_rules_forward_peak_bytes = all_rules.forward_peak;
    sel.memory_margin_for_all_rules = needed;
    sel.log.push_back(absl::StrFormat(
        "every rule would be kept with memory_margin %.2f: %s, against %.3f ms kept", needed,
        describe(all_rules), best->ms));
  }
  std::shared_ptr<const RuleSet> chosen = rules.Without(dropped);
  for (const std::string& name : dropped) {
    if (ever_fired.contains(name)) sel.dropped.push_back(name);
  }
  sel.optimized_ms = best->ms;
  sel.optimized_forward_ms = best->forward_ms;
  sel.optimized_peak_bytes = best->peak;
  sel.optimized_forward_peak_bytes = best->forward_peak;
  sel.within_memory = excess(*best) == 0;
  sel.faster = faster(best->ms, orig_ms) && !best->fired.empty();
  // The forward (inference_too): its ratio to the original's, from the timing that chose the set
  // and, below, from the confirmation; only where a rule fires (with none, the "selection" is the
  // original graph, and a slower forward would be noise).
  const bool judge_forward = options.training && options.inference_too && !best->fired.empty();
  const double first_forward_ratio =
      judge_forward && orig.forward_ms > 0 ? best->forward_ms / orig.forward_ms : 1.0;
  if (!sel.within_memory) {
    sel.faster = false;  // faster, but needs more memory: not published
    sel.log.push_back(absl::StrFormat("peak memory higher with the selection: %s vs %s (forward %s vs %s)",
                                      size(best->peak), size(orig.peak), size(best->forward_peak),
                                      size(orig.forward_peak)));
  }
  if (sel.faster) {
    // Confirmation: the selection and the original once more, timed back to back in one call,
    // so that a gain that was drift between earlier measurements (another process, clocks) is
    // not published. The step must be faster in this timing too; the forward must not be
    // slower over both timings together.
    Trial again_orig;
    auto again = measure(*chosen, &again_orig);
    if (!again.ok()) return again.status();
    sel.log.push_back(absl::StrFormat("confirmation: selection %.3f ms, original %.3f ms", again->ms,
                                      again_orig.ms));
    sel.confirm_ms = again->ms;
    sel.confirm_original_ms = again_orig.ms;
    bool forward_ok = true;
    double forward_ratio = 1.0;
    if (judge_forward) {
      const double second = again_orig.forward_ms > 0 ? again->forward_ms / again_orig.forward_ms : 1.0;
      const double ratio = std::sqrt(first_forward_ratio * second);
      forward_ratio = ratio;
      forward_ok = ratio <= 1.0 + options.margins.speed;
      if (first_forward_ratio > 1.0 + options.margins.speed || !forward_ok) {
        sel.log.push_back(absl::StrFormat(
            "forward with the selection: %.3f vs %.3f ms, then %.3f vs %.3f ms (ratio %.3f over "
            "both): %s",
            best->forward_ms, orig.forward_ms, again->forward_ms, again_orig.forward_ms, ratio,
            forward_ok ? "not slower" : "slower"));
      }
    }
    if (!faster(again->ms, again_orig.ms)) {
      sel.faster = false;
      sel.confirmed = false;
      sel.log.push_back(absl::StrFormat(
          "not confirmed: %.3f vs %.3f ms when timed again, so the original is kept", again->ms, again_orig.ms));
    } else if (!forward_ok) {
      sel.faster = false;  // faster to train, slower to serve: not published
      // Both timings: the first alone can favour the selection while the two together do not.
      sel.log.push_back(absl::StrFormat(
          "forward slower with the selection: %.3f vs %.3f ms, then %.3f vs %.3f ms (%.3f of the "
          "original's over both)",
          best->forward_ms, orig.forward_ms, again->forward_ms, again_orig.forward_ms, forward_ratio));
    }
  }
  if (sel.faster) {
    sel.rules = chosen;
  } else {
    sel.rules = rules.Only({});
  }
  return sel;
}

}  // namespace sentier
