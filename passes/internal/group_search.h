// internal/group_search.h — the group search: finds the members of a `group` rule (one match of
// its pattern per member, with a key), batches members with equal keys in the same block into
// groups of independent members, proves that each group's batch-following inputs have equal
// sizes for every batch, and rewrites each group once. The driver (rewrite_driver.cc) hands it
// the round's candidate anchors and records what it reports. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_GROUP_SEARCH_H_
#define SENTIER_PASSES_INTERNAL_GROUP_SEARCH_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "passes/internal/compiled_rule.h"
#include "passes/internal/datum.h"
#include "passes/internal/rewriter.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace internal {

// GroupMember: one match of a group rule's pattern, with its key and the span it occupies in its
// block: every new node of a group must come after each member's last input definition and
// before each member's first output use.
struct GroupMember {
  Node* anchor = nullptr;
  Bindings bindings;
  std::string key;
  Node* last_input_def = nullptr;    // nullptr: all inputs at block start (or movable there)
  Node* first_output_use = nullptr;  // nullptr: only the graph's return uses the outputs
};

// MatchGroupMember: matches a group rule's pattern and `where` lines at `anchor` and evaluates
// its key; false when it does not match or the key cannot be evaluated.
bool MatchGroupMember(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                      GroupMember* out, const RuleEnvironment& env = RuleEnvironment());

// GroupReport: told the outcome of every group that was tried (kNoMatch included), its number
// of members and, for kError, why the rewrite failed.
using GroupReport =
    std::function<void(ApplyResult result, size_t members, const std::string& error)>;

// ApplyGroupRule: batches the members of one group rule: members are collected in program
// order, bucketed by block and key, and each bucket is cut greedily into groups whose members are
// independent (every member's inputs are defined before any member's outputs are used; this also
// rules out any dependence between members), at most max_group long. Members are matched again
// right before their group is rewritten, since earlier groups may have replaced their inputs.
// `candidates`: the round's nodes of the anchor's kinds, in program order (nodes created during
// the round are members from the next round on, as for ordinary rules). Returns whether any
// group was rewritten.
// `env`: what rules know beyond the graph (the artifact's layout, for `param_layout()`).
bool ApplyGroupRule(const std::vector<Node*>& candidates, const CompiledRule& rule,
                    ShapeFacts* facts, const LegalityCheck& legal, const GroupReport& report,
                    const RuleEnvironment& env = RuleEnvironment());

// FollowsBatch: a tensor value whose size may change with the batch (a dynamic dim in the facts,
// or no facts at all); module parameters and constants never do.
bool FollowsBatch(Value* v, const ShapeFacts* facts);

// ProvablySameShape: `a` and `b` have equal sizes for every input the graph accepts, whatever
// the batch (see group_search.cc for the cases it can prove). `depth`: recursion depth so far.
bool ProvablySameShape(Value* a, Value* b, const ShapeFacts* facts, int depth = 0);

// HoistAfter: moves the definition of `v` (and what it needs) right after `*cursor` in `*cursor`'s
// block, advancing the cursor, when it is movable (a constant, an attribute read of the module, a
// constant int list, a read at a constant key of a list or dict the graph takes as input) and
// defined later; false when `v` is defined later and cannot move.
bool HoistAfter(Value* v, Node** cursor);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_GROUP_SEARCH_H_
