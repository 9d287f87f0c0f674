// pipeline.cc — runs the canonicalization passes in order to a fixpoint (see the header).
#include "passes/canonicalize/pipeline.h"

#include <torch/csrc/jit/ir/ir.h>

namespace sentier {
namespace {

using torch::jit::Graph;

struct Pass {
  std::string name;
  std::function<bool(const std::shared_ptr<Graph>&, const CanonicalizeOptions&, PassCounters*)> run;
};

const std::vector<Pass>& Passes() {
  using G = const std::shared_ptr<Graph>&;
  using O = const CanonicalizeOptions&;
  static const std::vector<Pass> passes = {
      {"inline_calls", [](G g, O, PassCounters* c) { return InlineCalls(g, c); }},
      {"fold_module_attributes", [](G g, O o, PassCounters* c) { return FoldModuleAttributes(g, o.self, c); }},
      {"constant_propagation", [](G g, O, PassCounters* c) { return PropagateConstants(g, c); }},
      {"remove_list_mutation", [](G g, O, PassCounters* c) { return RemoveListMutations(g, c); }},
      {"fold_list_reads", [](G g, O, PassCounters* c) { return FoldListReads(g, c); }},
      {"fold_scalar_tensors", [](G g, O, PassCounters* c) { return FoldScalarTensors(g, c); }},
      {"unroll_loops", [](G g, O, PassCounters* c) { return UnrollKnownLoops(g, c); }},
      {"lower_tuples", [](G g, O, PassCounters* c) { return LowerTuples(g, c); }},
      {"normalize_split_family", [](G g, O o, PassCounters* c) { return NormalizeSplitFamily(g, o.facts, c); }},
      {"cse", [](G g, O, PassCounters* c) { return EliminateCommonSubexpressions(g, c); }},
      {"constant_pooling", [](G g, O, PassCounters* c) { return PoolConstants(g, c); }},
      {"dead_code", [](G g, O, PassCounters* c) { return EliminateDeadNodes(g, c); }},
  };
  return passes;
}

}  // namespace

const std::vector<std::string>& CanonicalPassNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Pass& p : Passes()) out.push_back(p.name);
    return out;
  }();
  return names;
}

bool Canonicalize(const std::shared_ptr<Graph>& graph, const CanonicalizeOptions& options,
                  PassCounters* counters) {
  bool changed = false;
  for (int iteration = 0; iteration < options.max_iterations; ++iteration) {
    bool any = false;
    for (const Pass& pass : Passes()) {
      if (!pass.run(graph, options, counters)) continue;
      any = true;
      if (counters != nullptr) ++(*counters)[pass.name];
      if (options.after_pass) options.after_pass(pass.name, *graph);
    }
    changed |= any;
    if (!any) break;
  }
  return changed;
}

}  // namespace sentier
