// rule_functions_lists.cc — the rule language's functions over lists and sequences (of ints,
// constants or graph values): lengths, predicates on the elements, sums, offsets and positions,
// and new lists made of old ones (slices, removals, splices).
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "passes/internal/rule_functions_parts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace rule_functions {

namespace {

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

// A list like `like` (a value sequence, or a list of constants) holding `items`.
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

}  // namespace

// Functions over lists and sequences of ints or values: lengths, sums, offsets, positions.
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
}

// Functions that make a list or sequence from another: slices, removals, splices.
void AddListEditFunctions(FunctionTable* table) {
  FunctionTable& f = *table;
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

}  // namespace rule_functions
}  // namespace internal
}  // namespace sentier
