// internal/compiled_rule.h — a rule compiled against the operator registry, and the matcher entry
// point used by the rewrite driver. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_
#define SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "passes/internal/rule_eval.h"
#include "passes/rule_ast.h"

namespace sentier {

struct CompiledPatternNode {
  const PatternNode* ast = nullptr;
  absl::flat_hash_set<c10::Symbol> kinds;  // node kinds this line accepts
  std::vector<internal::Datum> literals;   // per argument (kLiteral args only)
};

// Definitions of names inside one scope (the main pattern, or one foreach block).
struct PatternScope {
  std::vector<int> node_ids;
  absl::flat_hash_map<std::string, std::pair<int, int>> value_def;  // %x -> (node, output)
  absl::flat_hash_map<std::string, int> seq_def;                    // %xs... -> node
};

struct CompiledForeach {
  const ForeachPattern* ast = nullptr;
  PatternScope scope;
};

struct CompiledRule {
  Rule ast;
  std::vector<CompiledPatternNode> nodes;  // main pattern nodes first, then foreach nodes
  PatternScope main;
  int anchor = 0;
  std::vector<CompiledForeach> foreach;
};

namespace internal {

// kError: the rule matched but its rewrite failed (the graph is unchanged; `error` says why).
enum class ApplyResult { kNoMatch, kIllegal, kApplied, kError };

// LegalityCheck: returns true when the matched nodes may be rewritten (driver-supplied).
using LegalityCheck = std::function<bool(const std::vector<Node*>& matched, Node* anchor)>;

// TryApply: matches `rule` with `anchor` as its anchor node; when it matches, the constraints
// hold and `legal` agrees, performs the rewrite.
ApplyResult TryApply(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                     const LegalityCheck& legal, std::string* error = nullptr);

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
                      GroupMember* out);

// ApplyGroup: rewrites `members` (same block, same key, independent) as one group.
ApplyResult ApplyGroup(const CompiledRule& rule, const std::vector<GroupMember*>& members,
                       ShapeFacts* facts, const LegalityCheck& legal, std::string* error);

// IsBefore: program order of two nodes of one block (nullptr = block start).
bool IsBefore(Node* a, Node* b);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_
