// eliminate_common_tensor_ops.cc — in a graph that writes nothing, a tensor computation repeated
// on the same inputs is computed once.
//
// Models join their field embeddings twice (a factorization machine's second-order part, then the
// DNN's input), and the lookup rules rewrite each join alike: two stacks of the same ids, two
// adds of the same first rows, two concatenations of the same 26 tables (a copy of every table
// per step in the original layout) and two lookups. eliminate_common_reads merges only immutable
// values, since whether two tensor computations may be merged depends on what writes to them,
// which takes an alias analysis (LibTorch's EliminateCommonSubexpression, whose cost grows faster
// than the graph). A graph in which no node writes anything needs none: every value keeps the
// contents it was computed with, so a deterministic node without side effects or blocks computes
// what an earlier node of the same kind on the same inputs computed, and its uses can read that
// one (gradients then sum through the one node, as they summed through the two). So the pass
// first looks for a writer — any schema argument annotated as written (`add_`, `append`, BatchNorm's
// running statistics), or a node without a schema it does not know — and does nothing where it
// finds one. Linear in the graph.
#include <string>
#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;

bool WritesSomething(const Node* n) {
  switch (n->kind()) {
    case c10::prim::Constant:
    case c10::prim::ListConstruct:
    case c10::prim::ListUnpack:
    case c10::prim::TupleConstruct:
    case c10::prim::TupleUnpack:
    case c10::prim::GetAttr:
    case c10::prim::device:
    case c10::prim::dtype:
    case c10::prim::RaiseException:
    case c10::prim::If:  // the nodes of its blocks are looked at too
      return false;
    default:
      break;
  }
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr) return true;  // a node whose effects are unknown
  for (const c10::Argument& a : schema->arguments()) {
    if (a.alias_info() != nullptr && a.alias_info()->isWrite()) return true;
  }
  return false;
}

}  // namespace

bool AnyWriter(const Block* b) {
  for (const Node* n : b->nodes()) {
    if (WritesSomething(n)) return true;
    for (const Block* sub : n->blocks()) {
      if (AnyWriter(sub)) return true;
    }
  }
  return false;
}

bool IsPureComputation(const Node* n) {
  if (n->kind() == c10::prim::Constant || !n->blocks().empty() || n->outputs().empty()) return false;
  if (n->kind() == c10::prim::GetAttr || n->kind() == c10::prim::RaiseException) return false;
  if (!n->kind().is_aten() && n->kind() != c10::prim::ListConstruct &&
      n->kind() != c10::prim::ListUnpack && n->kind() != c10::prim::device) {
    return false;
  }
  return !n->hasSideEffects() && !n->isNondeterministic();
}

bool EliminateCommonTensorOps(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters) {
  if (AnyWriter(graph->block())) return false;
  std::unordered_map<std::string, Node*> seen;
  int64_t merged = 0;
  for (auto it = graph->block()->nodes().begin(); it != graph->block()->nodes().end();) {
    Node* n = *it++;
    if (!IsPureComputation(n)) continue;
    std::string key = std::string(n->kind().toQualString()) + "/" + std::to_string(n->outputs().size());
    for (torch::jit::Value* in : n->inputs()) key += "|" + InputKey(in);
    auto [at, inserted] = seen.emplace(std::move(key), n);
    if (inserted) continue;
    Node* first = at->second;
    bool same_types = true;
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      same_types = same_types && first->output(i)->type()->isSubtypeOf(*n->output(i)->type());
    }
    if (!same_types) continue;
    for (size_t i = 0; i < n->outputs().size(); ++i) n->output(i)->replaceAllUsesWith(first->output(i));
    ++merged;
  }
  AddCount(counters, "eliminate_common_tensor_ops.merged", merged);
  return merged > 0;
}

}  // namespace sentier
