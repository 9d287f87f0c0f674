// fold_known_ranks.cc — `x.dim()` of a tensor whose rank the shape facts know becomes a constant.
//
// A scripted F.embedding_bag checks its input's rank in branches (`if input.dim() == 2: ...
// elif input.dim() == 1: ... else: raise`), and unwrap_raising_branches leaves each check as a
// guard: an `if` on `aten::eq(aten::dim(%ids), 1)` whose other branch formats a message and
// raises. On a model with 512 lookups those guards are two thirds of the graph (seed_scale: 6,500
// of 10,100 nodes), and every later pass and every run walks them. The rules already take ranks
// from the shape facts (`rank(%i) == 1` in the lookup rules): the optimized graph is specialized
// to the ranks the sample inputs had, as it is to their dtypes. So `aten::dim` of a top-level
// value with a fact becomes that fact's rank, and constant propagation then folds the checks and
// drops the branches that cannot run. A call with another rank than the samples' fails in the
// rewritten ops instead of in the wrapper's check (the error says where, not what).
// Without facts nothing changes.
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {

bool FoldKnownRanks(const std::shared_ptr<torch::jit::Graph>& graph, const ShapeFacts* facts,
                    PassCounters* counters) {
  if (facts == nullptr) return false;
  int64_t folded = 0;
  // Facts exist for top-level values only (shape_facts.h), so only the top-level block is read.
  for (torch::jit::Node* n : graph->block()->nodes()) {
    if (n->kind() != c10::aten::dim || n->inputs().size() != 1 || !n->output()->hasUses()) continue;
    const TensorFact* fact = facts->Find(n->input(0));
    if (fact == nullptr) continue;
    torch::jit::WithInsertPoint guard(n);
    torch::jit::Value* rank = graph->insertConstant(static_cast<int64_t>(fact->sizes.size()));
    n->output()->replaceAllUsesWith(rank);
    ++folded;
  }
  AddCount(counters, "fold_known_ranks.dims", folded);
  return folded > 0;
}

}  // namespace sentier
