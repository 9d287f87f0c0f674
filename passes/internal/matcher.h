// internal/matcher.h — the matcher: binds a compiled rule's pattern to the graph around one
// anchor node. Matching starts at the anchor (the rule's last match line) and walks backwards
// through inputs; every pattern line is reached through the value it defines, so a match is
// deterministic, with no backtracking. Variadic captures bind all remaining inputs (or outputs)
// of a node; `foreach` blocks then match a sub-pattern once per element of a sequence, with
// per-element names collected into sequences. `where` lines are not the matcher's: see
// expr_eval.h. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_MATCHER_H_
#define SENTIER_PASSES_INTERNAL_MATCHER_H_

#include "passes/internal/compiled_rule.h"
#include "passes/internal/datum.h"

namespace sentier {
namespace internal {

// MatchRule: matches `rule`'s pattern (main lines, then every foreach block) with `anchor` as the
// anchor node, recording what it binds in `*bindings` (which should start empty). False when the
// anchor's kind is not one the anchor line accepts or the pattern does not match; `*bindings`
// then holds a partial match and should be discarded.
bool MatchRule(const CompiledRule& rule, Node* anchor, Bindings* bindings);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_MATCHER_H_
