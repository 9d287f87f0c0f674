// rule_functions.cc — the named functions (for `where` lines and rewrite arguments) and the
// named builtin transforms (for `call`) of the rule language.
//
// Functions are pure: they read bindings, the graph and shape facts, and never edit the graph.
// A function that cannot answer (a size that is not known, a value with several uses where one
// is required) returns an error, and the constraint that called it does not hold.
// Builtins edit the graph for rewrites that reshape a node's sections or list in place; each one
// checks everything it relies on before its first edit and returns false, unchanged, otherwise.
#include <functional>
#include <memory>
#include <numeric>

#include <torch/csrc/jit/ir/constants.h>

#include "absl/strings/str_cat.h"
#include "passes/internal/rule_eval.h"
#include "passes/remove_dead_nodes.h"
#include "passes/shape_facts.h"
#include "passes/status_macros.h"
#include "re2/re2.h"

namespace sentier {
namespace internal {
namespace {

using torch::jit::Graph;
using torch::jit::WithInsertPoint;

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

// Elements of a list or a value sequence, as Datums.
absl::StatusOr<std::vector<Datum>> ItemsOf(const Datum& d) {
  if (d.kind == Datum::Kind::kList) return d.list;
  if (d.kind == Datum::Kind::kValueSeq) {
    std::vector<Datum> out;
    for (Value* v : d.values) out.push_back(Datum::Val(v));
    return out;
  }
  return Err(absl::StrCat("expected a list or a sequence, got ", d.DebugString()));
}

absl::StatusOr<Datum> Rebuild(const Datum& like, std::vector<Datum> items) {
  if (like.kind == Datum::Kind::kValueSeq) {
    std::vector<Value*> vs;
    for (const Datum& d : items) {
      if (d.kind != Datum::Kind::kValue) {
        return Err("cannot mix graph values and constants in one sequence");
      }
      vs.push_back(d.value);
    }
    return Datum::Seq(std::move(vs));
  }
  for (const Datum& d : items) {
    if (!d.IsConstant()) return Err("cannot mix graph values and constants in one list");
  }
  return Datum::List(std::move(items));
}

// The single user of `v`, or an error.
absl::StatusOr<Node*> SingleUser(Value* v) {
  if (v->uses().size() != 1) {
    return Err(absl::StrCat("%", v->debugName(), " has ", v->uses().size(), " uses, not 1"));
  }
  return v->uses()[0].user;
}

bool IsSplitWithSizes(const Node* n) {
  static const c10::Symbol kSplitWithSizes = c10::Symbol::fromQualString("aten::split_with_sizes");
  return n->kind() == kSplitWithSizes;
}

using FunctionTable = absl::flat_hash_map<std::string, FunctionSpec>;

// Every value in `d` has exactly `want` uses; uses by dead nodes (replaced earlier in the round,
// not yet swept) do not count.
absl::StatusOr<Datum> EveryValueHasLiveUses(const Datum& d, size_t want) {
  SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(d));
  for (Value* v : vs) {
    size_t live = 0;
    for (const torch::jit::Use& u : v->uses()) live += IsDeadNode(u.user) ? 0 : 1;
    if (live != want) return Datum::Bool(false);
  }
  return Datum::Bool(true);
}

// Functions over lists and sequences of ints or values: lengths, sums, offsets, slices.
void AddListFunctions(FunctionTable* table) {
  FunctionTable& f = *table;
  f["len"] = {1, 1, "len(x): number of elements of a list or sequence", [](auto& a, auto&) -> absl::StatusOr<Datum> {
                SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(a[0]));
                return Datum::Int(static_cast<int64_t>(items.size()));
              }};
  f["all_equal"] = {1, 2, "all_equal(list[, x]): every element equal (to x when given)",
                    [](auto& a, auto&) -> absl::StatusOr<Datum> {
                      SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(a[0]));
                      for (size_t k = 0; k < items.size(); ++k) {
                        const Datum& ref = a.size() == 2 ? a[1] : items[0];
                        if (!items[k].Equal(ref)) return Datum::Bool(false);
                      }
                      return Datum::Bool(true);
                    }};
  f["iota"] = {1, 1, "iota(list): the list is exactly [0, 1, ..., n-1]",
               [](auto& a, auto&) -> absl::StatusOr<Datum> {
                 SENTIER_ASSIGN_OR_RETURN(xs, IntsOf(a[0]));
                 for (size_t k = 0; k < xs.size(); ++k) {
                   if (xs[k] != static_cast<int64_t>(k)) return Datum::Bool(false);
                 }
                 return Datum::Bool(!xs.empty());
               }};
  f["consecutive"] = {1, 1, "consecutive(list): each int is the previous plus one",
                      [](auto& a, auto&) -> absl::StatusOr<Datum> {
                        SENTIER_ASSIGN_OR_RETURN(xs, IntsOf(a[0]));
                        for (size_t k = 1; k < xs.size(); ++k) {
                          if (xs[k] != xs[k - 1] + 1) return Datum::Bool(false);
                        }
                        return Datum::Bool(!xs.empty());
                      }};
  f["sum"] = {1, 1, "sum(list): sum of ints", [](auto& a, auto&) -> absl::StatusOr<Datum> {
                SENTIER_ASSIGN_OR_RETURN(xs, IntsOf(a[0]));
                return Datum::Int(std::accumulate(xs.begin(), xs.end(), int64_t{0}));
              }};
  f["offsets"] = {1, 1, "offsets(list): where each int's run starts when they are laid end to end: [0, a, a+b, ...]",
                  [](auto& a, auto&) -> absl::StatusOr<Datum> {
                    SENTIER_ASSIGN_OR_RETURN(xs, IntsOf(a[0]));
                    std::vector<Datum> out;
                    int64_t at = 0;
                    for (int64_t x : xs) {
                      out.push_back(Datum::Int(at));
                      at += x;
                    }
                    return Datum::List(std::move(out));
                  }};
  f["index"] = {2, 2, "index(list, x): the position of the first element equal to x (fails when none is)",
                [](auto& a, auto&) -> absl::StatusOr<Datum> {
                  SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(a[0]));
                  for (size_t k = 0; k < items.size(); ++k) {
                    if (items[k].Equal(a[1])) return Datum::Int(static_cast<int64_t>(k));
                  }
                  return Err("index(): no element is equal");
                }};
  f["min"] = {1, 1, "min(list): smallest int", [](auto& a, auto&) -> absl::StatusOr<Datum> {
                SENTIER_ASSIGN_OR_RETURN(xs, IntsOf(a[0]));
                if (xs.empty()) return Err("min of an empty list");
                return Datum::Int(*std::min_element(xs.begin(), xs.end()));
              }};
  f["max"] = {1, 1, "max(list): largest int", [](auto& a, auto&) -> absl::StatusOr<Datum> {
                SENTIER_ASSIGN_OR_RETURN(xs, IntsOf(a[0]));
                if (xs.empty()) return Err("max of an empty list");
                return Datum::Int(*std::max_element(xs.begin(), xs.end()));
              }};
  f["slice"] = {3, 3, "slice(x, a, b): elements a..b-1 of a list or sequence (clamped)",
                [](auto& a, auto&) -> absl::StatusOr<Datum> {
                  SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(a[0]));
                  SENTIER_ASSIGN_OR_RETURN(lo, IntOf(a[1]));
                  SENTIER_ASSIGN_OR_RETURN(hi, IntOf(a[2]));
                  int64_t n = static_cast<int64_t>(items.size());
                  lo = std::max<int64_t>(0, std::min(lo, n));
                  hi = std::max<int64_t>(lo, std::min(hi, n));
                  return Rebuild(a[0], std::vector<Datum>(items.begin() + lo, items.begin() + hi));
                }};
  f["remove"] = {2, 2, "remove(x, i): the list or sequence without element i",
                 [](auto& a, auto&) -> absl::StatusOr<Datum> {
                   SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(a[0]));
                   SENTIER_ASSIGN_OR_RETURN(i, IntOf(a[1]));
                   if (i < 0 || i >= static_cast<int64_t>(items.size())) return Err("remove: index out of range");
                   items.erase(items.begin() + i);
                   return Rebuild(a[0], std::move(items));
                 }};
  f["splice"] = {3, 3, "splice(list, i, other): the list with element i replaced by the elements of other",
                 [](auto& a, auto&) -> absl::StatusOr<Datum> {
                   SENTIER_ASSIGN_OR_RETURN(items, ItemsOf(a[0]));
                   SENTIER_ASSIGN_OR_RETURN(i, IntOf(a[1]));
                   SENTIER_ASSIGN_OR_RETURN(other, ItemsOf(a[2]));
                   if (i < 0 || i >= static_cast<int64_t>(items.size())) return Err("splice: index out of range");
                   items.erase(items.begin() + i);
                   items.insert(items.begin() + i, other.begin(), other.end());
                   return Rebuild(a[0], std::move(items));
                 }};
}

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
      [](auto& a, auto&) -> absl::StatusOr<Datum> {
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
      }};
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
                 [](auto& a, auto&) -> absl::StatusOr<Datum> {
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
                 }};
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
      [](auto& a, auto&) -> absl::StatusOr<Datum> {
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
      }};
}

// Functions over the uses of values: how many, by which nodes, with which inputs.
void AddUseFunctions(FunctionTable* table) {
  FunctionTable& f = *table;
  f["single_use"] = {1, 1,
                     "single_use(v or vs...): every value has exactly one use (uses by dead nodes, "
                     "replaced earlier in the round and not yet swept, do not count)",
                     [](auto& a, auto&) { return EveryValueHasLiveUses(a[0], 1); }};
  f["unused"] = {1, 1,
                 "unused(v or vs...): no value has a use (uses by dead nodes do not count): the "
                 "outputs of a many-output node that a rewrite does not replace",
                 [](auto& a, auto&) { return EveryValueHasLiveUses(a[0], 0); }};
  f["outputs"] = {1, 1, "outputs(%v): every output of the node that produces %v, in order",
                  [](auto& a, auto&) -> absl::StatusOr<Datum> {
                    SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                    if (vs.size() != 1) return Err("outputs() takes one value");
                    auto outs = vs[0]->node()->outputs();
                    return Datum::Seq(std::vector<Value*>(outs.begin(), outs.end()));
                  }};
  f["users_are"] = {3, 3,
                    "users_are(vs..., \"op-regex\", n): each value has exactly one use, as input 0 "
                    "of a node of that kind with n inputs",
                    [](auto& a, auto&) -> absl::StatusOr<Datum> {
                      SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                      SENTIER_ASSIGN_OR_RETURN(re, KindPattern(a[1], "users_are"));
                      SENTIER_ASSIGN_OR_RETURN(n, IntOf(a[2]));
                      for (Value* v : vs) {
                        if (v->uses().size() != 1) return Datum::Bool(false);
                        const torch::jit::Use& u = v->uses()[0];
                        if (u.offset != 0 || !RE2::FullMatch(u.user->kind().toQualString(), *re) ||
                            static_cast<int64_t>(u.user->inputs().size()) != n) {
                          return Datum::Bool(false);
                        }
                      }
                      return Datum::Bool(true);
                    }};
  f["uses_by"] = {3, 3,
                  "uses_by(%v, \"op-regex\", i): how many live nodes of a kind that fully matches the "
                  "RE2 take %v as input i (uses by dead nodes do not count)",
                  [](auto& a, auto&) -> absl::StatusOr<Datum> {
                    SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                    if (vs.size() != 1) return Err("uses_by() takes one value");
                    SENTIER_ASSIGN_OR_RETURN(re, KindPattern(a[1], "uses_by"));
                    SENTIER_ASSIGN_OR_RETURN(i, IntOf(a[2]));
                    int64_t n = 0;
                    for (const torch::jit::Use& u : vs[0]->uses()) {
                      n += !IsDeadNode(u.user) && static_cast<int64_t>(u.offset) == i &&
                           RE2::FullMatch(u.user->kind().toQualString(), *re);
                    }
                    return Datum::Int(n);
                  }};
  f["user_outputs"] = {1, 1, "user_outputs(vs...): the first output of each value's single user",
                       [](auto& a, auto&) -> absl::StatusOr<Datum> {
                         SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                         std::vector<Value*> out;
                         for (Value* v : vs) {
                           SENTIER_ASSIGN_OR_RETURN(user, SingleUser(v));
                           if (user->outputs().empty()) return Err("user has no output");
                           out.push_back(user->output(0));
                         }
                         return Datum::Seq(std::move(out));
                       }};
  f["user_const_input"] = {2, 2,
                           "user_const_input(vs..., i): constant input i of each value's single user",
                           [](auto& a, auto&) -> absl::StatusOr<Datum> {
                             SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                             SENTIER_ASSIGN_OR_RETURN(i, IntOf(a[1]));
                             std::vector<Datum> out;
                             for (Value* v : vs) {
                               SENTIER_ASSIGN_OR_RETURN(user, SingleUser(v));
                               if (i < 0 || i >= static_cast<int64_t>(user->inputs().size())) {
                                 return Err("user_const_input: index out of range");
                               }
                               c10::optional<Datum> d = DatumFromConstant(user->input(i));
                               if (!d) return Err("user_const_input: input is not a constant");
                               out.push_back(*d);
                             }
                             return Datum::List(std::move(out));
                           }};
}

// Functions over tensor types, from the typed IR or the sample inputs' shape facts.
void AddTypeFunctions(FunctionTable* table) {
  FunctionTable& f = *table;
  f["rank"] = {1, 1, "rank(%v): number of dims of a tensor value (needs a typed IR or sample inputs)",
               [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                 SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                 if (vs.size() != 1) return Err("rank() takes one value");
                 c10::optional<int64_t> r = StaticRank(vs[0], ctx.facts);
                 if (!r) return Err("rank not known");
                 return Datum::Int(*r);
               }};
  f["size"] = {2, 2, "size(%v, d): static size of dim d (never a dynamic dim such as the batch)",
               [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                 SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                 SENTIER_ASSIGN_OR_RETURN(d, IntOf(a[1]));
                 if (vs.size() != 1) return Err("size() takes one value");
                 c10::optional<int64_t> s = StaticSize(vs[0], d, ctx.facts);
                 if (!s) return Err("size not known");
                 return Datum::Int(*s);
               }};
  f["shape"] = {1, 1,
                "shape(%v): the sizes of a tensor value on the sample inputs; a dim that changes "
                "with the batch is the string \"s@s2\" (sizes at the sample batch and at twice "
                "it) (needs --inputs or a complete IR type)",
                [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                  SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                  if (vs.size() != 1) return Err("shape() takes one value");
                  std::vector<Datum> out;
                  const TensorFact* f = ctx.facts != nullptr ? ctx.facts->Find(vs[0]) : nullptr;
                  if (f != nullptr) {
                    // A dim that changes with the batch is written "s@s2" (its size at the
                    // sample batch and at twice it), so it never equals a static dim, nor a
                    // dim that changes differently.
                    for (size_t d = 0; d < f->sizes.size(); ++d) {
                      if (!f->dynamic[d]) {
                        out.push_back(Datum::Int(f->sizes[d]));
                      } else {
                        int64_t s2 = d < f->sizes_at_double_batch.size() ? f->sizes_at_double_batch[d] : -1;
                        out.push_back(Datum::Str(absl::StrCat(f->sizes[d], "@", s2)));
                      }
                    }
                    return Datum::List(std::move(out));
                  }
                  auto t = vs[0]->type()->template cast<c10::TensorType>();
                  auto sizes = t ? t->sizes().concrete_sizes() : c10::nullopt;
                  if (!sizes) return Err("shape not known");
                  for (int64_t s : *sizes) out.push_back(Datum::Int(s));
                  return Datum::List(std::move(out));
                }};
  f["dtype"] = {1, 1, "dtype(%v): the dtype of a tensor value, as a string (\"Float\")",
                [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                  SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                  if (vs.size() != 1) return Err("dtype() takes one value");
                  const TensorFact* f = ctx.facts != nullptr ? ctx.facts->Find(vs[0]) : nullptr;
                  if (f != nullptr) return Datum::Str(c10::toString(f->dtype));
                  auto t = vs[0]->type()->template cast<c10::TensorType>();
                  if (!t || !t->scalarType()) return Err("dtype not known");
                  return Datum::Str(c10::toString(*t->scalarType()));
                }};
  f["dtypes"] = {1, 1, "dtypes(vs...): the dtype of each tensor value, as a list of strings",
                 [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                   SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                   std::vector<Datum> out;
                   for (Value* v : vs) {
                     const TensorFact* f = ctx.facts != nullptr ? ctx.facts->Find(v) : nullptr;
                     if (f != nullptr) {
                       out.push_back(Datum::Str(c10::toString(f->dtype)));
                       continue;
                     }
                     auto t = v->type()->template cast<c10::TensorType>();
                     if (!t || !t->scalarType()) return Err("dtype not known");
                     out.push_back(Datum::Str(c10::toString(*t->scalarType())));
                   }
                   return Datum::List(std::move(out));
                 }};
  f["sizes_at"] = {2, 2, "sizes_at(vs..., d): the static size of dim d of each value (a list)",
                   [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                     SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                     SENTIER_ASSIGN_OR_RETURN(d, IntOf(a[1]));
                     std::vector<Datum> out;
                     for (Value* v : vs) {
                       c10::optional<int64_t> s = StaticSize(v, d, ctx.facts);
                       if (!s) return Err("size not known");
                       out.push_back(Datum::Int(*s));
                     }
                     return Datum::List(std::move(out));
                   }};
}

// Functions over the rewrite's context: the legality check and the parameter layout.
void AddContextFunctions(FunctionTable* table) {
  FunctionTable& f = *table;
  f["may_rewrite"] = {1, 1,
                      "may_rewrite(vs...): the nodes that produce the values pass the engine's "
                      "legality check (no mutation, no aliased writes), as matched nodes do: for "
                      "nodes a rule reaches through functions (addends, inputs_of)",
                      [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
                        SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
                        std::vector<Node*> nodes;
                        for (Value* v : vs) {
                          if (v->node()->kind() == c10::prim::Param) return Datum::Bool(false);
                          nodes.push_back(v->node());
                        }
                        return Datum::Bool(!ctx.legal || ctx.legal(nodes));
                      }};
  f["param_layout"] = {0, 0,
                       "param_layout(): \"stacked\" when the artifact stores the parameters the "
                       "batching rules stack as stacked parameters, else \"original\"",
                       [](auto&, auto& ctx) -> absl::StatusOr<Datum> {
                         return Datum::Str(ctx.env.stacked_parameters ? "stacked" : "original");
                       }};
  f["storable_parameters"] = {
      1, 1,
      "storable_parameters(vs...): the layout is stacked and each value is a parameter that a "
      "stored stack can hold: the only tensor of a module other than the root, which "
      "--param_layout=stacked then moves out whole (passes/stacked_parameters.h)",
      [](auto& a, EvalContext& ctx) -> absl::StatusOr<Datum> {
        SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
        if (!ctx.env.stacked_parameters || !ctx.env.storable_parameter) return Datum::Bool(false);
        for (Value* v : vs) {
          if (!ctx.env.storable_parameter(v)) return Datum::Bool(false);
        }
        return Datum::Bool(true);
      }};
}

FunctionTable MakeFunctions() {
  FunctionTable f;
  AddListFunctions(&f);
  AddProducerFunctions(&f);
  AddUseFunctions(&f);
  AddTypeFunctions(&f);
  AddContextFunctions(&f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Builtins over cat(list, d) whose inputs contain runs of consecutive split pieces.

struct PieceRun {
  size_t first = 0;  // index in the cat list
  size_t count = 0;
  Node* unpack = nullptr;
  Node* split = nullptr;
  size_t piece_begin = 0;  // index of the first piece in the unpack's outputs
};

// Pieces of `split` (split_with_sizes with constant sizes, or split with a constant int size)
// have known offsets along the split dim.
c10::optional<std::vector<int64_t>> PieceOffsets(Node* split, size_t num_pieces) {
  c10::optional<Datum> s = DatumFromConstant(split->input(1));
  if (!s) return c10::nullopt;
  std::vector<int64_t> offsets = {0};
  if (s->kind == Datum::Kind::kList) {
    if (s->list.size() != num_pieces) return c10::nullopt;
    for (const Datum& x : s->list) {
      if (x.kind != Datum::Kind::kInt) return c10::nullopt;
      offsets.push_back(offsets.back() + x.i);
    }
    return offsets;
  }
  if (s->kind == Datum::Kind::kInt && split->kind() == c10::aten::split) {
    for (size_t k = 0; k < num_pieces; ++k) offsets.push_back(offsets.back() + s->i);
    return offsets;
  }
  return c10::nullopt;
}

// Finds maximal runs (length >= min_len) of consecutive pieces of one split on dim `d`.
std::vector<PieceRun> FindRuns(Node* list, int64_t d, size_t min_len, bool need_single_use) {
  std::vector<PieceRun> runs;
  auto piece_of = [&](Value* v, Node** unpack, Node** split) {
    Node* u = v->node();
    if (u->kind() != c10::prim::ListUnpack) return false;
    Node* s = u->input(0)->node();
    if (s->kind() != c10::aten::split && !IsSplitWithSizes(s)) return false;
    if (s->inputs().size() != 3) return false;
    c10::optional<Datum> dim = DatumFromConstant(s->input(2));
    if (!dim || dim->kind != Datum::Kind::kInt || dim->i != d) return false;
    if (need_single_use && v->uses().size() != 1) return false;
    *unpack = u;
    *split = s;
    return true;
  };
  auto ins = list->inputs();
  size_t k = 0;
  while (k < ins.size()) {
    Node *u = nullptr, *s = nullptr;
    if (!piece_of(ins[k], &u, &s)) {
      ++k;
      continue;
    }
    size_t j = k + 1;
    while (j < ins.size()) {
      Node *u2 = nullptr, *s2 = nullptr;
      if (!piece_of(ins[j], &u2, &s2) || u2 != u ||
          ins[j]->offset() != ins[j - 1]->offset() + 1) {
        break;
      }
      ++j;
    }
    if (j - k >= min_len) {
      PieceRun r;
      r.first = k;
      r.count = j - k;
      r.unpack = u;
      r.split = s;
      r.piece_begin = ins[k]->offset();
      runs.push_back(r);
    }
    k = j;
  }
  return runs;
}

// Common checks; returns the cat's ListConstruct and dim.
bool CatParts(Value* y, Node** list, int64_t* d) {
  Node* cat = y->node();
  if (cat->kind() != c10::aten::cat || cat->inputs().size() != 2) return false;
  Node* l = cat->input(0)->node();
  if (l->kind() != c10::prim::ListConstruct || cat->input(0)->uses().size() != 1) return false;
  c10::optional<Datum> dim = DatumFromConstant(cat->input(1));
  if (!dim || dim->kind != Datum::Kind::kInt) return false;
  *list = l;
  *d = dim->i;
  return true;
}

// merge_piece_runs(%y): in cat(list, d), a run of >= 2 consecutive single-use pieces of one
// split_with_sizes on dim d becomes one piece: the split's sections of the run are merged (or,
// when the run is every piece, the split's input is used).
absl::StatusOr<bool> MergePieceRuns(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("merge_piece_runs takes the cat's output");
  Node* list = nullptr;
  int64_t d = 0;
  if (!CatParts(a[0].value, &list, &d)) return false;
  for (const PieceRun& run : FindRuns(list, d, 2, /*need_single_use=*/true)) {
    if (!IsSplitWithSizes(run.split)) continue;
    size_t n = run.unpack->outputs().size();
    c10::optional<std::vector<int64_t>> offsets = PieceOffsets(run.split, n);
    if (!offsets) continue;
    if (run.split->owningBlock() != list->owningBlock()) continue;
    if (ctx.legal && !ctx.legal({run.split, run.unpack})) continue;
    Graph* g = list->owningGraph();
    Value* merged = nullptr;
    if (run.count == n) {
      merged = run.split->input(0);
    } else {
      std::vector<int64_t> sizes;
      for (size_t k = 0; k < n; ++k) {
        int64_t sz = (*offsets)[k + 1] - (*offsets)[k];
        if (k == run.piece_begin) {
          sz = (*offsets)[run.piece_begin + run.count] - (*offsets)[run.piece_begin];
        } else if (k > run.piece_begin && k < run.piece_begin + run.count) {
          continue;
        }
        sizes.push_back(sz);
      }
      WithInsertPoint guard(run.unpack->next());
      Value* new_sizes = g->insertConstant(c10::IValue(sizes));
      Value* new_split = g->insert(c10::Symbol::fromQualString("aten::split_with_sizes"),
                                   {run.split->input(0), new_sizes, run.split->input(2)});
      Node* new_unpack = g->insertNode(g->createListUnpack(new_split, sizes.size()));
      size_t out = 0;
      for (size_t k = 0; k < n; ++k) {
        if (k > run.piece_begin && k < run.piece_begin + run.count) continue;
        new_unpack->output(out)->setType(run.unpack->output(k)->type());
        if (k != run.piece_begin) run.unpack->output(k)->replaceAllUsesWith(new_unpack->output(out));
        if (k == run.piece_begin) merged = new_unpack->output(out);
        ++out;
      }
    }
    // Edit the (single-use) list: the run's first slot gets the merged piece, the rest go.
    list->replaceInput(run.first, merged);
    for (size_t k = run.first + run.count - 1; k > run.first; --k) list->removeInput(k);
    return true;
  }
  return false;
}

// runs_to_slices(%y, min_len): in cat(list, d), each run of >= min_len consecutive pieces of one
// split on dim d (pieces may have other uses) becomes one slice of the split's input.
absl::StatusOr<bool> RunsToSlices(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("runs_to_slices takes the cat's output");
  SENTIER_ASSIGN_OR_RETURN(min_len, IntOf(a[1]));
  Node* list = nullptr;
  int64_t d = 0;
  if (!CatParts(a[0].value, &list, &d)) return false;
  std::vector<PieceRun> runs =
      FindRuns(list, d, static_cast<size_t>(std::max<int64_t>(2, min_len)), false);
  bool changed = false;
  // Back to front so that list indices of earlier runs stay valid.
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    const PieceRun& run = *it;
    c10::optional<std::vector<int64_t>> offsets =
        PieceOffsets(run.split, run.unpack->outputs().size());
    if (!offsets) continue;
    if (ctx.legal && !ctx.legal({run.split, run.unpack})) continue;
    Graph* g = list->owningGraph();
    WithInsertPoint guard(list);
    int64_t start = (*offsets)[run.piece_begin];
    int64_t end = (*offsets)[run.piece_begin + run.count];
    Value* slice = g->insert(c10::aten::slice, {run.split->input(0), d, start, end, 1});
    list->replaceInput(run.first, slice);
    for (size_t k = run.first + run.count - 1; k > run.first; --k) list->removeInput(k);
    changed = true;
  }
  return changed;
}

// split_pieces_across_dim(%y): in cat(list, e), every piece of one split_with_sizes on dim d != e,
// or of one unbind on any dim d, in order, each used only there: the run becomes one tensor,
// flatten(movedim(unflatten(x, d, [n, -1]), d, e), e, e + 1) for the split and
// flatten(movedim(x, d, e), e, e + 1) for the unbind. The split's sections may be values known
// only when the graph runs (a batched lookup's bags per member): cat on e needs its inputs'
// sizes equal on every other dim, d among them, so wherever the original runs the sections are
// equal. Where they are not, the original raises; the reshape raises too unless the rows divide
// evenly.
absl::StatusOr<bool> SplitPiecesAcrossDim(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("split_pieces_across_dim takes the cat's output");
  Node* list = nullptr;
  int64_t e = 0;
  if (!CatParts(a[0].value, &list, &e) || e < 0) return false;
  auto ins = list->inputs();
  for (size_t k = 0; k + 1 < ins.size(); ++k) {
    Node* unpack = ins[k]->node();
    if (unpack->kind() != c10::prim::ListUnpack || ins[k]->offset() != 0) continue;
    Node* source = unpack->input(0)->node();
    bool unbind = source->kind() == c10::aten::unbind && source->inputs().size() == 2;
    if (!unbind && (!IsSplitWithSizes(source) || source->inputs().size() != 3)) continue;
    c10::optional<Datum> dim = DatumFromConstant(source->inputs().back());
    if (!dim || dim->kind != Datum::Kind::kInt || dim->i < 0 || (!unbind && dim->i == e)) continue;
    size_t n = unpack->outputs().size();
    if (n < 2 || k + n > ins.size()) continue;
    bool run = true;
    for (size_t j = 0; j < n && run; ++j) {
      run = ins[k + j] == unpack->output(j) && ins[k + j]->uses().size() == 1;
    }
    if (!run || source->owningBlock() != list->owningBlock()) continue;
    // The pieces' rank: the unbind's input has one dim more.
    c10::optional<int64_t> rank = StaticRank(ins[k], ctx.facts);
    if (!rank || dim->i > *rank || (!unbind && dim->i == *rank) || e >= *rank) continue;
    if (ctx.legal && !ctx.legal({source, unpack})) continue;
    Graph* g = list->owningGraph();
    WithInsertPoint guard(list);
    Value* u = source->input(0);
    if (!unbind) {
      std::vector<int64_t> shape = {static_cast<int64_t>(n), -1};
      u = g->insert(c10::Symbol::fromQualString("aten::unflatten"), {u, dim->i, c10::IValue(shape)});
    }
    Value* m = g->insert(c10::Symbol::fromQualString("aten::movedim"), {u, dim->i, e});
    Value* f = g->insert(c10::aten::flatten, {m, e, e + 1});
    list->replaceInput(k, f);
    for (size_t j = k + n - 1; j > k; --j) list->removeInput(j);
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// stack_runs_to_views(%y): stack(list, e) whose list holds runs of consecutive pieces of one
// unbind or of one split with equal sections, each piece possibly reshaped to one constant shape.

// A stack member read as piece `index` of `source` (aten::unbind, or split_with_sizes with
// constant sections) on dim `dim`, through an optional reshape/view to the constant `shape`.
struct StackMember {
  Node* source = nullptr;
  size_t index = 0;
  int64_t dim = 0;
  c10::optional<std::vector<int64_t>> shape;
};

c10::optional<StackMember> AsStackMember(Value* v) {
  StackMember m;
  Node* n = v->node();
  if ((n->kind() == c10::aten::reshape || n->kind() == c10::aten::view) && n->inputs().size() == 2) {
    c10::optional<Datum> shape = DatumFromConstant(n->input(1));
    if (!shape) return c10::nullopt;
    absl::StatusOr<std::vector<int64_t>> dims = IntsOf(*shape);
    if (!dims.ok()) return c10::nullopt;
    m.shape = *std::move(dims);
    v = n->input(0);
    n = v->node();
  }
  if (n->kind() != c10::prim::ListUnpack) return c10::nullopt;
  Node* s = n->input(0)->node();
  bool unbind = s->kind() == c10::aten::unbind && s->inputs().size() == 2;
  if (!unbind && (!IsSplitWithSizes(s) || s->inputs().size() != 3)) return c10::nullopt;
  c10::optional<Datum> dim = DatumFromConstant(s->inputs().back());
  if (!dim || dim->kind != Datum::Kind::kInt || dim->i < 0) return c10::nullopt;
  m.source = s;
  m.index = v->offset();
  m.dim = dim->i;
  return m;
}

// A run of stack members [first, first + count) that are consecutive pieces of one source.
struct StackRun {
  size_t first = 0;
  size_t count = 0;
  StackMember head;
};

// Section sizes of a source's pieces (1 for an unbind's), or nullopt when not constant.
c10::optional<std::vector<int64_t>> SourceSections(Node* source) {
  if (source->kind() == c10::aten::unbind) {
    Node* unpack = source->output()->uses()[0].user;
    return std::vector<int64_t>(unpack->outputs().size(), 1);
  }
  return SplitSections(source);
}

// How many zero gradients the rewrite adds to the backward of the split or unbind behind
// `unpack`: a piece that only `list` takes (directly, or through a reshape or view only `list`
// uses) loses its last use, and when another piece keeps a use the source stays and its backward
// fills a zero gradient for each such piece. None when the source goes with the stack. At most
// one is allowed. Measured with the conformance set (testdata/optimus_conformance): one such
// piece still paid on the H200 (move_reshape_out_of_split_stack 13 -> 12 CUDA kernels per
// training step, split_stack_to_cats 17 -> 13); two did not (split_stack_to_cats_different_dim
// 15 -> 16, though 14 -> 13 launches on the CPU); seven cost more than the stack saved even on
// the CPU (unbind_stack_to_slices 10 -> 15 launches).
int64_t ZeroGradientsAdded(Node* unpack, Node* list) {
  int64_t orphaned = 0;
  bool source_stays = false;
  for (Value* piece : unpack->outputs()) {
    bool only_list = true;
    for (const torch::jit::Use& u : piece->uses()) {
      Node* user = u.user;
      bool reshaped = (user->kind() == c10::aten::reshape || user->kind() == c10::aten::view) &&
                      user->output()->uses().size() == 1 &&
                      user->output()->uses()[0].user == list;
      only_list = only_list && (user == list || reshaped);
    }
    if (piece->uses().empty()) continue;
    if (only_list) ++orphaned;
    else source_stays = true;
  }
  return source_stays ? orphaned : 0;
}
constexpr int64_t kMaxZeroGradientsAdded = 1;

std::vector<StackRun> FindStackRuns(at::ArrayRef<Value*> members) {
  std::vector<c10::optional<StackMember>> read;
  for (Value* v : members) read.push_back(AsStackMember(v));
  auto continues = [&](size_t k) {
    const StackMember& a = *read[k - 1];
    const StackMember& b = *read[k];
    if (b.source != a.source || b.index != a.index + 1 || b.shape != a.shape) return false;
    c10::optional<std::vector<int64_t>> sections = SourceSections(a.source);
    return sections && (*sections)[a.index] == (*sections)[b.index] && (*sections)[a.index] > 0;
  };
  std::vector<StackRun> runs;
  size_t k = 0;
  while (k < members.size()) {
    if (!read[k] || read[k]->source->output()->uses().size() != 1) {
      ++k;
      continue;
    }
    size_t j = k + 1;
    while (j < members.size() && read[j] && continues(j)) ++j;
    if (j - k >= 2) runs.push_back({k, j - k, *read[k]});
    k = j;
  }
  return runs;
}

// The run as one view of its source's input, shaped like stack(run, e): the run's sections as one
// slice, unflattened to [n, s] for a split, the reshape applied per piece as one over the run.
Value* StackRunAsView(Graph* g, const StackRun& run, int64_t e) {
  Node* source = run.head.source;
  bool unbind = source->kind() == c10::aten::unbind;
  std::vector<int64_t> sections = *SourceSections(source);
  int64_t d = run.head.dim;
  int64_t n = static_cast<int64_t>(run.count);
  int64_t section = sections[run.head.index];
  int64_t begin = std::accumulate(sections.begin(), sections.begin() + run.head.index, int64_t{0});
  Value* v = source->input(0);
  if (run.count != sections.size()) v = g->insert(c10::aten::slice, {v, d, begin, begin + n * section, 1});
  if (!unbind) {
    v = g->insert(c10::Symbol::fromQualString("aten::unflatten"),
                  {v, d, c10::IValue(std::vector<int64_t>{n, section})});
  }
  auto movedim = [&](Value* x, int64_t from, int64_t to) {
    return from == to ? x : g->insert(c10::Symbol::fromQualString("aten::movedim"), {x, from, to});
  };
  if (!run.head.shape) return movedim(v, d, e);
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), run.head.shape->begin(), run.head.shape->end());
  v = g->insert(c10::aten::reshape, {movedim(v, d, 0), c10::IValue(shape)});
  return movedim(v, 0, e);
}

// stack(list, e) with every run of >= 2 consecutive pieces (of one unbind on any dim, or of one
// split_with_sizes with equal constant sections on any dim; each piece bare or reshaped to one
// constant shape) == cat([.., unsqueeze(m, e), .., view of the run, ..], e); the stack itself
// when the list is one run. A piece's elements in row-major order are those of the source's
// input at that index along the split dim, so the per-piece reshape is one reshape of the run
// moved to the front. The sources may have other uses: they stay.
absl::StatusOr<bool> StackRunsToViews(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("stack_runs_to_views takes the stack's output");
  Node* stack = a[0].value->node();
  if (stack->kind() != c10::aten::stack || stack->inputs().size() != 2) return false;
  Node* list = stack->input(0)->node();
  c10::optional<Datum> dim = DatumFromConstant(stack->input(1));
  if (list->kind() != c10::prim::ListConstruct || stack->input(0)->uses().size() != 1 || !dim ||
      dim->kind != Datum::Kind::kInt || dim->i < 0) {
    return false;
  }
  int64_t e = dim->i;
  std::vector<StackRun> runs;
  for (const StackRun& run : FindStackRuns(list->inputs())) {
    Node* unpack = run.head.source->output()->uses()[0].user;
    if (run.head.source->owningBlock() != stack->owningBlock()) continue;
    if (ZeroGradientsAdded(unpack, list) > kMaxZeroGradientsAdded) continue;
    if (ctx.legal && !ctx.legal({run.head.source, unpack})) continue;
    runs.push_back(run);
  }
  if (runs.empty()) return false;
  Graph* g = stack->owningGraph();
  WithInsertPoint guard(stack);
  std::vector<Value*> parts;
  auto members = list->inputs();
  size_t next_run = 0;
  for (size_t k = 0; k < members.size();) {
    if (next_run < runs.size() && runs[next_run].first == k) {
      parts.push_back(StackRunAsView(g, runs[next_run], e));
      k += runs[next_run++].count;
    } else {
      parts.push_back(g->insert(c10::aten::unsqueeze, {members[k++], e}));
    }
  }
  Value* out = parts[0];
  if (parts.size() > 1) {
    Value* joined = g->insertNode(g->createList(c10::TensorType::get(), parts))->output();
    out = g->insert(c10::aten::cat, {joined, e});
  }
  out->setType(a[0].value->type());
  a[0].value->replaceAllUsesWith(out);
  return true;
}

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

const absl::flat_hash_map<std::string, FunctionSpec>& Functions() {
  static const auto* f = new absl::flat_hash_map<std::string, FunctionSpec>(MakeFunctions());
  return *f;
}

const absl::flat_hash_map<std::string, BuiltinSpec>& Builtins() {
  static const auto* b = new absl::flat_hash_map<std::string, BuiltinSpec>(MakeBuiltins());
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
  if (!IsSplitWithSizes(split)) return c10::nullopt;
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
