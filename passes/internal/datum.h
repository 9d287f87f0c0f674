// internal/datum.h — the values of the rule language: a Datum (a constant, one graph value or a
// sequence of graph values), reading a Datum from a graph constant, and the Bindings a match
// produces (captured values, sequences and constants, and the graph nodes it matched). Shared by
// the rule compiler, the matcher, expression evaluation, the rewriter and the group search. Not
// part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_DATUM_H_
#define SENTIER_PASSES_INTERNAL_DATUM_H_

#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "passes/rule_ast.h"

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

// ScalarLiteral: the value of an int, float, bool, None or string literal; nullopt for any other
// expression.
c10::optional<Datum> ScalarLiteral(const Expr& e);

// Bindings: what a match bound. Sequences of per-element constants live in `consts` as kList.
struct Bindings {
  absl::flat_hash_map<std::string, Value*> values;
  absl::flat_hash_map<std::string, std::vector<Value*>> seqs;
  absl::flat_hash_map<std::string, Datum> consts;
  absl::flat_hash_map<const Node*, int> matched;  // graph node -> pattern node id
  std::vector<Node*> matched_order;
};

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_DATUM_H_
