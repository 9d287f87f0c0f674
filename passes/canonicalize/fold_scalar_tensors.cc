// fold_scalar_tensors.cc — integer arithmetic that tracing recorded on 0-dim tensors becomes
// integer arithmetic again.
//
// torch.jit.trace records Python int arithmetic on sizes as tensor ops: `bsz * num_heads` in
// F.multi_head_attention_forward becomes prim::NumToTensor(size) -> aten::mul(Tensor, 4) ->
// aten::Int, one dispatcher call (and an aten::item) per step where the scripted twin does int
// math in the interpreter. An aten::Int (or aten::IntImplicit) whose input is such an expression
// — NumToTensor of an int, integer constants, and aten::add/sub/mul/div/floor_divide of those —
// is replaced by the same expression on ints. Integer tensor arithmetic in int64 is int
// arithmetic, with one care: a true or truncating division is only turned into a floor division
// when both operands are provably non-negative (sizes and non-negative constants), where the
// three agree. The tensor ops are left to dead-code removal when nothing else reads them.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kNumToTensor = c10::Symbol::fromQualString("prim::NumToTensor");
const c10::Symbol kInt = c10::Symbol::fromQualString("aten::Int");
const c10::Symbol kIntImplicit = c10::Symbol::fromQualString("aten::IntImplicit");
const c10::Symbol kFloorDivide = c10::Symbol::fromQualString("aten::floor_divide");
const c10::Symbol kFloordiv = c10::Symbol::fromQualString("aten::floordiv");

struct IntExpr {
  Value* value = nullptr;     // an int value in the graph
  bool non_negative = false;  // provably >= 0
};

bool IsIntType(Value* v) { return v->type()->kind() == c10::TypeKind::IntType; }

// An int constant, or an int from a 0-dim integer tensor constant.
c10::optional<int64_t> ConstantInt(Value* v) {
  c10::optional<c10::IValue> iv = torch::jit::toIValue(v);
  if (!iv) return c10::nullopt;
  if (iv->isInt()) return iv->toInt();
  if (iv->isTensor()) {
    const at::Tensor& t = iv->toTensor();
    if (t.defined() && t.dim() == 0 && c10::isIntegralType(t.scalar_type(), false)) {
      return t.item<int64_t>();
    }
  }
  return c10::nullopt;
}

// The int expression that tensor (or scalar) value `v` carries. With `build`, its ops are
// inserted before `at`; without, nothing is inserted (a dry run: callers build only what they
// know will succeed, so that a failed attempt leaves no nodes behind to be removed again and
// again).
c10::optional<IntExpr> ToInt(Value* v, Node* at, bool build, int depth = 0) {
  if (depth > 16) return c10::nullopt;
  Graph* g = at->owningGraph();
  if (c10::optional<int64_t> c = ConstantInt(v)) {
    if (!build) return IntExpr{nullptr, *c >= 0};
    torch::jit::WithInsertPoint guard(at);
    return IntExpr{g->insertConstant(*c), *c >= 0};
  }
  if (IsIntType(v)) {
    return IntExpr{v, v->node()->kind() == c10::aten::size || v->node()->kind() == c10::aten::len};
  }
  Node* n = v->node();
  if (n->kind() == kNumToTensor && IsIntType(n->input())) return ToInt(n->input(), at, build, depth + 1);
  c10::Symbol k = n->kind();
  bool arith = k == c10::aten::mul || k == c10::aten::add || k == c10::aten::sub ||
               k == c10::aten::div || k == kFloorDivide;
  if (!arith || n->inputs().size() < 2) return c10::nullopt;
  auto out_type = n->output()->type()->cast<c10::TensorType>();
  if (!out_type && !IsIntType(n->output())) return c10::nullopt;
  c10::optional<IntExpr> a = ToInt(n->input(0), at, build, depth + 1);
  c10::optional<IntExpr> b = a ? ToInt(n->input(1), at, build, depth + 1) : c10::nullopt;
  if (!a || !b) return c10::nullopt;
  c10::Symbol op = k;
  if (k == c10::aten::add || k == c10::aten::sub) {
    // add/sub(self, other, alpha): only alpha == 1.
    if (n->inputs().size() >= 3) {
      c10::optional<int64_t> alpha = ConstantInt(n->input(2));
      if (!alpha || *alpha != 1) return c10::nullopt;
    }
  } else if (k == c10::aten::div || k == kFloorDivide) {
    std::string mode = k == kFloorDivide ? "floor" : "true";
    if (k == c10::aten::div && n->inputs().size() >= 3) {
      c10::optional<c10::IValue> m = torch::jit::toIValue(n->input(2));
      if (!m) return c10::nullopt;
      if (m->isString()) mode = m->toStringRef();
    }
    if (mode != "floor" && !(a->non_negative && b->non_negative)) return c10::nullopt;
    op = kFloordiv;
  }
  bool non_negative = a->non_negative && b->non_negative && k != c10::aten::sub;
  if (!build) return IntExpr{nullptr, non_negative};
  torch::jit::WithInsertPoint guard(at);
  // mul, add, sub and floordiv all have (int, int) -> int overloads.
  return IntExpr{g->insert(op, {a->value, b->value}), non_negative};
}

void Fold(Block* b, PassCounters* counters, bool* changed) {
  for (Node* n : b->nodes()) {
    for (Block* sub : n->blocks()) Fold(sub, counters, changed);
    if ((n->kind() != kInt && n->kind() != kIntImplicit) || n->inputs().size() != 1) continue;
    if (!n->output()->hasUses() || !IsIntType(n->output())) continue;
    Node* producer = n->input()->node();
    if (producer->kind() == c10::prim::Constant) continue;  // constant propagation's job
    if (!ToInt(n->input(), n, /*build=*/false)) continue;
    c10::optional<IntExpr> e = ToInt(n->input(), n, /*build=*/true);
    n->output()->replaceAllUsesWith(e->value);
    *changed = true;
    AddCount(counters, "fold_scalar_tensors.ints");
  }
}

}  // namespace

bool FoldScalarTensors(const std::shared_ptr<Graph>& graph, PassCounters* counters) {
  bool changed = false;
  Fold(graph->block(), counters, &changed);
  return changed;
}

}  // namespace sentier
