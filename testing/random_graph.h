// random_graph.h — seeded random TorchScript graphs and a differential check of the optimizer.
//
// GenerateRandomGraph builds text IR (complete input types such as `Float(4, 12)`; parameters
// as inputs named %param_*) from the ops the rule library touches: the split family (split,
// split_with_sizes, chunk, unbind) and what glues pieces back (cat, stack), slice, select,
// squeeze/unsqueeze, reshape, permute, linear, layer_norm, addcmul feeding baddbmm, pointwise
// unary (relu, tanh, sigmoid, gelu, silu, clamp, nan_to_num, dropout, detach) and binary (add,
// sub, mul, div) ops, embedding lookups per column of a Long index input, often in groups of
// identical independent ops (linears on one input each, joined side by side or along dim 0,
// among them), with fan-out and reuse of pieces, and in
// some graphs in-place ops (relu_, add_) on values and on views of them. Shapes are tracked while
// generating, so every graph runs at the sample batch size. The same (seed, steps) always gives
// the same text; a smaller `steps` gives a prefix of the same graph's body.
//
// RunDifferential optimizes one graph with a rule set (sample inputs from RandomInputsFor, fixed
// inputs from ParamInputs) and checks: outputs and gradients agree (EquivalenceChecker::
// CheckGraphs, the judgement sentier_check and sentierd use), also at twice the batch size when
// the original accepts it, and the optimized graph's text parses back.
//
//   auto rules = LoadRules({DefaultRulesDir()});
//   DiffResult r = RunDifferential(**rules, /*seed=*/42, /*steps=*/10);
//   if (!r.ok()) std::cerr << FormatFailure(r);
#ifndef SENTIER_TESTING_RANDOM_GRAPH_H_
#define SENTIER_TESTING_RANDOM_GRAPH_H_

#include <cstdint>
#include <map>
#include <string>

#include "passes/rule_set.h"

namespace sentier {
namespace difftest {

struct RandomGraph {
  std::string text;          // text IR, parseable by torch::jit::parseIR
  bool has_inplace = false;  // some node mutates a value (relu_, add_)
  bool inplace_on_leaf = false;  // ... a graph input or a view of one (no gradients then)
  // Optimized as --param_layout=stacked would be, its %param_* inputs taken as parameters a
  // stored stack can hold (the stored-table lookups fire then; the stacks stay in the graph).
  bool stacked_layout = false;
};

RandomGraph GenerateRandomGraph(uint64_t seed, int steps);

// StepsForSeed: the default graph size for a seed (4..14 generation steps).
int StepsForSeed(uint64_t seed);

struct DiffResult {
  uint64_t seed = 0;
  int steps = 0;
  bool valid = true;          // false: the original graph itself did not parse or run (skipped)
  std::string invalid_reason;
  std::string failure;        // empty when the optimized graph matches the original
  bool grads_checked = false;
  bool batch2_checked = false;
  // Only gradients differed, by at most 1e-3 relative to the float64 reference: the rounding of
  // cancelling contributions summed in another order (see Judge in random_graph.cc).
  bool gradient_rounding = false;
  std::string original_text, optimized_text;
  std::map<std::string, int64_t> applications;  // rule -> times applied
  std::map<std::string, int64_t> errors;        // rule -> rewrites that failed (engine-reported)
  bool ok() const { return failure.empty(); }
};

DiffResult RunDifferential(const RuleSet& rules, uint64_t seed, int steps);

// Minimize: the smallest steps (1..r.steps) for which the seed still fails; returns that result.
DiffResult Minimize(const RuleSet& rules, const DiffResult& r);

// FormatFailure: seed, steps, the failed check, and both graphs' text.
std::string FormatFailure(const DiffResult& r);

}  // namespace difftest
}  // namespace sentier

#endif  // SENTIER_TESTING_RANDOM_GRAPH_H_
