// unfused_large_cats.cc — see unfused_large_cats.h.
#include "passes/unfused_large_cats.h"

#include <torch/csrc/jit/ir/ir.h>

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// The cat's list when the fuser could take it: a ListConstruct of more than `max` tensors whose
// only use is this cat; nullptr otherwise.
Value* FusableLargeList(Node* cat, int64_t max) {
  if (cat->kind() != c10::aten::cat || cat->inputs().empty()) return nullptr;
  Value* list = cat->input(0);
  Node* def = list->node();
  if (def->kind() != c10::prim::ListConstruct || list->uses().size() != 1) return nullptr;
  return static_cast<int64_t>(def->inputs().size()) > max ? list : nullptr;
}

int64_t KeepUnfusedIn(Block* block, torch::jit::Graph* graph, int64_t max) {
  int64_t kept = 0;
  for (Node* n : block->nodes()) {
    for (Block* b : n->blocks()) kept += KeepUnfusedIn(b, graph, max);
    Value* list = FusableLargeList(n, max);
    if (list == nullptr) continue;
    torch::jit::WithInsertPoint guard(n);
    Value* copy = graph->insert(c10::aten::list, {list});
    n->replaceInput(0, copy);
    ++kept;
  }
  return kept;
}

}  // namespace

bool KeepLargeCatsUnfused(const std::shared_ptr<torch::jit::Graph>& graph, int64_t* cats,
                          int64_t max_fused_inputs) {
  const int64_t kept = KeepUnfusedIn(graph->block(), graph.get(), max_fused_inputs);
  if (cats != nullptr) *cats += kept;
  return kept > 0;
}

}  // namespace sentier
