// unroll_known_loops.cc — full unrolling of constant-trip-count `for` loops.
//
// Scripting turns `for p in parts:`, `for k in range(n):` and list comprehensions into prim::Loop;
// once the trip count is a constant (aten::len of a list whose length is known, folded by the
// passes before this one), the loop is replaced by straight-line copies of its body, so that rules
// see one node per piece. Identity: Loop(n, true, c0){ i, c -> body } == body(n-1, ...
// body(1, body(0, c0))) when the loop's continue condition is the constant true; loops in
// `while` form are left alone, and so is a loop whose unrolled size would exceed the bound.
#include "passes/canonicalize/passes.h"

#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool IsTrue(Value* v) {
  c10::optional<bool> b = torch::jit::constant_as<bool>(v);
  return b && *b;
}

int64_t CountNodes(Block* b) {
  int64_t n = 0;
  for (Node* node : b->nodes()) {
    ++n;
    for (Block* sub : node->blocks()) n += CountNodes(sub);
  }
  return n;
}

void CollectLoops(Block* b, std::vector<Node*>* out) {
  for (Node* n : b->nodes()) {
    for (Block* sub : n->blocks()) CollectLoops(sub, out);
    if (n->kind() == c10::prim::Loop) out->push_back(n);  // inner loops first
  }
}

bool UnrollOne(Node* loop, int64_t max_unrolled_nodes) {
  c10::optional<int64_t> trips = torch::jit::constant_as<int64_t>(loop->input(0));
  if (!trips || *trips < 0) return false;
  if (!IsTrue(loop->input(1))) return false;
  Block* body = loop->blocks().at(0);
  if (!IsTrue(body->outputs().at(0))) return false;
  if (*trips * CountNodes(body) > max_unrolled_nodes) return false;
  Graph* g = loop->owningGraph();
  torch::jit::WithInsertPoint guard(loop);
  std::vector<Value*> carried(loop->inputs().begin() + 2, loop->inputs().end());
  for (int64_t i = 0; i < *trips; ++i) {
    std::unordered_map<Value*, Value*> map;
    map[body->inputs()[0]] = g->insertConstant(i);
    for (size_t k = 0; k < carried.size(); ++k) map[body->inputs()[k + 1]] = carried[k];
    auto lookup = [&](Value* v) {
      auto it = map.find(v);
      return it == map.end() ? v : it->second;
    };
    for (Node* n : body->nodes()) {
      Node* copy = g->insertNode(g->createClone(n, lookup));
      for (size_t k = 0; k < n->outputs().size(); ++k) map[n->outputs()[k]] = copy->outputs()[k];
    }
    for (size_t k = 0; k < carried.size(); ++k) carried[k] = lookup(body->outputs()[k + 1]);
  }
  for (size_t k = 0; k < carried.size(); ++k) loop->outputs()[k]->replaceAllUsesWith(carried[k]);
  loop->destroy();
  return true;
}

}  // namespace

bool UnrollKnownLoops(const std::shared_ptr<Graph>& graph, PassCounters* counters,
                      int64_t max_unrolled_nodes) {
  std::vector<Node*> loops;
  CollectLoops(graph->block(), &loops);
  bool changed = false;
  // Inner loops come first; unrolling an outer loop clones whatever is left inside it, so stop
  // after the first unrolled loop that contains others and let the caller iterate.
  for (Node* loop : loops) {
    bool has_inner = false;
    for (Node* n : loop->blocks().at(0)->nodes()) has_inner |= n->kind() == c10::prim::Loop;
    bool did = UnrollOne(loop, max_unrolled_nodes);
    changed |= did;
    if (did) AddCount(counters, "unroll_loops.loops");
    if (did && has_inner) break;
  }
  return changed;
}

}  // namespace sentier
