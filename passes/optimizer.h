// optimizer.h — the whole optimization pipeline for one TorchScript graph.
//
// OptimizeGraph: inlines calls, unrolls loops with known trip counts, normalizes the split/cat
// family, records shape facts from sample inputs (when given), then applies the rule set to a
// fixpoint, re-normalizing between rounds of rules. It edits `graph` in place.
//
//   OptimizeOptions opts;
//   opts.sample_inputs = &inputs;           // optional: graph inputs, `self` first for methods
//   absl::StatusOr<OptimizeReport> rep = OptimizeGraph(graph, *rules, opts);
#ifndef SENTIER_PASSES_OPTIMIZER_H_
#define SENTIER_PASSES_OPTIMIZER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "passes/rewrite_driver.h"
#include "passes/rule_set.h"

#include "passes/graph_fwd.h"

namespace sentier {

struct OptimizeOptions {
  int max_rounds = 16;
  const std::vector<c10::IValue>* sample_inputs = nullptr;
  // fixed_inputs[i]: graph input i does not follow the batch size (see RecordShapeFacts).
  std::vector<bool> fixed_inputs;
};

struct OptimizeReport {
  RewriteStats stats;
  int64_t nodes_before = 0;   // non-constant nodes, nested blocks included
  int64_t nodes_after = 0;
  bool shape_facts = false;   // whether facts from sample inputs were recorded
  std::string shape_facts_error;  // why not, when sample inputs were given but failed
  double optimize_ms = 0.0;
};

// CountNodes: non-constant nodes in the graph, nested blocks included.
int64_t CountNodes(const torch::jit::Graph& graph);

absl::StatusOr<OptimizeReport> OptimizeGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                                             const RuleSet& rules, const OptimizeOptions& options);

}  // namespace sentier

#endif  // SENTIER_PASSES_OPTIMIZER_H_
