// cost_selection.cc — greedy rule ablation driven by measured step times (see the header).
#include "runtime/cost_selection.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "passes/optimizer.h"
#include "runtime/equivalence_checker.h"
#include "runtime/model_io.h"

namespace sentier {
namespace {

struct Trial {
  double ms = 0.0;          // the score (see CostOptions)
  double forward_ms = 0.0;  // forward alone
  std::vector<std::string> fired;
};

// Optimizes a fresh copy with `rules` and times it against `original`.
absl::StatusOr<Trial> Measure(const std::string& model_path, const Model& original,
                              const std::vector<c10::IValue>& samples, const RuleSet& rules,
                              const CostOptions& options, Trial* original_trial) {
  auto model = LoadModel(model_path);
  if (!model.ok()) return model.status();
  std::vector<c10::IValue> with_self = {model->module._ivalue()};
  with_self.insert(with_self.end(), samples.begin(), samples.end());
  OptimizeOptions opts;
  opts.sample_inputs = &with_self;
  auto report = OptimizeGraph(model->graph, rules, opts);
  if (!report.ok()) return report.status();
  CheckOptions check;
  check.device = options.device;
  check.trials = 1;
  check.time = true;
  check.timing_only = !options.verify_each;
  check.inference = !options.training;
  check.training = options.training;
  auto r = EquivalenceChecker(check).Check(original.module, model->module, samples);
  if (!r.ok()) return r.status();
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
  original_trial->ms = score(r->reference_train_ms, r->reference_ms);
  original_trial->forward_ms = r->reference_ms;
  for (const auto& [name, n] : report->stats.applications) {
    if (n > 0) t.fired.push_back(name);
  }
  return t;
}

std::string WithoutRegex(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  return absl::StrCat("(", absl::StrJoin(names, "|"), ")");
}

}  // namespace

absl::StatusOr<CostSelection> SelectRulesByMeasurement(const std::string& model_path,
                                                       const std::vector<c10::IValue>& samples,
                                                       const RuleSet& rules,
                                                       const CostOptions& options) {
  auto original = LoadModel(model_path);
  if (!original.ok()) return original.status();
  CostSelection sel;
  Trial orig;
  auto all = rules.Filter("", "");
  if (!all.ok()) return all.status();
  auto best = Measure(model_path, *original, samples, **all, options, &orig);
  if (!best.ok()) return best.status();
  double orig_ms = orig.ms;
  sel.original_ms = orig_ms;
  sel.original_forward_ms = orig.forward_ms;
  sel.log.push_back(absl::StrFormat("all rules: %.3f ms (original %.3f ms)", best->ms, orig_ms));
  std::vector<std::string> dropped;
  for (const std::string& name : std::vector<std::string>(best->fired)) {
    std::vector<std::string> trial_drop = dropped;
    trial_drop.push_back(name);
    auto subset = rules.Filter("", WithoutRegex(trial_drop));
    if (!subset.ok()) return subset.status();
    Trial o;
    auto t = Measure(model_path, *original, samples, **subset, options, &o);
    if (!t.ok()) return t.status();
    sel.log.push_back(absl::StrFormat("without %s: %.3f ms (best so far %.3f ms)", name, t->ms, best->ms));
    if (t->ms < best->ms * (1.0 - options.margin)) {
      dropped = trial_drop;
      best = t;
    }
  }
  auto chosen = rules.Filter("", WithoutRegex(dropped));
  if (!chosen.ok()) return chosen.status();
  sel.dropped = dropped;
  sel.optimized_ms = best->ms;
  sel.optimized_forward_ms = best->forward_ms;
  sel.faster = best->ms < orig_ms * (1.0 - options.margin) && !best->fired.empty();
  if (options.training && options.inference_too &&
      best->forward_ms > orig.forward_ms * (1.0 + options.margin)) {
    sel.faster = false;  // faster to train, slower to serve: not published
    sel.log.push_back(absl::StrFormat("forward slower with the selection: %.3f ms vs %.3f ms",
                                      best->forward_ms, orig.forward_ms));
  }
  sel.rules = *chosen;
  return sel;
}

}  // namespace sentier
