// stacked_parameters.cc — stacks of module parameters become stored parameters (see the header).
//
// Identity: a parameter P registered with the values stack([p_1, ..., p_n], d) (or their cat),
// read where the graph computed that stack, gives the same values to every later op; the
// gradient that reaches P is the one the stack's backward split among the p_i, and an
// element-wise optimizer updating P updates each slice exactly as it would update p_i. The
// members' modules go only when nothing else reads them: no other node of the graph, no method
// of any class in the module (other than the forward being rewritten) reading them; where their
// parent's class is shared, every instance of it loses the same attributes.
#include "passes/stacked_parameters.h"

#include <algorithm>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/module_objects.h"
#include "passes/remove_dead_nodes.h"
#include "passes/torch_error.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;
using Obj = c10::ivalue::Object;

// Where each module object sits in the hierarchy.
struct Place {
  const Obj* parent = nullptr;
  std::string attr;  // its attribute name in the parent
  std::string path;  // qualified, "" for the root
};

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

struct Member {
  const Obj* module;  // the module holding the parameter
  std::string attr;   // the parameter's name in it
  at::Tensor tensor;
};

struct Candidate {
  Node* node;   // aten::stack or aten::cat
  int64_t dim;
  std::vector<Member> members;
};

// The members of `n` when it stacks (or concatenates) module parameters, each read only there.
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
  for (Value* v : list->inputs()) {
    Node* get = v->node();
    if (get->kind() != c10::prim::GetAttr || v->uses().size() != 1) return false;
    auto it = objects.find(get->input());
    if (it == objects.end()) return false;
    const std::string& name = get->s(c10::attr::name);
    c10::optional<size_t> slot = it->second->type()->findAttributeSlot(name);
    if (!slot || !it->second->type()->is_parameter(*slot)) return false;
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

// The TorchScript access path from `self` to a qualified name: `.name`, or getattr(x, "0") for
// attribute names that are not identifiers (the entries of ModuleList and Sequential).
std::string Access(const std::string& qualified) {
  std::string out = "self";
  for (absl::string_view part : absl::StrSplit(qualified, '.')) {
    bool identifier = !part.empty() && !absl::ascii_isdigit(part[0]) &&
                      std::all_of(part.begin(), part.end(), [](char ch) { return absl::ascii_isalnum(ch) || ch == '_'; });
    out = identifier ? absl::StrCat(out, ".", part) : absl::StrCat("getattr(", out, ", \"", part, "\")");
  }
  return out;
}


// A string literal for TorchScript source (the names are module paths: letters, digits, '.', '_').
std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

}  // namespace

std::string ParamLayout::ToJson() const {
  nlohmann::json j;
  j["version"] = 1;
  j["stacked"] = nlohmann::json::array();
  for (const StackedParameter& p : stacked) {
    j["stacked"].push_back({{"name", p.name}, {"op", p.op}, {"dim", p.dim}, {"members", p.members}, {"sizes", p.sizes}});
  }
  j["removed_methods"] = removed_methods;
  j["original_names"] = original_names;
  j["original_shapes"] = original_shapes;
  return j.dump();
}

absl::StatusOr<ParamLayout> ParamLayout::FromJson(const std::string& text) {
  ParamLayout layout;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& p : j.at("stacked")) {
      StackedParameter s;
      s.name = p.at("name").get<std::string>();
      s.op = p.at("op").get<std::string>();
      s.dim = p.at("dim").get<int64_t>();
      s.members = p.at("members").get<std::vector<std::string>>();
      s.sizes = p.at("sizes").get<std::vector<int64_t>>();
      layout.stacked.push_back(std::move(s));
    }
    if (j.contains("removed_methods")) {
      layout.removed_methods = j.at("removed_methods").get<std::vector<std::string>>();
    }
    layout.original_names = j.at("original_names").get<std::vector<std::string>>();
    layout.original_shapes = j.at("original_shapes").get<std::vector<std::vector<int64_t>>>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed parameter layout: ", e.what()));
  }
  return layout;
}

absl::StatusOr<ParamLayout> ReadParamLayout(const torch::jit::Module& module) {
  if (!module.hasattr(kParamLayoutAttribute)) return ParamLayout{};
  c10::IValue v = module.attr(kParamLayoutAttribute);
  if (!v.isString()) return absl::InvalidArgumentError("sentier_param_layout is not a string");
  return ParamLayout::FromJson(v.toStringRef());
}

namespace {

// The module hierarchy below the root, and what reads it: the graph being rewritten (the
// root's forward) and the methods of every class in it.
struct ModuleTree {
  ObjectPtr root;
  absl::flat_hash_map<const Obj*, Place> places;
  absl::flat_hash_map<const c10::ClassType*, int> type_uses;
  absl::flat_hash_map<const Obj*, std::vector<const Obj*>> children;
  absl::flat_hash_map<const c10::ClassType*, std::vector<const Obj*>> instances;
  // Attributes some method reads, by the class of the object it reads them from: a method reads
  // its own attributes and, through GetAttr chains, those of the objects below (a loop over a
  // ModuleList in a method of the list's parent reads the list's entries). Every method of every
  // class counts, except the root's: its forward is the graph being rewritten, and its other
  // methods are the helpers forward called (inlined into it now: DLRM's apply_emb), which go
  // where they read what moves (StaleRootMethods).
  absl::flat_hash_map<const c10::ClassType*, absl::flat_hash_set<std::string>> method_reads;
  // The graph's reads: GetAttr nodes reading a non-module attribute of each object, objects that
  // some other node takes as input, and GetAttr nodes per attribute of the root.
  absl::flat_hash_map<const Obj*, int64_t> param_reads;
  absl::flat_hash_set<const Obj*> other_reads;
  absl::flat_hash_map<std::string, int64_t> root_reads;

  const Obj* parent(const Obj* o) const { return places.at(o).parent; }
  bool ReadByMethods(const Obj* o, const std::string& attr) const {
    auto it = method_reads.find(o->type().get());
    return it != method_reads.end() && it->second.contains(attr);
  }
};

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

// The original state_dict: names and shapes, before anything moves.
void RecordOriginalState(const torch::jit::Module& module, ParamLayout* layout) {
  for (const auto& np : module.named_parameters(/*recurse=*/true)) {
    layout->original_names.push_back(np.name);
    layout->original_shapes.push_back(np.value.sizes().vec());
  }
  for (const auto& nb : module.named_buffers(/*recurse=*/true)) {
    layout->original_names.push_back(nb.name);
    layout->original_shapes.push_back(nb.value.sizes().vec());
  }
}

std::vector<Candidate> FindCandidates(Graph& graph, const ModuleObjectMap& objects) {
  std::vector<Candidate> candidates;
  for (Node* n : graph.nodes()) {
    Candidate c;
    if (AsCandidate(n, objects, &c)) candidates.push_back(std::move(c));
  }
  return candidates;
}

// The units that leave the tree with the accepted candidates.
struct LeavingUnits {
  const ModuleTree* tree;
  absl::flat_hash_set<const Obj*> units;

  // Whether `o` is (inside) a unit that goes.
  bool Goes(const Obj* o) const {
    for (; o != nullptr; o = tree->parent(o)) {
      if (units.contains(o)) return true;
    }
    return false;
  }
};

LeavingUnits UnitsLeaving(const ModuleTree& tree, const absl::flat_hash_map<const Obj*, const Obj*>& unit_of) {
  LeavingUnits leaving{&tree, {}};
  for (const auto& [member, unit] : unit_of) leaving.units.insert(unit);
  return leaving;
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
  size_t slot = holder_mut->type()->addAttribute(name, c10::TensorType::get(), /*is_parameter=*/true);
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

// Checkpoints stay interchangeable: original_state_dict() gives the original names, as views of
// the stored parameters, and load_original_state_dict() loads through them.
std::string StateDictMethodsSource(const ParamLayout& layout) {
  absl::flat_hash_map<std::string, std::string> view;  // original name -> expression
  for (const StackedParameter& p : layout.stacked) {
    int64_t offset = 0;
    for (size_t k = 0; k < p.members.size(); ++k) {
      view[p.members[k]] = p.op == "stack"
                               ? absl::StrCat(Access(p.name), ".select(", p.dim, ", ", k, ")")
                               : absl::StrCat(Access(p.name), ".narrow(", p.dim, ", ", offset, ", ", p.sizes[k], ")");
      offset += p.sizes[k];
    }
  }
  std::string src = "def original_state_dict(self) -> Dict[str, Tensor]:\n    d: Dict[str, Tensor] = {}\n";
  for (const std::string& n : layout.original_names) {
    auto it = view.find(n);
    absl::StrAppend(&src, "    d[", Quote(n), "] = ", it != view.end() ? it->second : Access(n), "\n");
  }
  absl::StrAppend(&src, "    return d\n\n");
  // Loading goes through those views (copy_ into a view writes the stored parameter), in one
  // loop: a statement per name would make the method slow to compile and to save.
  absl::StrAppend(&src,
                  "def load_original_state_dict(self, sd: Dict[str, Tensor]):\n"
                  "    d = self.original_state_dict()\n"
                  "    for k in sd.keys():\n"
                  "        assert k in d, \"load_original_state_dict: unexpected key \" + k\n"
                  "    for k in d.keys():\n"
                  "        assert k in sd, \"load_original_state_dict: missing key \" + k\n"
                  "        assert sd[k].size() == d[k].size(), \"load_original_state_dict: key \" + k + \" has the wrong shape\"\n"
                  "        d[k].detach().copy_(sd[k])\n");
  return src;
}

// Records the layout in the module and defines its state_dict methods.
absl::Status RecordLayout(torch::jit::Module& module, const ParamLayout& layout) {
  std::string src = StateDictMethodsSource(layout);
  try {
    module.register_attribute(kParamLayoutAttribute, c10::StringType::get(), layout.ToJson());
    module.define(src);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("storing stacked parameters: the state_dict methods do not compile: ",
                                            TorchErrorMessage(e.what())));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

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
