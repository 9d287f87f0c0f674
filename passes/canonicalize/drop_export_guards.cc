// drop_export_guards.cc — the dtype guards torch.export writes before casts, removed.
//
// An exported program checks, before each `.to(dtype)` and `.float()`-style cast, that the value
// has the dtype and device it had when exported: `aten::_assert_tensor_metadata(x, dtype=...)`,
// a node with no result. The guard restates what the graph already computes for the inputs the
// program accepts, and it pins the dtype: the checker's float64 reference run would stop at the
// first guard, and a cast the rules prove redundant would keep a guard in front of it. Scripted
// and traced models never hold these guards; an exported program comes out with the form theirs
// have. What the guard checked on user inputs stays checked: a program's inputs are checked
// against its recorded input metadata where its sample inputs are read (runtime/pt2/).
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"

namespace sentier {

bool DropExportGuards(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters) {
  static const c10::Symbol kGuard = c10::Symbol::fromQualString("aten::_assert_tensor_metadata");
  std::vector<torch::jit::Node*> guards;
  for (torch::jit::Node* n : graph->nodes()) {
    if (n->kind() == kGuard && n->outputs().empty()) guards.push_back(n);
  }
  for (torch::jit::Node* n : guards) n->destroy();
  if (counters != nullptr && !guards.empty()) (*counters)["drop_export_guards.guards"] += guards.size();
  return !guards.empty();
}

}  // namespace sentier
