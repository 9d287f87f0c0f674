// stacked_parameters.cc — stacks of module parameters become stored parameters (see the header).
//
// Identity: a parameter P registered with the values stack([p_1, ..., p_n], d) (or their cat),
// read where the graph computed that stack, gives the same values to every later op; the
// gradient that reaches P is the one the stack's backward split among the p_i, and an
// element-wise optimizer updating P updates each slice exactly as it would update p_i. The
// members' modules go only when nothing else reads them: no other node of the graph, no method
// of any class in the module (other than the forward being rewritten) reading them; where their
// parent's class is shared, every instance of it loses the same attributes.
//
// This file finds the candidate stacks and decides which can move (and which module objects go
// with them), then runs the steps; storing them is stacked_parameters_store.cc's, the layout
// record and the state_dict methods are stacked_parameters_layout.cc's
// (internal/stacked_parameters_parts.h).
#include "passes/stacked_parameters.h"

#include <algorithm>
#include <functional>
#include <set>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "passes/internal/stacked_parameters_parts.h"
#include "passes/module_objects.h"
#include "passes/remove_dead_nodes.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;
using Obj = c10::ivalue::Object;
using internal::stacked_parameters::Candidate;
using internal::stacked_parameters::CheckMovedStateUnread;
using internal::stacked_parameters::LeavingUnits;
using internal::stacked_parameters::Member;
using internal::stacked_parameters::ModuleTree;
using internal::stacked_parameters::Place;
using internal::stacked_parameters::RecordLayout;
using internal::stacked_parameters::RecordOriginalState;
using internal::stacked_parameters::RemoveMovedState;
using internal::stacked_parameters::StaleRootMethods;
using internal::stacked_parameters::StoreCandidates;

void MapPlaces(const ObjectPtr& obj, const Obj* parent, const std::string& attr, const std::string& path,
               absl::flat_hash_map<const Obj*, Place>* places, absl::flat_hash_map<const c10::ClassType*, int>* type_uses) {
  if (places->contains(obj.get())) return;
  (*places)[obj.get()] = Place{parent, attr, path};
  ++(*type_uses)[obj->type().get()];
  for (size_t i = 0; i < obj->type()->numAttributes(); ++i) {
    const c10::IValue& v = obj->getSlot(i);
    if (v.isObject() && v.toObject()->type()->is_module()) {
      std::string name = obj->type()->getAttributeName(i);
      MapPlaces(v.toObject(), obj.get(), name, path.empty() ? name : absl::StrCat(path, ".", name), places,
                type_uses);
    }
  }
}

// Tensor attributes that are parameters or buffers of `obj`.
std::vector<std::string> StateNames(const Obj& obj) {
  std::vector<std::string> out;
  for (size_t i = 0; i < obj.type()->numAttributes(); ++i) {
    const c10::IValue& v = obj.getSlot(i);
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    if (obj.type()->is_parameter(i) || obj.type()->is_buffer(i)) out.push_back(obj.type()->getAttributeName(i));
  }
  return out;
}

// Whether buffer `v` (a member of the stack or cat `n`) is read only by `n`'s list and by one
// copy back of a piece of `n`'s result (`v.data.copy_(unbind-or-split(n)[k])`, as
// batched_batch_norms writes it); the copy and its prim::data go to `write_backs`.
bool CopiedBackOnly(Value* v, Node* n, std::vector<Node*>* write_backs) {
  if (v->uses().size() != 2) return false;
  Node* data = nullptr;
  for (const torch::jit::Use& u : v->uses()) {
    if (u.user->kind() == c10::Symbol::fromQualString("prim::data")) data = u.user;
    else if (u.user != n->input(0)->node()) return false;
  }
  if (data == nullptr || data->output()->uses().size() != 1) return false;
  Node* copy = data->output()->uses()[0].user;
  if (copy->kind() != c10::aten::copy_ || copy->input(0) != data->output() || copy->output()->hasUses()) return false;
  Node* unpack = copy->input(1)->node();
  if (unpack->kind() != c10::prim::ListUnpack) return false;
  Node* pieces = unpack->input()->node();
  if ((pieces->kind() != c10::aten::unbind && pieces->kind() != c10::aten::split_with_sizes) ||
      pieces->input(0) != n->output()) {
    return false;
  }
  write_backs->push_back(copy);
  write_backs->push_back(data);
  return true;
}

// The members of `n` when it stacks (or concatenates) module parameters, each read only there, or
// module buffers each read there and copied back into (CopiedBackOnly).
bool AsCandidate(Node* n, const ModuleObjectMap& objects, Candidate* c) {
  bool stack = n->kind() == c10::aten::stack, cat = n->kind() == c10::aten::cat;
  if ((!stack && !cat) || n->inputs().size() != 2 || n->owningBlock() != n->owningGraph()->block()) {
    return false;
  }
  c10::optional<int64_t> dim = torch::jit::constant_as<int64_t>(n->input(1));
  Node* list = n->input(0)->node();
  if (!dim || *dim < 0 || list->kind() != c10::prim::ListConstruct || list->inputs().size() < 2 ||
      n->input(0)->uses().size() != 1) {
    return false;
  }
  c->node = n;
  c->dim = *dim;
  absl::flat_hash_set<const void*> seen;
  for (size_t k = 0; k < list->inputs().size(); ++k) {
    Value* v = list->input(k);
    Node* get = v->node();
    if (get->kind() != c10::prim::GetAttr) return false;
    auto it = objects.find(get->input());
    if (it == objects.end()) return false;
    const std::string& name = get->s(c10::attr::name);
    c10::optional<size_t> slot = it->second->type()->findAttributeSlot(name);
    if (!slot) return false;
    const bool buffer = it->second->type()->is_buffer(*slot);
    if (k == 0) c->buffers = buffer;
    if (buffer != c->buffers || (!buffer && !it->second->type()->is_parameter(*slot))) return false;
    if (buffer ? !CopiedBackOnly(v, n, &c->write_backs) : v->uses().size() != 1) return false;
    at::Tensor t = it->second->getSlot(*slot).toTensor();
    if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) return false;
    if (!c->members.empty()) {
      const at::Tensor& first = c->members[0].tensor;
      if (t.scalar_type() != first.scalar_type() || t.device() != first.device() ||
          t.requires_grad() != first.requires_grad() || t.dim() != first.dim() || *dim > t.dim() ||
          (stack && t.sizes() != first.sizes())) {
        return false;
      }
    }
    c->members.push_back(Member{it->second.get(), name, t});
  }
  return !c->members.empty() && c->dim <= c->members[0].tensor.dim() - (cat ? 1 : 0);
}

ModuleTree MapModuleTree(const ObjectPtr& root, Graph& graph, const ModuleObjectMap& objects) {
  ModuleTree tree;
  tree.root = root;
  MapPlaces(root, nullptr, "", "", &tree.places, &tree.type_uses);
  for (const auto& [o, place] : tree.places) {
    if (place.parent != nullptr) tree.children[place.parent].push_back(o);
    tree.instances[o->type().get()].push_back(o);
  }
  std::function<void(Block*)> walk = [&](Block* b) {
    for (Node* n : b->nodes()) {
      if (n->kind() == c10::prim::GetAttr || n->kind() == c10::prim::SetAttr) {
        if (auto cls = n->input(0)->type()->cast<c10::ClassType>()) {
          tree.method_reads[cls.get()].insert(n->s(c10::attr::name));
        }
      }
      for (Block* sub : n->blocks()) walk(sub);
    }
  };
  absl::flat_hash_set<const c10::ClassType*> walked;
  for (const auto& [o, place] : tree.places) {
    if (!walked.insert(o->type().get()).second) continue;
    for (torch::jit::Function* fn : o->type()->methods()) {
      if (!fn->isGraphFunction() || o == root.get()) continue;
      walk(torch::jit::toGraphFunction(*fn).graph()->block());
    }
  }
  for (Node* n : graph.nodes()) {
    for (Value* in : n->inputs()) {
      auto it = objects.find(in);
      if (it == objects.end()) continue;
      const Obj* o = it->second.get();
      if (n->kind() != c10::prim::GetAttr) {
        tree.other_reads.insert(o);
      } else if (objects.count(n->output()) == 0) {
        ++tree.param_reads[o];
      }
      if (o == root.get() && n->kind() == c10::prim::GetAttr) ++tree.root_reads[n->s(c10::attr::name)];
    }
  }
  return tree;
}

using Consumed = absl::flat_hash_map<const Obj*, std::set<std::string>>;

// The attributes the accepted candidates take from each module object.
Consumed ConsumedAttributes(const std::vector<Candidate>& candidates, const std::vector<bool>& accepted) {
  Consumed consumed;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!accepted[i]) continue;
    for (const Member& m : candidates[i].members) consumed[m.module].insert(m.attr);
  }
  return consumed;
}

// Every parameter and buffer below `o` consumed, and the graph reads nothing else there.
bool SubtreeGoes(const Obj* o, const ModuleTree& tree, const Consumed& consumed) {
  if (tree.other_reads.contains(o)) return false;
  const std::set<std::string> none;
  auto found = consumed.find(o);
  const std::set<std::string>& used = found == consumed.end() ? none : found->second;
  std::vector<std::string> state = StateNames(*o);
  auto reads = tree.param_reads.find(o);
  if (!std::all_of(state.begin(), state.end(), [&](const std::string& s) { return used.count(s) != 0; }) ||
      (reads == tree.param_reads.end() ? 0 : reads->second) != static_cast<int64_t>(used.size())) {
    return false;
  }
  auto kids = tree.children.find(o);
  return kids == tree.children.end() || std::all_of(kids->second.begin(), kids->second.end(), [&](const Obj* kid) {
           return SubtreeGoes(kid, tree, consumed);
         });
}

// The units that take the members of `c` out of the tree, in member order (the root's own
// parameters go one by one, without a unit); false when one of its members cannot go.
bool UnitsOf(const Candidate& c, const ModuleTree& tree, const Consumed& consumed, std::vector<const Obj*>* units) {
  const Obj* root = tree.root.get();
  for (const Member& m : c.members) {
    bool ok = true;
    if (!tree.places.contains(m.module)) {
      ok = false;
    } else if (m.module == root) {  // a parameter of the root itself
      auto reads = tree.root_reads.find(m.attr);
      ok = reads != tree.root_reads.end() && reads->second == 1 && !tree.ReadByMethods(root, m.attr);
    } else {
      const Obj* unit = m.module;
      while (tree.parent(unit) != nullptr && tree.ReadByMethods(tree.parent(unit), tree.places.at(unit).attr)) {
        unit = tree.parent(unit);
      }
      ok = tree.parent(unit) != nullptr && SubtreeGoes(unit, tree, consumed);
      if (ok) units->push_back(unit);
    }
    if (!ok) return false;
  }
  return true;
}

// A parent whose class other objects share: all of them must lose the same attributes (`leaving`:
// parent -> attributes that go). Clears `(*accepted)[i]` where candidate i's units break that;
// true when it cleared any.
bool RejectUnevenSharedClasses(const ModuleTree& tree, const std::vector<std::vector<const Obj*>>& units,
                               const absl::flat_hash_map<const Obj*, std::set<std::string>>& leaving,
                               std::vector<bool>* accepted) {
  const std::set<std::string> none;
  auto attrs = [&](const Obj* o) -> const std::set<std::string>& {
    auto it = leaving.find(o);
    return it == leaving.end() ? none : it->second;
  };
  bool changed = false;
  for (size_t i = 0; i < units.size(); ++i) {
    if (!(*accepted)[i]) continue;
    bool ok = true;
    for (const Obj* u : units[i]) {
      const Obj* parent = tree.parent(u);
      for (const Obj* twin : tree.instances.at(parent->type().get())) {
        ok &= twin == parent || attrs(twin) == attrs(parent);
      }
    }
    if (!ok) {
      (*accepted)[i] = false;
      changed = true;
    }
  }
  return changed;
}

// Member module -> unit, for the accepted candidates' members below the root.
absl::flat_hash_map<const Obj*, const Obj*> UnitOfMembers(const std::vector<Candidate>& candidates,
                                                          const std::vector<bool>& accepted,
                                                          const std::vector<std::vector<const Obj*>>& units,
                                                          const Obj* root) {
  absl::flat_hash_map<const Obj*, const Obj*> unit_of;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!accepted[i]) continue;
    for (size_t k = 0, u = 0; k < candidates[i].members.size(); ++k) {
      const Obj* mod = candidates[i].members[k].module;
      if (mod != root) unit_of[mod] = units[i][u++];
    }
  }
  return unit_of;
}

// AcceptCandidates: which candidates can move, and which module objects go with them. A member
// module goes with the smallest unit that can leave its parent: itself, or, where a method of
// its parent's class reads it (a Sequential's forward reads its entries), that parent, and so
// on up (below the root). A unit can go when every parameter and buffer in its subtree is in an
// accepted candidate and the graph reads its subtree only for those parameters and for its own
// submodules; its parent's class must be the parent's own, or every instance of that class must
// lose the same attributes (a class shared by two ModuleLists loses them once, for both). The
// root's own parameters (models whose forward reads self.w0, self.w1, ...) go one by one. A
// candidate is accepted when all its members can go; iterated to a fixpoint. Clears
// `(*accepted)[i]` for the others and returns member module -> unit for the accepted ones.
absl::flat_hash_map<const Obj*, const Obj*> AcceptCandidates(const std::vector<Candidate>& candidates,
                                                             const ModuleTree& tree, std::vector<bool>* accepted) {
  absl::flat_hash_map<const Obj*, const Obj*> unit_of;
  bool changed = true;
  while (changed) {
    changed = false;
    const Consumed consumed = ConsumedAttributes(candidates, *accepted);
    absl::flat_hash_map<const Obj*, std::set<std::string>> leaving;  // parent -> attributes that go
    std::vector<std::vector<const Obj*>> units(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!(*accepted)[i]) continue;
      if (!UnitsOf(candidates[i], tree, consumed, &units[i])) {
        (*accepted)[i] = false;
        changed = true;
        continue;
      }
      for (const Obj* u : units[i]) leaving[tree.parent(u)].insert(tree.places.at(u).attr);
    }
    if (changed) continue;
    changed = RejectUnevenSharedClasses(tree, units, leaving, accepted);
    if (changed) continue;
    unit_of = UnitOfMembers(candidates, *accepted, units, tree.root.get());
  }
  return unit_of;
}

std::vector<Candidate> FindCandidates(Graph& graph, const ModuleObjectMap& objects) {
  std::vector<Candidate> candidates;
  for (Node* n : graph.nodes()) {
    Candidate c;
    if (AsCandidate(n, objects, &c)) candidates.push_back(std::move(c));
  }
  return candidates;
}

LeavingUnits UnitsLeaving(const ModuleTree& tree, const absl::flat_hash_map<const Obj*, const Obj*>& unit_of) {
  LeavingUnits leaving{&tree, {}};
  for (const auto& [member, unit] : unit_of) leaving.units.insert(unit);
  return leaving;
}

// Tensors an object holds: its own tensor attributes and those of its object attributes.
int64_t TensorsHeld(const c10::intrusive_ptr<c10::ivalue::Object>& obj, int depth = 0) {
  if (depth > 64) return 2;  // deeper than any module tree: never "alone"
  int64_t n = 0;
  for (size_t i = 0; i < obj->slots().size(); ++i) {
    const c10::IValue& v = obj->getSlot(i);
    if (v.isTensor() && v.toTensor().defined()) ++n;
    if (v.isObject()) n += TensorsHeld(v.toObject(), depth + 1);
  }
  return n;
}

}  // namespace

std::function<bool(const torch::jit::Value* v)> StorableParameterReads(Graph& graph,
                                                                       const c10::IValue& self) {
  auto objects = std::make_shared<ModuleObjectMap>(ModuleObjects(graph, self));
  const torch::jit::Value* root = graph.inputs().empty() ? nullptr : graph.inputs()[0];
  return [objects, root](const torch::jit::Value* v) {
    const Node* n = v->node();
    if (n->kind() != c10::prim::GetAttr || n->input() == root) return false;
    auto it = objects->find(n->input());
    if (it == objects->end()) return false;
    const c10::intrusive_ptr<c10::ivalue::Object>& owner = it->second;
    c10::optional<size_t> slot = owner->type()->findAttributeSlot(n->s(c10::attr::name));
    if (!slot || !owner->type()->is_parameter(*slot)) return false;
    const c10::IValue& value = owner->getSlot(*slot);
    return value.isTensor() && value.toTensor().defined() && TensorsHeld(owner) == 1;
  };
}

absl::StatusOr<ParamLayout> StoreStackedParameters(torch::jit::Module& module, const std::shared_ptr<Graph>& graph) {
  ParamLayout layout;
  ObjectPtr root = module._ivalue();
  if (module.hasattr(kParamLayoutAttribute)) {
    return absl::FailedPreconditionError("the module's parameters are stored stacked already");
  }
  RecordOriginalState(module, &layout);
  ModuleObjectMap objects = ModuleObjects(*graph, c10::IValue(root));
  if (objects.empty()) return layout;
  const ModuleTree tree = MapModuleTree(root, *graph, objects);
  std::vector<Candidate> candidates = FindCandidates(*graph, objects);
  std::vector<bool> accepted(candidates.size(), true);
  const LeavingUnits leaving = UnitsLeaving(tree, AcceptCandidates(candidates, tree, &accepted));
  std::vector<std::string> removed_root_params;
  absl::Status stored =
      StoreCandidates(*graph, objects, candidates, accepted, tree, leaving, &layout, &removed_root_params);
  if (!stored.ok()) return stored;
  if (layout.stacked.empty()) return layout;
  RemoveDeadNodes(graph);
  absl::Status unread = CheckMovedStateUnread(*graph, tree, leaving, removed_root_params);
  if (!unread.ok()) return unread;
  layout.removed_methods = StaleRootMethods(tree, leaving, removed_root_params);
  for (const std::string& name : layout.removed_methods) root->type()->unsafeRemoveMethod(name);
  RemoveMovedState(tree, leaving, removed_root_params);
  absl::Status recorded = RecordLayout(module, layout);
  if (!recorded.ok()) return recorded;
  return layout;
}

}  // namespace sentier
