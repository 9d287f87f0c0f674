// pipeline.cc — runs the canonicalization passes in order to a fixpoint (see the header).
#include "passes/canonicalize/pipeline.h"

#include <chrono>

#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_set.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;

// Inventory: what kinds of node a graph holds, taken in one walk at the start of every
// iteration, so that a pass with nothing to work on is skipped without walking the graph (on a
// 100k-node graph each walk costs ~15 ms of cache misses). A pass that creates work for a later
// one changes the graph, so the next iteration takes a fresh inventory and runs it then.
struct Inventory {
  absl::flat_hash_set<c10::Symbol> kinds;
  bool foldable = false;    // a non-constant node whose inputs are all constants
  bool scalar_ops = false;  // a node computing an immutable value (an int, a size, a GetAttr)
  // Something fold_list_reads may fold: a ListConstruct of constants, a len or constant index of
  // a constant list, a read of a ListConstruct.
  bool list_folds = false;
  std::vector<Node*> split_family;  // the nodes NormalizeSplitFamily looks at, in program order
  bool Has(const char* kind) const { return kinds.contains(c10::Symbol::fromQualString(kind)); }
  bool Has(c10::Symbol kind) const { return kinds.contains(kind); }
};

bool ScalarType(const c10::TypePtr& t) {
  c10::TypeKind k = t->kind();
  return k == c10::TypeKind::IntType || k == c10::TypeKind::FloatType ||
         k == c10::TypeKind::BoolType || k == c10::TypeKind::StringType ||
         k == c10::TypeKind::NoneType || k == c10::TypeKind::NumberType;
}

const c10::Symbol kGetItem = c10::Symbol::fromQualString("aten::__getitem__");
const c10::Symbol kLen = c10::Symbol::fromQualString("aten::len");
const c10::Symbol kMin = c10::Symbol::fromQualString("prim::min");
const c10::Symbol kMax = c10::Symbol::fromQualString("prim::max");

void Take(Block* b, Inventory* inv) {
  for (Node* n : b->nodes()) {
    c10::Symbol k = n->kind();
    inv->kinds.insert(k);
    if (NormalizeSplitFamilyLooksAt(k)) inv->split_family.push_back(n);
    if (!inv->list_folds) {
      if (k == c10::prim::ListConstruct) {
        bool constants = true;
        for (const torch::jit::Value* in : n->inputs()) {
          if (in->node()->kind() != c10::prim::Constant) {
            constants = false;
            break;
          }
        }
        inv->list_folds = constants;
      } else if ((k == kMin || k == kMax) && n->inputs().size() == 1) {
        inv->list_folds = n->input(0)->node()->kind() == c10::prim::Constant;
      } else if ((k == kGetItem || k == kLen || k == c10::aten::slice || k == c10::aten::add ||
                  k == c10::prim::ListUnpack) &&
                 !n->inputs().empty()) {
        c10::Symbol src = n->input(0)->node()->kind();
        inv->list_folds = src == c10::prim::ListConstruct ||
                          ((k == kGetItem || k == kLen) && src == c10::prim::Constant);
      }
    }
    if (n->kind() != c10::prim::Constant) {
      if (n->kind() == c10::prim::GetAttr || n->kind() == kGetItem ||
          (n->outputs().size() == 1 && ScalarType(n->output()->type()))) {
        inv->scalar_ops = true;
      }
      if (!inv->foldable && !n->inputs().empty() && n->blocks().empty()) {
        bool all = true;
        for (const torch::jit::Value* in : n->inputs()) {
          if (in->node()->kind() != c10::prim::Constant) {
            all = false;  // the other inputs' nodes need not be touched
            break;
          }
        }
        inv->foldable = all;
      }
      if (n->kind() == c10::prim::If) inv->foldable |= n->input(0)->node()->kind() == c10::prim::Constant;
    }
    for (Block* sub : n->blocks()) Take(sub, inv);
  }
}

struct Pass {
  std::string name;
  bool after_rules;  // also run between rounds of rules (CanonicalizeOptions::full false)
  std::function<bool(const Inventory&, const CanonicalizeOptions&)> needed;
  // `fresh`: the inventory when the graph is still as it saw it, else nullptr.
  std::function<bool(const std::shared_ptr<Graph>&, const CanonicalizeOptions&, const Inventory* fresh,
                     PassCounters*)>
      run;
};

const std::vector<Pass>& Passes() {
  using G = const std::shared_ptr<Graph>&;
  using O = const CanonicalizeOptions&;
  using I = const Inventory&;
  static const std::vector<Pass> passes = {
      {"drop_export_guards", false, [](I i, O) { return i.Has("aten::_assert_tensor_metadata"); },
       [](G g, O, const Inventory*, PassCounters* c) { return DropExportGuards(g, c); }},
      {"inline_calls", false,
       [](I i, O) { return i.Has(c10::prim::CallMethod) || i.Has(c10::prim::CallFunction); },
       [](G g, O, const Inventory*, PassCounters* c) { return InlineCalls(g, c); }},
      {"fold_module_attributes", false, [](I i, O o) { return i.Has(c10::prim::GetAttr) && o.self.isObject(); },
       [](G g, O o, const Inventory*, PassCounters* c) { return FoldModuleAttributes(g, o.self, c); }},
      {"fold_known_ranks", false, [](I i, O o) { return o.facts != nullptr && i.Has(c10::aten::dim); },
       [](G g, O o, const Inventory*, PassCounters* c) { return FoldKnownRanks(g, o.facts, c); }},
      {"constant_propagation", false, [](I i, O) { return i.foldable; },
       [](G g, O, const Inventory*, PassCounters* c) { return PropagateConstants(g, c); }},
      {"unwrap_raising_branches", false,
       [](I i, O) {
         return (i.Has(c10::prim::If) && i.Has(c10::prim::RaiseException)) ||
                i.Has(c10::prim::unchecked_cast) || i.Has("aten::__is__") || i.Has("aten::__isnot__");
       },
       [](G g, O, const Inventory*, PassCounters* c) { return UnwrapRaisingBranches(g, c); }},
      {"remove_list_mutation", false,
       [](I i, O) {
         return i.Has("aten::append") || i.Has("aten::insert") || i.Has("aten::_set_item") ||
                i.Has("aten::extend") || i.Has("aten::pop") || i.Has("aten::clear");
       },
       [](G g, O, const Inventory*, PassCounters* c) { return RemoveListMutations(g, c); }},
      {"fold_list_reads", true,
       [](I i, O) {
         return i.Has(c10::prim::ListConstruct) || i.Has("aten::__getitem__") || i.Has("aten::len") ||
                i.Has("prim::min") || i.Has("prim::max");
       },
       [](G g, O, const Inventory*, PassCounters* c) { return FoldListReads(g, c); }},
      {"fold_scalar_tensors", false, [](I i, O) { return i.Has("aten::Int") || i.Has("aten::IntImplicit"); },
       [](G g, O, const Inventory*, PassCounters* c) { return FoldScalarTensors(g, c); }},
      {"unroll_loops", false, [](I i, O) { return i.Has(c10::prim::Loop); },
       [](G g, O, const Inventory*, PassCounters* c) { return UnrollKnownLoops(g, c); }},
      {"out_of_place_updates", false,
       [](I i, O o) {
         return o.facts != nullptr && (i.Has(c10::aten::add_) || i.Has(c10::aten::sub_) ||
                                       i.Has(c10::aten::mul_) || i.Has(c10::aten::div_));
       },
       [](G g, O o, const Inventory*, PassCounters* c) { return OutOfPlaceUpdates(g, o.facts, c); }},
      {"lower_tuples", false,
       [](I i, O) {
         return i.Has(c10::prim::TupleConstruct) || i.Has(c10::prim::TupleUnpack) ||
                i.Has(c10::prim::TupleIndex);
       },
       [](G g, O, const Inventory*, PassCounters* c) { return LowerTuples(g, c); }},
      {"normalize_split_family", true, [](I, O) { return true; },
       [](G g, O o, const Inventory* fresh, PassCounters* c) {
         return NormalizeSplitFamily(g, o.facts, c, fresh != nullptr ? &fresh->split_family : nullptr);
       }},
      {"cse", true, [](I i, O) { return i.scalar_ops; },
       [](G g, O, const Inventory*, PassCounters* c) { return EliminateCommonReads(g, c); }},
      {"dead_code", true, [](I, O) { return true; },
       [](G g, O, const Inventory*, PassCounters* c) { return EliminateDeadNodes(g, c); }},
  };
  return passes;
}

}  // namespace

const std::vector<std::string>& CanonicalPassNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Pass& p : Passes()) out.push_back(p.name);
    return out;
  }();
  return names;
}

bool Canonicalize(const std::shared_ptr<Graph>& graph, const CanonicalizeOptions& options,
                  PassCounters* counters) {
  bool changed = false;
  for (int iteration = 0; iteration < options.max_iterations; ++iteration) {
    bool any = false;
    Inventory inventory;
    Take(graph->block(), &inventory);
    // Whether the graph is still as the inventory saw it: no pass has run since, except
    // fold_list_reads finding nothing (it changes nothing then).
    bool fresh = true;
    for (const Pass& pass : Passes()) {
      if (!options.full && !pass.after_rules) continue;
      if (!pass.needed(inventory, options)) continue;
      // Dead code appears only where something was rewritten (or in the graph as given).
      if (pass.name == "dead_code" && iteration > 0 && !any) continue;
      const bool list_reads = pass.name == "fold_list_reads";
      // It would find nothing to fold.
      if (list_reads && fresh && !inventory.list_folds) continue;
      auto start = std::chrono::steady_clock::now();
      bool changed_now = pass.run(graph, options, fresh ? &inventory : nullptr, counters);
      if (changed_now || !list_reads) fresh = false;
      if (options.pass_ms != nullptr) {
        (*options.pass_ms)[pass.name] +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      }
      if (!changed_now) continue;
      // Removing dead nodes gives no other pass new work: it alone does not call for another
      // iteration.
      if (pass.name != "dead_code") any = true;
      changed = true;
      AddCount(counters, pass.name);
      if (options.after_pass) options.after_pass(pass.name, *graph);
    }
    if (!any) break;
  }
  return changed;
}

}  // namespace sentier
