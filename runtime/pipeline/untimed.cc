// untimed.cc — the untimed stage of the pipeline (stages.h). With nothing timed,
// kernel launches decide (verdict.h's UntimedGrowth). One rule that adds launches (split pieces
// made slices: fewer aten ops, but each slice's backward is a fill and a copy where the split's
// was one concatenation) would otherwise cost the model every rule that saves them. So a rewrite
// that makes no fewer launches than the original is made again from the original without each
// rule that fired, in turn; the rewrite with the fewest launches is kept when it makes fewer than
// the one it came from, and the search goes on from it until a rewrite pays, no dropped rule
// helps, or kMaxUntimedRewrites more rewrites were made. A rewrite that took longer than
// kMaxUntimedRewriteMs is not repeated (large models: their gate times them).
#include "runtime/pipeline/internal.h"

namespace sentier {
namespace {

constexpr int kMaxUntimedRewrites = 12;
constexpr double kMaxUntimedRewriteMs = 2000;

struct UntimedAttempt {
  std::shared_ptr<const RuleSet> rules;
  std::vector<std::string> dropped;  // what RewriteWithout left out
  LoadedModel loaded;
  OptimizeReport report;
  OpCounts ops;
};

// RewriteWith: the original, loaded afresh through its format (a stacked layout rewrites the
// module's parameters too), rewritten with `rules` and counted.
absl::StatusOr<UntimedAttempt> RewriteWith(const PipelineRequest& req, std::shared_ptr<const RuleSet> rules,
                                           const LoadedModel& original) {
  UntimedAttempt a;
  a.rules = std::move(rules);
  auto model = original.format->Load(req.model_path);
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

// BestWithoutOne: of the rewrites without one rule that fired, the one with the fewest launches
// under `current`; none when no such rewrite makes fewer.
std::optional<UntimedAttempt> BestWithoutOne(const PipelineRequest& req, const RuleSet& rules,
                                             const RewriteStats& fired, const LoadedModel& original,
                                             int64_t current, int* budget) {
  std::optional<UntimedAttempt> best;
  for (const auto& [name, n] : fired.applications) {
    if ((*budget)-- <= 0) break;
    auto attempt = RewriteWithout(req, rules, {name}, fired, original, budget);
    if (!attempt.ok() || attempt->report.stats.applications.empty()) continue;
    if (UntimedLaunches(attempt->ops) >= current) continue;
    if (best && UntimedLaunches(attempt->ops) >= UntimedLaunches(best->ops)) continue;
    best = *std::move(attempt);
  }
  return best;
}

}  // namespace

bool UntimedAblationApplies(const PipelineRequest& req, const LoadedModel& loaded, const Placement& placement,
                            bool gated, const OptimizeReport& report, const OpCounts& ops_after) {
  std::string growth;
  return !gated && !placement.timed && !req.options.allow_growth && loaded.model.is_module &&
         loaded.ops.launches_forward >= 0 && report.stats.applications.size() > 1 &&
         report.optimize_ms <= kMaxUntimedRewriteMs && UntimedGrowth(loaded.ops, ops_after, &growth);
}

std::optional<UntimedAblation> DropRulesThatAddLaunches(const PipelineRequest& req,
                                                        std::shared_ptr<const RuleSet> rules,
                                                        const LoadedModel& original, const OptimizeReport& report,
                                                        const OpCounts& ops_after) {
  std::vector<std::string> dropped;
  std::optional<UntimedAttempt> best;
  int budget = kMaxUntimedRewrites;
  std::string growth;
  int64_t current = UntimedLaunches(ops_after);
  const RewriteStats* fired = &report.stats;
  while (budget > 0) {
    std::optional<UntimedAttempt> round_best = BestWithoutOne(req, *rules, *fired, original, current, &budget);
    if (!round_best) break;
    current = UntimedLaunches(round_best->ops);
    rules = round_best->rules;
    dropped.insert(dropped.end(), round_best->dropped.begin(), round_best->dropped.end());
    best = std::move(round_best);
    fired = &best->report.stats;
    if (!UntimedGrowth(original.ops, best->ops, &growth)) break;
  }
  if (!best) return std::nullopt;
  UntimedAblation kept;
  kept.model = best->loaded.model;
  kept.samples = best->loaded.samples;
  kept.report = std::move(best->report);
  kept.ops = best->ops;
  kept.dropped = dropped;
  kept.first_launches = UntimedLaunches(ops_after);
  return kept;
}

}  // namespace sentier
