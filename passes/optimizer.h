// optimizer.h — the whole optimization pipeline for one TorchScript graph.
//
// OptimizeGraph: canonicalizes the graph (passes/canonicalize/pipeline.h: inlining, module
// attributes folded, list mutation removed, loops unrolled, the split/cat family normalized, ...),
// records shape facts from sample inputs (when given; a batch larger than 16 is cut to 16 rows
// where ShrinkBatch can, since facts need shapes, not numbers), then applies the rule set to a
// fixpoint, canonicalizing again between rounds of rules and recording facts again after each
// (so the values the rules created get sizes too; at most 4 rounds). It edits `graph` in place.
//
//   OptimizeOptions opts;
//   opts.self = module._ivalue();           // the module whose method `graph` is
//   opts.sample_inputs = &inputs;           // optional: graph inputs, `self` first for methods
//   absl::StatusOr<OptimizeReport> rep = OptimizeGraph(graph, *rules, opts);
#ifndef SENTIER_PASSES_OPTIMIZER_H_
#define SENTIER_PASSES_OPTIMIZER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "passes/canonicalize/passes.h"
#include "passes/rewrite_driver.h"
#include "passes/rule_set.h"
#include "passes/stacked_parameters.h"

#include "passes/graph_fwd.h"

namespace sentier {

struct OptimizeOptions {
  int max_rounds = 16;
  // The module object whose method the graph is (attributes are folded from it). When unset and
  // sample_inputs[0] is an object, that one is used.
  c10::IValue self;
  const std::vector<c10::IValue>* sample_inputs = nullptr;
  // fixed_inputs[i]: graph input i does not follow the batch size (see RecordShapeFacts).
  std::vector<bool> fixed_inputs;
  // Called after each canonicalization pass that changed the graph, and with "rules" after each
  // round of rules that did (sentier_opt --print_ir_after=<pass>).
  std::function<void(const std::string& pass, const torch::jit::Graph& graph)> after_pass;
  // Store the parameters the batching rules stack as stacked parameters of the module (see
  // stacked_parameters.h; needs `self`). false: the original layout, parameters stay as they are.
  bool stacked_parameters = false;
  // With stacked_parameters: which parameter reads a stored stack can hold (rules ask it through
  // `storable_parameters()`). Unset: those StorableParameterReads finds in `self`. A graph whose
  // parameters are its inputs (a rule's golden test) sets its own and is given no module: nothing
  // is stored then, the stacks stay in the graph.
  std::function<bool(const torch::jit::Value* v)> storable_parameter;
  // Whether the result may write a module's buffers in place: batched_batch_norms copies the
  // joined running statistics back into each member's. false (an exported program's writer takes
  // no such write): training-mode batch norms stay apart.
  bool buffer_writes = true;
};

struct OptimizeReport {
  RewriteStats stats;
  PassCounters canonicalize;  // per canonicalization pass (see pipeline.h)
  int64_t nodes_before = 0;   // non-constant nodes, nested blocks included (after inlining)
  int64_t nodes_after = 0;
  bool shape_facts = false;   // whether facts from sample inputs were recorded
  std::string shape_facts_error;  // why not, when sample inputs were given but failed
  double optimize_ms = 0.0;
  // Where the time went: "canonicalize.<pass>", "shape_facts", "rules" -> milliseconds.
  std::map<std::string, double> stage_ms;
  ParamLayout param_layout;  // with stacked_parameters: what was stored stacked
};

// CountNodes: non-constant nodes in the graph, nested blocks included.
int64_t CountNodes(const torch::jit::Graph& graph);

absl::StatusOr<OptimizeReport> OptimizeGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                                             const RuleSet& rules, const OptimizeOptions& options);

}  // namespace sentier

#endif  // SENTIER_PASSES_OPTIMIZER_H_
