// libtorch_passes.cc — LibTorch's own passes, as canonicalization passes with counters.
//
// Each wrapper runs one pass of torch/csrc/jit/passes that exists with the same behaviour in
// LibTorch 1.13 and 2.x (the canonicalization tests run in both builds), and only where the graph
// has something for it to do: several of them build an alias analysis, which on a 100k-node graph
// costs more than the rest of canonicalization. (PeepholeOptimize is not used: what it rewrites
// differs between LibTorch versions, and it merges nested cats that the rules are about.
// ConstantPooling and EliminateCommonSubexpression are not used either: both build an alias
// analysis whose cost grows faster than the graph; pool_constants.cc and
// eliminate_common_reads.cc do what canonicalization needs of them in linear time.)
// Why each is safe for artifacts that must train:
//   inline_calls          Inline: a call and its inlined body compute the same values.
//   constant_propagation  ConstantPropagationImmutableTypes: evaluates only ops whose inputs and
//                         outputs are immutable (ints, floats, bools, strings, tuples of them) and
//                         inlines prim::If on a constant condition; it never creates tensor
//                         constants, so no tensor is baked into the graph on the wrong device.
//   remove_list_mutation  RemoveListMutation: proves with an alias analysis that no one else sees
//                         the list before turning appends into one ListConstruct.
//   lower_tuples          LowerSimpleTuples: a tuple built and unpacked in the graph.
//   dead_code             Sentier's RemoveDeadNodes (linear, no alias analysis) and, where an unused
//                         prim::If/Loop or a list write remains, LibTorch's EliminateDeadCode.
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "passes/canonicalize/passes.h"
#include "passes/remove_dead_nodes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;

// Whether any node (nested blocks included) satisfies `pred`.
template <typename Pred>
bool Any(Block* b, const Pred& pred) {
  for (Node* n : b->nodes()) {
    if (pred(n)) return true;
    for (Block* sub : n->blocks()) {
      if (Any(sub, pred)) return true;
    }
  }
  return false;
}

int64_t Count(Block* b) {
  int64_t c = 0;
  for (Node* n : b->nodes()) {
    ++c;
    for (Block* sub : n->blocks()) c += Count(sub);
  }
  return c;
}

// Writes to a list argument (append, insert, _set_item, extend, pop, clear, ...).
bool MutatesList(Node* n) {
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr) return false;
  for (size_t i = 0; i < schema->arguments().size() && i < n->inputs().size(); ++i) {
    const auto& alias = schema->arguments()[i].alias_info();
    if (alias && alias->isWrite() && n->input(i)->type()->kind() == c10::TypeKind::ListType) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool InlineCalls(const std::shared_ptr<Graph>& graph, PassCounters* counters) {
  bool calls = Any(graph->block(), [](Node* n) {
    return n->kind() == c10::prim::CallMethod || n->kind() == c10::prim::CallFunction;
  });
  if (!calls) return false;
  torch::jit::Inline(*graph);
  AddCount(counters, "inline_calls.graphs");
  return true;
}

bool PropagateConstants(const std::shared_ptr<Graph>& graph, PassCounters* counters) {
  std::shared_ptr<Graph> g = graph;
  bool changed = torch::jit::ConstantPropagationImmutableTypes(g);
  AddCount(counters, "constant_propagation.changed", changed);
  return changed;
}

bool RemoveListMutations(const std::shared_ptr<Graph>& graph, PassCounters* counters) {
  if (!Any(graph->block(), MutatesList)) return false;
  bool changed = torch::jit::RemoveListMutation(graph);
  AddCount(counters, "remove_list_mutation.changed", changed);
  return changed;
}

bool LowerTuples(const std::shared_ptr<Graph>& graph, PassCounters* counters) {
  bool tuples = Any(graph->block(), [](Node* n) {
    return n->kind() == c10::prim::TupleConstruct || n->kind() == c10::prim::TupleUnpack ||
           n->kind() == c10::prim::TupleIndex;
  });
  if (!tuples) return false;
  int64_t before = Count(graph->block());
  torch::jit::LowerSimpleTuples(graph);
  int64_t removed = before - Count(graph->block());
  AddCount(counters, "lower_tuples.nodes_removed", removed);
  return removed != 0;
}

bool EliminateDeadNodes(const std::shared_ptr<Graph>& graph, PassCounters* counters) {
  int64_t removed = 0;
  // What RemoveDeadNodes leaves for LibTorch's pass: unused nodes with blocks (a prim::If whose
  // results nobody reads) and list writes nobody reads after. Only then is its alias analysis
  // worth building. The sweep shows every node it keeps once its users are settled, so the
  // question is answered there rather than in another walk.
  bool more = false;
  RemoveDeadNodes(graph, &removed, [&more](Node* n) {
    if (more) return;
    if (n->kind() == c10::prim::If || n->kind() == c10::prim::Loop) {
      bool used = false;
      for (const torch::jit::Value* o : n->outputs()) used |= o->hasUses();
      more = !used;
      return;
    }
    more = MutatesList(n);
  });
  if (more) {
    int64_t before = Count(graph->block());
    torch::jit::EliminateDeadCode(graph);
    removed += before - Count(graph->block());
  }
  AddCount(counters, "dead_code.nodes_removed", removed);
  return removed != 0;
}

}  // namespace sentier
