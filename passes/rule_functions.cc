// rule_functions.cc — the named functions (for `where` lines and rewrite arguments) and the
// named builtin transforms (for `call`) of the rule language: the tables and their registry.
//
// Functions are pure: they read bindings, the graph and shape facts, and never edit the graph.
// A function that cannot answer (a size that is not known, a value with several uses where one
// is required) returns an error, and the constraint that called it does not hold.
// Builtins edit the graph for rewrites that reshape a node's sections or list in place; each one
// checks everything it relies on before its first edit and returns false, unchanged, otherwise.
// The functions and builtins themselves live in the parts (internal/rule_functions_parts.h);
// this file holds the argument helpers they share and assembles the tables.
#include <memory>

#include "absl/strings/str_cat.h"
#include "passes/internal/rule_eval.h"
#include "passes/internal/rule_functions_parts.h"
#include "passes/shape_facts.h"
#include "re2/re2.h"

namespace sentier {
namespace internal {
namespace rule_functions {

absl::Status Err(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::StatusOr<std::vector<Value*>> ValuesOf(const Datum& d) {
  if (d.kind == Datum::Kind::kValue) return std::vector<Value*>{d.value};
  if (d.kind == Datum::Kind::kValueSeq) return d.values;
  return Err(absl::StrCat("expected graph values, got ", d.DebugString()));
}

absl::StatusOr<int64_t> IntOf(const Datum& d) {
  if (d.kind != Datum::Kind::kInt) return Err(absl::StrCat("expected an int, got ", d.DebugString()));
  return d.i;
}

// KindPattern: the op-regex argument of `fn` (producers_are, users_are, uses_by), compiled.
absl::StatusOr<std::unique_ptr<RE2>> KindPattern(const Datum& d, absl::string_view fn) {
  if (d.kind != Datum::Kind::kString) return Err(absl::StrCat(fn, ": op must be a string"));
  auto re = std::make_unique<RE2>(d.s);
  if (!re->ok()) return Err(absl::StrCat(fn, ": bad regex: ", re->error()));
  return re;
}

absl::StatusOr<std::vector<int64_t>> IntsOf(const Datum& d) {
  if (d.kind != Datum::Kind::kList) return Err(absl::StrCat("expected an int list, got ", d.DebugString()));
  std::vector<int64_t> out;
  for (const Datum& x : d.list) {
    if (x.kind != Datum::Kind::kInt) return Err("expected an int list");
    out.push_back(x.i);
  }
  return out;
}

bool IsSplitWithSizes(const Node* n) {
  static const c10::Symbol kSplitWithSizes = c10::Symbol::fromQualString("aten::split_with_sizes");
  return n->kind() == kSplitWithSizes;
}

namespace {

// Every function, from its themed parts.
FunctionTable MakeFunctions() {
  FunctionTable f;
  AddListFunctions(&f);
  AddListEditFunctions(&f);
  AddProducerFunctions(&f);
  AddUseFunctions(&f);
  AddTypeFunctions(&f);
  AddContextFunctions(&f);
  return f;
}

// Every builtin, with its documentation.
absl::flat_hash_map<std::string, BuiltinSpec> MakeBuiltins() {
  absl::flat_hash_map<std::string, BuiltinSpec> b;
  b["merge_piece_runs"] = {1,
                           "merge_piece_runs(%y): in %y = aten::cat(list, d), merge each run of "
                           ">= 2 consecutive single-use pieces of one split_with_sizes on dim d "
                           "into one piece (the split's sections are merged)",
                           MergePieceRuns};
  b["runs_to_slices"] = {2,
                         "runs_to_slices(%y, n): in %y = aten::cat(list, d), replace each run of "
                         ">= n consecutive pieces of one split on dim d by one aten::slice of the "
                         "split's input",
                         RunsToSlices};
  b["split_pieces_across_dim"] = {
      1,
      "split_pieces_across_dim(%y): in %y = aten::cat(list, e), replace every piece of one "
      "split_with_sizes on dim d != e (all of them, in order, single-use; the sections may be "
      "runtime values, which the cat needs equal) by flatten(movedim(unflatten(x, d, [n, -1]), "
      "d, e), e, e + 1), and every piece of one unbind(x, d) by flatten(movedim(x, d, e), e, "
      "e + 1)",
      SplitPiecesAcrossDim};
  b["unsqueeze_runs_to_stack"] = {
      1,
      "unsqueeze_runs_to_stack(%y): in %y = aten::cat(list, d), replace each run of >= 2 "
      "consecutive single-use pieces unsqueeze(x_k, d) by one stack([x_k, ...], d) (a list that is "
      "one such run is cat_of_unsqueezes_to_stack's)",
      UnsqueezeRunsToStack};
  b["stack_runs_to_views"] = {
      1,
      "stack_runs_to_views(%y): in %y = aten::stack(list, e), replace each run of >= 2 "
      "consecutive pieces of one unbind, or of one split_with_sizes with equal constant sections "
      "(each piece bare or reshaped to one constant shape), by one view of the source's input; "
      "the stack becomes a cat of those views and of the other members unsqueezed on e",
      StackRunsToViews};
  return b;
}

}  // namespace
}  // namespace rule_functions

const absl::flat_hash_map<std::string, FunctionSpec>& Functions() {
  static const auto* f =
      new absl::flat_hash_map<std::string, FunctionSpec>(rule_functions::MakeFunctions());
  return *f;
}

const absl::flat_hash_map<std::string, BuiltinSpec>& Builtins() {
  static const auto* b =
      new absl::flat_hash_map<std::string, BuiltinSpec>(rule_functions::MakeBuiltins());
  return *b;
}

c10::optional<int64_t> StaticRank(const Value* v, const ShapeFacts* facts) {
  if (facts != nullptr) return facts->StaticRank(v);
  ShapeFacts none;
  return none.StaticRank(v);
}

c10::optional<int64_t> StaticSize(const Value* v, int64_t dim, const ShapeFacts* facts) {
  if (facts != nullptr) return facts->StaticSize(v, dim);
  ShapeFacts none;
  return none.StaticSize(v, dim);
}

c10::optional<std::vector<int64_t>> SplitSections(const Node* split) {
  if (!rule_functions::IsSplitWithSizes(split)) return c10::nullopt;
  c10::optional<Datum> s = DatumFromConstant(split->input(1));
  if (!s || s->kind != Datum::Kind::kList) return c10::nullopt;
  std::vector<int64_t> out;
  for (const Datum& x : s->list) {
    if (x.kind != Datum::Kind::kInt) return c10::nullopt;
    out.push_back(x.i);
  }
  return out;
}

}  // namespace internal
}  // namespace sentier
