// optimizer.cc — orders the passes: inline, unroll and normalize, facts, rules to a fixpoint.
#include "passes/optimizer.h"

#include <chrono>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/peephole_list_idioms.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "absl/strings/str_cat.h"
#include "passes/normalize_split_family.h"
#include "passes/remove_dead_nodes.h"
#include "passes/shape_facts.h"
#include "passes/unroll_known_loops.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;

int64_t CountIn(const Block* b) {
  int64_t n = 0;
  for (const torch::jit::Node* node : b->nodes()) {
    if (node->kind() != c10::prim::Constant) ++n;
    for (const Block* sub : node->blocks()) n += CountIn(sub);
  }
  return n;
}

// Unrolling and normalization feed each other (a folded len() makes a trip count constant, an
// unrolled body exposes constant indices); iterate a few times.
void Canonicalize(const std::shared_ptr<Graph>& graph, const ShapeFacts* facts) {
  for (int i = 0; i < 8; ++i) {
    bool normalized = NormalizeSplitFamily(graph, facts);
    bool unrolled = UnrollKnownLoops(graph);
    if (unrolled) {
      // Unrolled bodies build lists by append and index them with loop counters: LibTorch's
      // list and constant passes turn that into straight-line values. They build alias
      // analyses, so they only run when a loop was unrolled.
      torch::jit::RemoveListMutation(graph);
      std::shared_ptr<Graph> g = graph;
      torch::jit::PeepholeOptimizeListIdioms(g);
      torch::jit::ConstantPropagation(g);
      torch::jit::ConstantPooling(graph);
      torch::jit::EliminateDeadCode(graph);
    } else if (normalized) {
      RemoveDeadNodes(graph);
    }
    if (!normalized && !unrolled) break;
  }
}

}  // namespace

int64_t CountNodes(const Graph& graph) { return CountIn(graph.block()); }

absl::StatusOr<OptimizeReport> OptimizeGraph(const std::shared_ptr<Graph>& graph,
                                             const RuleSet& rules,
                                             const OptimizeOptions& options) {
  auto start = std::chrono::steady_clock::now();
  OptimizeReport report;
  try {
    torch::jit::Inline(*graph);
    report.nodes_before = CountNodes(*graph);
    Canonicalize(graph, nullptr);
    ShapeFacts facts;
    const ShapeFacts* facts_ptr = nullptr;
    if (options.sample_inputs != nullptr) {
      auto recorded = RecordShapeFacts(graph, *options.sample_inputs, options.fixed_inputs);
      if (recorded.ok()) {
        facts = std::move(*recorded);
        facts_ptr = &facts;
        report.shape_facts = true;
      } else {
        report.shape_facts_error = std::string(recorded.status().message());
      }
    }
    RewriteOptions ro;
    ro.max_rounds = options.max_rounds;
    ro.facts = facts_ptr;
    for (int outer = 0; outer < 4; ++outer) {
      Canonicalize(graph, facts_ptr);
      if (!ApplyRules(graph, rules, ro, &report.stats)) break;
    }
    RemoveDeadNodes(graph);
    graph->lint();  // a rewrite that broke the graph must never reach a published artifact
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InternalError(
        absl::StrCat("optimization failed: ", what.substr(0, what.find('\n'))));
  }
  report.nodes_after = CountNodes(*graph);
  report.optimize_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace sentier
