// out_of_place_updates.cc — in-place arithmetic on a tensor nothing else sees becomes out of place.
//
// Accumulators are written `out = lin(x0)` then `out += lin(x1)` (scripted and traced alike:
// aten::add_); as long as they are updated in place, no rule may touch them (the engine refuses
// rewrites across mutation). `a.add_(b, alpha)` (sub_, mul_, div_ alike) becomes
// `add(a, b, alpha)` when:
//   * `a` is a fresh tensor: the output of an op that returns new memory (its schema's return
//     aliases nothing), or of an update this pass already made out of place, in the same block;
//   * the update is `a`'s only use, so nothing else reads `a` before or after it: the result is
//     only ever read through the update's output, which the out-of-place op produces instead;
//   * `b` is a tensor whose recorded dtype is `a`'s (shape facts): in place the result keeps
//     `a`'s dtype, out of place it takes the promoted one, so they agree only then. Shapes agree
//     wherever the in-place op runs (it requires `b` to broadcast to `a`'s shape).
// Values and gradients are the original's (an in-place update of a non-leaf differentiates as
// its out-of-place op). Without facts nothing changes.
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// In-place op -> its out-of-place twin (same arguments).
c10::optional<c10::Symbol> OutOfPlace(c10::Symbol k) {
  if (k == c10::aten::add_) return c10::aten::add;
  if (k == c10::aten::sub_) return c10::aten::sub;
  if (k == c10::aten::mul_) return c10::aten::mul;
  if (k == c10::aten::div_) return c10::aten::div;
  return c10::nullopt;
}

// `v` is new memory: produced by an aten op whose returns alias nothing.
bool Fresh(Value* v) {
  Node* n = v->node();
  if (!n->kind().is_aten()) return false;
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr || schema->is_mutable()) return false;
  for (const c10::Argument& r : schema->returns()) {
    if (r.alias_info() != nullptr) return false;
  }
  return true;
}

bool SameDtype(Value* a, Value* b, const ShapeFacts* facts) {
  if (facts == nullptr) return false;
  const TensorFact* fa = facts->Find(a);
  const TensorFact* fb = facts->Find(b);
  return fa != nullptr && fb != nullptr && fa->dtype == fb->dtype;
}

int64_t Visit(Block* b, ShapeFacts* facts) {
  int64_t changed = 0;
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it;
    ++it;
    for (Block* sub : n->blocks()) changed += Visit(sub, facts);
    c10::optional<c10::Symbol> twin = OutOfPlace(n->kind());
    const size_t arity = n->kind() == c10::aten::add_ || n->kind() == c10::aten::sub_ ? 3 : 2;
    if (!twin || n->inputs().size() != arity || n->outputs().size() != 1) continue;
    Value* a = n->input(0);
    Value* other = n->input(1);
    if (other->type()->kind() != c10::TypeKind::TensorType) continue;
    if (a->uses().size() != 1 || a->node()->owningBlock() != b || !Fresh(a)) continue;
    if (!SameDtype(a, other, facts)) continue;
    Node* created = b->owningGraph()->create(*twin, n->inputs(), 1);
    created->insertBefore(n);
    created->copyMetadata(n);
    created->output()->setType(n->output()->type());
    if (!created->maybeSchema()) {  // no such overload: leave the update as it is
      created->destroy();
      continue;
    }
    n->output()->replaceAllUsesWith(created->output());
    facts->Propagate(n->output(), created->output());  // the next update of the sum reads it
    n->destroy();
    ++changed;
  }
  return changed;
}

}  // namespace

bool OutOfPlaceUpdates(const std::shared_ptr<torch::jit::Graph>& graph, ShapeFacts* facts,
                       PassCounters* counters) {
  if (facts == nullptr) return false;
  int64_t changed = Visit(graph->block(), facts);
  AddCount(counters, "out_of_place_updates.updates", changed);
  return changed > 0;
}

}  // namespace sentier
