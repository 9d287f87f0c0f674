// stacked_parameters_store.cc — the module and graph edits of StoreStackedParameters: each
// accepted stack becomes a parameter of the members' nearest common ancestor (or the root) that
// the graph reads in the stack's place; then the moved parameters, the modules that go and the
// root's methods that read them are removed, once nothing in the graph reads them any more.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <torch/csrc/jit/api/function_impl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/internal/stacked_parameters_parts.h"
#include "passes/torch_error.h"

namespace sentier {
namespace internal {
namespace stacked_parameters {

namespace {

// The stored parameter's name in its holder: "stacked_<attr>" (or "concatenated_<attr>") where
// the members share a container below the root (`l1.stacked_weight` for l1.0.weight, ...,
// l1.63.weight) or are the root's own parameters; where the holder is the root and the members
// sit in different submodules, their paths say which: "concatenated_gates_7_lins_7_weight" for
// gates.7.weight and lins.7.weight, "concatenated_experts_0_0_to_gates_1_weight" for more than two.
std::string StoredName(const Candidate& c, bool stack, const Obj* holder,
                       const absl::flat_hash_map<const Obj*, Place>& places) {
  const std::string op = stack ? "stacked_" : "concatenated_";
  const std::string& attr = c.members[0].attr;
  const Place& first = places.at(c.members[0].module);
  if (first.parent == nullptr || places.at(holder).parent != nullptr) return absl::StrCat(op, attr);
  auto flat = [&](const Member& m) {
    std::string path = places.at(m.module).path;
    std::replace(path.begin(), path.end(), '.', '_');
    return path;
  };
  std::string which = c.members.size() <= 2
                          ? absl::StrJoin(c.members, "_", [&](std::string* out, const Member& m) { out->append(flat(m)); })
                          : absl::StrCat(flat(c.members.front()), "_to_", flat(c.members.back()));
  return absl::StrCat(op, which, "_", attr);
}

// The object that holds the stored parameter: the members' nearest common ancestor, or the root
// where that one's class has other instances or it goes itself.
const Obj* HolderOf(const Candidate& c, const ModuleTree& tree, const LeavingUnits& leaving) {
  std::vector<const Obj*> chain;
  for (const Obj* o = tree.parent(c.members[0].module); o != nullptr; o = tree.parent(o)) chain.push_back(o);
  const Obj* holder = tree.root.get();
  for (const Obj* cand : chain) {
    bool all = true;
    for (const Member& m : c.members) {
      bool under = false;
      for (const Obj* o = tree.parent(m.module); o != nullptr && !under; o = tree.parent(o)) under = o == cand;
      all &= under;
    }
    if (all) {
      holder = cand;
      break;
    }
  }
  if (holder != tree.root.get() && (tree.type_uses.at(holder->type().get()) != 1 || leaving.Goes(holder))) {
    holder = tree.root.get();
  }
  return holder;
}

// `base`, or `base_1`, `base_2`, ...: a name that is neither an attribute of the holder nor in
// `taken`, the names already given in it; adds it to `taken`.
std::string FreshName(const std::string& base, const Obj* holder, absl::flat_hash_set<std::string>* taken) {
  std::string name = base;
  for (int k = 1; holder->type()->hasAttribute(name) || taken->contains(name); ++k) {
    name = absl::StrCat(base, "_", k);
  }
  taken->insert(name);
  return name;
}

// Registers parameter `name` of `holder`, the members of `c` stacked (or concatenated), and
// returns its record.
StackedParameter StoreParameter(const Candidate& c, const Obj* holder, const std::string& name,
                                const ModuleTree& tree) {
  const bool stack = c.node->kind() == c10::aten::stack;
  std::vector<at::Tensor> values;
  StackedParameter record;
  for (const Member& m : c.members) {
    values.push_back(m.tensor.detach());
    const std::string& path = tree.places.at(m.module).path;
    record.members.push_back(path.empty() ? m.attr : absl::StrCat(path, ".", m.attr));
    record.sizes.push_back(stack ? 1 : m.tensor.size(c.dim));
  }
  at::Tensor stored = (stack ? at::stack(values, c.dim) : at::cat(values, c.dim)).contiguous();
  stored.requires_grad_(c.members[0].tensor.requires_grad());
  Obj* holder_mut = const_cast<Obj*>(holder);
  size_t slot = holder_mut->type()->addAttribute(name, c10::TensorType::get(), /*is_parameter=*/!c.buffers,
                                                 /*is_buffer=*/c.buffers);
  holder_mut->setSlot(slot, stored);
  const std::string& holder_path = tree.places.at(holder).path;
  record.name = holder_path.empty() ? name : absl::StrCat(holder_path, ".", name);
  record.op = stack ? "stack" : "cat";
  record.dim = c.dim;
  return record;
}

// In the graph: read the stored parameter `name` of `holder` where the stack was computed.
void ReadStoredParameter(Graph& graph, const ModuleObjectMap& objects, const Candidate& c, const Obj* holder,
                         const std::string& name, const ModuleTree& tree) {
  Value* holder_value = nullptr;
  for (const auto& [v, o] : objects) {
    if (o.get() != holder) continue;
    Value* mv = const_cast<Value*>(v);
    if (mv->node()->kind() == c10::prim::Param || mv->node()->isBefore(c.node)) {
      holder_value = mv;
      break;
    }
  }
  torch::jit::WithInsertPoint guard(c.node);
  if (holder_value == nullptr) {
    holder_value = graph.inputs()[0];
    for (absl::string_view part : absl::StrSplit(tree.places.at(holder).path, '.', absl::SkipEmpty())) {
      Node* get = graph.insertNode(graph.createGetAttr(holder_value, std::string(part)));
      holder_value = get->output();
    }
  }
  Node* read = graph.insertNode(graph.createGetAttr(holder_value, name));
  read->output()->setType(c10::TensorType::get());
  c.node->output()->replaceAllUsesWith(read->output());
}

// Whether some node of `g`, nested blocks included, satisfies `pred`.
bool AnyNode(Graph& g, const std::function<bool(const Node*)>& pred) {
  std::function<bool(Block*)> walk = [&](Block* b) {
    for (Node* n : b->nodes()) {
      if (pred(n)) return true;
      for (Block* sub : n->blocks()) {
        if (walk(sub)) return true;
      }
    }
    return false;
  };
  return walk(g.block());
}

}  // namespace

// Each accepted candidate becomes a stored parameter (its record goes to `layout`) that the graph
// reads in its place. The root's own parameters that moved go to `removed_root_params`.
absl::Status StoreCandidates(Graph& graph, const ModuleObjectMap& objects, const std::vector<Candidate>& candidates,
                             const std::vector<bool>& accepted, const ModuleTree& tree,
                             const LeavingUnits& leaving, ParamLayout* layout,
                             std::vector<std::string>* removed_root_params) {
  absl::flat_hash_map<const Obj*, absl::flat_hash_set<std::string>> new_names;
  try {
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!accepted[i]) continue;
      const Candidate& c = candidates[i];
      bool stack = c.node->kind() == c10::aten::stack;
      const Obj* holder = HolderOf(c, tree, leaving);
      std::string name = FreshName(StoredName(c, stack, holder, tree.places), holder, &new_names[holder]);
      layout->stacked.push_back(StoreParameter(c, holder, name, tree));
      ReadStoredParameter(graph, objects, c, holder, name, tree);
      // The stored buffer is what the step updates: the copies back into members go.
      for (Node* w : c.write_backs) w->destroy();
      for (const Member& m : c.members) {
        if (m.module == tree.root.get()) removed_root_params->push_back(m.attr);
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("storing stacked parameters failed: ", TorchErrorMessage(e.what())));
  }
  return absl::OkStatus();
}

// Nothing in the graph may read a module that goes, or a moved parameter of the root, any more.
absl::Status CheckMovedStateUnread(Graph& graph, const ModuleTree& tree, const LeavingUnits& leaving,
                                   const std::vector<std::string>& removed_root_params) {
  absl::flat_hash_set<const Obj*> removed;
  for (const auto& [o, place] : tree.places) {
    if (leaving.Goes(o)) removed.insert(o);
  }
  ModuleObjectMap after = ModuleObjects(graph, c10::IValue(tree.root));
  for (const auto& [v, o] : after) {
    if (removed.contains(o.get())) {
      return absl::InternalError(absl::StrCat("storing stacked parameters: module '", tree.places.at(o.get()).path,
                                              "' is still read after its parameters moved"));
    }
  }
  for (Node* n : graph.nodes()) {
    if (n->kind() == c10::prim::GetAttr && n->input() == graph.inputs()[0] &&
        std::find(removed_root_params.begin(), removed_root_params.end(), n->s(c10::attr::name)) !=
            removed_root_params.end()) {
      return absl::InternalError(absl::StrCat("storing stacked parameters: '", n->s(c10::attr::name),
                                              "' is still read after it moved"));
    }
  }
  return absl::OkStatus();
}

// The root's methods other than forward that read a module that goes or a moved parameter of the
// root, and those that call them, transitively: they would fail to compile on load. They are the
// helpers forward called before it was inlined (DLRM's apply_emb); a method exported on its own
// that reads moved state goes too (ParamLayout::removed_methods lists them).
std::vector<std::string> StaleRootMethods(const ModuleTree& tree, const LeavingUnits& leaving,
                                          const std::vector<std::string>& removed_root_params) {
  std::set<std::string> stale;
  std::vector<torch::jit::Function*> methods;
  for (torch::jit::Function* fn : tree.root->type()->methods()) {
    if (fn->isGraphFunction() && fn->name() != "forward") methods.push_back(fn);
  }
  auto reads_moved = [&](Graph& g) {
    ModuleObjectMap objects = ModuleObjects(g, c10::IValue(tree.root));
    for (const auto& [v, o] : objects) {
      if (leaving.Goes(o.get())) return true;
    }
    return AnyNode(g, [&](const Node* n) {
      return n->kind() == c10::prim::GetAttr && n->input() == g.inputs()[0] &&
             std::count(removed_root_params.begin(), removed_root_params.end(), n->s(c10::attr::name));
    });
  };
  auto calls_stale = [&](Graph& g) {
    return AnyNode(g, [&](const Node* n) {
      return n->kind() == c10::prim::CallMethod && n->input(0) == g.inputs()[0] &&
             stale.count(n->s(c10::attr::name));
    });
  };
  for (torch::jit::Function* fn : methods) {
    if (reads_moved(*torch::jit::toGraphFunction(*fn).graph())) stale.insert(fn->name());
  }
  for (bool grew = !stale.empty(); grew;) {
    grew = false;
    for (torch::jit::Function* fn : methods) {
      if (!stale.count(fn->name()) && calls_stale(*torch::jit::toGraphFunction(*fn).graph())) {
        grew = stale.insert(fn->name()).second;
      }
    }
  }
  return std::vector<std::string>(stale.begin(), stale.end());
}

// Removes the root's moved parameters, then each unit from its parent: the slot of every instance
// of the parent's class first (a slot is found through the class), then the class's attribute,
// once.
void RemoveMovedState(const ModuleTree& tree, const LeavingUnits& leaving,
                      const std::vector<std::string>& removed_root_params) {
  for (const std::string& attr : removed_root_params) {
    tree.root->unsafeRemoveAttr(attr);
    tree.root->type()->unsafeRemoveAttribute(attr);
  }
  std::map<std::pair<const c10::ClassType*, std::string>, std::vector<Obj*>> from;
  for (const Obj* u : leaving.units) {
    if (leaving.Goes(tree.parent(u))) continue;  // inside a unit that goes as a whole
    Obj* parent = const_cast<Obj*>(tree.parent(u));
    from[{parent->type().get(), tree.places.at(u).attr}].push_back(parent);
  }
  for (auto& [key, parents] : from) {
    for (Obj* parent : parents) parent->unsafeRemoveAttr(key.second);
    parents[0]->type()->unsafeRemoveAttribute(key.second);
  }
}

}  // namespace stacked_parameters
}  // namespace internal
}  // namespace sentier
