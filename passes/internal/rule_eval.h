// internal/rule_eval.h — what rule-language functions and builtins see and how they are found:
// the evaluation context of one match, the registries of named functions (for `where` lines and
// rewrite arguments) and builtin transforms (for `call`), which live in rule_functions.cc, the
// shape helpers they share, and the `file:line:col: message` error of a rule. Used by the rule
// compiler (to check names), expression evaluation, the rewriter and canonicalization passes.
// Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_RULE_EVAL_H_
#define SENTIER_PASSES_INTERNAL_RULE_EVAL_H_

#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "passes/internal/datum.h"
#include "passes/rule_ast.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace internal {

// RuleEnvironment: what rules may know beyond the graph and the facts (set by the driver).
struct RuleEnvironment {
  // The artifact stores the parameters the batching rules stack as stacked parameters
  // (`param_layout()` in rules).
  bool stacked_parameters = false;
  // Which parameter reads that layout can store inside a stored stack (`storable_parameters()`
  // in rules); unset: none.
  std::function<bool(const Value* v)> storable_parameter;
};

// EvalContext: what functions and builtins may look at.
struct EvalContext {
  torch::jit::Graph* graph = nullptr;
  Node* anchor = nullptr;
  ShapeFacts* facts = nullptr;
  Bindings* bindings = nullptr;
  std::string rule_name;
  // legal: the driver's legality check, for builtins that touch nodes beyond the match.
  std::function<bool(const std::vector<Node*>& nodes)> legal;
  RuleEnvironment env;
};

// Functions usable in `where` lines and rewrite arguments.
using FunctionImpl =
    std::function<absl::StatusOr<Datum>(const std::vector<Datum>& args, EvalContext& ctx)>;
struct FunctionSpec {
  int min_args = 0;
  int max_args = 0;  // -1: any
  std::string doc;
  FunctionImpl impl;
};
const absl::flat_hash_map<std::string, FunctionSpec>& Functions();

// Builtin transforms usable with `call name(args)` in a rewrite section. They edit the graph and
// return whether they changed it; a builtin that returns false must leave the graph unchanged.
using BuiltinImpl =
    std::function<absl::StatusOr<bool>(const std::vector<Datum>& args, EvalContext& ctx)>;
struct BuiltinSpec {
  int num_args = 0;
  std::string doc;
  BuiltinImpl impl;
};
const absl::flat_hash_map<std::string, BuiltinSpec>& Builtins();

// LocError: an InvalidArgumentError for something written at `loc`: `file:line:col: msg`.
inline absl::Status LocError(const SourceLoc& loc, const std::string& msg) {
  return absl::InvalidArgumentError(loc.ToString() + ": " + msg);
}

// Helpers shared by builtins and functions.
c10::optional<int64_t> StaticRank(const Value* v, const ShapeFacts* facts);
c10::optional<int64_t> StaticSize(const Value* v, int64_t dim, const ShapeFacts* facts);
// SplitSections: for aten::split_with_sizes with constant sizes, the sizes; else nullopt.
c10::optional<std::vector<int64_t>> SplitSections(const Node* split);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_EVAL_H_
