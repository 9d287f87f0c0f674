// pool_constants.cc — constants spread out while the graph is rewritten, pooled when it is done.
//
// A pooled constant (one `1` for the whole graph) has as many uses as the graph has nodes that
// take a 1, and LibTorch removes a use by searching the use list: every node a rewrite deletes
// costs the fan-out of its constant inputs, which made optimizing a 100k-node graph quadratic.
// SpreadConstants therefore gives every few uses their own copy of the constant before
// rewriting (splitting each use list in halves by graph position with
// replaceAllUsesAfterNodeWith, O(uses log uses)); rules and passes compare constants by value,
// so nothing else notices. PoolConstants, at the end, keeps one prim::Constant per distinct
// immutable value (int, float, bool, str, None, device; int/float/bool lists only when every
// use only reads them) at the start of the graph, from where it dominates every use; tensor
// constants are left as they are (a shared tensor could be written through one use and seen
// through another). Linear: LibTorch's ConstantPooling builds an alias analysis first, which on
// a 100k-node graph took longer than the rest of the optimization.
#include <algorithm>
#include <unordered_set>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/node_hashing.h>

#include "passes/canonicalize/passes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;

bool Poolable(Node* n) {
  if (n->kind() != c10::prim::Constant || n->outputs().size() != 1) return false;
  const c10::TypePtr& t = n->output()->type();
  if (t->kind() != c10::TypeKind::TupleType && IsImmutableType(t)) return true;
  switch (t->kind()) {
    case c10::TypeKind::ListType: {
      c10::TypeKind e = t->expectRef<c10::ListType>().getElementType()->kind();
      bool scalar = e == c10::TypeKind::IntType || e == c10::TypeKind::FloatType ||
                    e == c10::TypeKind::BoolType;
      return scalar && ListIsOnlyRead(n->output());
    }
    default:
      return false;
  }
}

void Collect(Block* b, std::vector<Node*>* out) {
  for (Node* n : b->nodes()) {
    if (Poolable(n)) out->push_back(n);
    for (Block* sub : n->blocks()) Collect(sub, out);
  }
}

constexpr size_t kUsesPerCopy = 4;

// The node of the graph's top-level block that is `n` or contains it.
Node* TopLevel(Node* n) {
  while (n->owningBlock()->owningNode() != nullptr) n = n->owningBlock()->owningNode();
  return n;
}

// Splits `users` (sorted by graph position) between `v` and new copies of its constant node,
// until no copy serves more than kUsesPerCopy users. A copy goes right before the first user it
// serves (at the top level), which dominates all of them; inserting every copy at one place
// would use up the topological numbering there and renumber the block each time.
void Spread(torch::jit::Value* v, std::vector<Node*>::iterator begin,
            std::vector<Node*>::iterator end, int64_t* copies) {
  size_t n = static_cast<size_t>(end - begin);
  if (n <= kUsesPerCopy) return;
  auto mid = begin + n / 2;
  Node* copy = v->owningGraph()->createClone(v->node(), [](torch::jit::Value* x) { return x; });
  copy->insertBefore(TopLevel(*mid));
  copy->output()->setType(v->type());
  v->replaceAllUsesAfterNodeWith(*(mid - 1), copy->output());
  ++*copies;
  Spread(v, begin, mid, copies);
  Spread(copy->output(), mid, end, copies);
}

}  // namespace

int64_t SpreadConstants(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<Node*> constants;
  for (Node* n : graph->block()->nodes()) {
    if (Poolable(n) && n->output()->uses().size() > kUsesPerCopy) constants.push_back(n);
  }
  int64_t copies = 0;
  for (Node* c : constants) {
    std::vector<Node*> users;
    users.reserve(c->output()->uses().size());
    for (const torch::jit::Use& u : c->output()->uses()) users.push_back(u.user);
    std::sort(users.begin(), users.end(), [](Node* a, Node* b) { return a->isBefore(b); });
    users.erase(std::unique(users.begin(), users.end()), users.end());
    Spread(c->output(), users.begin(), users.end(), &copies);
  }
  return copies;
}

bool PoolConstants(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters) {
  std::vector<Node*> constants;
  Collect(graph->block(), &constants);
  std::unordered_set<Node*, torch::jit::HashNode, torch::jit::EqualNode> kept;
  Node* top = graph->block()->param_node();  // kept constants go after it, in first-seen order
  bool changed = false;
  int64_t merged = 0;
  for (Node* n : constants) {
    auto [it, inserted] = kept.insert(n);
    if (inserted) {
      if (n->owningBlock() != graph->block() || n->prev() != top) {
        n->moveAfter(top);
        changed = true;
      }
      top = n;
      continue;
    }
    n->output()->replaceAllUsesWith((*it)->output());
    n->destroy();
    ++merged;
    changed = true;
  }
  if (counters != nullptr && merged > 0) (*counters)["constant_pooling.merged"] += merged;
  return changed;
}

}  // namespace sentier
