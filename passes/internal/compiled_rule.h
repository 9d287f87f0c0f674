// internal/compiled_rule.h — a rule compiled against the operator registry (the output of the
// rule compiler, rule_compiler.h): its pattern lines with the node kinds each accepts and their
// literal arguments, the names each scope (the main pattern, each foreach block) defines, and
// its anchor. The matcher, the rewriter, the group search and the driver read it; RuleSet
// (rule_set.h) holds it. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_
#define SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "passes/internal/datum.h"
#include "passes/rule_ast.h"

namespace sentier {

struct CompiledPatternNode {
  const PatternNode* ast = nullptr;
  absl::flat_hash_set<c10::Symbol> kinds;  // node kinds this line accepts
  std::vector<internal::Datum> literals;   // per argument (kLiteral args only)
  // Main-pattern lines only: the arguments another main line defines, in argument order
  // (`seq`: the variadic argument, defined by a line's variadic output). The matcher's
  // structural pre-check follows them without looking names up.
  struct DefinedInput {
    size_t arg = 0;
    int def = 0;
    bool seq = false;
  };
  std::vector<DefinedInput> defined_inputs;
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

}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_COMPILED_RULE_H_
