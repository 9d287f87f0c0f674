// internal/rule_engine_testing.h — helpers for the rule engine's unit tests: a graph from
// LibTorch's text IR, and the one rule of a rule text parsed and compiled. Test-only.
#ifndef SENTIER_PASSES_INTERNAL_RULE_ENGINE_TESTING_H_
#define SENTIER_PASSES_INTERNAL_RULE_ENGINE_TESTING_H_

#include <memory>
#include <string>
#include <unordered_map>
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

// ParsedGraph: a graph parsed from text IR, with its values by the names the text gives them
// (without the '%').
struct ParsedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  std::unordered_map<std::string, Value*> values;

  torch::jit::Graph* operator->() const { return graph.get(); }
  torch::jit::Graph& operator*() const { return *graph; }
  Value* value(const std::string& name) const { return values.at(name); }
  // node: the node that defines the value named `name`.
  Node* node(const std::string& name) const { return values.at(name)->node(); }
};

// ParseGraph: parses text IR (torch::jit::parseIR); throws on malformed IR.
inline ParsedGraph ParseGraph(const std::string& ir) {
  ParsedGraph g;
  g.graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.graph.get(), g.values);
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

}  // namespace test_util
}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_ENGINE_TESTING_H_
