// internal/expr_eval.cc — expression evaluation (see expr_eval.h): literals, captures, lists,
// unary and binary operators (integer arithmetic floors as in TorchScript), indexing, and calls
// of the named functions of rule_functions.cc. Errors name the expression's `file:line:col`.
#include "passes/internal/expr_eval.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sentier {
namespace internal {
namespace {

// `and` / `or`, short-circuiting: the right side is evaluated only when it decides.
absl::StatusOr<Datum> EvalLogical(const Expr& e, const Datum& lhs, EvalContext& ctx) {
  const std::string& op = e.text;
  if (lhs.kind != Datum::Kind::kBool) return LocError(e.loc, "'and'/'or' need booleans");
  if (op == "and" && !lhs.b) return Datum::Bool(false);
  if (op == "or" && lhs.b) return Datum::Bool(true);
  auto rhs = Eval(*e.args[1], ctx);
  if (!rhs.ok()) return rhs;
  if (rhs->kind != Datum::Kind::kBool) return LocError(e.loc, "'and'/'or' need booleans");
  return Datum::Bool(rhs->b);
}

// Comparisons and arithmetic on two numbers (ints stay ints except for comparisons with a float;
// integer division and modulo floor, as in TorchScript/Python).
absl::StatusOr<Datum> EvalNumeric(const Expr& e, const Datum& a, const Datum& b) {
  const std::string& op = e.text;
  bool ints = a.kind == Datum::Kind::kInt && b.kind == Datum::Kind::kInt;
  if (ints) {
    if (op == "<") return Datum::Bool(a.i < b.i);
    if (op == "<=") return Datum::Bool(a.i <= b.i);
    if (op == ">") return Datum::Bool(a.i > b.i);
    if (op == ">=") return Datum::Bool(a.i >= b.i);
  }
  double x = a.kind == Datum::Kind::kInt ? static_cast<double>(a.i) : a.f;
  double y = b.kind == Datum::Kind::kInt ? static_cast<double>(b.i) : b.f;
  if (op == "<") return Datum::Bool(x < y);
  if (op == "<=") return Datum::Bool(x <= y);
  if (op == ">") return Datum::Bool(x > y);
  if (op == ">=") return Datum::Bool(x >= y);
  if (ints) {
    if (op == "+") return Datum::Int(a.i + b.i);
    if (op == "-") return Datum::Int(a.i - b.i);
    if (op == "*") return Datum::Int(a.i * b.i);
    if (op == "/" || op == "%") {
      if (b.i == 0) return LocError(e.loc, "division by zero");
      // Floor division and modulo, as in TorchScript/Python.
      int64_t q = a.i / b.i;
      if ((a.i % b.i != 0) && ((a.i < 0) != (b.i < 0))) --q;
      return op == "/" ? Datum::Int(q) : Datum::Int(a.i - q * b.i);
    }
  }
  if (op == "+") return Datum::Float(x + y);
  if (op == "-") return Datum::Float(x - y);
  if (op == "*") return Datum::Float(x * y);
  if (op == "/") return Datum::Float(x / y);
  return LocError(e.loc, absl::StrCat("unsupported operator '", op, "'"));
}

absl::StatusOr<Datum> EvalBinary(const Expr& e, EvalContext& ctx) {
  const std::string& op = e.text;
  auto lhs = Eval(*e.args[0], ctx);
  if (!lhs.ok()) return lhs;
  if (op == "and" || op == "or") return EvalLogical(e, *lhs, ctx);
  auto rhs = Eval(*e.args[1], ctx);
  if (!rhs.ok()) return rhs;
  const Datum& a = *lhs;
  const Datum& b = *rhs;
  if (op == "==") return Datum::Bool(a.Equal(b));
  if (op == "!=") return Datum::Bool(!a.Equal(b));
  if (op == "+" && a.kind == Datum::Kind::kValueSeq && b.kind == Datum::Kind::kValueSeq) {
    std::vector<Value*> out = a.values;
    out.insert(out.end(), b.values.begin(), b.values.end());
    return Datum::Seq(std::move(out));
  }
  if (op == "+" && a.kind == Datum::Kind::kList && b.kind == Datum::Kind::kList) {
    std::vector<Datum> out = a.list;
    out.insert(out.end(), b.list.begin(), b.list.end());
    return Datum::List(std::move(out));
  }
  bool nums = (a.kind == Datum::Kind::kInt || a.kind == Datum::Kind::kFloat) &&
              (b.kind == Datum::Kind::kInt || b.kind == Datum::Kind::kFloat);
  if (!nums) {
    return LocError(e.loc, absl::StrCat("'", op, "' needs numbers, got ", a.DebugString(), " and ",
                                        b.DebugString()));
  }
  return EvalNumeric(e, a, b);
}

// `$c`, `%x` and `%xs...`: the bound constant, value or sequence.
absl::StatusOr<Datum> EvalRef(const Expr& e, const Bindings& b) {
  if (e.kind == Expr::Kind::kConstRef) {
    auto it = b.consts.find(e.text);
    if (it == b.consts.end()) return LocError(e.loc, absl::StrCat("$", e.text, " is not bound"));
    return it->second;
  }
  if (e.variadic) {
    auto it = b.seqs.find(e.text);
    if (it == b.seqs.end()) return LocError(e.loc, absl::StrCat("%", e.text, "... is not bound"));
    return Datum::Seq(it->second);
  }
  auto it = b.values.find(e.text);
  if (it == b.values.end()) return LocError(e.loc, absl::StrCat("%", e.text, " is not bound"));
  return Datum::Val(it->second);
}

// `[a, b, ...]`: a list of constants, or a sequence of graph values (sequences spliced in).
absl::StatusOr<Datum> EvalList(const Expr& e, EvalContext& ctx) {
  std::vector<Datum> items;
  bool any_value = false;
  for (const auto& a : e.args) {
    auto d = Eval(*a, ctx);
    if (!d.ok()) return d;
    any_value |= !d->IsConstant();
    items.push_back(std::move(*d));
  }
  if (!any_value) return Datum::List(std::move(items));
  std::vector<Value*> vs;
  for (const Datum& d : items) {
    if (d.kind == Datum::Kind::kValue) {
      vs.push_back(d.value);
    } else if (d.kind == Datum::Kind::kValueSeq) {
      vs.insert(vs.end(), d.values.begin(), d.values.end());
    } else {
      return LocError(e.loc, "a list cannot mix graph values and constants");
    }
  }
  return Datum::Seq(std::move(vs));
}

// `not x` and `-x`.
absl::StatusOr<Datum> EvalUnary(const Expr& e, EvalContext& ctx) {
  auto d = Eval(*e.args[0], ctx);
  if (!d.ok()) return d;
  if (e.text == "not") {
    if (d->kind != Datum::Kind::kBool) return LocError(e.loc, "'not' needs a boolean");
    return Datum::Bool(!d->b);
  }
  if (d->kind == Datum::Kind::kInt) return Datum::Int(-d->i);
  if (d->kind == Datum::Kind::kFloat) return Datum::Float(-d->f);
  return LocError(e.loc, "unary '-' needs a number");
}

// `xs[k]` on a list or a value sequence; a negative k counts from the end.
absl::StatusOr<Datum> EvalIndex(const Expr& e, EvalContext& ctx) {
  auto base = Eval(*e.args[0], ctx);
  if (!base.ok()) return base;
  auto idx = Eval(*e.args[1], ctx);
  if (!idx.ok()) return idx;
  if (idx->kind != Datum::Kind::kInt) return LocError(e.loc, "an index must be an int");
  int64_t n = base->kind == Datum::Kind::kList      ? static_cast<int64_t>(base->list.size())
              : base->kind == Datum::Kind::kValueSeq ? static_cast<int64_t>(base->values.size())
                                                     : -1;
  if (n < 0) return LocError(e.loc, "only lists and sequences can be indexed");
  int64_t k = idx->i < 0 ? idx->i + n : idx->i;
  if (k < 0 || k >= n) return LocError(e.loc, "index out of range");
  if (base->kind == Datum::Kind::kList) return base->list[k];
  return Datum::Val(base->values[k]);
}

// `f(args...)`: one of the named functions of rule_functions.cc.
absl::StatusOr<Datum> EvalCall(const Expr& e, EvalContext& ctx) {
  const FunctionSpec& fn = Functions().at(e.text);
  absl::StatusOr<std::vector<Datum>> args = EvalAll(e.args, ctx);
  if (!args.ok()) return args.status();
  auto out = fn.impl(*args, ctx);
  if (!out.ok()) return LocError(e.loc, absl::StrCat(e.text, ": ", out.status().message()));
  return out;
}

}  // namespace

// A dispatch on the expression's kind; each kind has its step above.
absl::StatusOr<Datum> Eval(const Expr& e, EvalContext& ctx) {
  if (c10::optional<Datum> scalar = ScalarLiteral(e)) return *scalar;
  switch (e.kind) {
    case Expr::Kind::kConstRef:
    case Expr::Kind::kValueRef:
      return EvalRef(e, *ctx.bindings);
    case Expr::Kind::kList:
      return EvalList(e, ctx);
    case Expr::Kind::kBinary:
      return EvalBinary(e, ctx);
    case Expr::Kind::kUnary:
      return EvalUnary(e, ctx);
    case Expr::Kind::kIndex:
      return EvalIndex(e, ctx);
    case Expr::Kind::kCall:
      return EvalCall(e, ctx);
    default:  // scalar literals: answered by ScalarLiteral above
      break;
  }
  return LocError(e.loc, "cannot evaluate");
}

absl::StatusOr<std::vector<Datum>> EvalAll(const std::vector<ExprPtr>& exprs, EvalContext& ctx) {
  std::vector<Datum> out;
  for (const ExprPtr& e : exprs) {
    absl::StatusOr<Datum> d = Eval(*e, ctx);
    if (!d.ok()) return d.status();
    out.push_back(std::move(*d));
  }
  return out;
}

bool ConstraintsHold(const std::vector<ExprPtr>& where, EvalContext& ctx) {
  for (const ExprPtr& w : where) {
    auto d = Eval(*w, ctx);
    // A constraint that cannot be evaluated (e.g. a size that is not known) does not hold.
    if (!d.ok() || d->kind != Datum::Kind::kBool || !d->b) return false;
  }
  return true;
}

}  // namespace internal
}  // namespace sentier
