// pipeline.h — canonicalization: the passes of passes.h, in a fixed order, to a fixpoint.
//
// Canonicalize runs, in this order,
//   drop_export_guards, inline_calls, fold_module_attributes, fold_known_ranks, constant_propagation,
//   unwrap_raising_branches, remove_list_mutation, fold_list_reads, fold_scalar_tensors,
//   unroll_loops, out_of_place_updates, lower_tuples, normalize_split_family, cse, dead_code
// and repeats the sequence while any pass changed the graph (at most `max_iterations` times):
// the passes feed each other (a folded attribute makes a split's sections known, which makes a
// loop's trip count constant, whose unrolled body indexes lists with constants, ...). A scripted
// model and its traced twin come out in the same straight-line form. Every pass preserves what
// the graph computes for every input, gradients included — the passes that read shape facts
// (fold_known_ranks, out_of_place_updates, normalize_split_family) for inputs of the sample
// inputs' ranks and dtypes, which the rules assume too; none does I/O.
//
//   CanonicalizeOptions options;
//   options.self = module._ivalue();      // for fold_module_attributes
//   options.facts = &facts;               // optional: sizes for normalize_split_family
//   PassCounters counters;
//   bool changed = Canonicalize(graph, options, &counters);
//
// Spellings that need no list or attribute analysis (x @ w.t() + b as a linear, dropout with
// p = 0) are rules of the `normalize` family in patterns/normalize.rules, with golden tests.
//
// Constants are pooled once, after the rules (OptimizeGraph; pool_constants.cc says why).
//
// Choices a user should know: module attributes that are not parameters or buffers are taken as
// constants (as torch.jit.freeze does; see fold_module_attributes.cc); `training` never is.
#ifndef SENTIER_PASSES_CANONICALIZE_PIPELINE_H_
#define SENTIER_PASSES_CANONICALIZE_PIPELINE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "passes/canonicalize/passes.h"
#include "passes/graph_fwd.h"
#include "passes/shape_facts.h"

namespace sentier {

struct CanonicalizeOptions {
  // false: only the passes whose work a round of rules can create (fold_list_reads,
  // normalize_split_family, cse, dead_code) — what OptimizeGraph runs between rounds of rules,
  // after the full pipeline has run once. Rules insert no calls, attribute reads, loops or
  // tuples, so the other passes would find nothing new.
  bool full = true;
  c10::IValue self;                   // the module object (graph input 0); None: no attributes
  ShapeFacts* facts = nullptr;  // sizes from sample inputs, when recorded
  int max_iterations = 8;
  // Called after every pass that changed the graph, with the pass's name (for
  // sentier_opt --print_ir_after=<pass>).
  std::function<void(const std::string& pass, const torch::jit::Graph& graph)> after_pass;
  // When set, each pass's wall time is added to (*pass_ms)[pass] (milliseconds).
  std::map<std::string, double>* pass_ms = nullptr;
};

// CanonicalPassNames: the passes in pipeline order.
const std::vector<std::string>& CanonicalPassNames();

// Canonicalize: returns whether the graph changed. `counters` gets "<pass>" (iterations in which
// the pass changed the graph) and the passes' own "<pass>.<what>" counts; may be null.
bool Canonicalize(const std::shared_ptr<torch::jit::Graph>& graph,
                  const CanonicalizeOptions& options, PassCounters* counters);

}  // namespace sentier

#endif  // SENTIER_PASSES_CANONICALIZE_PIPELINE_H_
