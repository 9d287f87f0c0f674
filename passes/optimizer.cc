// optimizer.cc — orders the stages: canonicalize, facts, rules to a fixpoint.
#include "passes/optimizer.h"

#include <chrono>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "absl/strings/str_cat.h"
#include "passes/batched_batch_norms.h"
#include "passes/canonicalize/pipeline.h"
#include "passes/joined_lookup_shifts.h"
#include "passes/member_gradient_layout.h"
#include "passes/remove_dead_nodes.h"
#include "passes/sample_inputs.h"
#include "passes/shape_facts.h"
#include "passes/torch_error.h"
#include "passes/unfused_large_cats.h"

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

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The batch at which shape facts are recorded when the samples' batch is larger.
constexpr int64_t kFactsBatch = 16;

// One optimization of one graph, in steps: inline and count -> first canonicalization -> facts ->
// rewrite rounds (canonicalize, facts, rules) -> common tensor ops, joined lookup shifts -> pool
// constants and drop dead nodes -> stacked layout -> member gradients, large cats kept unfused,
// and the report's timings -> lint.
class Optimizer {
 public:
  Optimizer(const std::shared_ptr<Graph>& graph, const RuleSet& rules,
            const OptimizeOptions& options, OptimizeReport* report)
      : graph_(graph), rules_(rules), options_(options), report_(*report) {}

  // May throw (LibTorch errors); the caller turns that into a status.
  absl::Status Run() {
    InlineAndCount();
    CanonicalizeFirst();
    RecordFacts();
    RunRewriteRounds();
    // Once, after the rules (merging earlier would give rules that want single-use values
    // shared ones): the same lookup made twice, say, is made once.
    if (EliminateCommonTensorOps(graph_, &report_.canonicalize)) RemoveDeadNodes(graph_);
    // The stored-table lookups of every width and mode share one index shift (after the rules,
    // which form them one set at a time).
    int64_t joined = 0;
    auto t = std::chrono::steady_clock::now();
    if (JoinLookupShifts(graph_, facts_ptr_, canon_.self, &joined)) {
      report_.canonicalize["joined_lookup_shifts.lookups"] = joined;
      RemoveDeadNodes(graph_);
    }
    report_.stage_ms["joined_lookup_shifts"] = MsSince(t);
    // The stacked layout stores a joined batch norm's modules only when all their buffers are
    // joined, the step counters too.
    if (options_.stacked_parameters && options_.buffer_writes) JoinBatchNormCounters(graph_, canon_.self);
    PoolConstants(graph_, &report_.canonicalize);
    RemoveDeadNodes(graph_);
    absl::Status stacked = StoreStackedLayout();
    if (!stacked.ok()) return stacked;
    // Stacks of parameters left in the graph (the original layout) hand their members
    // contiguous gradients (no per-member copy in AccumulateGrad).
    int64_t member_views = 0;
    ContiguousMemberGradients(graph_, &member_views);
    if (member_views > 0) report_.canonicalize["member_gradient_layout.stacks"] = member_views;
    // Cats of many tensors stay out of the CUDA fuser, whose compile of them does not finish.
    int64_t unfused_cats = 0;
    KeepLargeCatsUnfused(graph_, &unfused_cats);
    if (unfused_cats > 0) report_.canonicalize["unfused_large_cats"] = unfused_cats;
    for (const auto& [pass, ms] : pass_ms_) report_.stage_ms["canonicalize." + pass] = ms;
    graph_->lint();  // a rewrite that broke the graph must never reach a published artifact
    return absl::OkStatus();
  }

 private:
  // Inlining has nothing to do without calls; one walk both counts and looks for them (every
  // walk of a 100k-node graph costs ~15 ms of cache misses).
  void InlineAndCount() {
    bool calls = false;
    report_.nodes_before = CountIn(graph_->block(), &calls);
    if (calls) {
      torch::jit::Inline(*graph_);
      report_.nodes_before = CountNodes(*graph_);
    }
  }

  // Spreads constants, sets up the canonicalization options (the module: options.self, or the
  // first sample input when that is an object) and canonicalizes once without facts.
  void CanonicalizeFirst() {
    // Constants are spread while the graph is rewritten and pooled at the end (see
    // pool_constants.cc: deleting users of a constant with a huge fan-out is quadratic).
    report_.canonicalize["constant_spreading.copies"] = SpreadConstants(graph_);
    canon_.self = options_.self;
    const std::vector<c10::IValue>* samples = options_.sample_inputs;
    if (canon_.self.isNone() && samples != nullptr && !samples->empty() &&
        (*samples)[0].isObject()) {
      canon_.self = (*samples)[0];
    }
    canon_.after_pass = options_.after_pass;
    canon_.pass_ms = &pass_ms_;
    Canonicalize(graph_, canon_, &report_.canonicalize);
  }

  // Records shape facts from the sample inputs, if any; on failure the graph has no facts and
  // the report says why.
  void RecordFacts() {
    if (options_.sample_inputs == nullptr) return;
    auto t = std::chrono::steady_clock::now();
    // Facts need shapes, not a production batch: a large batch is cut to kFactsBatch rows
    // where that is unambiguous (sizes that follow the batch are dynamic either way), and the
    // samples are used as they are when the cut run fails.
    c10::optional<std::vector<c10::IValue>> small =
        ShrinkBatch(*options_.sample_inputs, kFactsBatch, options_.fixed_inputs);
    absl::StatusOr<ShapeFacts> recorded = absl::UnknownError("not recorded");
    if (small) recorded = RecordShapeFacts(graph_, *small, options_.fixed_inputs);
    if (!recorded.ok()) recorded = RecordShapeFacts(graph_, *options_.sample_inputs, options_.fixed_inputs);
    if (recorded.ok()) {
      facts_ = std::move(*recorded);
      facts_ptr_ = &facts_;
      report_.shape_facts = true;
      report_.shape_facts_error.clear();
    } else {
      facts_ptr_ = nullptr;
      report_.shape_facts = false;
      report_.shape_facts_error = std::string(recorded.status().message());
    }
    report_.stage_ms["shape_facts"] += MsSince(t);
  }

  // Up to four rounds of canonicalize -> facts -> rules, until the rules change nothing.
  void RunRewriteRounds() {
    RewriteOptions ro;
    ro.max_rounds = options_.max_rounds;
    ro.stacked_parameters = options_.stacked_parameters;
    ro.storable_parameter = options_.storable_parameter;
    ro.self = canon_.self;
    for (int outer = 0; outer < 4; ++outer) {
      canon_.facts = facts_ptr_;
      canon_.full = outer == 0;  // after a round of rules, only what rules can give work to
      // With facts, canonicalization can go further (sections of a split by size, loops over
      // its pieces); the values it creates get facts from a new recording. Without facts the
      // first round would repeat the canonicalization just done.
      const bool canonicalized =
          (outer > 0 || facts_ptr_ != nullptr) && Canonicalize(graph_, canon_, &report_.canonicalize);
      // Values the last round of rules created have no facts (only the values they replaced pass
      // theirs on); a new recording gives them facts, so rules that need their sizes (the fold
      // of a batched layer norm's affine step into the next batched linear, say) can fire now.
      if (canonicalized || outer > 0) RecordFacts();
      ro.facts = facts_ptr_;
      // Training-mode batch norms on the pieces of a layer the last round batched become one,
      // so this round's rules keep the chain behind them batched.
      auto t = std::chrono::steady_clock::now();
      int64_t batch_norms = 0;
      bool rewrote = options_.buffer_writes &&
                     BatchTrainingBatchNorms(graph_, facts_ptr_, canon_.self, &batch_norms);
      if (rewrote) report_.canonicalize["batched_batch_norms.members"] += batch_norms;
      report_.stage_ms["batched_batch_norms"] += MsSince(t);
      t = std::chrono::steady_clock::now();
      rewrote = ApplyRules(graph_, rules_, ro, &report_.stats) || rewrote;
      report_.stage_ms["rules"] += MsSince(t);
      if (!rewrote) break;
      if (options_.after_pass) options_.after_pass("rules", *graph_);
    }
  }

  // With stacked_parameters, stores the stacked parameters in the module.
  absl::Status StoreStackedLayout() {
    if (!options_.stacked_parameters) return absl::OkStatus();
    if (!canon_.self.isObject()) {
      if (options_.storable_parameter) return absl::OkStatus();  // parameters are graph inputs
      return absl::InvalidArgumentError("stacked parameters need the module (a .pt model)");
    }
    torch::jit::Module module(canon_.self.toObject());
    auto layout = StoreStackedParameters(module, graph_);
    if (!layout.ok()) return layout.status();
    report_.param_layout = std::move(*layout);
    return SparseTablesAreStored(*graph_);
  }

  // A lookup with a sparse gradient must read a parameter: through a concatenation in the graph
  // its gradient would not reach the tables (the rules that batch sparse tables fire only where
  // the stacked layout stores them; this holds them to it).
  static absl::Status SparseTablesAreStored(const Graph& graph) {
    for (const torch::jit::Node* n : graph.nodes()) {
      const bool bag = n->kind() == c10::aten::embedding_bag;
      if (!bag && n->kind() != c10::aten::embedding) continue;
      const size_t sparse_at = bag ? 5 : 4;
      if (n->inputs().size() <= sparse_at) continue;
      c10::optional<c10::IValue> sparse = torch::jit::toIValue(n->input(sparse_at));
      if (!sparse || !sparse->isBool() || !sparse->toBool()) continue;
      if (n->input(0)->node()->kind() == c10::aten::cat) {
        return absl::InternalError(absl::StrCat(
            "a lookup with a sparse gradient reads a concatenation of tables the stacked layout "
            "did not store (", n->input(0)->debugName(), "); its gradient would not be sparse"));
      }
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<Graph>& graph_;
  const RuleSet& rules_;
  const OptimizeOptions& options_;
  OptimizeReport& report_;
  CanonicalizeOptions canon_;
  std::map<std::string, double> pass_ms_;
  ShapeFacts facts_;
  ShapeFacts* facts_ptr_ = nullptr;
};

}  // namespace

int64_t CountNodes(const Graph& graph) { return CountIn(graph.block()); }

absl::StatusOr<OptimizeReport> OptimizeGraph(const std::shared_ptr<Graph>& graph,
                                             const RuleSet& rules,
                                             const OptimizeOptions& options) {
  auto start = std::chrono::steady_clock::now();
  OptimizeReport report;
  try {
    absl::Status st = Optimizer(graph, rules, options, &report).Run();
    if (!st.ok()) return st;
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InternalError(
        absl::StrCat("optimization failed: ", TorchErrorMessage(what)));
  }
  report.nodes_after = CountNodes(*graph);
  report.optimize_ms = MsSince(start);
  return report;
}

}  // namespace sentier
