// internal/rule_eval.h — values, bindings and the function/builtin registries shared by the rule
// compiler, the matcher and the builtin transforms. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_RULE_EVAL_H_
#define SENTIER_PASSES_INTERNAL_RULE_EVAL_H_

#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace internal {

using torch::jit::Node;
using torch::jit::Value;

// Datum: what an expression evaluates to: a constant, one graph value, or a sequence of values.
struct Datum {
  enum class Kind { kNone, kInt, kFloat, kBool, kString, kList, kValue, kValueSeq, kOpaque };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  std::vector<Datum> list;
  Value* value = nullptr;  // kValue; for constants, the graph value they came from (if any)
  std::vector<Value*> values;  // kValueSeq
  c10::IValue opaque;          // kOpaque: a constant we do not interpret (tensor, device, ...)

  static Datum Int(int64_t v) { Datum d; d.kind = Kind::kInt; d.i = v; return d; }
  static Datum Bool(bool v) { Datum d; d.kind = Kind::kBool; d.b = v; return d; }
  static Datum Float(double v) { Datum d; d.kind = Kind::kFloat; d.f = v; return d; }
  static Datum Str(std::string v) { Datum d; d.kind = Kind::kString; d.s = std::move(v); return d; }
  static Datum List(std::vector<Datum> v) { Datum d; d.kind = Kind::kList; d.list = std::move(v); return d; }
  static Datum Val(Value* v) { Datum d; d.kind = Kind::kValue; d.value = v; return d; }
  static Datum Seq(std::vector<Value*> v) { Datum d; d.kind = Kind::kValueSeq; d.values = std::move(v); return d; }

  bool IsConstant() const { return kind != Kind::kValue && kind != Kind::kValueSeq; }
  // Equal: structural equality of constants; identity of graph values.
  bool Equal(const Datum& other) const;
  std::string DebugString() const;
  // ToIValue: a constant as an IValue (ints, floats, bools, strings, None, lists of these).
  absl::StatusOr<c10::IValue> ToIValue() const;
};

// DatumFromConstant: reads a prim::Constant's value (nullopt when `v` is not a constant).
c10::optional<Datum> DatumFromConstant(Value* v);

// Bindings: what a match bound. Sequences of per-element constants live in `consts` as kList.
struct Bindings {
  absl::flat_hash_map<std::string, Value*> values;
  absl::flat_hash_map<std::string, std::vector<Value*>> seqs;
  absl::flat_hash_map<std::string, Datum> consts;
  absl::flat_hash_map<const Node*, int> matched;  // graph node -> pattern node id
  std::vector<Node*> matched_order;
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

// Helpers shared by builtins and functions.
c10::optional<int64_t> StaticRank(const Value* v, const ShapeFacts* facts);
c10::optional<int64_t> StaticSize(const Value* v, int64_t dim, const ShapeFacts* facts);
// SplitSections: for aten::split_with_sizes with constant sizes, the sizes; else nullopt.
c10::optional<std::vector<int64_t>> SplitSections(const Node* split);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_EVAL_H_
