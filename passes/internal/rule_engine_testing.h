// internal/rule_engine_testing.h — helpers for the rule engine's unit tests: a graph from
// LibTorch's text IR, and the one rule of a rule text parsed and compiled. Test-only.
#ifndef SENTIER_PASSES_INTERNAL_RULE_ENGINE_TESTING_H_
#define SENTIER_PASSES_INTERNAL_RULE_ENGINE_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "absl/status/statusor.h"
#include "passes/internal/compiled_rule.h"
#include "passes/internal/rule_compiler.h"
#include "passes/rule_parser.h"

namespace sentier {
namespace internal {
namespace test_util {

// ParseGraph: a graph from text IR (torch::jit::parseIR); throws on malformed IR.
inline std::shared_ptr<torch::jit::Graph> ParseGraph(const std::string& ir) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  return g;
}

// CompileOne: parses `text` (which must hold exactly one rule, file name "test.rules") and
// compiles it.
inline absl::StatusOr<std::shared_ptr<CompiledRule>> CompileOne(const std::string& text) {
  absl::StatusOr<std::vector<Rule>> rules = ParseRules(text, "test.rules");
  if (!rules.ok()) return rules.status();
  if (rules->size() != 1) return absl::InvalidArgumentError("expected exactly one rule");
  return CompileRule(std::move((*rules)[0]));
}

// FindNode: the first node of `g`'s top block whose first output is named `name`.
inline Node* FindNode(torch::jit::Graph& g, const std::string& name) {
  for (Node* n : g.nodes()) {
    if (n->outputs().size() > 0 && n->output(0)->debugName() == name) return n;
  }
  return nullptr;
}

}  // namespace test_util
}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_ENGINE_TESTING_H_
