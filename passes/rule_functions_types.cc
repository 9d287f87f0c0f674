// rule_functions_types.cc — the rule language's functions over tensor types (ranks, sizes, shapes
// and dtypes, from the typed IR or the sample inputs' shape facts) and over the rewrite's context
// (the engine's legality check, the parameter layout the artifact stores).
#include "absl/strings/str_cat.h"
#include "passes/internal/rule_functions_parts.h"
#include "passes/shape_facts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace rule_functions {

namespace {

// shape(%v): the sizes of a tensor value; a dim that changes with the batch as "s@s2".
absl::StatusOr<Datum> Shape(const std::vector<Datum>& a, EvalContext& ctx) {
  SENTIER_ASSIGN_OR_RETURN(vs, ValuesOf(a[0]));
  if (vs.size() != 1) return Err("shape() takes one value");
  std::vector<Datum> out;
  const TensorFact* f = ctx.facts != nullptr ? ctx.facts->Find(vs[0]) : nullptr;
  if (f != nullptr) {
    // A dim that changes with the batch is written "s@s2" (its size at the sample batch and at
    // twice it), so it never equals a static dim, nor a dim that changes differently.
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
}

}  // namespace

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
                Shape};
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

}  // namespace rule_functions
}  // namespace internal
}  // namespace sentier
