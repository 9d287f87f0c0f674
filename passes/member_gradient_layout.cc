// member_gradient_layout.cc — a flat view after stacks of parameters read transposed (see the
// header for why).
#include "passes/member_gradient_layout.h"

#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// An aten::stack(ListConstruct(GetAttr...), 0) of two or more module attributes.
bool IsStackOfAttributes(const Node* n) {
  if (n->kind() != c10::aten::stack || n->inputs().size() != 2) return false;
  c10::optional<int64_t> dim = torch::jit::constant_as<int64_t>(n->input(1));
  if (!dim.has_value() || *dim != 0) return false;
  const Node* list = n->input(0)->node();
  if (list->kind() != c10::prim::ListConstruct || list->inputs().size() < 2) return false;
  for (const Value* v : list->inputs()) {
    if (v->node()->kind() != c10::prim::GetAttr) return false;
  }
  return true;
}

bool ReadTransposed(const Value* v) {
  for (const torch::jit::Use& u : v->uses()) {
    c10::Symbol k = u.user->kind();
    if (k == c10::aten::transpose || k == c10::aten::permute || k == c10::aten::t ||
        k == c10::aten::movedim) {
      return true;
    }
  }
  return false;
}

void Collect(Block* b, std::vector<Node*>* out) {
  for (Node* n : b->nodes()) {
    for (Block* sub : n->blocks()) Collect(sub, out);
    if (IsStackOfAttributes(n) && ReadTransposed(n->output())) out->push_back(n);
  }
}

}  // namespace

bool ContiguousMemberGradients(const std::shared_ptr<torch::jit::Graph>& graph, int64_t* stacks) {
  std::vector<Node*> found;
  Collect(graph->block(), &found);
  for (Node* stack : found) {
    Value* s = stack->output();
    torch::jit::WithInsertPoint guard(stack->next());
    Value* start = graph->insertConstant(0);
    Value* end = graph->insertConstant(-1);
    Node* flat = graph->insertNode(graph->create(c10::aten::flatten, {s, start, end}));
    flat->output()->setType(c10::TensorType::get());
    Node* size = graph->insertNode(graph->create(c10::aten::size, {s}));
    size->output()->setType(c10::ListType::ofInts());
    Node* view = graph->insertNode(graph->create(c10::aten::view, {flat->output(), size->output()}));
    view->output()->setType(s->type());
    s->replaceAllUsesAfterNodeWith(view, view->output());
    // replaceAllUsesAfterNodeWith leaves the uses up to `view` (flatten, size) on `s`.
  }
  if (stacks != nullptr) *stacks += static_cast<int64_t>(found.size());
  return !found.empty();
}

}  // namespace sentier
