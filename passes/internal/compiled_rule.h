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
ApplyResult TryApply(const CompiledRule& rule, Node* anchor, const ShapeFacts* facts,
                     const LegalityCheck& legal, std::string* error = nullptr);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_
