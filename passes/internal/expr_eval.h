// internal/expr_eval.h — expression evaluation: the value (a Datum) of a rule-language
// expression over a match's bindings, used for `where` constraints, group keys and rewrite
// arguments. Named functions are looked up in the registry of rule_eval.h. Not part of the
// public API.
#ifndef SENTIER_PASSES_INTERNAL_EXPR_EVAL_H_
#define SENTIER_PASSES_INTERNAL_EXPR_EVAL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "passes/internal/datum.h"
#include "passes/internal/rule_eval.h"
#include "passes/rule_ast.h"

namespace sentier {
namespace internal {

// Eval: the value of `e` in `ctx` (captures are read from ctx.bindings). Errors (an unbound
// capture, a type mismatch, a failing function) start with the expression's `file:line:col`.
absl::StatusOr<Datum> Eval(const Expr& e, EvalContext& ctx);

// EvalAll: the values of `exprs`, in order; the first error is returned.
absl::StatusOr<std::vector<Datum>> EvalAll(const std::vector<ExprPtr>& exprs, EvalContext& ctx);

// ConstraintsHold: whether every expression of `where` evaluates to true. One that cannot be
// evaluated (e.g. a size that is not known) or is not a boolean does not hold.
bool ConstraintsHold(const std::vector<ExprPtr>& where, EvalContext& ctx);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_EXPR_EVAL_H_
