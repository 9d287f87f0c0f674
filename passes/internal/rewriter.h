// internal/rewriter.h — the transactional rewriter: runs a matched rule's rewrite section
// (insert, unpack, replace, call) on the graph. Either every replacement is valid (types,
// dominance, no cycle) and all uses are redirected at once, or the nodes it inserted are
// destroyed and the graph is unchanged. Also the evaluation context of one match, the outcome
// of an application and the driver's legality check, shared by the driver and the group search,
// and where a value's definition or a node sits within a block. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_REWRITER_H_
#define SENTIER_PASSES_INTERNAL_REWRITER_H_

#include <functional>
#include <string>
#include <vector>

#include "passes/internal/compiled_rule.h"
#include "passes/internal/datum.h"
#include "passes/internal/rule_eval.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace internal {

// kError: the rule matched but its rewrite failed (the graph is unchanged; `error` says why).
enum class ApplyResult { kNoMatch, kIllegal, kApplied, kError };

// LegalityCheck: returns true when the matched nodes may be rewritten (driver-supplied).
using LegalityCheck = std::function<bool(const std::vector<Node*>& matched, Node* anchor)>;

// MakeContext: the evaluation context of one match (or one group) anchored at `anchor`; with a
// non-empty `legal`, builtins may ask it about nodes beyond the match.
EvalContext MakeContext(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                        Bindings* bindings, const LegalityCheck* legal,
                        const RuleEnvironment& env = RuleEnvironment());

// Rewrite: runs `rule`'s rewrite section on the bindings of `ctx`: kApplied; kNoMatch when it
// changed nothing (a builtin declined, or every replacement was invalid); kError, with `*error`
// set, when a statement failed. The graph is unchanged unless kApplied.
ApplyResult Rewrite(const CompiledRule& rule, EvalContext& ctx, std::string* error);

// OwnerIn: the node of `block` that is `n` or contains it (in a sub-block); nullptr when `n` is
// not inside `block`.
Node* OwnerIn(Node* n, torch::jit::Block* block);

// DefinitionIn: position of `v`'s definition within `block`: the node (of `block`) that defines
// it or contains its definition; nullptr when it is defined outside (graph inputs, outer
// blocks), i.e. earliest.
Node* DefinitionIn(Value* v, torch::jit::Block* block);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_REWRITER_H_
