// optimizer.cc — orders the stages: canonicalize, facts, rules to a fixpoint.
#include "passes/optimizer.h"

#include <chrono>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "absl/strings/str_cat.h"
#include "passes/canonicalize/pipeline.h"
#include "passes/member_gradient_layout.h"
#include "passes/remove_dead_nodes.h"
#include "passes/sample_inputs.h"
#include "passes/shape_facts.h"
#include "passes/torch_error.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;

// Counts the non-constant nodes; `calls`, when given, is set if a call is left to inline.
int64_t CountIn(const Block* b, bool* calls = nullptr) {
  int64_t n = 0;
  for (const torch::jit::Node* node : b->nodes()) {
    if (node->kind() != c10::prim::Constant) ++n;
    if (calls != nullptr &&
        (node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::CallFunction)) {
      *calls = true;
    }
    for (const Block* sub : node->blocks()) n += CountIn(sub, calls);
  }
  return n;
}

}  // namespace

int64_t CountNodes(const Graph& graph) { return CountIn(graph.block()); }

// The batch at which shape facts are recorded when the samples' batch is larger.
constexpr int64_t kFactsBatch = 16;

absl::StatusOr<OptimizeReport> OptimizeGraph(const std::shared_ptr<Graph>& graph,
                                             const RuleSet& rules,
                                             const OptimizeOptions& options) {
  auto start = std::chrono::steady_clock::now();
  OptimizeReport report;
  try {
    // Inlining has nothing to do without calls; one walk both counts and looks for them (every
    // walk of a 100k-node graph costs ~15 ms of cache misses).
    bool calls = false;
    report.nodes_before = CountIn(graph->block(), &calls);
    if (calls) {
      torch::jit::Inline(*graph);
      report.nodes_before = CountNodes(*graph);
    }
    // Constants are spread while the graph is rewritten and pooled at the end (see
    // pool_constants.cc: deleting users of a constant with a huge fan-out is quadratic).
    report.canonicalize["constant_spreading.copies"] = SpreadConstants(graph);
    CanonicalizeOptions canon;
    canon.self = options.self;
    if (canon.self.isNone() && options.sample_inputs != nullptr && !options.sample_inputs->empty() &&
        (*options.sample_inputs)[0].isObject()) {
      canon.self = (*options.sample_inputs)[0];
    }
    canon.after_pass = options.after_pass;
    std::map<std::string, double> pass_ms;
    canon.pass_ms = &pass_ms;
    auto ms_since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    };
    Canonicalize(graph, canon, &report.canonicalize);
    ShapeFacts facts;
    ShapeFacts* facts_ptr = nullptr;
    auto record = [&]() {
      if (options.sample_inputs == nullptr) return;
      auto t = std::chrono::steady_clock::now();
      // Facts need shapes, not a production batch: a large batch is cut to kFactsBatch rows
      // where that is unambiguous (sizes that follow the batch are dynamic either way), and the
      // samples are used as they are when the cut run fails.
      c10::optional<std::vector<c10::IValue>> small =
          ShrinkBatch(*options.sample_inputs, kFactsBatch, options.fixed_inputs);
      absl::StatusOr<ShapeFacts> recorded = absl::UnknownError("not recorded");
      if (small) recorded = RecordShapeFacts(graph, *small, options.fixed_inputs);
      if (!recorded.ok()) recorded = RecordShapeFacts(graph, *options.sample_inputs, options.fixed_inputs);
      if (recorded.ok()) {
        facts = std::move(*recorded);
        facts_ptr = &facts;
        report.shape_facts = true;
        report.shape_facts_error.clear();
      } else {
        facts_ptr = nullptr;
        report.shape_facts = false;
        report.shape_facts_error = std::string(recorded.status().message());
      }
      report.stage_ms["shape_facts"] += ms_since(t);
    };
    record();
    RewriteOptions ro;
    ro.max_rounds = options.max_rounds;
    ro.stacked_parameters = options.stacked_parameters;
    ro.self = canon.self;
    for (int outer = 0; outer < 4; ++outer) {
      canon.facts = facts_ptr;
      canon.full = outer == 0;  // after a round of rules, only what rules can give work to
      // With facts, canonicalization can go further (sections of a split by size, loops over
      // its pieces); the values it creates get facts from a new recording. Without facts the
      // first round would repeat the canonicalization just done.
      const bool canonicalized =
          (outer > 0 || facts_ptr != nullptr) && Canonicalize(graph, canon, &report.canonicalize);
      // Values the last round of rules created have no facts (only the values they replaced pass
      // theirs on); a new recording gives them facts, so rules that need their sizes (the fold
      // of a batched layer norm's affine step into the next batched linear, say) can fire now.
      if (canonicalized || outer > 0) record();
      ro.facts = facts_ptr;
      auto t = std::chrono::steady_clock::now();
      bool rewrote = ApplyRules(graph, rules, ro, &report.stats);
      report.stage_ms["rules"] += ms_since(t);
      if (!rewrote) break;
      if (options.after_pass) options.after_pass("rules", *graph);
    }
    PoolConstants(graph, &report.canonicalize);
    RemoveDeadNodes(graph);
    if (options.stacked_parameters) {
      if (!canon.self.isObject()) {
        return absl::InvalidArgumentError("stacked parameters need the module (a .pt model)");
      }
      torch::jit::Module module(canon.self.toObject());
      auto layout = StoreStackedParameters(module, graph);
      if (!layout.ok()) return layout.status();
      report.param_layout = std::move(*layout);
    }
    // Stacks of parameters left in the graph (the original layout) hand their members
    // contiguous gradients (no per-member copy in AccumulateGrad).
    int64_t member_views = 0;
    ContiguousMemberGradients(graph, &member_views);
    if (member_views > 0) report.canonicalize["member_gradient_layout.stacks"] = member_views;
    for (const auto& [pass, ms] : pass_ms) report.stage_ms["canonicalize." + pass] = ms;
    graph->lint();  // a rewrite that broke the graph must never reach a published artifact
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InternalError(
        absl::StrCat("optimization failed: ", TorchErrorMessage(what)));
  }
  report.nodes_after = CountNodes(*graph);
  report.optimize_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace sentier
