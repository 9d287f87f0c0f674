// remove_dead_nodes.cc — backward sweep deleting unused, effect-free nodes (see the header).
#include "passes/remove_dead_nodes.h"

#include <torch/csrc/jit/ir/ir.h>

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;

// Whether `n` can go once nothing uses its outputs.
bool EffectFree(Node* n) {
  if (!n->blocks().empty() || n->kind() == c10::prim::Return) return false;
  if (n->kind() == c10::prim::Constant) return true;
  try {
    if (n->hasSideEffects()) return false;
  } catch (const std::exception&) {
    return false;  // an op LibTorch cannot classify: keep it
  }
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema != nullptr && schema->is_mutable()) return false;
  if (schema == nullptr && !n->kind().is_prim()) return false;
  return true;
}

bool Removable(Node* n) {
  for (const torch::jit::Value* o : n->outputs()) {
    if (o->hasUses()) return false;
  }
  return EffectFree(n);
}

// `kept`: empty, or called on every node left in place.
int64_t Sweep(Block* b, const std::function<void(Node*)>& kept) {
  int64_t removed = 0;
  for (auto it = b->nodes().rbegin(); it != b->nodes().rend();) {
    Node* n = *it;
    ++it;  // advance first: destroying n must not invalidate the iterator
    for (Block* sub : n->blocks()) removed += Sweep(sub, kept);
    if (Removable(n)) {
      n->destroy();
      ++removed;
    } else if (kept) {
      kept(n);
    }
  }
  return removed;
}

}  // namespace

bool RemoveDeadNodes(const std::shared_ptr<torch::jit::Graph>& graph, int64_t* removed,
                     const std::function<void(Node*)>& kept) {
  int64_t n = Sweep(graph->block(), kept);
  if (removed != nullptr) *removed += n;
  return n > 0;
}

bool HasLiveUses(Node* n, int depth) {
  for (torch::jit::Value* o : n->outputs()) {
    for (const torch::jit::Use& u : o->uses()) {
      if (depth <= 0 || !EffectFree(u.user) || HasLiveUses(u.user, depth - 1)) return true;
    }
  }
  return false;
}

bool IsDeadNode(Node* n, int depth) { return EffectFree(n) && !HasLiveUses(n, depth); }

}  // namespace sentier
