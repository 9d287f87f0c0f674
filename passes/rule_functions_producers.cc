// rule_functions_producers.cc — the rule language's functions over the nodes that produce values:
// their kinds and inputs, the terms of a sum, the numbers constants hold, None and tensor values,
// and the inputs of the cats a list of values splices in.
#include <functional>

#include <torch/csrc/jit/ir/constants.h>

#include "passes/internal/rule_functions_parts.h"
#include "passes/remove_dead_nodes.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace rule_functions {

namespace {

// addends(%y): the terms of a sum of two tensors, nested single-use adds of its block spliced in.
absl::StatusOr<Datum> Addends(const std::vector<Datum>& a, EvalContext&) {
  SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
  if (vs.size() != 1) return Err("addends() takes one value");
  auto is_sum = [](Value* v) {
    Node* n = v->node();
    if (n->kind() != c10::aten::add || n->inputs().size() != 3 || n->outputs().size() != 1) return false;
    c10::optional<Datum> alpha = DatumFromConstant(n->input(2));
    return alpha && alpha->kind == Datum::Kind::kInt && alpha->i == 1 &&
           n->input(0)->type()->kind() == c10::TypeKind::TensorType &&
           n->input(1)->type()->kind() == c10::TypeKind::TensorType;
  };
  if (!is_sum(vs[0])) return Err("addends(): not a sum of two tensors");
  torch::jit::Block* block = vs[0]->node()->owningBlock();
  std::vector<Value*> terms;
  std::function<void(Value*, bool)> walk = [&](Value* v, bool root) {
    size_t live = 0;
    for (const torch::jit::Use& u : v->uses()) live += IsDeadNode(u.user) ? 0 : 1;
    if (root || (is_sum(v) && live == 1 && v->node()->owningBlock() == block)) {
      walk(v->node()->input(0), false);
      walk(v->node()->input(1), false);
      return;
    }
    terms.push_back(v);
  };
  walk(vs[0], true);
  return Datum::Seq(std::move(terms));
}

// number(%v or $c): the int, float or bool a constant (or a one-element tensor constant) holds.
absl::StatusOr<Datum> Number(const std::vector<Datum>& a, EvalContext&) {
  c10::optional<c10::IValue> iv;
  if (a[0].kind == Datum::Kind::kInt || a[0].kind == Datum::Kind::kFloat) return a[0];
  if (a[0].kind == Datum::Kind::kBool) return Datum::Int(a[0].b ? 1 : 0);
  if (a[0].kind == Datum::Kind::kOpaque) {
    iv = a[0].opaque;  // a bound constant ($c) that is no int, float or bool
  } else {
    SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
    if (vs.size() != 1) return Err("number() takes one value");
    iv = torch::jit::toIValue(vs[0]);
  }
  if (!iv) return Err("number(): not a constant");
  if (iv->isTensor()) {
    const at::Tensor t = iv->toTensor();
    if (t.numel() != 1 || t.is_complex()) return Err("number(): not a one-element tensor");
    const c10::Scalar item = t.item();
    iv = c10::IValue(item);
  }
  if (iv->isInt()) return Datum::Int(iv->toInt());
  if (iv->isDouble()) return Datum::Float(iv->toDouble());
  if (iv->isBool()) return Datum::Int(iv->toBool() ? 1 : 0);
  return Err("number(): not a number");
}

// spliced_cat_inputs(vs..., d): vs with each single-use cat on dim d replaced by its inputs.
absl::StatusOr<Datum> SplicedCatInputs(const std::vector<Datum>& a, EvalContext&) {
  SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
  SENTIER_ASSIGN_OR_RETURN(d, IntOf(a[1]));
  std::vector<Value*> out;
  for (Value* v : vs) {
    Node* n = v->node();
    bool splice = n->kind() == c10::aten::cat && v->uses().size() == 1 &&
                  n->inputs().size() == 2 &&
                  n->input(0)->node()->kind() == c10::prim::ListConstruct &&
                  n->input(0)->uses().size() == 1;
    if (splice) {
      c10::optional<Datum> dim = DatumFromConstant(n->input(1));
      splice = dim && dim->kind == Datum::Kind::kInt && dim->i == d;
    }
    if (splice) {
      for (Value* in : n->input(0)->node()->inputs()) out.push_back(in);
    } else {
      out.push_back(v);
    }
  }
  return Datum::Seq(std::move(out));
}

}  // namespace

// Functions over the nodes that produce values: kinds, inputs, constants.
void AddProducerFunctions(FunctionTable* table) {
  FunctionTable& f = *table;
  f["kind"] = {1, 1, "kind(%v): the kind of the node that produces the value, as a string (\"aten::sum\")",
               [](auto& a, auto&) -> absl::StatusOr<Datum> {
                 SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                 if (vs.size() != 1) return Err("kind() takes one value");
                 return Datum::Str(vs[0]->node()->kind().toQualString());
               }};
  f["addends"] = {
      1, 1,
      "addends(%y): the terms of the sum %y: %y is aten::add(a, b, 1) of two tensors, and each "
      "operand that is itself such an add in the same block, used only there, is replaced by its "
      "terms, left to right (((a + b) + c) + d: a, b, c, d)",
      Addends};
  f["producers_are"] = {2, 2,
                        "producers_are(vs..., \"op-regex\"): each value is produced by a node whose "
                        "kind fully matches the RE2",
                        [](auto& a, auto&) -> absl::StatusOr<Datum> {
                          SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                          SENTIER_ASSIGN_OR_RETURN(re, KindPattern(a[1], "producers_are"));
                          for (Value* v : vs) {
                            if (!RE2::FullMatch(v->node()->kind().toQualString(), *re)) return Datum::Bool(false);
                          }
                          return Datum::Bool(true);
                        }};
  f["inputs_of"] = {2, 2, "inputs_of(vs..., i): input i of the node that produces each value",
                    [](auto& a, auto&) -> absl::StatusOr<Datum> {
                      SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                      SENTIER_ASSIGN_OR_RETURN(i, IntOf(a[1]));
                      std::vector<Value*> out;
                      for (Value* v : vs) {
                        Node* n = v->node();
                        if (i < 0 || i >= static_cast<int64_t>(n->inputs().size())) {
                          return Err("inputs_of: index out of range");
                        }
                        out.push_back(n->input(i));
                      }
                      return Datum::Seq(std::move(out));
                    }};
  f["number"] = {1, 1,
                 "number(%v or $c): the number a constant holds: an int, float or bool constant, or a "
                 "one-element tensor constant (tracing records a Python number added to a tensor so)",
                 Number};
  f["all_tensors"] = {1, 1, "all_tensors(vs...): every value is a tensor (no None among optional inputs)",
                      [](auto& a, auto&) -> absl::StatusOr<Datum> {
                        SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                        for (Value* v : vs) {
                          if (v->type()->kind() != c10::TypeKind::TensorType) return Datum::Bool(false);
                        }
                        return Datum::Bool(true);
                      }};
  f["is_none"] = {1, 1, "is_none(%v): the value is the constant None",
                  [](auto& a, auto&) -> absl::StatusOr<Datum> {
                    if (a[0].kind == Datum::Kind::kNone) return Datum::Bool(true);
                    SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                    for (Value* v : vs) {
                      if (v->type()->kind() != c10::TypeKind::NoneType) return Datum::Bool(false);
                    }
                    return Datum::Bool(true);
                  }};
  f["spliced_cat_inputs"] = {
      2, 2,
      "spliced_cat_inputs(vs..., d): vs with every single-use aten::cat(list, d) element "
      "replaced by that cat's inputs",
      SplicedCatInputs};
}

}  // namespace rule_functions
}  // namespace internal
}  // namespace sentier
