// internal/rule_functions_parts.h — the parts of the rule language's function and builtin tables.
//
// rule_functions.cc assembles the tables Functions() and Builtins() (rule_eval.h) and defines the
// argument helpers below; each part adds the functions of one theme, or defines builtins:
//   rule_functions_lists.cc      lists and sequences: lengths, sums, offsets, slices
//   rule_functions_producers.cc  the nodes that produce values: kinds, inputs, constants
//   rule_functions_uses.cc       the uses of values: how many, by which nodes
//   rule_functions_types.cc      tensor types, and the rewrite's context (legality, layout)
//   rule_functions_builtins.cc   the builtins over runs of split pieces in a cat or a stack
// Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_RULE_FUNCTIONS_PARTS_H_
#define SENTIER_PASSES_INTERNAL_RULE_FUNCTIONS_PARTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "passes/internal/rule_eval.h"
#include "re2/re2.h"

namespace sentier {
namespace internal {
namespace rule_functions {

using FunctionTable = absl::flat_hash_map<std::string, FunctionSpec>;

// Argument helpers shared by the parts (rule_functions.cc).

// Err: the error of a function that cannot answer (an InvalidArgumentError).
absl::Status Err(const std::string& msg);
// ValuesOf / IntOf / IntsOf: an argument as graph values (one or a sequence), an int, an int list.
absl::StatusOr<std::vector<Value*>> ValuesOf(const Datum& d);
absl::StatusOr<int64_t> IntOf(const Datum& d);
absl::StatusOr<std::vector<int64_t>> IntsOf(const Datum& d);
// KindPattern: the op-regex argument of `fn` (producers_are, users_are, uses_by), compiled.
absl::StatusOr<std::unique_ptr<RE2>> KindPattern(const Datum& d, absl::string_view fn);
// IsSplitWithSizes: `n` is an aten::split_with_sizes.
bool IsSplitWithSizes(const Node* n);

// The function tables, by theme: each adds its functions to `table`.

// Functions over lists and sequences that read them: lengths, sums, offsets, positions.
void AddListFunctions(FunctionTable* table);
// Functions that make new lists and sequences from old ones: slices, removals, splices.
void AddListEditFunctions(FunctionTable* table);
// Functions over the nodes that produce values: kinds, inputs, constants.
void AddProducerFunctions(FunctionTable* table);
// Functions over the uses of values: how many, by which nodes, with which inputs.
void AddUseFunctions(FunctionTable* table);
// Functions over tensor types, from the typed IR or the sample inputs' shape facts.
void AddTypeFunctions(FunctionTable* table);
// Functions over the rewrite's context: the legality check and the parameter layout.
void AddContextFunctions(FunctionTable* table);

// The builtins (rule_functions_builtins.cc; Builtins() documents them).

absl::StatusOr<bool> MergePieceRuns(const std::vector<Datum>& a, EvalContext& ctx);
absl::StatusOr<bool> RunsToSlices(const std::vector<Datum>& a, EvalContext& ctx);
absl::StatusOr<bool> SplitPiecesAcrossDim(const std::vector<Datum>& a, EvalContext& ctx);
absl::StatusOr<bool> UnsqueezeRunsToStack(const std::vector<Datum>& a, EvalContext& ctx);
absl::StatusOr<bool> StackRunsToViews(const std::vector<Datum>& a, EvalContext& ctx);

}  // namespace rule_functions
}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_FUNCTIONS_PARTS_H_
