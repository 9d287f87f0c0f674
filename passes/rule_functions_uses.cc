// rule_functions_uses.cc — the rule language's functions over the uses of values: how many
// (uses by dead nodes, replaced earlier in the round and not yet swept, do not count), by which
// nodes, with which inputs, and what those users output.
#include "absl/strings/str_cat.h"
#include "passes/internal/rule_functions_parts.h"
#include "passes/remove_dead_nodes.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace rule_functions {

namespace {

// The single user of `v`, or an error.
absl::StatusOr<Node*> SingleUser(Value* v) {
  if (v->uses().size() != 1) {
    return Err(absl::StrCat("%", v->debugName(), " has ", v->uses().size(), " uses, not 1"));
  }
  return v->uses()[0].user;
}

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

}  // namespace

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

}  // namespace rule_functions
}  // namespace internal
}  // namespace sentier
