// eliminate_common_reads.cc — repeated pure computations of immutable values are computed once.
//
// Inlined modules and unrolled loops repeat small computations: `x.size(1)`, `len(parts)`,
// integer arithmetic on them, reads of the same module attribute (`self.l1`, then `.weight`).
// A node is merged into an earlier equal one (same kind, the same attribute name for GetAttr,
// and the same inputs, constants compared by value since constants are spread while the graph
// is rewritten — in the same block or one that encloses it) when it has no side effects,
// no blocks, is deterministic, writes nothing, and its outputs cannot be written: values of
// immutable types (int, float, bool, str, None, tuples of them), or prim::GetAttr when nothing
// in the graph assigns an attribute (two reads of one attribute are the same object), or a read
// at a constant index of a list that nothing writes (`inputs[0]` read twice of a List[Tensor]
// input: the same tensor object both times, whatever either reader does with it). Tensor
// computations are left alone: telling whether one may be merged takes an alias analysis,
// which LibTorch's EliminateCommonSubexpression builds at a cost that grows faster than the
// graph (2.4 s of a 100k-node graph's 6 s before this pass replaced it). Linear in the graph.
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {

std::string InputKey(torch::jit::Value* v) {
  if (v->node()->kind() == c10::prim::Constant) {
    c10::optional<c10::IValue> iv = torch::jit::toIValue(v);
    if (iv && (iv->isInt() || iv->isDouble() || iv->isBool() || iv->isString() || iv->isNone() ||
               iv->isIntList() || iv->isDoubleList() || iv->isBoolList())) {
      return "c" + v->type()->repr_str() + ":" + c10::str(*iv);
    }
  }
  return "v" + std::to_string(v->unique());
}

namespace {

using torch::jit::Block;
using torch::jit::Node;

std::string NodeKey(Node* n) {
  std::string key = n->kind().toQualString();
  if (n->kind() == c10::prim::GetAttr) key += "[" + n->s(c10::attr::name) + "]";
  for (torch::jit::Value* in : n->inputs()) key += "|" + InputKey(in);
  return key;
}

using Table = std::unordered_map<std::string, Node*>;

bool AssignsAttributes(Block* b) {
  for (Node* n : b->nodes()) {
    if (n->kind() == c10::prim::SetAttr) return true;
    for (Block* sub : n->blocks()) {
      if (AssignsAttributes(sub)) return true;
    }
  }
  return false;
}

const c10::Symbol kGetItem = c10::Symbol::fromQualString("aten::__getitem__");

// list[k], k constant, of a list that nothing writes: every such read gives the same element.
bool ReadOfUnwrittenList(Node* n) {
  return n->kind() == kGetItem && n->inputs().size() == 2 && n->outputs().size() == 1 &&
         n->input(0)->type()->kind() == c10::TypeKind::ListType &&
         n->input(1)->node()->kind() == c10::prim::Constant && ListNeverWritten(n->input(0));
}

bool Mergeable(Node* n, bool getattr_ok) {
  if (!n->blocks().empty() || n->outputs().empty() || n->kind() == c10::prim::Constant) return false;
  if (n->kind() == c10::prim::GetAttr) return getattr_ok;
  if (ReadOfUnwrittenList(n)) return true;
  if (n->hasAttributes()) return false;  // only GetAttr's name is part of the key
  try {
    if (n->hasSideEffects() || n->isNondeterministic()) return false;
  } catch (const std::exception&) {
    return false;
  }
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema != nullptr && schema->is_mutable()) return false;
  if (schema == nullptr && !n->kind().is_prim()) return false;
  for (const torch::jit::Value* o : n->outputs()) {
    if (!IsImmutableType(o->type())) return false;
  }
  return true;
}

// `scopes` holds the tables of the enclosing blocks; a node may reuse any of them.
void Visit(Block* b, std::vector<Table>* scopes, bool getattr_ok, int64_t* merged) {
  scopes->emplace_back();
  for (auto it = b->nodes().begin(); it != b->nodes().end();) {
    Node* n = *it;
    ++it;
    for (Block* sub : n->blocks()) Visit(sub, scopes, getattr_ok, merged);
    if (!Mergeable(n, getattr_ok)) continue;
    std::string key = NodeKey(n);
    Node* earlier = nullptr;
    for (const Table& t : *scopes) {
      auto found = t.find(key);
      if (found != t.end()) {
        earlier = found->second;
        break;
      }
    }
    if (earlier == nullptr) {
      scopes->back().emplace(std::move(key), n);
      continue;
    }
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      n->output(k)->replaceAllUsesWith(earlier->output(k));
    }
    n->destroy();
    ++*merged;
  }
  scopes->pop_back();
}

}  // namespace

bool EliminateCommonReads(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters) {
  std::vector<Table> scopes;
  int64_t merged = 0;
  Visit(graph->block(), &scopes, /*getattr_ok=*/!AssignsAttributes(graph->block()), &merged);
  AddCount(counters, "cse.merged", merged);
  return merged > 0;
}

}  // namespace sentier
