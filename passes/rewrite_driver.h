// rewrite_driver.h — applies a RuleSet to a graph until nothing changes (or a round bound).
//
// Legality is the driver's job, not each rule's: a match is rewritten only when every matched
// node lives in the anchor's block, no matched node mutates anything or has side effects, and —
// when the graph contains any mutation at all — no matched node reads or produces a value that
// something writes to (LibTorch's AliasDb). Replacement values must keep the replaced value's
// type. Dead code is removed after every round.
//
//   RewriteStats stats;
//   bool changed = ApplyRules(graph, *rules, options, &stats);
#ifndef SENTIER_PASSES_REWRITE_DRIVER_H_
#define SENTIER_PASSES_REWRITE_DRIVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "passes/rule_set.h"
#include "passes/shape_facts.h"

#include "passes/graph_fwd.h"

namespace sentier {

struct RewriteOptions {
  int max_rounds = 16;                 // rounds of "try every rule at every anchor"
  ShapeFacts* facts = nullptr;   // optional; rules that need sizes fail without them
  // The module object whose method the graph is (optional). With it, a graph that mutates one
  // module tensor (BatchNorm's num_batches_tracked += 1) does not make every other parameter
  // "possibly written": when every module tensor is read by one prim::GetAttr, no two share
  // storage and nothing assigns attributes, each read is its own memory location (LibTorch's
  // AliasDb in frozen mode); otherwise all module tensors may alias, as LibTorch assumes.
  c10::IValue self;
  // The artifact stores stacked parameters (OptimizeOptions::stacked_parameters): rules see it
  // through `param_layout()`.
  bool stacked_parameters = false;
  // With stacked_parameters: which parameter reads a stored stack can hold (rules see it through
  // `storable_parameters()`). Unset: StorableParameterReads of `self`, taken anew each round.
  std::function<bool(const torch::jit::Value* v)> storable_parameter;
};

struct RewriteStats {
  std::map<std::string, int64_t> applications;  // rule name -> times applied (groups, for group rules)
  std::map<std::string, int64_t> grouped_members;  // group rule name -> members batched in all
  std::map<std::string, int64_t> rejected;      // rule name -> matches refused by legality
  std::map<std::string, int64_t> errors;        // rule name -> rewrites that failed (unchanged)
  std::map<std::string, std::string> first_error;  // rule name -> the first failure's message
  // rule name -> why the driver stopped applying it: a rule whose rewrite keeps producing a new
  // match of itself (its anchor is a node its own earlier rewrite created) in kSelfFeedingRounds
  // rounds is stopped for the rest of the optimization, so that it cannot fire round after
  // round until --max_rounds.
  std::map<std::string, std::string> stopped;
  int rounds = 0;
  bool hit_round_limit = false;
  // Bookkeeping for `stopped`, kept across ApplyRules calls: the ranges of Value::unique() ids
  // each rule's rewrites created, and the rounds in which a rule rewrote its own output.
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> created_by;
  std::map<std::string, int> self_feeding_rounds;
};

constexpr int kSelfFeedingRounds = 3;

// ApplyRules: rewrites `graph` in place; returns whether it changed.
bool ApplyRules(const std::shared_ptr<torch::jit::Graph>& graph, const RuleSet& rules,
                const RewriteOptions& options, RewriteStats* stats);

}  // namespace sentier

#endif  // SENTIER_PASSES_REWRITE_DRIVER_H_
