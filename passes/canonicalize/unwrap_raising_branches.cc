// unwrap_raising_branches.cc — argument checks of F.* wrappers become guards in straight-line code.
//
// A scripted F.* wrapper validates its arguments in branches: F.embedding_bag reads
// `if input.dim() == 2: <raise unless offsets is None>; <2-D path> else: <1-D checks; 1-D path>`,
// so the values that reach aten::embedding_bag are outputs of an `if`, defined next to each call,
// and a loop over tables becomes calls interleaved with branches that a group rule cannot batch
// across. Once the checks that cannot fail or must fail are folded, an `if` one of whose branches
// always raises is a guard around the other: `%a = If(c) { raise } else { B; -> %x }` becomes
// `If(c) { raise } else { }` followed by B in the outer block, with %a replaced by %x. The program
// raises exactly when it did and otherwise runs the same nodes in the same order; only B's
// values now live in the outer block, where rules and the group search see them. Two
// refinements that cannot fail feed it: `x is None` / `x is not None` for a tensor (a Tensor
// passed where the wrapper declares Optional[Tensor]) become false / true, and a
// `prim::unchecked_cast` whose input already has the cast's type becomes its input.
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kIs = c10::Symbol::fromQualString("aten::__is__");
const c10::Symbol kIsNot = c10::Symbol::fromQualString("aten::__isnot__");


bool AlwaysRaises(Block* b) {
  for (Node* n : b->nodes()) {
    if (n->kind() == c10::prim::RaiseException) return true;
  }
  return false;
}

bool IsTensor(const Value* v) { return v->type()->isSubtypeOf(*c10::TensorType::get()); }

// `x is None` / `x is not None` with x a tensor: a constant.
bool FoldNoneCheck(Node* n, PassCounters* counters) {
  if ((n->kind() != kIs && n->kind() != kIsNot) || n->inputs().size() != 2) return false;
  const bool none0 = n->input(0)->type()->kind() == c10::TypeKind::NoneType;
  const bool none1 = n->input(1)->type()->kind() == c10::TypeKind::NoneType;
  if (!(none0 && IsTensor(n->input(1))) && !(none1 && IsTensor(n->input(0)))) return false;
  if (!n->output()->hasUses()) return false;
  Value* c;
  {
    torch::jit::WithInsertPoint guard(n);
    c = n->owningGraph()->insertConstant(n->kind() == kIsNot);
  }
  n->output()->replaceAllUsesWith(c);
  AddCount(counters, "unwrap_raising_branches.none_checks");
  return true;
}

// A cast to the type its input already has.
bool FoldNoOpCast(Node* n, PassCounters* counters) {
  if (n->kind() != c10::prim::unchecked_cast || n->inputs().size() != 1) return false;
  if (!n->output()->hasUses()) return false;
  c10::TypePtr in = c10::unshapedType(n->input()->type());
  c10::TypePtr out = c10::unshapedType(n->output()->type());
  if (!in->isSubtypeOf(*out)) return false;
  n->output()->replaceAllUsesWith(n->input());
  AddCount(counters, "unwrap_raising_branches.casts");
  return true;
}

// `If(c) { raise } else { B }` (either order): B moves after the If, the If keeps only the check.
bool UnwrapGuard(Node* n, PassCounters* counters) {
  if (n->kind() != c10::prim::If || n->blocks().size() != 2) return false;
  const bool raises0 = AlwaysRaises(n->blocks()[0]), raises1 = AlwaysRaises(n->blocks()[1]);
  if (raises0 == raises1) return false;
  Block* keep = raises0 ? n->blocks()[1] : n->blocks()[0];
  if (keep->nodes().begin() == keep->nodes().end() && n->outputs().empty()) return false;  // a guard already
  Node* cursor = n;
  for (auto it = keep->nodes().begin(); it != keep->nodes().end();) {
    Node* moved = *it;
    ++it;
    moved->moveAfter(cursor);
    cursor = moved;
  }
  for (size_t i = 0; i < n->outputs().size(); ++i) n->output(i)->replaceAllUsesWith(keep->outputs()[i]);
  for (size_t i = n->outputs().size(); i-- > 0;) {
    for (Block* b : n->blocks()) b->eraseOutput(i);
    n->eraseOutput(i);
  }
  AddCount(counters, "unwrap_raising_branches.guards");
  return true;
}

bool Walk(Block* b, PassCounters* counters) {
  bool changed = false;
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it;
    for (Block* sub : n->blocks()) changed |= Walk(sub, counters);
    changed |= FoldNoneCheck(n, counters) || FoldNoOpCast(n, counters);
    // Nodes moved out of an unwrapped branch land right after it: the walk visits them next.
    changed |= UnwrapGuard(n, counters);
    ++it;
  }
  return changed;
}

}  // namespace

bool UnwrapRaisingBranches(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters) {
  return Walk(graph->block(), counters);
}

}  // namespace sentier
